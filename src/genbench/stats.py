"""Statistics over request records: percentiles, throughput, and the steady window.

Two throughput definitions, both kept:

* burst: output tokens of successful requests / wall time from the first send
  to the last end. This is the field's definition; a burst under-fills the
  batch as stragglers finish, so it understates what a long job sustains.
* sustained: tokens *arriving* inside a steady window in which every worker
  had a request in flight: after the last of the first C requests produced
  its first token (ramp-up) and before the first completion after sending
  stopped (tail). Token arrival times come from chunk timestamps; each
  chunk's share of the server's `usage` count is spread evenly over the
  chunks of its kind, so speculative chunks carrying several tokens count
  as several tokens.

A job that runs for days is followed by `RecentRates`: records binned by the second
they ended, so its rates cover the last minutes whatever the job's length.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from genbench.records import THINKING, RequestRecord

if TYPE_CHECKING:
    import numpy as np

PCTS = (50, 90, 99)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear-interpolated percentile (numpy's default method); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    return _between(xs, (len(xs) - 1) * p / 100.0)


def quantile(values: Sequence[float], q: float) -> float:
    """`percentile` with q a fraction (0.5 the median); the values must not be empty."""
    xs = sorted(values)
    return _between(xs, (len(xs) - 1) * q)


def _between(xs: list[float], k: float) -> float:
    """The sorted values read at fractional rank k, linearly between its neighbours."""
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# -- Student t and resamples: the one copy every interval in genbench uses ------------------


@lru_cache(maxsize=1024)
def t_quantile(p: float, df: float) -> float:
    """Student's t quantile for any df >= 1 (fractional too, as Welch gives).

    The CDF is the integral of the density from 0 (Simpson's rule: the density is smooth,
    and the 95% quantile is under 13 for df >= 1), inverted by bisection."""
    import numpy as np  # here: most commands never need a t quantile

    if not 0.5 <= p < 1:
        raise ValueError(f"p={p}: expected 0.5 <= p < 1")
    if df == math.inf or df > 1e7:
        return NormalDist().inv_cdf(p)
    if df <= 0:
        raise ValueError(f"df={df}: expected > 0")
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(x: float) -> float:
        ts = np.linspace(0.0, x, 2001)
        dens = np.exp(log_c - (df + 1) / 2 * np.log1p(ts * ts / df))
        h = x / 2000
        area = h / 3 * (dens[0] + dens[-1] + 4 * dens[1:-1:2].sum() + 2 * dens[2:-1:2].sum())
        return 0.5 + float(area)

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# the degrees of freedom of a printed t table: the plan reads t there (`t_975`)
T_DFS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 30)


def t_975(df: int) -> float:
    """Student t's 97.5% quantile as a printed table gives it, which the plan's bars were
    built on: 3 decimals, the nearest tabulated df at or below; 1.96 past 30."""
    if df > 30:
        return 1.96
    return round(t_quantile(0.975, max(d for d in T_DFS if d <= max(df, 1))), 3)


def resample_index(rng: np.random.Generator, n: int, boot: int | None = None) -> np.ndarray:
    """Indices of a bootstrap resample of n items (with replacement): one resample, or
    `boot` of them as the rows of a matrix."""
    return rng.integers(0, n, n if boot is None else (boot, n))


def dist(values: Iterable[float | None]) -> dict[str, float | None]:
    """mean, p50/p90/p99, min, max of the values that are not None."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"n": 0, "mean": None, **{f"p{p}": None for p in PCTS}, "min": None, "max": None}
    return {
        "n": len(xs),
        "mean": sum(xs) / len(xs),
        **{f"p{p}": percentile(xs, p) for p in PCTS},
        "min": min(xs),
        "max": max(xs),
    }


def token_events(rec: RequestRecord) -> list[tuple[float, float, bool]]:
    """(absolute time, tokens, is_thinking) per text chunk, tokens from usage spread per kind."""
    n_think = rec.chunk_kinds.count(THINKING)
    n_ans = len(rec.chunk_kinds) - n_think
    total = rec.completion_tokens if rec.completion_tokens is not None else len(rec.chunk_kinds)
    think_tok = rec.reasoning_tokens if rec.reasoning_tokens is not None else n_think
    think_tok = min(think_tok, total)
    ans_tok = total - think_tok
    per_think = think_tok / n_think if n_think else 0.0
    per_ans = ans_tok / n_ans if n_ans else 0.0
    if not n_think and think_tok:  # thinking counted by the server but not streamed apart
        per_ans = total / n_ans if n_ans else 0.0
    t0 = rec.t_send
    return [
        (t0 + off, per_think if k == THINKING else per_ans, k == THINKING)
        for off, k in zip(rec.chunk_offsets, rec.chunk_kinds, strict=False)
    ]


