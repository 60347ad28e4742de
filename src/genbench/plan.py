"""`genbench plan`: hours, tokens and bytes of a generation job, with an error bar.

Three ways in, from least to most faithful:

* arithmetic (`--rate`, `--tokens-per-sample`): samples × tokens / rate. It is
  the field's method and is kept exact so that its numbers can be reproduced.
* a `run` result (`--from`): the same arithmetic at the *sustained* rate of the
  best measured concurrency, beside the field's burst-rate extrapolation.
* a pilot on the user's own prompts (`--prompts`): K prompts at the job's
  concurrency, then a simulation of the whole job built from what the pilot saw.

Why simulate instead of multiply: the field's forecasts were 35–45% short
because (1) the tokens per sample were a point guess where the real lengths
are skewed (mean ≈ 1.3 × median), (2) a short burst of equal-length requests
runs faster than a long job with mixed lengths and longer contexts in flight,
and (3) a job has a start-up and a tail where fewer than C requests run. The
simulation carries each of these: it draws output lengths from the pilot's
empirical distribution, runs C workers per server as the load engine does,
and advances decoding with a step time fitted to the pilot as a function of
how many requests decode and how many context tokens they hold, calibrated by
replaying the pilot. The error bar adds a bootstrap over the pilot's requests
(lengths, TTFT, failures), the server's speed over stretches of the pilot, and
the replay's own error. docs/plan.md says what is and is not modelled.
"""

from __future__ import annotations

import heapq
import io
import itertools
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from genbench import __version__
from genbench.client import ChatRequest, Timeouts
from genbench.endpoint import Endpoint
from genbench.errors import InputFileError, UsageError
from genbench.fastclient import FastClient
from genbench.generate.conversation import Conversation, turn_count
from genbench.generate.input import Row, iter_rows, scan
from genbench.generate.pipeline import Retries, row_load
from genbench.generate.servers import Server
from genbench.load import run_phase
from genbench.planfile import PLAN_FILE, PLAN_SCHEMA, PLAN_SCHEMA_VERSION
from genbench.records import ErrorKind, RecordWriter, RequestRecord, read_records
from genbench.result import REQUESTS_FILE, write_json_atomic
from genbench.stats import dist, steady_window, summarize, token_events

DEFAULT_SAMPLES = (100_000, 200_000, 500_000, 900_000)
FIELD_CONCURRENCY = 32  # the field's burst was measured at C=32
CONFIDENCE = 0.95
TARGET_REL_ERROR = 0.05  # the pilot size that gives a ±5% bar is reported
ASSUMED_BYTES_PER_TOKEN = 4.0  # English text with a Llama-style tokenizer, when nothing measured
JSONL_OVERHEAD_BYTES = 400  # id, generate's metadata and JSON punctuation per output line
PARQUET_ROWS = 2000  # pilot outputs kept in memory to measure Parquet's bytes per row
T_975 = {  # Student t, 97.5% quantile, by degrees of freedom (batch means with ≤ 10 batches)
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262
}  # fmt: skip


# ------------------------------------------------------------------------------ inputs


def parse_counts(flag: str, text: str) -> list[int]:
    """`100K,200k,1.5M` → [100000, 200000, 1500000]; every value must be a positive count."""
    mult = {"k": 1_000, "m": 1_000_000, "b": 1_000_000_000}
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"{flag} '{text}' is empty: expected counts like 100K,200K")
    out: list[int] = []
    for item in items:
        num, factor = item, 1
        if item[-1].lower() in mult:
            num, factor = item[:-1], mult[item[-1].lower()]
        try:
            value = float(num.replace("_", "")) * factor
        except ValueError:
            raise UsageError(f"{flag}: '{item}' is not a count (e.g. 100000 or 100K)") from None
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{flag}: {item} must be positive")
        if value != int(value):
            raise UsageError(f"{flag}: {item} is not a whole number of samples")
        out.append(int(value))
    return out


def human_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def human_tokens(n: float) -> str:
    if n >= 1e8:
        return f"{n / 1e9:,.4g}B"
    if n >= 1e6:
        return f"{n / 1e6:,.4g}M"
    if n >= 1e3:
        return f"{n / 1e3:,.4g}K"
    return f"{n:,.0f}"


def duration(seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "hours": seconds / 3600, "days": seconds / 86400}


# ------------------------------------------------------------------------------ arithmetic


def arithmetic(samples: int, tokens_per_sample: float, rate: float, servers: int = 1) -> dict:
    """The field's method, exactly: samples × tokens per sample / (rate × servers)."""
    if samples <= 0:
        raise UsageError(f"--samples: {samples} must be positive")
    if tokens_per_sample <= 0:
        raise UsageError(f"--tokens-per-sample must be positive, got {tokens_per_sample}")
    if rate <= 0:
        raise UsageError(f"--rate must be positive, got {rate}")
    if servers <= 0:
        raise UsageError(f"--servers must be positive, got {servers}")
    tokens = samples * tokens_per_sample
    return {
        "samples": samples,
        "tokens_per_sample": tokens_per_sample,
        "tokens": tokens,
        "tok_per_s": rate,
        "servers": servers,
        **duration(tokens / (rate * servers)),
    }


# ------------------------------------------------------------------------------ storage


@dataclass(frozen=True)
class HiddenStates:
    """Target-model hidden states kept for offline drafter training (EAGLE-3, DFlash)."""

    hidden_size: int
    layers: int
    dtype_bytes: int = 2

    def bytes_for(self, tokens: float) -> float:
        return tokens * self.hidden_size * self.layers * self.dtype_bytes


@dataclass(frozen=True)
class StorageModel:
    """Bytes per sample of the job's output, and how that figure was obtained."""

    jsonl_bytes_per_sample: float
    parquet_bytes_per_sample: float | None
    basis: str
    hidden: HiddenStates | None = None

    def row(self, samples: int, hidden_tokens: float) -> dict[str, Any]:
        return {
            "jsonl_bytes_per_sample": self.jsonl_bytes_per_sample,
            "jsonl_bytes": samples * self.jsonl_bytes_per_sample,
            "parquet_bytes_per_sample": self.parquet_bytes_per_sample,
            "parquet_bytes": (
                samples * self.parquet_bytes_per_sample if self.parquet_bytes_per_sample else None
            ),
            "hidden_state_tokens": hidden_tokens if self.hidden else None,
            "hidden_state_bytes": self.hidden.bytes_for(hidden_tokens) if self.hidden else None,
        }


def storage_from_tokens(
    tokens_per_sample: float,
    bytes_per_token: float | None,
    hidden: HiddenStates | None,
    basis: str | None = None,
) -> StorageModel:
    """Without outputs to measure: text bytes from a bytes-per-token figure, plus a fixed
    per-line overhead; the prompt is not counted (it was not seen)."""
    bpt = bytes_per_token or ASSUMED_BYTES_PER_TOKEN
    why = basis or (
        f"{bpt:g} bytes per output token ("
        + ("given" if bytes_per_token else "assumed")
        + f") + {JSONL_OVERHEAD_BYTES} bytes per line; prompts not counted"
    )
    return StorageModel(tokens_per_sample * bpt + JSONL_OVERHEAD_BYTES, None, why, hidden)


