"""The job's wall time and its 95% bar: a bootstrap over the pilot's requests (the mean
length studentized), batch means of the server's speed over stretches of time, and the
replay's own error; and the pilot size a bar asks for."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from genbench.plan.jobsim import job_walls

if TYPE_CHECKING:
    from genbench.plan.model import PilotModel

CONFIDENCE = 0.95
TARGET_REL_ERROR = 0.05  # the pilot size that gives a ±5% bar is reported
T_975 = {  # Student t, 97.5% quantile, by degrees of freedom (batch means with ≤ 10 batches)
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262
}  # fmt: skip


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


# The speed's wander, carried from the pilot to the job (docs/plan.md, "The server's speed")
WANDER_EXPONENT = 0.5  # how the speed's spread grows with the time between two stretches
WANDER_HORIZON = 10.0  # ... for up to this many pilot lengths, then no more
SPEED_Z = 1.96  # 95%, normal


def semivariogram(values: Sequence[float], max_lag: int) -> np.ndarray:
    """Half the mean squared difference between values k apart, for k = 1 … max_lag (as
    far as the series allows): how far apart the speed of two stretches k apart is."""
    v = np.asarray(values, dtype=float)
    lags = range(1, min(max_lag, len(v) - 1) + 1)
    return np.array([float(np.mean((v[k:] - v[:-k]) ** 2)) / 2 for k in lags])


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

    The pilot's decoding is cut into stretches of equal size; each stretch's speed is
    relative to their mean. How far apart two stretches k apart are (the semivariogram
    γ(k), half their mean squared difference) is fitted as γ(k) = noise + growth ·
    min(k, H)^WANDER_EXPONENT, both ≥ 0: `noise` is scatter that averages out (a steady
    server's), `growth` is speed that wanders with time, growing with the time between
    two moments for up to H = WANDER_HORIZON pilot lengths. The job's mean speed minus
    the pilot's then has the variance the fitted γ implies for two windows of those
    lengths, one after the other (2·γ̄(pilot, job) − γ̄(pilot) − γ̄(job), γ̄ the mean of γ
    over pairs of stretches): the noise averages out as 1/m + 1/n, the wander does not,
    and it grows with the job's length. Speed that moves more slowly than the pilot
    shows nothing of itself in it and is not in the range: `drift` adds what the user
    knows of it."""

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
    def fit(
        cls,
        values: Sequence[float],
        stretch_s: float,
        exponent: float = WANDER_EXPONENT,
        horizon: float = WANDER_HORIZON,
    ) -> SpeedWander:
        """From the pilot's stretches (speeds in any unit, in time order)."""
        v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
        if len(v) < 3 or v.mean() <= 0:
            return cls(len(v), stretch_s, (), 0.0, 0.0, 0.0, 0.0, exponent, horizon)
        v = v / v.mean()
        gamma = semivariogram(v, len(v) // 2)
        k = np.arange(1, len(gamma) + 1, dtype=float)
        x = np.column_stack([np.ones_like(k), k**exponent])
        noise, growth = _fit_nonneg(x, gamma, np.sqrt(len(v) - k))
        moved = float(v.std(ddof=1))
        return cls(len(v), stretch_s, tuple(gamma.tolist()), noise, growth, moved, lag1(v),
                   exponent, horizon)  # fmt: skip

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
        noise = self.noise * (1 / m + 1 / n)
        horizon = max(1.0, self.horizon * m)
        wander = self.growth * _window_gap_variance(m, gap, n, horizon, self.exponent)
        parts = (SPEED_Z * math.sqrt(noise), SPEED_Z * math.sqrt(max(wander, 0.0)), drift)
        return SpeedBar(math.hypot(*parts), *parts)


def _fit_nonneg(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least squares of y on the two columns of x, both coefficients ≥ 0 (the
    best of both, either alone, or none)."""
    best, coef = float(np.sum((y * w) ** 2)), (0.0, 0.0)
    for cols in ([0, 1], [0], [1]):
        c, *_ = np.linalg.lstsq(x[:, cols] * w[:, None], y * w, rcond=None)
        if np.any(c < 0) or not np.all(np.isfinite(c)):
            continue
        full = np.zeros(2)
        full[cols] = c
        resid = float(np.sum(((x @ full - y) * w) ** 2))
        if resid < best * (1 - 1e-12):
            best, coef = resid, (float(full[0]), float(full[1]))
    return coef


def _window_gap_variance(m: int, gap: int, n: int, horizon: float, alpha: float) -> float:
    """Var(mean of n stretches − mean of the m before them, `gap` stretches earlier) for a
    process whose semivariogram is g(d) = min(d, horizon)^alpha (d ≥ 1, g(0) = 0):
    2·ḡ(between) − ḡ(within the m) − ḡ(within the n). Beyond the horizon g is flat, so
    only lags below it are summed one by one and a job of days costs no more than one of
    minutes."""
    top = horizon**alpha
    cut = int(math.ceil(horizon))  # g(d) = top for every d ≥ cut

    def g(d: np.ndarray) -> np.ndarray:
        return np.minimum(d, horizon) ** alpha

    def within(k: int) -> float:  # the mean of g over all k² pairs of one window
        if k < 2:
            return 0.0
        d = np.arange(1, min(k, cut), dtype=float)
        below = float(np.sum((k - d) * (g(d) - top)))
        return 2 * (below + top * k * (k - 1) / 2) / (k * k)

    d = np.arange(gap + 1, min(gap + m + n, cut), dtype=float)
    count = np.minimum(m - 1, m + gap + n - 1 - d) - np.maximum(0, m + gap - d) + 1
    between = top - float(np.sum(np.maximum(count, 0) * (top - g(d)))) / (m * n)
    return 2 * between - within(m) - within(n)


def length_halfwidth(count: int, total: float, squares: float) -> float:
    """Relative 95% half-width of a mean output length from its running sums (normal
    approximation; the final bar uses the bootstrap-t). inf until there are 2 values."""
    if count < 2 or total <= 0:
        return math.inf
    mean = total / count
    var = max(squares / count - mean * mean, 0.0) * count / (count - 1)
    return 1.96 * math.sqrt(var / count) / mean


def pilot_size_for(rel_halfwidth: float, pilot: int, target: float = TARGET_REL_ERROR) -> int:
    """An interval narrows as 1/√K: the pilot size whose bar would be ±target."""
    return max(1, math.ceil(pilot * (rel_halfwidth / target) ** 2))


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
    speed: SpeedBar | None = None  # the server's speed's share, with its parts

    @property
    def rel_halfwidth(self) -> float:
        return max(self.hi_s / self.seconds - 1, 1 - self.lo_s / self.seconds)


def forecast(
    model: PilotModel,
    jobs: Sequence[tuple[int, int]],
    boot: int = 100,
    seed: int = 0,
    time_budget_s: float = 20.0,
    drift: float = 0.0,
) -> list[WallForecast]:
    """For each job (samples, servers): a point forecast (the full pilot, averaged over a
    few simulations) and a 95% interval. The servers share the samples evenly and run
    alike.

    The interval has three parts, added in quadrature on each side:

    * a bootstrap over the pilot's requests (lengths, TTFTs, failures), each replicate
      simulating every job again;
    * the server's speed: how it moved during the pilot, carried over the job's length
      (`SpeedWander`: a server whose speed wanders, which a bootstrap over requests
      misses, gets a wider range, and a longer job a wider one still), with `drift`
      (relative, 95%: what the user knows of drift slower than the pilot) added;
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
    shares = [math.ceil(s / m) for s, m in jobs]
    walls = job_walls(shares, model.concurrency, model.pool, model.step, rng, repeats=3)
    point = [w * model.calibration for w in walls]
    reps, means = _bootstrap(model, shares, rng, boot, time_budget_s)
    return _intervals(model, jobs, shares, point, np.array(reps), means, drift)


def _bootstrap(
    model: PilotModel, shares: list[int], rng: np.random.Generator, boot: int, budget_s: float
) -> tuple[list[list[float]], list[float]]:
    """Each replicate resamples the pilot's requests and simulates every job again: its
    calibrated walls with the length factor studentized, and that studentized mean length."""
    out = model.pool.sample_output
    k = len(out)
    mean = float(out.mean())
    se = float(out.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0
    reps: list[list[float]] = []
    means: list[float] = []
    t_end = time.perf_counter() + budget_s
    for rep in range(boot):
        if rep >= 20 and time.perf_counter() > t_end:
            break  # enough replicates for a 95% interval; keep the command quick
        pool = model.pool.resample(rng)
        walls = job_walls(shares, model.concurrency, pool, model.step, rng)
        out_r = pool.sample_output
        m_r = float(out_r.mean())
        se_r = float(out_r.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0
        # bootstrap-t: the replicate's length factor m_r/mean is replaced by the
        # studentized one, mean − t·se with t = (m_r − mean)/se_r, reflected
        ok_t = se > 0 and se_r > 0
        m_t = max(mean - (m_r - mean) / se_r * se, 0.05 * mean) if ok_t else m_r
        reps.append([w * model.calibration * m_t / m_r for w in walls])
        means.append(m_t)
    return reps, means


def _intervals(
    model: PilotModel,
    jobs: Sequence[tuple[int, int]],
    shares: list[int],
    point: list[float],
    arr: np.ndarray,
    means: list[float],
    drift: float,
) -> list[WallForecast]:
    """Each job's bootstrap interval, widened in quadrature by the speed's (for a job of
    its length) and the replay's half-widths; the output tokens with the studentized mean
    length's interval."""
    pool = model.pool
    mean = float(pool.sample_output.mean())
    wander = model.wander
    lo_q, hi_q = (1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100
    out_lo, out_hi = np.percentile(means, [lo_q, hi_q]) if means else (mean, mean)
    sim_err = abs(model.replay_err)
    result = []
    for j, (s, servers) in enumerate(jobs):
        lo, hi = np.percentile(arr[:, j], [lo_q, hi_q]) if len(arr) else (point[j], point[j])
        p = point[j]
        speed = wander.job(p, drift)
        speed_hw = speed.halfwidth
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
                thinking_tokens=s * float(pool.per_sample(pool.thinking).mean()),
                prompt_tokens=s * float(pool.per_sample(pool.prompt).mean()),
                length_halfwidth=float(max(out_hi / mean - 1, 1 - out_lo / mean)) if mean else 0.0,
                speed=speed,
            )
        )
    return result
