"""The server's decode step time, a + b·n + c·k, fitted to the pilot's own timestamps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from genbench.errors import UsageError
from genbench.records import RequestRecord


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

    return [c for c in combinations(_TERMS, size) if "a" in c or "b" in c]
