"""When is a difference between two sides real? The interval arithmetic of `compare`.

A server's speed moves between runs (its host, other tenants, caches), not only within
one, so an interval built from inside each run calls a drift a difference. A side is one
run or several repeats of it (docs/compare-and-report.md):

* a side's value is the mean m of its repeats; its relative standard error is
  e = max(s / m / sqrt(n), w): the spread between repeats (s their standard deviation),
  floored by the runs' own error of that mean, w = sqrt(sum w_i^2) / n, where w_i is
  repeat i's relative standard error (bootstrap, window halves);
* the log ratio d = ln(m_B / m_A) has standard error sqrt(e_A^2 + e_B^2) and the interval
  d ± t·SE, t Student's 97.5% quantile at the Welch–Satterthwaite degrees of freedom (a
  side whose floor binds counts as exactly known); `≈` when the interval holds 0, or
  when |d| is under FLOOR;
* a side of one run borrows the other side's spread between repeats;
* with one run on each side nothing measured the drift: `≈` when |d| is under
  max(Z·sqrt(w_A^2 + w_B^2), FLOOR, allowance), the allowance (ALLOWANCE by default)
  standing in for the drift the runs could not see.

All values are relative (fractions of the mean), so the rule is the same for tok/s and
for milliseconds, and a ratio's interval is exp(d ± t·SE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from genbench.stats import t_quantile

Z = 2.0  # one run per side: about a 95% interval from the runs' own errors
FLOOR = 0.01  # differences under 1% are never called: timer and scheduler jitter
# One run per side: differences under this are not called, because nothing measured how
# far the server's speed moves between runs. Measured: vLLM's own benchmark, three runs
# back to back, 1,983 / 2,168 / 2,247 tok/s; genbench runs of one vLLM server minutes apart
# differ by up to ~10% (benchmarks/README.md, "compare and drift").
ALLOWANCE = 0.10
LEVEL = 0.975  # two-sided 95%


def noise_rule(allowance: float = ALLOWANCE) -> str:
    """The rule in one line, as results and the console state it."""
    return (
        "with repeats: a difference is within noise when the 95% interval of ln(ratio) holds 0 "
        "or |ln(ratio)| <= "
        f"{FLOOR:g}; interval = Student t (Welch) over the sides' repeat means, each side's "
        "standard error floored by its runs' own; one run per side: within noise when "
        f"|ln(ratio)| <= max({Z:g}*sqrt(n_base^2 + n_run^2), {FLOOR:g}, allowance {allowance:g}) "
        "(between-run drift unmeasured); n = relative standard error within a run: bootstrap "
        "over requests (per-request metrics, burst tok/s, tokens per chunk for acceptance "
        "length), steady-window halves (sustained tok/s)"
    )


@dataclass(frozen=True)
class Side:
    """One metric on one side: its repeats' values and what they say about the mean."""

    values: tuple[float, ...]  # one per repeat that measured the metric
    within: float | None  # relative standard error of the mean from the runs' own noise

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def spread(self) -> float | None:
        """Relative standard deviation between repeats (None for one run)."""
        if self.n < 2 or self.mean <= 0:
            return None
        return float(np.std(self.values, ddof=1)) / self.mean

    @property
    def within_per_run(self) -> float | None:
        """The runs' own relative error, as one repeat's (root mean square)."""
        return None if self.within is None else self.within * math.sqrt(self.n)


def side(values: list[float | None], rel_noise: list[float | None]) -> Side | None:
    """The repeats that measured the metric; None when none did."""
    pairs = [(v, w) for v, w in zip(values, rel_noise, strict=True) if v is not None]
    if not pairs:
        return None
    ws = [w for _, w in pairs]
    within = None if any(w is None for w in ws) else math.sqrt(sum(w * w for w in ws)) / len(ws)
    return Side(tuple(float(v) for v, _ in pairs), within)


@dataclass(frozen=True)
class Difference:
    """One side against the base: the ratio, its interval and the verdict."""

    ratio: float
    interval: tuple[float, float] | None  # 95% interval of the ratio; None: drift unmeasured
    within_noise: bool | None  # True: cannot tell at this noise; None: no estimate
    drift_measured: bool  # some side had repeats
    repeats_needed: int | None  # per side, to resolve this difference at this spread
    se: float | None = None  # of the log ratio
    df: float = math.inf


def _term(s: Side, spread: float | None, n: int) -> tuple[float, float] | None:
    """(variance of the side's log mean, its degrees of freedom), or None if unknown."""
    between = None if spread is None else spread / math.sqrt(s.n)
    if between is None and s.within is None:
        return None
    if s.within is not None and (between is None or s.within >= between):
        return s.within**2, math.inf
    assert between is not None
    return between**2, float(n - 1)


def welch(terms: list[tuple[float, float]]) -> tuple[float, float]:
    """Standard error and Welch–Satterthwaite degrees of freedom of a sum of variances."""
    var = sum(v for v, _ in terms)
    denom = sum(v * v / df for v, df in terms if df != math.inf)
    df = var * var / denom if denom > 0 else math.inf
    return math.sqrt(var), df


def difference(base: Side, other: Side, allowance: float = ALLOWANCE) -> Difference:
    """The verdict on other ÷ base (module docstring)."""
    ratio = other.mean / base.mean
    d = math.log(ratio)
    if base.n < 2 and other.n < 2:
        return Difference(ratio, None, _single(d, base, other, allowance), False, None)
    # a side of one run borrows the other's spread (and its degrees of freedom)
    sa, sb = base.spread, other.spread
    na, nb = (base.n, other.n) if base.n > 1 and other.n > 1 else (max(base.n, other.n),) * 2
    ta = _term(base, sa if sa is not None else sb, na)
    tb = _term(other, sb if sb is not None else sa, nb)
    if ta is None or tb is None:
        return Difference(ratio, None, True if abs(d) <= FLOOR else None, True, None)
    se, df = welch([ta, tb])
    half = t_quantile(LEVEL, df) * se
    within = abs(d) <= max(half, FLOOR)
    needed = _needed(d, base, other) if within else None
    return Difference(ratio, (math.exp(d - half), math.exp(d + half)), within, True, needed, se, df)


def _single(d: float, base: Side, other: Side, allowance: float) -> bool | None:
    if abs(d) <= max(FLOOR, allowance):
        return True
    if base.within is None or other.within is None:
        return None
    return abs(d) <= Z * math.hypot(base.within, other.within)


def _needed(d: float, base: Side, other: Side) -> int | None:
    """Repeats per side that would resolve |d| at the spread seen (None: under FLOOR).

    Each side's per-repeat variance is its spread squared, floored by its runs' own error;
    a side of one run takes the other's spread. The smallest n whose interval excludes 0."""
    if abs(d) <= FLOOR:
        return None
    sa, sb = base.spread, other.spread
    vs = []
    for s, spread in ((base, sa if sa is not None else sb), (other, sb if sb is not None else sa)):
        parts = [x * x for x in (spread, s.within_per_run) if x is not None]
        vs.append(max(parts, default=0.0))
    var = sum(vs)
    if var <= 0:
        return 2
    # equal n per side: Welch's degrees of freedom are (n - 1)·(va + vb)^2 / (va^2 + vb^2)
    shape = var * var / sum(v * v for v in vs)
    z = NormalDist().inv_cdf(LEVEL)
    # more than both sides have (that did not resolve it), and t > z, so at least this
    n = max(2, min(base.n, other.n) + 1, math.floor(z * z * var / (d * d)))
    while t_quantile(LEVEL, (n - 1) * shape) * math.sqrt(var / n) >= abs(d):
        n += 1
    return n
