"""How the server's speed moved during a pilot, and what that says about a job's mean speed.

A range is a statement about the job, not about the pilot's mean: what matters is how far
the job's mean speed can be from the pilot's. A server whose speed only scatters from one
stretch of time to the next is known better the longer it is watched, and a long job
averages the scatter away. A server whose speed wanders (stretches alike from one to the
next: another tenant, a thermal limit, a scheduler) is not: the job runs at other moments
than the pilot did, and the longer it runs the further the speed can have moved. This
module fits that from the pilot's own stretches and carries it over the job's length.

Pure Python (no numpy): `genbench generate` uses the same model for its live ETA, and it
does not load the forecast's numerical code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from genbench.stats import t_975

WANDER_EXPONENT = 0.5  # how the speed's spread grows with the time between two stretches
WANDER_HORIZON = 1.0  # ... for up to this many pilot lengths (what it saw), then no more
UNSEEN = 0.15  # speed change not seen yet, relative (95%), before anything of it is seen
# the speed's half-width at most, as the plan's bar and the live ETA put it on the time
# (× 2.5 at the slow end, ÷ 1.6 at the fast): past it a short pilot of a server swinging
# ±60% made a plan's bar +1,132% (its job ran 0.4 × its speed at worst: 2.5 × the time);
# the live ETA's high end ran to 20 × the time left on a short job's scattered stretches
SPEED_MAX = 0.6


def unseen_drift(ahead_s: float, seen_s: float) -> float:
    """Speed that changes more slowly than what has been watched (another tenant on the
    host, a thermal limit, a restart), over `ahead_s` seconds still to run after `seen_s`
    seconds watched: UNSEEN × ahead / (ahead + seen), relative, 95%. Nothing watched: all
    of UNSEEN; as much watched as is ahead: half. The plan's default for a job after its
    pilot (plan --speed-drift) and the live ETA's for the time left after the job's own
    history: one prior for both. A watch of a few seconds shows nothing of a speed that
    moves over minutes (benchmarks/README.md: a pilot at a slow spell of a server that
    wanders over 45 s forecast jobs 12–20% long, inside a bar of ±1%)."""
    if ahead_s <= 0:
        return 0.0
    return UNSEEN * ahead_s / (ahead_s + max(seen_s, 0.0))
def lag1(values: Sequence[float]) -> float:
    """Lag-1 autocorrelation of a series (0 with fewer than 3 values)."""
    v = [x for x in values if math.isfinite(x)]
    if len(v) < 3:
        return 0.0
    mean = sum(v) / len(v)
    d = [x - mean for x in v]
    denom = sum(x * x for x in d)
    return sum(a * b for a, b in zip(d, d[1:], strict=False)) / denom if denom > 0 else 0.0


def semivariogram(values: Sequence[float], max_lag: int) -> list[float]:
    """Half the mean squared difference between values k apart, for k = 1 … max_lag (as
    far as the series allows): how far apart the speed of two stretches k apart is."""
    v = list(values)
    out = []
    for k in range(1, min(max_lag, len(v) - 1) + 1):
        out.append(sum((b - a) ** 2 for a, b in zip(v, v[k:], strict=False)) / (len(v) - k) / 2)
    return out


@dataclass(frozen=True)
class SpeedBar:
    """The speed's part of one job's 95% range, relative, and its parts (each a 95%
    half-width; they add in quadrature)."""

    halfwidth: float
    noise: float  # the stretches' independent scatter: averages out over pilot and job
    wander: float  # speed that moves with time, extended over the job: does not
    drift: float  # what the user adds for drift slower than the pilot (--speed-drift)


@dataclass(frozen=True)
class SpeedWander:
    """How the server's speed moved during the pilot, and what that says about the job.

    The pilot's decoding is cut into m stretches of equal size; each stretch's speed is
    relative to their mean. How far apart two stretches k apart are (the semivariogram
    γ(k), half their mean squared difference, for k up to m/2) is fitted as
    γ(k) = noise + growth · min(k, H)^exponent, both ≥ 0: `noise` is scatter that averages
    out (a steady server's), `growth` is speed that wanders with time, growing with the
    time between two moments for up to H = `horizon` pilot lengths and no further. The
    job's mean speed minus the pilot's then has the variance the fitted γ implies for two
    windows of those lengths, one after the other: 2·γ̄(pilot, job) − γ̄(pilot) − γ̄(job),
    γ̄ the mean of γ over pairs of stretches. The noise averages out as 1/m + 1/n; the
    wander does not, and it grows with the job's length up to the horizon. Its 95%
    half-width is Student t (m − 1 degrees of freedom: the fit is from m stretches) times
    that standard deviation. Speed that moves more slowly than the pilot shows nothing of
    itself in it and is not in the range: `drift` adds what the user knows of it."""

    stretches: int  # m
    stretch_s: float  # seconds per stretch
    gamma: tuple[float, ...]  # the semivariogram at k = 1 … m // 2, relative speed squared
    noise: float  # γ's constant
    growth: float  # γ's growth per stretch^exponent
    moved: float  # the stretches' relative standard deviation: how much the speed moved
    lag1: float
    exponent: float = WANDER_EXPONENT
    horizon: float = WANDER_HORIZON  # pilot lengths

    @classmethod
    def fit(cls, values: Sequence[float], stretch_s: float) -> SpeedWander:
        """From the pilot's stretches (speeds in any unit, in time order)."""
        v = [float(x) for x in values if math.isfinite(x)]
        mean = sum(v) / len(v) if v else 0.0
        if len(v) < 3 or mean <= 0:
            return cls(len(v), stretch_s, (), 0.0, 0.0, 0.0, 0.0)
        v = [x / mean for x in v]
        gamma = semivariogram(v, len(v) // 2)
        ks = range(1, len(gamma) + 1)
        noise, growth = _fit_nonneg(
            [k**WANDER_EXPONENT for k in ks], gamma, [math.sqrt(len(v) - k) for k in ks]
        )
        moved = math.sqrt(sum((x - 1) ** 2 for x in v) / (len(v) - 1))
        return cls(len(v), stretch_s, tuple(gamma), noise, growth, moved, lag1(v))

    @property
    def pilot_s(self) -> float:
        return self.stretches * self.stretch_s

    def job(self, job_s: float, drift: float = 0.0, gap_s: float = 0.0) -> SpeedBar:
        """The speed's 95% half-width for a job of `job_s` seconds starting `gap_s` after
        the pilot, with `drift` (relative, 95%) added in quadrature."""
        m = self.stretches
        if m < 3 or self.stretch_s <= 0:
            return SpeedBar(drift, 0.0, 0.0, drift)
        n = max(1, round(job_s / self.stretch_s))
        gap = max(0, round(gap_s / self.stretch_s))
        z = t_975(m - 1)
        noise = self.noise * (1 / m + 1 / n)
        horizon = max(1.0, self.horizon * m)
        wander = self.growth * window_gap_variance(m, gap, n, horizon, self.exponent)
        parts = (z * math.sqrt(noise), z * math.sqrt(max(wander, 0.0)), drift)
        return SpeedBar(math.hypot(*parts), *parts)


def _fit_nonneg(f: Sequence[float], y: Sequence[float], w: Sequence[float]) -> tuple[float, float]:
    """Weighted least squares of y on (1, f), both coefficients ≥ 0: the best of both,
    either alone, or none."""
    ww = [x * x for x in w]
    s1, sf = sum(ww), sum(a * b for a, b in zip(ww, f, strict=True))
    sff = sum(a * b * b for a, b in zip(ww, f, strict=True))
    sy = sum(a * b for a, b in zip(ww, y, strict=True))
    sfy = sum(a * b * c for a, b, c in zip(ww, f, y, strict=True))

    def resid(a: float, b: float) -> float:
        return sum(q * (yi - a - b * fi) ** 2 for q, fi, yi in zip(ww, f, y, strict=True))

    cands = [(0.0, 0.0)]
    if s1 > 0:
        cands.append((sy / s1, 0.0))
    if sff > 0:
        cands.append((0.0, sfy / sff))
    det = s1 * sff - sf * sf
    if det > 1e-12 * max(s1 * sff, 1e-300):
        cands.append(((sff * sy - sf * sfy) / det, (s1 * sfy - sf * sy) / det))
    ok = [(a, b) for a, b in cands if a >= 0 and b >= 0]
    return min(ok, key=lambda c: resid(*c))


def window_gap_variance(m: int, gap: int, n: int, horizon: float, alpha: float) -> float:
    """Var(mean of n stretches − mean of the m before them, `gap` stretches earlier) for a
    process whose semivariogram is g(d) = min(d, horizon)^alpha (d ≥ 1, g(0) = 0):
    2·ḡ(between) − ḡ(within the m) − ḡ(within the n). Beyond the horizon g is flat, so
    only lags below it are summed one by one and a job of days costs no more than one of
    minutes."""
    top = horizon**alpha
    cut = math.ceil(horizon)  # g(d) = top for every d ≥ cut

    def g(d: int) -> float:
        return min(d, horizon) ** alpha

    def within(k: int) -> float:  # the mean of g over all k² pairs of one window
        if k < 2:
            return 0.0
        below = sum((k - d) * (g(d) - top) for d in range(1, min(k, cut)))
        return 2 * (below + top * k * (k - 1) / 2) / (k * k)

    short = 0.0  # Σ over lags below the cut of (pairs at that lag) × (top − g)
    for d in range(gap + 1, min(gap + m + n, cut)):
        count = min(m - 1, m + gap + n - 1 - d) - max(0, m + gap - d) + 1
        if count > 0:
            short += count * (top - g(d))
    between = top - short / (m * n)
    return 2 * between - within(m) - within(n)
