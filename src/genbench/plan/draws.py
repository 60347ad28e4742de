"""The pilot's requests as the simulation draws from them: lengths, TTFTs, failures and
the client's gap, whole samples (conversations) kept together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from genbench.errors import UsageError
from genbench.records import ErrorKind, RequestRecord
from genbench.stats import cluster_index, resample_index


@dataclass
class Draws:
    """What the pilot's requests say about the job's requests; bootstrap resamples it.

    One entry per successful request. A sample of several requests (a multi-turn row)
    has its requests next to each other, in turn order: `row_of` numbers the sample of
    each request and `next_of` gives the index of the sample's next request (-1 for its
    last); both None when every sample is one request."""

    prompt: np.ndarray  # prompt tokens per successful request
    output: np.ndarray  # completion tokens (thinking + answer)
    thinking: np.ndarray
    ttft: np.ndarray  # TTFT of requests sent under full load
    first_ttft: np.ndarray  # TTFT of the first C requests, all sent at once
    attempts: int
    fail_rate: float
    fail_s: np.ndarray  # how long a failed attempt held its worker
    gap_s: float = 0.0  # client time from one request's end to the worker's next send
    order: np.ndarray | None = None  # samples' first requests in the order they were sent
    row_of: np.ndarray | None = None
    next_of: np.ndarray | None = None
    # requests whose thinking tokens genbench estimated by chunks (the server left them out)
    thinking_estimated: int = 0
    thinking_counted: int = 0  # ... and those it counted with the server's /tokenize

    def per_sample(self, values: np.ndarray) -> np.ndarray:
        """A per-request quantity summed over each sample's requests."""
        if self.row_of is None:
            return values
        return np.bincount(self.row_of, weights=values)

    @property
    def sample_output(self) -> np.ndarray:
        return self.per_sample(self.output)

    @property
    def heads(self) -> np.ndarray:
        """Index of each sample's first request."""
        if self.row_of is None:
            return np.arange(len(self.output))
        return np.flatnonzero(np.r_[True, self.row_of[1:] != self.row_of[:-1]])

    def resample(self, rng: np.random.Generator) -> Draws:
        if self.row_of is None:
            i = resample_index(rng, len(self.output))
            row_of = next_of = None
        else:  # whole samples, their requests together
            heads = self.heads
            lens = np.diff(np.r_[heads, len(self.output)])
            pick = resample_index(rng, len(heads))
            i = cluster_index(heads, lens, pick)
            row_of = np.repeat(np.arange(len(pick)), lens[pick])
            next_of = chain_next(row_of)
        fails = rng.binomial(self.attempts, self.fail_rate) if self.attempts else 0
        return Draws(
            prompt=self.prompt[i],
            output=self.output[i],
            thinking=self.thinking[i],
            ttft=self.ttft[resample_index(rng, len(self.ttft))],
            first_ttft=self.first_ttft[resample_index(rng, len(self.first_ttft))],
            attempts=self.attempts,
            fail_rate=min(fails / self.attempts, 0.95) if self.attempts else 0.0,
            fail_s=(
                self.fail_s[resample_index(rng, len(self.fail_s))]
                if len(self.fail_s)
                else self.fail_s
            ),
            gap_s=self.gap_s,
            row_of=row_of,
            next_of=next_of,
        )

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord], concurrency: int) -> Draws:
        ok = [r for r in records if r.ok and r.completion_tokens and r.ttft is not None]
        if not ok:
            raise UsageError("the pilot has no successful request to learn from")
        by_send = sorted((r for r in records if r.t_send), key=lambda r: r.t_send)
        first_ids = {id(r) for r in by_send[:concurrency]}
        first = [r.ttft for r in ok if id(r) in first_ids]
        later = [r.ttft for r in ok if id(r) not in first_ids]
        failed = [r for r in records if not r.ok and r.error_kind != ErrorKind.CANCELLED]
        attempts = len(ok) + len(failed)
        samples = complete_samples(ok)
        if not samples:
            raise UsageError("the pilot finished no sample (every conversation had a failed turn)")
        reqs = [r for g in samples for r in g]
        chained = any(len(g) > 1 for g in samples)
        row_of = np.repeat(np.arange(len(samples)), [len(g) for g in samples])
        heads_send = [g[0].t_send for g in samples]
        head_idx = np.cumsum([0] + [len(g) for g in samples[:-1]])
        return cls(
            prompt=np.array([float(r.prompt_tokens or 0) for r in reqs]),
            output=np.array([float(r.completion_tokens or 0) for r in reqs]),
            thinking=np.array([float(r.reasoning_tokens or 0) for r in reqs]),
            ttft=np.array(later or first, dtype=float),
            first_ttft=np.array(first or later, dtype=float),
            attempts=attempts,
            fail_rate=len(failed) / attempts if attempts else 0.0,
            fail_s=np.array([r.e2e or 0.0 for r in failed], dtype=float),
            gap_s=worker_gap(by_send, concurrency),
            order=head_idx[np.argsort(heads_send, kind="stable")],
            row_of=row_of if chained else None,
            next_of=chain_next(row_of) if chained else None,
            thinking_estimated=sum(r.reasoning_source == "estimate" for r in reqs),
            thinking_counted=sum(r.reasoning_source == "tokenizer" for r in reqs),
        )


def chain_next(row_of: np.ndarray) -> np.ndarray:
    """For requests grouped by sample: the index of the next request of the same sample,
    -1 for a sample's last."""
    nxt = np.arange(1, len(row_of) + 1)
    nxt[np.r_[row_of[1:] != row_of[:-1], True]] = -1
    return nxt


def complete_samples(ok: Sequence[RequestRecord]) -> list[list[RequestRecord]]:
    """Successful requests grouped by the pilot row they belong to (`extra["row"]`), in
    turn order, keeping only rows whose every turn succeeded. Records without a row tag
    (older pilots, `run` results) are samples of one request each."""
    groups: dict[Any, list[RequestRecord]] = {}
    for r in ok:
        key = r.extra.get("row") if r.extra else None
        groups.setdefault(("row", key) if key is not None else ("req", id(r)), []).append(r)
    out = []
    for g in groups.values():
        g.sort(key=lambda r: (r.extra or {}).get("turn", 0))
        # the last record's count: an agentic row makes as many requests as its target's
        # calls need, which only its end knows (earlier records carry the expected count)
        want = (g[-1].extra or {}).get("turns", 1)
        if [(r.extra or {}).get("turn", 0) for r in g] == list(range(want)):
            out.append(g)
    return out


def worker_gap(by_send: Sequence[RequestRecord], concurrency: int) -> float:
    """Median time from a request's end to the next send. After the first C, every send
    is a worker refilling its slot, so the i-th later send answers the i-th end."""
    ends = sorted(r.t_end for r in by_send if r.t_end is not None)
    later = [r.t_send for r in by_send[concurrency:]]
    gaps = [s - e for s, e in zip(later, ends, strict=False) if s >= e]
    return float(np.median(gaps)) if gaps else 0.0