@dataclass
class Window:
    start: float
    end: float
    tokens: float
    thinking_tokens: float
    halves: tuple[float, float]  # tok/s in the first and second half

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def stable(self) -> bool:
        a, b = self.halves
        return a > 0 and b > 0 and abs(a - b) / max(a, b) <= 0.05


def window_throughput(records: Sequence[RequestRecord], start: float, end: float) -> Window | None:
    """Tokens of successful requests arriving in [start, end)."""
    if end <= start:
        return None
    mid = (start + end) / 2
    tok = think = first = second = 0.0
    for r in records:
        if not r.ok:
            continue
        for t, n, is_think in token_events(r):
            if start <= t < end:
                tok += n
                if is_think:
                    think += n
                if t < mid:
                    first += n
                else:
                    second += n
    half = (end - start) / 2
    return Window(start, end, tok, think, (first / half, second / half))


def steady_window(
    records: Sequence[RequestRecord], concurrency: int, stop_sending_at: float | None
) -> tuple[float, float] | None:
    """[ramp end, tail start] for a sustained phase.

    Ramp ends when each of the first `concurrency` requests has produced its first token.
    The tail starts at the first completion after sending stopped (from then on fewer than
    C requests are in flight)."""
    ok = [r for r in records if r.t_send]
    if not ok:
        return None
    by_send = sorted(ok, key=lambda r: r.t_send)
    first_c = by_send[:concurrency]
    # a slot is ramped up when its first request streams its first token; a request that
    # failed before streaming frees its slot at its end, when the worker sends the next
    firsts = [
        r.t_send + r.ttft if r.ttft is not None else r.t_end
        for r in first_c
        if r.ttft is not None or r.t_end is not None
    ]
    if not firsts:
        return None
    start = max(firsts)
    ends = sorted(r.t_end for r in ok if r.t_end is not None)
    if stop_sending_at is None:
        stop_sending_at = by_send[-1].t_send
    after = [t for t in ends if t >= stop_sending_at]
    end = after[0] if after else (ends[-1] if ends else start)
    return (start, end) if end > start else None


@dataclass
class PhaseSummary:
    """What a phase measured. Rates are tokens/s; times are seconds."""

    requests: int = 0
    ok: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    finish_reasons: dict[str, int] = field(default_factory=dict)
    output_tokens: int = 0
    thinking_tokens: int = 0
    answer_tokens: int = 0
    prompt_tokens: int = 0
    tokens_estimated: bool = False
    wall_s: float = 0.0
    # burst definition: tokens / wall
    output_tps: float | None = None
    request_rate: float | None = None
    # sustained: steady-window figures (None for phases that are not sustained)
    steady_tps: float | None = None
    steady_thinking_tps: float | None = None
    steady_answer_tps: float | None = None
    steady_window_s: tuple[float, float] | None = None  # offsets from phase start
    steady_halves_tps: tuple[float, float] | None = None
    steady_stable: bool | None = None
    decode_tps: dict[str, Any] = field(default_factory=dict)  # per-request
    ttft_s: dict[str, Any] = field(default_factory=dict)
    ttft_answer_s: dict[str, Any] = field(default_factory=dict)
    itl_chunk_s: dict[str, Any] = field(default_factory=dict)
    tpot_s: dict[str, Any] = field(default_factory=dict)
    e2e_s: dict[str, Any] = field(default_factory=dict)
    output_len: dict[str, Any] = field(default_factory=dict)
    tokens_per_chunk: float | None = None
    acceptance: dict[str, Any] | None = None  # each request's, where the server said it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    records: Sequence[RequestRecord],
    *,
    concurrency: int | None = None,
    sustained: bool = False,
    stop_sending_at: float | None = None,
) -> PhaseSummary:
    s = PhaseSummary(requests=len(records))
    if not records:
        return s
    ok = [r for r in records if r.ok]
    s.ok, s.failed = len(ok), len(records) - len(ok)
    s.errors = dict(Counter(str(r.error_kind) for r in records if not r.ok))
    s.finish_reasons = dict(Counter(r.finish_reason or "none" for r in ok))
    s.output_tokens = sum(r.completion_tokens or 0 for r in ok)
    s.thinking_tokens = sum(r.reasoning_tokens or 0 for r in ok)
    s.answer_tokens = s.output_tokens - s.thinking_tokens
    s.prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    s.tokens_estimated = any(r.tokens_estimated for r in ok)
    t_start = min(r.t_send for r in records)
    t_end = max((r.t_end for r in records if r.t_end is not None), default=t_start)
    s.wall_s = t_end - t_start
    if s.wall_s > 0:
        s.output_tps = s.output_tokens / s.wall_s
        s.request_rate = s.ok / s.wall_s
    s.decode_tps = dist(r.decode_rate for r in ok)
    s.ttft_s = dist(r.ttft for r in ok)
    s.ttft_answer_s = dist(r.ttft_answer for r in ok)
    s.itl_chunk_s = dist(g for r in ok for g in r.itls())
    s.tpot_s = dist(r.tpot for r in ok)
    s.e2e_s = dist(r.e2e for r in ok)
    s.output_len = dist(float(r.completion_tokens) for r in ok if r.completion_tokens is not None)
    chunks = sum(r.chunk_count for r in ok)
    if chunks:
        s.tokens_per_chunk = s.output_tokens / chunks
    if sustained and concurrency:
        win = steady_window(records, concurrency, stop_sending_at)
        w = window_throughput(records, *win) if win else None
        if w is not None:
            s.steady_tps = w.rate
            s.steady_thinking_tps = w.thinking_tokens / w.seconds
            s.steady_answer_tps = (w.tokens - w.thinking_tokens) / w.seconds
            s.steady_window_s = (w.start - t_start, w.end - t_start)
            s.steady_halves_tps = w.halves
            s.steady_stable = w.stable
    s.acceptance = acceptance(ok)
    return s