def parquet_bytes_per_row(rows: list[dict[str, Any]]) -> float | None:
    """Write the rows as one zstd Parquet file in memory, in generate's schema when it is
    there; None without pyarrow."""
    if not rows:
        return None
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        from genbench.generate.store import parquet_schema

        schema = parquet_schema()
    except Exception:  # generate absent or changed: let pyarrow infer the schema
        schema = None

    def text(v: Any) -> str:
        return v if isinstance(v, str) else orjson.dumps(v).decode()

    flat = [
        {
            **r,
            "id": str(r["id"]),
            "conversations": [{**t, "content": text(t["content"])} for t in r["conversations"]],
        }
        for r in rows
    ]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(flat, schema=schema), buf, compression="zstd")
    return buf.tell() / len(rows)


# ------------------------------------------------------------------------------ the model


@dataclass
class Pool:
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

    def resample(self, rng: np.random.Generator) -> Pool:
        if self.row_of is None:
            i = rng.integers(0, len(self.output), len(self.output))
            row_of = next_of = None
        else:  # whole samples, their requests together
            heads = self.heads
            lens = np.diff(np.r_[heads, len(self.output)])
            pick = rng.integers(0, len(heads), len(heads))
            n = lens[pick]
            starts = np.cumsum(n) - n
            i = np.repeat(heads[pick] - starts, n) + np.arange(int(n.sum()))
            row_of = np.repeat(np.arange(len(pick)), n)
            next_of = chain_next(row_of)
        fails = rng.binomial(self.attempts, self.fail_rate) if self.attempts else 0
        return Pool(
            prompt=self.prompt[i],
            output=self.output[i],
            thinking=self.thinking[i],
            ttft=self.ttft[rng.integers(0, len(self.ttft), len(self.ttft))],
            first_ttft=self.first_ttft[rng.integers(0, len(self.first_ttft), len(self.first_ttft))],
            attempts=self.attempts,
            fail_rate=min(fails / self.attempts, 0.95) if self.attempts else 0.0,
            fail_s=(
                self.fail_s[rng.integers(0, len(self.fail_s), len(self.fail_s))]
                if len(self.fail_s)
                else self.fail_s
            ),
            gap_s=self.gap_s,
            row_of=row_of,
            next_of=next_of,
        )

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord], concurrency: int) -> Pool:
        ok = [r for r in records if r.ok and r.completion_tokens and r.ttft is not None]
        if not ok:
            raise UsageError("the pilot has no successful request to learn from")
        by_send = sorted((r for r in records if r.t_send), key=lambda r: r.t_send)
        first_ids = {id(r) for r in by_send[:concurrency]}
        first = [r.ttft for r in ok if id(r) in first_ids]
        later = [r.ttft for r in ok if id(r) not in first_ids]
        failed = [r for r in records if not r.ok and r.error_kind is not ErrorKind.CANCELLED]
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
        want = (g[0].extra or {}).get("turns", 1)
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


@dataclass(frozen=True)
class StepModel:
    """How the server spends its time, fitted to the pilot.

    A decode step with n requests decoding, holding k context tokens in all, lasts
    a + b·n + c·k seconds and gives every decoding request one token. Steps are counted
    in tokens, not chunks: an API server that coalesces tokens into one chunk under
    load does not change the engine's steps; with speculative decoding a "step" is
    then the time per token. Prefills that stop decoding (vLLM, SGLang) are in the
    step time, at the rate the pilot's arrivals had (see `fit_step`)."""

    a: float
    b: float
    c: float

    def rate(self, n: float, k: float) -> float:
        """Decode tokens/s with n decoding and no arrivals."""
        return n / (self.a + self.b * n + self.c * k)


@dataclass
class DecodeRows:
    """One row per successful pilot request: how long its decoding took and what it
    shared the server with meanwhile. Every regressor is counted exactly (chunks, and
    time averages from the client's timestamps), so the fit has no errors-in-variables
    bias; a request's decode time includes every prefill that stopped its decoding."""

    x: np.ndarray  # [tokens decoded, Σ over them of n, Σ of k]
    y: np.ndarray  # seconds those tokens took
    start: np.ndarray  # when its decoding began (to bootstrap blocks of time)

    def blocks(self, count: int) -> list[np.ndarray]:
        """Rows in `count` stretches of consecutive decode start times."""
        order = np.argsort(self.start)
        return [b for b in np.array_split(order, max(1, min(count, len(order)))) if len(b)]


def decode_rows(records: Sequence[RequestRecord], concurrency: int) -> DecodeRows:
    """Build `DecodeRows`. Between two chunks of a request, the number of requests
    decoding and their context (prompt + tokens so far, growing linearly over each one's
    decode time) are read at the interval's midpoint and summed once per token the
    interval carried, so a request whose tail ran nearly alone is charged for short
    steps. Only intervals after the start-up count: until the first C requests have
    all been prefilled, the early ones decode between those prefills, and the
    simulation takes the start-up from the first C's TTFTs instead."""
    ok = [
        r
        for r in records
        if r.ok and len(r.chunk_offsets) >= 2 and r.completion_tokens and r.ttft is not None
    ]
    if len(ok) < 3:
        raise UsageError("the pilot streamed too few replies to time the server: use more")
    by_send = sorted((r for r in records if r.t_send), key=lambda r: r.t_send)
    first_c = {id(r) for r in by_send[:concurrency]}
    startup = [r.t_send + r.ttft for r in ok if id(r) in first_c]
    t0 = max(startup) if startup else -math.inf
    d = np.array([r.t_send + r.chunk_offsets[0] for r in ok])
    e = np.array([r.t_send + r.chunk_offsets[-1] for r in ok])
    chunks = np.array([len(r.chunk_offsets) - 1 for r in ok], dtype=int)
    total = np.array([float(r.completion_tokens or 0) for r in ok])
    prompt = np.array([float(r.prompt_tokens or 0) for r in ok])
    span = e - d
    slope = np.divide(total - 1, span, out=np.zeros_like(span), where=span > 0)
    # every interval between two chunks of a request: its start, end and owner
    starts = np.concatenate([r.t_send + np.asarray(r.chunk_offsets[:-1]) for r in ok])
    ends = np.concatenate([r.t_send + np.asarray(r.chunk_offsets[1:]) for r in ok])
    owner = np.repeat(np.arange(len(ok)), chunks)
    mids = (starts + ends) / 2
    # requests decoding at t: started (d <= t) minus ended (e < t); context by prefix sums
    base = prompt + 1 - slope * d  # context of j at t is base_j + slope_j·t while decoding
    by_d, by_e = np.argsort(d), np.argsort(e)
    started = np.searchsorted(d[by_d], mids, side="right")
    ended = np.searchsorted(e[by_e], mids, side="left")
    cum = lambda v, order: np.concatenate([[0.0], np.cumsum(v[order])])  # noqa: E731
    n_t = started - ended
    base_t = cum(base, by_d)[started] - cum(base, by_e)[ended]
    slope_t = cum(slope, by_d)[started] - cum(slope, by_e)[ended]
    k_t = base_t + slope_t * mids
    # each interval carries the request's mean tokens per chunk; start-up ones do not count
    per_chunk = np.divide(total - 1, chunks, out=np.ones_like(total), where=chunks > 0)
    w = per_chunk[owner] * (starts >= t0)
    tokens = np.bincount(owner, weights=w, minlength=len(ok))
    sum_n = np.bincount(owner, weights=n_t * w, minlength=len(ok))
    sum_k = np.bincount(owner, weights=k_t * w, minlength=len(ok))
    seconds = np.bincount(owner, weights=(ends - starts) * (starts >= t0), minlength=len(ok))
    x = np.column_stack([tokens, sum_n, sum_k])
    keep = (tokens > 0) & (seconds > 0)
    return DecodeRows(x[keep], seconds[keep], np.maximum(d, t0)[keep])


_TERMS = ("a", "b", "c")


def fit_step(rows: DecodeRows) -> StepModel:
    """Least squares of each request's decode seconds on Σ over its tokens of
    (a + b·n + c·k), every coefficient ≥ 0 (the best feasible subset of terms).

    Prefill time is not a term of its own: with arrivals in step with completions (C
    workers, same lengths as the job), the decoding it stops is spread into a and b at
    the job's own rate. A separate per-prefill term was tried and fitted badly from a
    pilot: arrivals during a request grow with its decode time, so the term soaked up
    whatever else made steps slow and overstated the job by up to 20% on vLLM."""
    x_all, y = rows.x, rows.y
    if len(y) < 3:
        raise UsageError("the pilot is too short to time the server: use a larger --pilot")
    best: tuple[float, StepModel] | None = None
    for size in range(len(_TERMS), 0, -1):
        for names in _subsets(size):
            x = x_all[:, [_TERMS.index(c) for c in names]]
            coef, *_ = np.linalg.lstsq(x, y, rcond=None)
            if np.any(coef < 0) or not np.all(np.isfinite(coef)):
                continue
            vals = dict.fromkeys(_TERMS, 0.0) | dict(zip(names, map(float, coef), strict=True))
            if vals["a"] + vals["b"] <= 0:
                continue
            resid = float(np.sum((x @ coef - y) ** 2))
            if best is None or resid < best[0] * (1 - 1e-9):
                best = (resid, StepModel(vals["a"], vals["b"], vals["c"]))
    if best is None:
        raise UsageError("could not fit the server's step time to the pilot")
    return best[1]


def _subsets(size: int) -> list[tuple[str, ...]]:
    from itertools import combinations

    return [c for c in combinations(_TERMS, size) if "a" in c or "b" in c]


@dataclass
class JobSim:
    wall_s: float
    steady_s_per_token: float | None  # in the middle of the job, all workers busy
    last_send_s: float = 0.0  # when the last sample was sent: start-up plus the steady part


def simulate_job(
    samples: int,
    concurrency: int,
    pool: Pool,
    step: StepModel,
    rng: np.random.Generator,
    order: Sequence[int] | None = None,
) -> JobSim:
    """Discrete-event simulation of one server running `samples` requests with C workers.

    A worker sends, waits a TTFT drawn from the pilot (the first C from the first C of
    the pilot; later ones after the measured client gap), then decodes with every other
    decoding request until its drawn length is reached, then sends the next sample. A
    failed attempt holds its worker for a drawn time and is retried. Between events the
    number decoding is constant and the context grows by n tokens per step, so the time
    to advance g steps is α·g + β·g²/2. With `order`, the samples are the pool's requests
    in that order (a replay of the pilot) instead of random draws. A sample of several
    requests (`pool.next_of`) sends its next request when one ends, on the same worker,
    like a retry (the measured gap and a later TTFT); it is done after its last."""
    a, b, c = step.a, step.b, step.c
    heads = pool.heads
    if order is not None:
        pick = [int(i) for i in order]
        samples = len(pick)
    else:
        pick = heads[rng.integers(0, len(heads), samples + 8 * concurrency)].tolist()
    next_l = pool.next_of.tolist() if pool.next_of is not None else None
    out_l = pool.output.tolist()
    prm_l = pool.prompt.tolist()
    ttft_l, first_l = pool.ttft.tolist(), pool.first_ttft.tolist()
    fail_l = pool.fail_s.tolist() or [0.0]
    f = pool.fail_rate
    gap = pool.gap_s
    rand = random.Random(int(rng.integers(0, 2**63))).random

    t = 0.0
    g = 0.0  # steps every decoding request has advanced since t = 0
    s_ctx = 0.0  # context held = s_ctx + n·g
    n = 0
    dec: list[tuple[float, int, float, int]] = []  # (finish step, seq, context offset, j)
    # (at, seq, kind, draw): kind 0 = first token, 1 = failed attempt ends
    wait: list[tuple[float, int, int, int]] = []
    seq = 0
    sent = 0
    done = 0
    draw = 0
    tokens = 0.0  # produced so far, for the steady rate
    q1, q3 = samples // 4, (3 * samples) // 4
    mark: tuple[float, float] | None = None
    steady: float | None = None
    last_send = 0.0

    def send(now: float, retry: int | None) -> None:
        nonlocal seq, sent, draw, last_send
        seq += 1
        if retry is None:
            sent += 1
            last_send = now
            j = pick[draw % len(pick)]
            draw += 1
        else:
            j = retry
        if f and rand() < f:
            heapq.heappush(wait, (now + fail_l[int(rand() * len(fail_l))], seq, 1, j))
            return
        if sent <= concurrency and retry is None:  # start-up: all C prefill at once
            ready = now + first_l[int(rand() * len(first_l))]
        else:
            ready = now + gap + ttft_l[int(rand() * len(ttft_l))]
        heapq.heappush(wait, (ready, seq, 0, j))

    for _ in range(min(concurrency, samples)):
        send(0.0, None)
    while done < samples:
        next_ev = wait[0][0] if wait else math.inf
        if n:
            alpha = a + b * n + c * (s_ctx + n * g)
            beta = c * n
            dg = dec[0][0] - g
            dt = alpha * dg + beta * dg * dg / 2 if dg > 0 else 0.0
            if t + dt <= next_ev:
                t += dt
                g = dec[0][0]
                tokens += n * max(dg, 0.0)
                while dec and dec[0][0] <= g + 1e-9:
                    _, _, off, jd = heapq.heappop(dec)
                    n -= 1
                    s_ctx -= off
                    if next_l is not None and next_l[jd] >= 0:
                        send(t, next_l[jd])  # the sample's next turn, on the same worker
                        continue
                    done += 1
                    if done == q1:
                        mark = (t, tokens)
                    elif done == q3 and mark is not None and tokens > mark[1]:
                        steady = (t - mark[0]) / (tokens - mark[1])
                    if sent < samples:
                        send(t, None)
                continue
            span = next_ev - t
            dg = 2 * span / (alpha + math.sqrt(alpha * alpha + 2 * beta * span))
            g += dg
            tokens += n * dg
        if not wait:  # pragma: no cover - nothing decoding and nothing waiting
            break
        t, _, kind, j = heapq.heappop(wait)
        if kind == 1:
            send(t, j)
            continue
        tokens += 1  # the first token comes with prefill
        steps = out_l[j] - 1
        if steps <= 0:
            if next_l is not None and next_l[j] >= 0:
                send(t, next_l[j])
                continue
            done += 1
            if sent < samples:
                send(t, None)
            continue
        off = prm_l[j] + 1 - g  # context = prompt + 1 + (g - g_start)
        seq += 1
        heapq.heappush(dec, (g + steps, seq, off, j))
        n += 1
        s_ctx += off
    return JobSim(t, steady, last_send)