# -- speculative acceptance per request (records' `spec`); output-length bins (tokens) ------
LENGTH_EDGES = (128, 512, 2048, 8192, 32768)


def _accept_row(pairs: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Pooled length (1 + accepted / steps, as the server's counters pool it) and the
    spread of the per-request lengths, from (steps, accepted) pairs."""
    steps = sum(p[0] for p in pairs)
    accepted = sum(p[1] for p in pairs)
    xs = [1.0 + a / n for n, a in pairs]
    row: dict[str, Any] = {"requests": len(pairs), "length": 1.0 + accepted / steps}
    row.update({f"p{p}": percentile(xs, p) for p in (10, 50, 90)})
    return row


def length_bin(tokens: int) -> tuple[int, int | None]:
    """The output-length bin of a request: (lo, hi) tokens, hi None for the last."""
    lo = 1 + max((e for e in LENGTH_EDGES if e < tokens), default=0)
    return lo, next((e for e in LENGTH_EDGES if tokens <= e), None)


def acceptance_of(items: Iterable[tuple[int, int, str | None, int]]) -> dict[str, Any] | None:
    """Acceptance of (steps, accepted, group, output tokens) items (requests or rows): as a
    distribution, by group worst first, and by output length; None for no items."""
    every: list[tuple[int, int]] = []
    groups: dict[str, list[tuple[int, int]]] = {}
    bins: dict[tuple[int, int | None], list[tuple[int, int]]] = {}
    for steps, accepted, group, tokens in items:
        pair = (steps, accepted)
        every.append(pair)
        if group:
            groups.setdefault(group, []).append(pair)
        bins.setdefault(length_bin(tokens), []).append(pair)
    if not every:
        return None
    out = _accept_row(every) | {"steps": sum(p[0] for p in every)}
    out["accepted"] = sum(p[1] for p in every)
    by_group = [{"group": g, **_accept_row(v)} for g, v in groups.items()]
    out["by_group"] = sorted(by_group, key=lambda row: (row["length"], row["group"]))
    out["by_length"] = [{"lo": k[0], "hi": k[1], **_accept_row(bins[k])} for k in sorted(bins)]
    return out


def left_out(out: dict[str, Any], unknown: int, dropped: Counter[str]) -> None:
    """What a pool of acceptance left out, in its summary: `unknown` (said nothing) and
    `dropped` (why: count), each only where there is one."""
    if unknown:
        out["unknown"] = unknown
    if dropped:
        out["dropped"] = dict(dropped.most_common())


def acceptance(records: Sequence[RequestRecord]) -> dict[str, Any] | None:
    """The requests' acceptance (records' `spec`, their `extra.group`), with how many of
    them said it (`of`), its dialect, and the drafts proposed where every one says. Pooled
    as the server's counters pool: over verify steps (a request that never drafted has
    none). A request that said nothing is unknown, one whose figures cannot be dropped:
    both counted (`unknown`, `dropped` by why) and left out."""
    specs = [(r, r.spec) for r in records if r.spec and r.spec["steps"]]
    out = acceptance_of((s["steps"], s["accepted"], r.extra.get("group"),
                         r.completion_tokens or 0) for r, s in specs)  # fmt: skip
    if out is None:
        return None
    out["of"] = len(records)
    left_out(out, sum(r.spec is None and r.spec_dropped is None for r in records),
             Counter(r.spec_dropped for r in records if r.spec_dropped))  # fmt: skip
    out["src"] = Counter(s["src"] for _, s in specs).most_common(1)[0][0]
    if all(s.get("drafted") is not None for _, s in specs):
        out["drafted"] = sum(s["drafted"] for _, s in specs)
        out["rate"] = out["accepted"] / out["drafted"] if out["drafted"] else None
    return out


def knee(points: Sequence[tuple[int, float | None]], min_gain: float = 0.10) -> int | None:
    """The lowest concurrency that no higher level beats by `min_gain` or more: where
    throughput stopped growing for good. Looking only at the next step would claim a knee
    that a later level contradicts (a flat step, then +40% further up); None when the
    highest level still paid (no knee within the sweep)."""
    pts = [(c, r) for c, r in sorted(points) if r]
    for i, (c, r) in enumerate(pts[:-1]):
        if max(r_later for _, r_later in pts[i + 1 :]) < r * (1 + min_gain):
            return c
    return None


def sweep_of(shape: str, rows: Sequence[Any]) -> dict[str, Any]:
    """One shape's sweep: tok/s by concurrency and its knee. An unstable steady window
    is no level to read a knee from, so a sustained sweep with one names those levels
    instead of claiming a knee."""
    key = "steady_tps" if shape == "sustained" else "output_tps"
    points = [(p.concurrency, getattr(p.summary, key)) for p in rows]
    shaky = [p.concurrency for p in rows if p.summary.steady_stable is False]
    shaky = shaky if shape == "sustained" else []
    out: dict[str, Any] = {
        "by_concurrency": {str(c): r for c, r in points},
        "knee": None if shaky else knee(points),
    }
    if shaky:
        out["knee_unstable"] = shaky
    return out


RATE_FIELDS = ("requests", "units", "tokens", "thinking_tokens")


class RecentRates:
    """Rates over the last `keep` seconds of records, by the time each ended: requests,
    units (what the caller counts as finished work: `generate`'s rows), output tokens and
    thinking tokens of successful requests. Per-second bins, so memory is the window."""

    def __init__(
        self,
        keep: float = 300.0,
        bin_s: float = 1.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.keep, self.bin_s, self.clock = keep, bin_s, clock
        self.t0 = clock()
        self.bins: dict[int, list[float]] = {}  # bin number -> counts, in RATE_FIELDS order

    def add(self, rec: RequestRecord, units: int = 0) -> None:
        """One ended request, and the units it finished."""
        key = math.floor((rec.t_end or self.clock()) / self.bin_s)
        row = self.bins.get(key)
        if row is None:
            oldest = key - int(self.keep / self.bin_s) - 1
            for k in [k for k in self.bins if k < oldest]:
                del self.bins[k]
            row = self.bins[key] = [0.0] * len(RATE_FIELDS)
        row[0] += 1
        row[1] += units
        if rec.ok:
            row[2] += rec.completion_tokens or 0
            row[3] += rec.reasoning_tokens or 0

    def totals(self, start: float, end: float) -> dict[str, float]:
        """Counts of the bins whose middle lies in [start, end)."""
        out = [0.0] * len(RATE_FIELDS)
        for key, row in self.bins.items():
            if start <= (key + 0.5) * self.bin_s < end:
                out = [a + b for a, b in zip(out, row, strict=True)]
        return dict(zip(RATE_FIELDS, out, strict=True))

    def _span(self, window: float) -> tuple[float, float]:
        now = self.clock()
        return max(now - window, self.t0), now

    def rates(self, window: float, min_s: float = 1.0) -> dict[str, float] | None:
        """Per second, over the last `window` seconds; None while less than `min_s` passed."""
        start, end = self._span(window)
        if end - start < min_s:
            return None
        return {k: v / (end - start) for k, v in self.totals(start, end).items()}


def cluster_index(starts: np.ndarray, lens: np.ndarray, pick: np.ndarray) -> np.ndarray:
    """A cluster bootstrap's items: cluster c holds the items starts[c] .. starts[c] +
    lens[c] - 1; the items of the picked clusters, concatenated in the order picked (a
    row's turns, a request's gaps, kept together)."""
    import numpy as np

    n = lens[pick]
    return np.repeat(starts[pick] - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))