def sim_cap(concurrency: int) -> int:
    """Requests simulated one by one; longer jobs continue at the simulated steady rate."""
    return max(5000, 100 * concurrency)


def job_walls(
    per_server: Sequence[int],
    concurrency: int,
    pool: Pool,
    step: StepModel,
    rng: np.random.Generator,
    repeats: int = 1,
) -> list[float]:
    """Wall time of one server's share for each job size: simulated up to `sim_cap`, then
    the simulated steady seconds per token times the remaining samples' mean tokens."""
    cap = sim_cap(concurrency)
    mean_out = float(pool.sample_output.mean())
    walls: dict[int, float] = {}
    big = [s for s in per_server if s > cap]
    if big:
        runs = [simulate_job(cap, concurrency, pool, step, rng) for _ in range(repeats)]
        w_cap = sum(r.wall_s for r in runs) / repeats
        spt = [r.steady_s_per_token for r in runs if r.steady_s_per_token]
        s_per_tok = sum(spt) / len(spt) if spt else w_cap / (cap * mean_out)
        for s in big:
            walls[s] = w_cap + (s - cap) * mean_out * s_per_tok
    for s in per_server:
        if s not in walls:
            runs = [simulate_job(s, concurrency, pool, step, rng) for _ in range(repeats)]
            walls[s] = sum(r.wall_s for r in runs) / repeats
    return [walls[s] for s in per_server]


REPLAYS = 5  # simulations of the pilot itself, averaged, for the model's own error
SPEED_BATCHES = 10  # stretches of the pilot for the speed's batch means
SHORT_PILOT_S = 120.0  # a pilot shorter than this says so: it cannot see slow drift
WANDER_LAG1 = 0.5  # stretches this alike: the speed wanders on the pilot's own time scale


def lag1(values: Sequence[float]) -> float:
    """Lag-1 autocorrelation of a series (0 with fewer than 3 values)."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    if len(v) < 3:
        return 0.0
    d = v - v.mean()
    denom = float(np.sum(d * d))
    return float(np.sum(d[:-1] * d[1:]) / denom) if denom > 0 else 0.0


def series_halfwidth(values: Sequence[float]) -> float:
    """Relative 95% half-width of the mean of a series of stretches in time (batch means):
    Student t × the standard error, inflated by (1 + ρ) / (1 − ρ) for the lag-1
    autocorrelation ρ of the stretches (clipped to [0, 0.9]). A server whose speed wanders
    for longer than one stretch makes neighbouring stretches alike; without the inflation
    their spread would understate how little a short stretch of time says about the mean.
    0 with fewer than 3 values."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    if len(v) < 3 or v.mean() <= 0:
        return 0.0
    rho = min(max(lag1(v), 0.0), 0.9)
    se = float(v.std(ddof=1) / v.mean() / math.sqrt(len(v)))
    return T_975[min(len(v) - 1, max(T_975))] * se * math.sqrt((1 + rho) / (1 - rho))


def speed_stretches(rows: DecodeRows, step: StepModel) -> list[float]:
    """Measured over fitted decode seconds in each of SPEED_BATCHES stretches of
    consecutive requests (empty when the pilot is too short to cut)."""
    m = min(SPEED_BATCHES, len(rows.y) // 5)
    if m < 3:
        return []
    pred = rows.x @ np.array([step.a, step.b, step.c])
    return [float(rows.y[b].sum() / pred[b].sum()) for b in rows.blocks(m)]


@dataclass
class PilotModel:
    """Everything the forecast needs, learned from one pilot at concurrency C."""

    concurrency: int
    pool: Pool
    rows: DecodeRows
    step: StepModel
    pilot_requests: int
    pilot_wall_s: float
    pilot_steady_tps: float | None
    replay_s: float = 0.0  # the fitted model simulating the pilot itself: its wall time
    replay_send_s: float = 0.0  # and when it sent the last request
    pilot_send_s: float = 0.0  # when the pilot really sent its last request
    stretches: list[float] = field(default_factory=list)  # speed_stretches of the fit
    pilot_samples: int = 0  # rows sent (requests, when the records do not name rows)

    @property
    def calibration(self) -> float:
        """Measured over simulated time until the last send (start-up and the steady
        part, where all C workers are busy): the factor that makes the simulation run
        the pilot as fast as the server did. The step fit is exact on the sim; what it
        leaves on a real server (and on steps that emit several tokens at once) is
        systematic, and the job at the same C and lengths has it too."""
        if self.replay_send_s <= 0 or self.pilot_send_s <= 0:
            return 1.0
        return self.pilot_send_s / self.replay_send_s

    @property
    def speed_halfwidth(self) -> float:
        """Relative 95% half-width of the server's mean speed: the pilot's decoding cut
        into SPEED_BATCHES stretches of consecutive requests, each stretch's decode
        seconds over the fitted model's, and `series_halfwidth` across them (batch
        means with an allowance for speed that wanders over several stretches)."""
        return series_halfwidth(self.stretches)

    @property
    def replay_err(self) -> float:
        """The simulation's error on the one job whose truth is known, once calibrated:
        the pilot replayed with its own requests in the order they were sent. What is
        left is the tail's (and a short pilot's start-up), which the calibration does
        not fix; the bar includes it."""
        if self.pilot_wall_s <= 0:
            return 0.0
        return self.replay_s * self.calibration / self.pilot_wall_s - 1

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord], concurrency: int) -> PilotModel:
        sent = [r for r in records if r.t_send]
        if not sent:
            raise UsageError("the pilot sent no request")
        pool = Pool.from_records(records, concurrency)
        rows = decode_rows(records, concurrency)
        s = summarize(records, concurrency=concurrency, sustained=True)
        step = fit_step(rows)
        t0 = min(r.t_send for r in sent)
        wall = max(r.t_end or r.t_send for r in sent) - t0
        rng = np.random.default_rng(0)
        sims = [
            simulate_job(0, concurrency, pool, step, rng, order=pool.order) for _ in range(REPLAYS)
        ]
        return cls(
            concurrency,
            pool,
            rows,
            step,
            len(sent),
            wall,
            s.steady_tps,
            float(np.mean([j.wall_s for j in sims])),
            float(np.mean([j.last_send_s for j in sims])),
            max(r.t_send for r in sent) - t0,
            speed_stretches(rows, step),
            len({r.extra["row"] for r in sent if r.extra and "row" in r.extra}) or len(sent),
        )

    def describe(self) -> dict[str, Any]:
        p = self.pool
        return {
            "concurrency": self.concurrency,
            "pilot_requests": self.pilot_requests,
            "pilot_ok": len(p.output),
            "pilot_samples": self.pilot_samples,
            "requests_per_sample": len(p.output) / len(p.heads),
            "pilot_wall_s": self.pilot_wall_s,
            "pilot_steady_tps": self.pilot_steady_tps,
            "output_tokens": dist(p.sample_output.tolist()),
            "thinking_tokens": dist(p.per_sample(p.thinking).tolist()),
            "prompt_tokens": dist(p.per_sample(p.prompt).tolist()),
            "ttft_s": dist(p.ttft.tolist()),
            "first_ttft_s": dist(p.first_ttft.tolist()),
            "fail_rate": p.fail_rate,
            "step_model": {
                **asdict(self.step),
                "formula": "seconds per decode step = a + b·n_decoding + c·context_tokens",
                "decode_tps_at_c": self.step.rate(
                    self.concurrency,
                    self.concurrency * float(np.mean(p.prompt) + np.mean(p.output) / 2),
                ),
            },
            "speed_halfwidth": self.speed_halfwidth,
            "speed_stretches": self.stretches,
            "speed_lag1": lag1(self.stretches),
            "replay": {
                "what": "the fitted model simulating the pilot itself, its requests in order",
                "simulated_s": self.replay_s,
                "actual_s": self.pilot_wall_s,
                "simulated_last_send_s": self.replay_send_s,
                "actual_last_send_s": self.pilot_send_s,
                "calibration": self.calibration,
                "error": self.replay_err,
            },
        }


@dataclass
class WallForecast:
    samples: int
    servers: int
    per_server: int
    seconds: float
    lo_s: float
    hi_s: float
    output_tokens: float
    output_lo: float
    output_hi: float
    thinking_tokens: float
    prompt_tokens: float
    length_halfwidth: float = 0.0  # the mean output length's share of the bar

    @property
    def rel_halfwidth(self) -> float:
        return max(self.hi_s / self.seconds - 1, 1 - self.lo_s / self.seconds)


def length_halfwidth(count: int, total: float, squares: float) -> float:
    """Relative 95% half-width of a mean output length from its running sums (normal
    approximation; the final bar uses the bootstrap-t). inf until there are 2 values."""
    if count < 2 or total <= 0:
        return math.inf
    mean = total / count
    var = max(squares / count - mean * mean, 0.0) * count / (count - 1)
    return 1.96 * math.sqrt(var / count) / mean


def forecast(
    model: PilotModel,
    jobs: Sequence[tuple[int, int]],
    boot: int = 100,
    seed: int = 0,
    time_budget_s: float = 20.0,
) -> list[WallForecast]:
    """For each job (samples, servers): a point forecast (the full pilot, averaged over a
    few simulations) and a 95% interval. The servers share the samples evenly and run
    alike.

    The interval has three parts, added in quadrature on each side:

    * a bootstrap over the pilot's requests (lengths, TTFTs, failures), each replicate
      simulating every job again;
    * the server's speed (`speed_halfwidth`): batch means of the fitted step time's
      error over stretches of the pilot, so a server whose speed wanders over seconds
      (autocorrelated, which a bootstrap over requests or short blocks misses) gets a
      wider bar;
    * the simulation's own error on the pilot (below).

    Two corrections make it honest where a plain percentile bootstrap is not:

    * the mean output length, which dominates the bar when lengths are skewed, is
      studentized (bootstrap-t): a percentile bootstrap of a right-skewed mean covers
      the truth less often than it says (93.5% for a nominal 95% at K = 100, lognormal
      sigma 0.75), because a pilot that missed the long tail also looks less variable;
    * the simulation is calibrated to the pilot (`calibration`: the pilot replayed runs
      as fast as the server ran it), and what is left of its error on the pilot
      (`replay_err`, the tail's) is added in quadrature to each side."""
    rng = np.random.default_rng(seed)
    c = model.concurrency
    shares = [math.ceil(s / m) for s, m in jobs]
    cal = model.calibration
    point = [w * cal for w in job_walls(shares, c, model.pool, model.step, rng, repeats=3)]
    speed_hw = model.speed_halfwidth
    out = model.pool.sample_output
    k = len(out)
    mean = float(out.mean())
    se = float(out.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0
    reps: list[list[float]] = []
    means: list[float] = []
    t_end = time.perf_counter() + time_budget_s
    for rep in range(boot):
        if rep >= 20 and time.perf_counter() > t_end:
            break  # enough replicates for a 95% interval; keep the command quick
        pool = model.pool.resample(rng)
        walls = job_walls(shares, c, pool, model.step, rng)
        out_r = pool.sample_output
        m_r = float(out_r.mean())
        se_r = float(out_r.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0
        # bootstrap-t: the replicate's length factor m_r/mean is replaced by the
        # studentized one, mean − t·se with t = (m_r − mean)/se_r, reflected
        ok_t = se > 0 and se_r > 0
        m_t = max(mean - (m_r - mean) / se_r * se, 0.05 * mean) if ok_t else m_r
        reps.append([w * cal * m_t / m_r for w in walls])
        means.append(m_t)
    arr = np.array(reps)
    lo_q, hi_q = (1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100
    out_lo, out_hi = np.percentile(means, [lo_q, hi_q]) if means else (mean, mean)
    sim_err = abs(model.replay_err)
    result = []
    for j, (s, servers) in enumerate(jobs):
        lo, hi = np.percentile(arr[:, j], [lo_q, hi_q]) if len(arr) else (point[j], point[j])
        p = point[j]
        below, above = max(p - float(lo), 0.0), max(float(hi) - p, 0.0)
        below = math.hypot(below, sim_err * p, p - p / (1 + speed_hw))
        above = math.hypot(above, sim_err * p, p / max(1 - speed_hw, 0.05) - p)
        result.append(
            WallForecast(
                samples=s,
                servers=servers,
                per_server=shares[j],
                seconds=p,
                lo_s=max(p - below, 0.0),
                hi_s=p + above,
                output_tokens=s * mean,
                output_lo=s * float(out_lo),
                output_hi=s * float(out_hi),
                thinking_tokens=s * float(model.pool.per_sample(model.pool.thinking).mean()),
                prompt_tokens=s * float(model.pool.per_sample(model.pool.prompt).mean()),
                length_halfwidth=float(max(out_hi / mean - 1, 1 - out_lo / mean)) if mean else 0.0,
            )
        )
    return result


def pilot_size_for(rel_halfwidth: float, pilot: int, target: float = TARGET_REL_ERROR) -> int:
    """An interval narrows as 1/√K: the pilot size whose bar would be ±target."""
    return max(1, math.ceil(pilot * (rel_halfwidth / target) ** 2))


# ------------------------------------------------------------------------------ documents


def new_plan_doc(mode: str, source: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": PLAN_SCHEMA,
        "schema_version": PLAN_SCHEMA_VERSION,
        "genbench_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": mode,
        "source": source,
        "inputs": inputs,
        "model": {},
        "rows": [],
        "notes": [],
    }


def plan_arithmetic(
    samples: Sequence[int],
    rate: float,
    tokens_per_sample: float,
    servers: int,
    storage: StorageModel,
) -> dict[str, Any]:
    doc = new_plan_doc(
        "arithmetic",
        {"kind": "arithmetic"},
        {
            "samples": list(samples),
            "tok_per_s": rate,
            "tokens_per_sample": tokens_per_sample,
            "servers": servers,
        },
    )
    doc["model"] = {"storage_basis": storage.basis}
    for s in samples:
        one = arithmetic(s, tokens_per_sample, rate, 1)
        row: dict[str, Any] = {
            "samples": s,
            "tokens": {"output": one["tokens"]},
            "one_server": {k: one[k] for k in ("tok_per_s", "seconds", "hours", "days")},
            "storage": storage.row(s, one["tokens"]),
        }
        if servers > 1:
            many = arithmetic(s, tokens_per_sample, rate, servers)
            row["at_servers"] = {"servers": servers, **duration(many["seconds"])}
        doc["rows"].append(row)
    return doc


def _phase_sums(doc: dict[str, Any]) -> tuple[int, int, int, int]:
    ok = out = think = prompt = 0
    for p in doc.get("phases") or []:
        if p.get("kind") == "warmup":
            continue
        s = p.get("summary") or {}
        ok += int(s.get("ok") or 0)
        out += int(s.get("output_tokens") or 0)
        think += int(s.get("thinking_tokens") or 0)
        prompt += int(s.get("prompt_tokens") or 0)
    return ok, out, think, prompt


def _by_c(doc: dict[str, Any], shape: str) -> dict[int, float]:
    table = ((doc.get("sweep") or {}).get(shape) or {}).get("by_concurrency") or {}
    out: dict[int, float] = {}
    for k, v in table.items():
        try:
            c = int(k)
        except (TypeError, ValueError):
            continue
        if isinstance(v, int | float) and v > 0:
            out[c] = float(v)
    return out


def _bytes_per_token_from_records(result_path: Path) -> float | None:
    req = result_path.parent / REQUESTS_FILE
    if not req.exists():
        return None
    chars = tokens = 0
    try:
        for r in read_records(req):
            if r.ok and r.completion_tokens:
                chars += r.answer_chars + r.thinking_chars
                tokens += r.completion_tokens
    except (OSError, ValueError):
        return None
    return chars / tokens if tokens and chars else None


RATE_WINDOWS = 10  # the steady window is cut into this many stretches for the rate's bar


def rate_halfwidth(records: Sequence[RequestRecord], concurrency: int) -> float | None:
    """Relative 95% half-width of a sustained phase's steady rate: its steady window is cut
    into stretches of equal time and the rate's standard error taken across them
    (`series_halfwidth`). A server that drifts within the window widens it. None when the
    window is missing or too short to cut."""
    win = steady_window(records, concurrency, None)
    if win is None:
        return None
    start, end = win
    edges = np.linspace(start, end, RATE_WINDOWS + 1)
    tokens = np.zeros(RATE_WINDOWS)
    for r in records:
        if r.ok:
            for t, n, _ in token_events(r):
                if start <= t < end:
                    tokens[
                        min(int(np.searchsorted(edges, t, side="right")) - 1, RATE_WINDOWS - 1)
                    ] += n
    if tokens.sum() <= 0 or np.count_nonzero(tokens) < RATE_WINDOWS // 2:
        return None
    return series_halfwidth(tokens.tolist())


def _rate_bars(result_path: Path, phases: dict[int, str]) -> dict[int, float]:
    """The steady-rate half-width of each sustained phase, from the run's requests.jsonl."""
    req = result_path.parent / REQUESTS_FILE
    if not req.exists():
        return {}
    by_phase: dict[str, list[RequestRecord]] = {name: [] for name in phases.values()}
    try:
        for r in read_records(req):
            if r.phase in by_phase:
                by_phase[r.phase].append(r)
    except (OSError, ValueError):
        return {}
    out: dict[int, float] = {}
    for c, name in phases.items():
        hw = rate_halfwidth(by_phase[name], c) if by_phase[name] else None
        if hw is not None:
            out[c] = hw
    return out


def _with_bar(seconds: float, rate_hw: float | None) -> dict[str, Any]:
    """Time at a rate known to ±rate_hw: the rate's bar, inverted."""
    if rate_hw is None:
        return {}
    hw = min(rate_hw, 0.95)
    return {
        "lo_s": seconds / (1 + hw),
        "hi_s": seconds / (1 - hw),
        "confidence": CONFIDENCE,
        "rel_halfwidth": 1 / (1 - hw) - 1,
    }


def plan_from_result(
    doc: dict[str, Any],
    samples: Sequence[int],
    servers: int,
    concurrency: int | None,
    tokens_per_sample: float | None,
    hidden: HiddenStates | None,
    bytes_per_token: float | None,
) -> dict[str, Any]:
    """Sustained-rate arithmetic from a `run` result, with the field's burst method beside."""
    path = doc.get("_path", "result")
    sustained = _by_c(doc, "sustained")
    if not sustained:
        raise UsageError(
            f"{path}: field 'sweep.sustained' has no steady rate: plan needs a sustained "
            "phase (genbench run --shape sustained, or the default burst,sustained)"
        )
    best_c = max(sustained, key=lambda c: sustained[c])
    phase_names = {
        int(p["concurrency"]): p["name"]
        for p in doc.get("phases") or []
        if p.get("kind") == "sustained" and p.get("concurrency") and p.get("name")
    }
    bars = _rate_bars(Path(path), phase_names)
    if concurrency is not None and concurrency not in sustained:
        have = ", ".join(str(c) for c in sorted(sustained))
        raise UsageError(
            f"--concurrency {concurrency}: {path} measured sustained load only at C = {have}"
        )
    ok, out, think, prompt = _phase_sums(doc)
    natural = bool((doc.get("config") or {}).get("natural"))
    notes: list[str] = []
    if tokens_per_sample is not None:
        tps_ours, tps_basis = tokens_per_sample, "given (--tokens-per-sample)"
    elif natural and ok:
        tps_ours = out / ok
        tps_basis = f"mean output length of the run's {ok} natural-length requests"
        notes.append(
            "tokens per sample measured on the run's built-in prompts, not yours: "
            "pass --tokens-per-sample, or forecast from a pilot (--prompts)"
        )
    else:
        raise UsageError(
            f"{path}: the run forced every output to a fixed length (field 'config.natural' "
            "is false), so it did not measure tokens per sample: pass --tokens-per-sample"
        )
    think_share = think / out if out else 0.0
    burst = _by_c(doc, "burst")
    field_c = None
    if burst:
        field_c = (
            FIELD_CONCURRENCY
            if FIELD_CONCURRENCY in burst
            else min(burst, key=lambda c: (abs(c - FIELD_CONCURRENCY), -c))
        )
        if field_c != FIELD_CONCURRENCY:
            notes.append(
                f"no burst at C={FIELD_CONCURRENCY} in the run: field column uses C={field_c}"
            )
    else:
        notes.append("the run has no burst phase: no field column")
    bpt = bytes_per_token or _bytes_per_token_from_records(Path(path))
    storage = storage_from_tokens(
        tps_ours,
        bpt,
        hidden,
        basis=(
            None
            if bytes_per_token or not bpt
            else f"{bpt:.2f} bytes per output token (measured in the run's requests.jsonl) "
            f"+ {JSONL_OVERHEAD_BYTES} bytes per line; prompts not counted"
        ),
    )
    target = doc.get("target") or {}
    plan = new_plan_doc(
        "result",
        {
            "kind": "result",
            "path": str(path),
            "url": target.get("url"),
            "model": target.get("model"),
            "server": (target.get("server") or {}).get("kind"),
        },
        {
            "samples": list(samples),
            "servers": servers,
            "concurrency": concurrency,
            "tokens_per_sample": tokens_per_sample,
        },
    )
    plan["model"] = {
        "tokens_per_sample": tps_ours,
        "tokens_per_sample_basis": tps_basis,
        "thinking_share": think_share,
        "sustained_tps_by_concurrency": {str(c): r for c, r in sorted(sustained.items())},
        "best_concurrency": best_c,
        "rate_halfwidth_by_concurrency": {str(c): h for c, h in sorted(bars.items())},
        "bar_basis": (
            f"the sustained rate's 95% bar only: its steady window cut into {RATE_WINDOWS} "
            "stretches (Student t); tokens per sample taken as exact, no start-up or tail"
        ),
        "field": {
            "method": "burst tok/s at C=32 × tokens per sample from the prompts used",
            "concurrency": field_c,
            "tok_per_s": burst.get(field_c) if field_c else None,
            "tokens_per_sample": tps_ours,
        },
        "storage_basis": storage.basis,
    }
    for s in samples:
        tokens = s * tps_ours
        row: dict[str, Any] = {
            "samples": s,
            "tokens": {
                "output": tokens,
                "thinking": tokens * think_share,
                "answer": tokens * (1 - think_share),
            },
            "ours_best": {
                "concurrency": best_c,
                "tok_per_s": sustained[best_c],
                **duration(tokens / sustained[best_c]),
                **_with_bar(tokens / sustained[best_c], bars.get(best_c)),
            },
            "storage": storage.row(s, tokens),
        }
        if concurrency is not None:
            row["ours_chosen"] = {
                "concurrency": concurrency,
                "tok_per_s": sustained[concurrency],
                **duration(tokens / sustained[concurrency]),
                **_with_bar(tokens / sustained[concurrency], bars.get(concurrency)),
            }
        if servers > 1:
            c_used = concurrency if concurrency is not None else best_c
            row["at_servers"] = {
                "servers": servers,
                "concurrency": c_used,
                **duration(tokens / (sustained[c_used] * servers)),
                **_with_bar(tokens / (sustained[c_used] * servers), bars.get(c_used)),
            }
        if field_c is not None:
            f = arithmetic(s, tps_ours, burst[field_c], 1)
            row["field"] = {
                "concurrency": field_c,
                "tok_per_s": burst[field_c],
                "tokens": f["tokens"],
                **duration(f["seconds"]),
            }
        plan["rows"].append(row)
    plan["notes"] = notes
    return plan


# ------------------------------------------------------------------------------ the pilot


@dataclass
class PilotRun:
    records: list[RequestRecord]
    wall_s: float
    jsonl_bytes: list[int] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = "size"  # why it ended: size, target, time, prompts
    stopped_at: dict[str, Any] = field(default_factory=dict)  # answered, length bar then
    samples: int = 0  # rows sent (a multi-turn row is one sample of several requests)


PILOT_ROWS = 100_000  # rows of the file held for the pilot (a random sample of a bigger file)


@dataclass
class PilotInput:
    """The job's input as `genbench generate` reads it: `rows` is a random sample of the
    file's valid rows (all of them when there are at most PILOT_ROWS), in random order."""

    path: Path
    total: int
    rows: list[Row]


def read_pilot_input(path: Path, seed: int, limit: int = PILOT_ROWS) -> PilotInput:
    """Check the whole file with generate's own reader (a bad row raises the error
    generate would give, naming file, line and field), then load a random sample of its
    rows. Two passes over the file, neither holding more than `limit` rows."""
    res = scan(path)
    total = len(res.todo)
    if total == 0:
        raise InputFileError(path, None, "empty: no rows with a prompt")
    rnd = random.Random(seed)
    chosen = rnd.sample(sorted(res.todo), min(total, limit))  # ids, in a random order
    by_id = {
        r.id: r for r in iter_rows(path, set(chosen), res.bad_lines) if isinstance(r, Row)
    }  # the second pass skips unchosen rows that carry an id without parsing them
    return PilotInput(path, total, [by_id[i] for i in chosen if i in by_id])


def pilot_stream(rows: Sequence[Row], seed: int) -> Iterator[Row]:
    """The rows in the order given (already random), then drawn at random with
    replacement: a pilot longer than the file sends some rows twice."""
    yield from rows
    rnd = random.Random(seed)
    while rows:
        yield rows[rnd.randrange(len(rows))]


def first_turn_requests(
    rows: Sequence[Row], params: dict[str, Any], all_turns: bool, prefix: str
) -> list[ChatRequest]:
    """Each row's first request, as generate sends it (for the warm-up)."""
    out = []
    for i, row in enumerate(rows):
        req = Conversation(row, params, all_turns, f"{prefix}-{i}").next_request()
        if req is not None:
            out.append(req)
    return out


@dataclass
class PilotStop:
    """When an open-ended pilot has seen enough: at least `min_requests` answered, at
    least `min_s` seconds, and the mean output length known to ±`target` ×
    `length_share` (95%), the rest of the bar being left to the server's speed; or
    `max_s` seconds; or `max_requests` sent."""

    target: float = TARGET_REL_ERROR
    min_requests: int = 200
    min_s: float = 0.0
    max_s: float = 600.0
    max_requests: int | None = None
    length_share: float = 0.8
    count: int = 0
    total: float = 0.0
    squares: float = 0.0
    started: float | None = None
    reason: str = ""
    at_count: int = 0  # answered requests when it stopped, and the length bar then
    at_halfwidth: float = math.inf

    def add_sample(self, tokens: int) -> None:
        """A finished sample's output tokens (all its turns)."""
        if tokens:
            self.count += 1
            self.total += tokens
            self.squares += float(tokens) ** 2

    @property
    def halfwidth(self) -> float:
        return length_halfwidth(self.count, self.total, self.squares)

    def done(self, sent: int) -> bool:
        now = time.perf_counter()
        if self.started is None:
            self.started = now
        enough = self.count >= self.min_requests and now - self.started >= self.min_s
        if enough and self.halfwidth <= self.target * self.length_share:
            self.reason = "target"
        elif now - self.started >= self.max_s:
            self.reason = "time"
        elif self.max_requests is not None and sent >= self.max_requests:
            self.reason = "size"
        if self.reason:
            self.at_count, self.at_halfwidth = self.count, self.halfwidth
        return bool(self.reason)


class PilotSink:
    """Where the pilot's finished rows go: measured as generate writes them, then dropped."""

    def __init__(self, model: str, run: PilotRun, stop: PilotStop | None) -> None:
        self.model, self.run, self.stop = model, run, stop

    def finish(self, conv: Conversation) -> None:
        line = conv.line(self.model)
        if conv.last is not None:
            conv.last.extra["jsonl_bytes"] = len(line)
        self.run.jsonl_bytes.append(len(line))
        if len(self.run.rows) < PARQUET_ROWS:
            self.run.rows.append(orjson.loads(line))
        if self.stop is not None:
            self.stop.add_sample(conv.tokens)

    def give_up(self, conv: Conversation, kind: ErrorKind, why: str) -> None: ...

    def note(self, text: str, style: str = "") -> None: ...


async def run_pilot(
    ep: Endpoint,
    model: str,
    rows: Iterable[Row],
    concurrency: int,
    out: Path | None,
    on_record: Callable[[RequestRecord], None] | None = None,
    timeout: float = 600.0,
    warmup: Sequence[ChatRequest] = (),
    warmup_s: float = 0.0,
    stop: PilotStop | None = None,
    params: dict[str, Any] | None = None,
    turns: str = "all",
) -> PilotRun:
    """Run the pilot as the job will run, on generate's own path (`row_load`): C
    workers, sustained, natural lengths, each row a conversation sent as `genbench
    generate` sends it, failures retried as it retries them. Records go to
    out/requests.jsonl without their text, tagged in `extra` with the row (`row`), the
    turn (`turn`) and the row's number of requests (`turns`), and are read back from
    there; each finished row is measured as generate writes it (`jsonl_bytes`), then
    dropped. `rows` is sent to its end, or, with `stop`, until `stop.done` says enough;
    conversations in flight then finish. A server that stops answering raises
    ServerDown, the records so far on disk.

    With `warmup_s`, the `warmup` requests (cycled) first load the server at C for that
    long and are discarded: a server that sat idle runs slower for its first seconds
    of load (12-20% for ~20 s on the vLLM CPU test server), and a pilot is short enough
    for that to bias the forecast of a job that runs warm for hours."""
    timeouts = Timeouts(connect=10.0, read=timeout, total=None)
    # the protocol-level transport `run` uses: the client's own CPU stays out of the pilot
    client = FastClient(ep, model, timeouts=timeouts, keep_text=True)
    server = Server(ep, client, concurrency)
    writer = RecordWriter(out / REQUESTS_FILE) if out else None
    run = PilotRun(records=[], wall_s=0.0)

    def record(rec: RequestRecord) -> None:
        rec.text = rec.reasoning = None
        if writer:
            writer.write(rec)
        if on_record:
            on_record(rec)

    def label(n: int, row: Row) -> tuple[str, dict[str, Any]]:
        return f"pilot-{n}-line{row.line}", {"row": n, "turns": turn_count(row, turns == "all")}

    load = row_load(
        [server],
        rows,
        PilotSink(model, run, stop),
        params=params or {},
        turns=turns,
        retries=Retries(),
        phase="pilot",
        admit=(lambda n: not stop.done(n)) if stop is not None else None,
        label=label,
        on_record=record,
    )
    try:
        if warmup_s > 0 and warmup:
            await run_phase(
                client,
                itertools.cycle(warmup),
                concurrency=concurrency,
                phase="warmup",
                duration=warmup_s,
            )
        phase = await load.run()
    finally:
        await server.close()
        if writer:
            writer.close()
    run.samples = load.queue.taken
    run.stopped = stop.reason or "prompts" if stop is not None else "size"
    if stop is not None and stop.reason:
        run.stopped_at = {"answered": stop.at_count, "length_halfwidth": stop.at_halfwidth}
    run.records = read_records(out / REQUESTS_FILE) if out else phase.records
    sent = [r for r in run.records if r.t_send]
    if sent:
        run.wall_s = max(r.t_end or r.t_send for r in sent) - min(r.t_send for r in sent)
    return run


def plan_from_pilot(
    run: PilotRun,
    concurrency: int,
    samples: Sequence[int],
    servers: int,
    hidden: HiddenStates | None,
    source: dict[str, Any],
    inputs: dict[str, Any],
    boot: int = 100,
    seed: int = 0,
) -> dict[str, Any]:
    model = PilotModel.from_records(run.records, concurrency)
    jobs = [(s, 1) for s in samples] + ([(s, servers) for s in samples] if servers > 1 else [])
    every = forecast(model, jobs, boot=boot, seed=seed)
    fc, fc_m = every[: len(samples)], (every[len(samples) :] if servers > 1 else None)
    jsonl = float(np.mean(run.jsonl_bytes)) if run.jsonl_bytes else JSONL_OVERHEAD_BYTES
    storage = StorageModel(
        jsonl,
        parquet_bytes_per_row(run.rows),
        f"measured on the pilot's {len(run.rows)} outputs, as genbench generate writes them "
        "(JSONL; Parquet with zstd)",
        hidden,
    )
    plan = new_plan_doc("pilot", source, inputs)
    plan["model"] = {**model.describe(), "storage_basis": storage.basis}
    k = model.pilot_samples
    worst = max(fc, key=lambda f: f.samples)
    plan["model"]["job_tps"] = worst.output_tokens / worst.seconds
    plan["pilot_size_for_5pct"] = pilot_size_for(worst.rel_halfwidth, k)
    target = inputs.get("target_error") or TARGET_REL_ERROR
    plan["pilot_size_for_target"] = {
        "target": target,
        "requests": pilot_size_for(worst.rel_halfwidth, k, target),  # samples, in fact
        "samples": pilot_size_for(worst.rel_halfwidth, k, target),
    }
    per = len(model.pool.output) / len(model.pool.heads)
    if per > 1:
        plan["notes"].append(
            f"a sample is {per:.2f} requests on average (multi-turn rows, every user turn "
            "answered in order as generate's --turns all does; --turns last: one each)"
        )
    for i, f in enumerate(fc):
        row: dict[str, Any] = {
            "samples": f.samples,
            "tokens": {
                "output": f.output_tokens,
                "output_lo": f.output_lo,
                "output_hi": f.output_hi,
                "thinking": f.thinking_tokens,
                "answer": f.output_tokens - f.thinking_tokens,
                "prompt": f.prompt_tokens,
            },
            "ours": _wall(f),
            "naive_pilot": {
                "method": "pilot wall time × samples / pilot samples",
                **duration(run.wall_s * f.samples / k),
            },
            "storage": storage.row(f.samples, f.output_tokens + f.prompt_tokens),
        }
        if fc_m is not None:
            row["at_servers"] = {"servers": servers, **_wall(fc_m[i])}
        plan["rows"].append(row)
    if abs(model.replay_err) > 0.05:
        plan["notes"].append(
            f"the fitted model replays the pilot {model.replay_err:+.1%} off its actual wall "
            "time: the server does something the model does not capture (the bar includes it)"
        )
    rho = lag1(model.stretches)
    if rho >= WANDER_LAG1:
        plan["notes"].append(
            f"the server's speed wandered during the pilot (its stretches alike from one to "
            f"the next: lag-1 autocorrelation {rho:.2f}): speed that wanders over longer than "
            "the pilot is not in the bar; a longer pilot (--pilot-min-time) sees more of it"
        )
    elif model.pilot_wall_s < SHORT_PILOT_S:
        plan["notes"].append(
            f"the pilot ran {model.pilot_wall_s:.0f} s: the bar's speed part is what the "
            "server did in that time; a server whose speed drifts over tens of minutes (a "
            "shared host) can run the job faster or slower (--pilot-min-time 300 sees more "
            "of it)"
        )
    if inputs.get("pilot_stopped") == "time":
        plan["notes"].append(
            "the pilot stopped at --pilot-max-time before the mean output length reached its "
            "target: the bar is wider than asked"
        )
    if model.pool.fail_rate:
        plan["notes"].append(
            f"{model.pool.fail_rate:.1%} of pilot requests failed; the forecast retries them"
        )
    if k < 2 * concurrency:
        plan["notes"].append(
            f"the pilot ({k} requests) is short for C={concurrency}: at least "
            f"{4 * concurrency} gives a steady stretch to measure"
        )
    return plan


def _wall(f: WallForecast) -> dict[str, Any]:
    return {
        **duration(f.seconds),
        "lo_s": f.lo_s,
        "hi_s": f.hi_s,
        "confidence": CONFIDENCE,
        "rel_halfwidth": f.rel_halfwidth,
        "length_halfwidth": f.length_halfwidth,
    }


def save_plan(plan: dict[str, Any], directory: Path) -> Path:
    path = directory / PLAN_FILE
    write_json_atomic(path, plan)
    return path
