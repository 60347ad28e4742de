"""The job's wall time and its 95% bar: a bootstrap over the pilot's requests (the mean
length studentized), batch means of the server's speed over stretches of time, and the
replay's own error; and the pilot size a bar asks for."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from genbench.generate.wander import SPEED_MAX, SpeedBar, lag1, unseen_drift
from genbench.plan.walltime import Capped, job_walls, sim_cap
from genbench.stats import t_975

if TYPE_CHECKING:
    from genbench.plan.model import PilotModel

CONFIDENCE = 0.95
TARGET_REL_ERROR = 0.05  # the pilot size that gives a ±5% bar is reported
# the model's misfit is at least this: the same job run twice on one server differs by
# about as much (0.0–0.4% on the sim with identical requests, 1.9% back to back on the
# vLLM CPU test server: benchmarks/README.md), which a pilot of like requests, replayed
# to a few thousandths, does not show (a bar of ±0.2% missed a job 0.3% off)
MISFIT_FLOOR = 0.01
POINT_REQUESTS = 100_000  # requests simulated in all for the point forecast (~0.2 s)
# the advice for a longer pilot is sized on the upper end of a one-sided 97.5% interval for
# the spread of the lengths (`spread_margin`): 64 requests of a heavy tail see little of it,
# and the pilot advised measures its own bar, which scatters about the one it was sized on
SPREAD_Z = 1.96


def target_of(percent: float | None) -> float:
    """--target-error's percent as a fraction: TARGET_REL_ERROR where not given."""
    return percent / 100 if percent else TARGET_REL_ERROR


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
    t = t_975(min(len(v) - 1, 9))  # batch means with at most 10 batches
    return t * se * math.sqrt((1 + rho) / (1 - rho))


def length_halfwidth(count: int, total: float, squares: float, cubes: float | None = None) -> float:
    """Relative 95% half-width of a mean output length from its running sums, on its upper
    side: the normal approximation, and with the sums of cubes the skew's one-term
    Edgeworth correction of the studentized mean (Hall 1992), which widens the upper side
    of a right-skewed mean as the final bar's bootstrap-t does (lognormal σ 0.6 at 1,000
    requests: × 1.05). inf until there are 2 values."""
    if count < 2 or total <= 0:
        return math.inf
    mean = total / count
    var = max(squares / count - mean * mean, 0.0) * count / (count - 1)
    z = 1.96
    if cubes is not None and var > 0:
        third = cubes / count - 3 * mean * squares / count + 2 * mean**3  # central, 1/n
        skew = max(third / var**1.5, 0.0)  # a left skew narrows this side: kept at z
        z += skew * (2 * z * z + 1) / (6 * math.sqrt(count))
    return z * math.sqrt(var / count) / mean


def pilot_size_for(
    rel_halfwidth: float, pilot: int, target: float = TARGET_REL_ERROR, floor: float = 0.0
) -> int | None:
    """The pilot size whose bar would be ±target. `rel_halfwidth` is the part of the bar a
    longer pilot narrows (as 1/√K); `floor` the part it does not (the model's misfit on
    the pilot, speed that wanders, --speed-drift), added in quadrature as the bar adds
    them. None when the floor alone is ±target or more: no pilot length reaches it."""
    if floor >= target:
        return None
    room = math.sqrt(target * target - floor * floor)
    return max(1, math.ceil(pilot * (rel_halfwidth / room) ** 2))


def spread_margin(values: Sequence[float] | np.ndarray, z: float = SPREAD_Z) -> float:
    """How much wider the spread of a pilot's lengths (each sample's output tokens) may be
    than the pilot shows: the upper end of Bonett's interval for their standard deviation
    (one-sided, z) over the pilot's own, at least 1. A longer pilot's advice is sized on it
    (`pilot_reach`'s `spread`), as the part of the bar that narrows as 1/√K rests on it.

    A small pilot of a heavy tail sees little of it: its spread is most often short of the
    lengths' own, and advice scaled from it falls short (64 requests of lognormal σ 0.8
    asked for 1,206, whose pilot showed ±7.4%). A chi-square bound assumes normal lengths
    (kurtosis 3); Bonett's (Computational Statistics & Data Analysis 50, 2006) takes the
    sample's kurtosis (about a trimmed mean), so a heavy tail widens it and light-tailed
    lengths get less: about ×1.3–1.6 in pilot size for uniform to gamma (shape 4) lengths
    at 64 samples, ×2.1 for lognormal σ 0.8 (×1.22 at 2,000), shrinking as √(kurtosis / K)
    (benchmarks/README.md). One-sided 97.5% (`SPREAD_Z`): the skew's share of the bar
    narrows as 1/K (`skew_share`), and a 90% bound without that share's 1/√K carry left
    the advised pilots of 64-request pilots over ±5% in 20–30% (lognormal σ 0.6–1.0),
    12–18% at 97.5%. 1 with fewer than 4 values or no spread (fixed lengths)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n < 4:
        return 1.0
    dev2 = float(((x - x.mean()) ** 2).sum())
    if dev2 <= 0:
        return 1.0
    cut = int(n / (2 * math.sqrt(n - 4))) if n > 4 else 0  # each end, Bonett's trim
    centre = float(np.sort(x)[cut : n - cut].mean())
    kurt = n * float(((x - centre) ** 4).sum()) / dev2**2
    c = n / (n - z)
    se = c * math.sqrt(max(kurt - (n - 3) / n, 0.0) / (n - 1))
    return max(math.sqrt(c * math.exp(z * se)), 1.0)


def skew_share(values: Sequence[float] | np.ndarray, upper: float) -> float:
    """The share of the upper side of a mean length's bar (`upper`, relative: the
    bootstrap-t's) that is more than its symmetric part, the normal approximation's
    1.96 × the standard error from the same lengths: 1 − that / `upper`, in [0, 1). The
    symmetric part narrows as 1/√K in a pilot K times as long; what the skew adds to the
    upper side of a studentized mean (Hall's one-term correction and the bootstrap-t's
    tail past it) as 1/K (`pilot_reach`'s `skew`). A pilot of lognormal σ 1.0 that drew a
    far outlier: ±199% at 64 requests, of which the symmetric part was about a quarter.
    0 where `upper` is no wider (no skew to the right) or there is no spread."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    plain = length_halfwidth(len(x), float(x.sum()), float((x * x).sum()))
    if not math.isfinite(plain) or plain <= 0 or not upper > plain:
        return 0.0
    return 1 - plain / upper


@dataclass(frozen=True)
class Reach:
    """What a pilot of another length would make of the bar: the pilot size whose bar is
    ±target (None: no pilot shorter than the job reaches it), and the narrowest bar such a
    pilot gets (`floor`, a pilot of the job's own length) with the part that is most of it
    (`floor_from`: "sample", "misfit", "speed" (its wander) or "unseen")."""

    requests: int | None
    floor: float
    floor_from: str
    # where none reaches the target: the pilot whose sample part (the part a longer pilot
    # narrows) is down to the target, when shorter than the job (None: none, or it reaches)
    sample_at: int | None = None


def pilot_reach(
    parts: BarParts, speed: SpeedBar | None, pilot: int, samples: int, target: float,
    wall_s: float = 0.0, job_s: float = 0.0, unseen: bool = False, spread: float = 1.0,
    skew: float = 0.0,
) -> Reach:  # fmt: skip
    """The pilot size for a ±target bar, as the bar is made: the pilot's sample and the
    speed's noise narrow as 1/√K, the misfit and the speed's wander do not, and speed the
    pilot cannot see (`unseen`: genbench's default, `unseen_drift`) narrows as the pilot's
    time grows against the job's (a user's --speed-drift does not). The sample's part is
    taken `spread` times as wide (`spread_margin`: a small pilot's lengths may spread more
    than it saw), and its `skew` share (`skew_share`: what a right skew adds to the upper
    side of a bootstrap-t, on the wider side above) narrows as 1/K, not 1/√K: carried as
    1/√K, a pilot that drew a far outlier (±199% at 64 requests of lognormal σ 1.0) found
    no pilot short of its 100K-sample job reaching ±5%. A pilot longer than the job is no
    pilot: the search stops at the job's own length, and past it the plan says what sets
    the floor, not a pilot of 2,298 requests for a job of 300 samples."""
    hw = speed.halfwidth if speed is not None else 0.0
    longest = max(max(samples, 1) / max(pilot, 1), 1.0)  # a pilot already as long: itself
    if longest <= 1.0:  # its own bar is the floor, as measured: no wider one beside it
        spread = 1.0
    if parts.side != "above":  # a right skew narrows the side below: all of it as 1/√K
        skew = 0.0

    def share(x: float) -> float:  # a part of the speed's, as it shows on the time
        return parts.speed * x / hw if hw > 0 else 0.0

    # the sample's part, the margin on both of its shares: symmetric (1/√K) and skew (1/K)
    sym, skewed = spread * parts.sample * (1 - skew), spread * parts.sample * skew
    noise2 = share(speed.noise) ** 2 if speed is not None else 0.0  # the speed's noise
    wander = share(speed.wander) if speed is not None else 0.0
    drift = share(speed.drift) if speed is not None else 0.0
    if speed is None or hw <= 0:  # no speed split: the old rule's parts
        noise2 = max(parts.scales**2 - parts.sample**2, 0.0)
        wander = math.sqrt(max(parts.floor**2 - parts.misfit**2, 0.0))

    def at(r: float) -> dict[str, float]:  # the parts for a pilot r times this one's length
        d = drift
        if unseen and wall_s > 0 and job_s > 0:
            d = drift * (job_s + wall_s) / (job_s + wall_s * r)
        sample = math.hypot(sym / math.sqrt(r) + skewed / r, math.sqrt(noise2 / r))
        return {"sample": sample, "misfit": parts.misfit, "speed": wander, "unseen": d}

    def total(r: float) -> float:
        return math.hypot(*at(r).values())

    def first(part: Callable[[float], float]) -> int | None:  # the shortest with part ≤ target
        if part(longest) > target:
            return None
        lo, hi = 1e-9, longest  # part(hi) ≤ target; decreasing in r
        for _ in range(100):
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if part(mid) <= target else (mid, hi)
        return max(1, math.ceil(pilot * hi - 1e-9))

    ends = at(longest)
    floor_from = max(ends, key=lambda k: ends[k])
    need = first(total)
    if need is not None:
        return Reach(need, total(longest), floor_from)
    sample = first(lambda r: at(r)["sample"])  # what a longer pilot can do, still
    return Reach(None, total(longest), floor_from,
                 sample if sample is not None and sample > pilot else None)  # fmt: skip


@dataclass(frozen=True)
class BarParts:
    """One side of a job's bar (the wider, which the ± reports), relative to the point
    forecast, in its parts: each a 95% half-width, and they add in quadrature to the
    side's width exactly (`total`). `sample`: the bootstrap over the pilot's requests
    (their lengths, TTFTs and failures); `speed`: the server's speed over the job
    (`SpeedBar`, on this side); `misfit`: the calibrated replay's error on the pilot,
    which no pilot length removes. `scales` and `floor` split them by what a longer
    pilot does: the sample and the speed's noise narrow as 1/√K; the misfit, the
    speed's wander and --speed-drift do not."""

    side: str  # "above" or "below"
    sample: float
    speed: float
    misfit: float
    scales: float
    floor: float

    @property
    def total(self) -> float:
        return math.hypot(self.sample, self.speed, self.misfit)

    @classmethod
    def of(cls, side: str, sample: float, speed: float, misfit: float,
           bar: SpeedBar) -> BarParts:  # fmt: skip
        """Splits the speed's part by the share of its noise in its variance."""
        noise_share = (bar.noise / bar.halfwidth) ** 2 if bar.halfwidth > 0 else 0.0
        scales = math.sqrt(sample * sample + speed * speed * noise_share)
        floor = math.sqrt(misfit * misfit + speed * speed * (1 - noise_share))
        return cls(side, sample, speed, misfit, scales, floor)


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
    length_halfwidth: float = 0.0  # the mean output length's own interval (the tokens')
    speed: SpeedBar | None = None  # the server's speed's share, with its parts
    parts: BarParts | None = None  # the wider side of the bar, in the parts that make it
    spread_margin: float = 1.0  # the pilot's lengths' `spread_margin`: a longer pilot's advice
    skew_share: float = 0.0  # the share of the mean length's upper side its skew adds (1/K)

    @property
    def rel_halfwidth(self) -> float:
        return max(self.hi_s / self.seconds - 1, 1 - self.lo_s / self.seconds)


def forecast(
    model: PilotModel,
    jobs: Sequence[tuple[int, int]],
    boot: int = 100,
    seed: int = 0,
    time_budget_s: float = 20.0,
    drift: float | None = 0.0,
    memo: dict[str, Any] | None = None,
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
      (relative, 95%: what the user knows of drift slower than the pilot; None: the
      default, `unseen_drift` of the job's time after the pilot's) added;
    * the simulation's own error on the pilot (below).

    Two corrections make it honest where a plain percentile bootstrap is not:

    * the mean output length, which dominates the bar when lengths are skewed, is
      studentized (bootstrap-t): a percentile bootstrap of a right-skewed mean covers
      the truth less often than it says (93.5% for a nominal 95% at K = 100, lognormal
      sigma 0.75), because a pilot that missed the long tail also looks less variable;
    * the simulation is calibrated to the pilot (`calibration`: the pilot replayed runs
      as fast as the server ran it), and what is left of its error on the pilot
      (`replay_err`, the tail's) is added in quadrature to each side.

    `memo` (plan.json's `simulation`) keeps each replicate's simulation of a long job's
    first `sim_cap` samples: given back with the same seed, replicates and concurrency, a
    re-plan (plan/replan.py) extends them to other long jobs instead of simulating again,
    the same figures in milliseconds; an empty dict given is filled."""
    rng = np.random.default_rng(seed)
    shares = [math.ceil(s / m) for s, m in jobs]
    key = {"seed": seed, "boot": boot, "concurrency": model.concurrency,
           "cap": sim_cap(model.concurrency)}  # fmt: skip
    fresh = memo is None or {k: memo.get(k) for k in key} != key
    old = None if fresh else memo  # type: ignore[assignment]
    made: list[Capped] = []
    point_cap = Capped(*old["point"]) if old and old.get("point") else None
    walls = job_walls(shares, model.concurrency, model.pool, model.step, rng, repeats=3,
                      capped=point_cap, keep=made, simulated=POINT_REQUESTS)  # fmt: skip
    point = [w * model.calibration for w in walls]
    kept = [tuple(r) for r in old["reps"]] if old else None
    reps, means, new = _bootstrap(model, shares, rng, boot, time_budget_s, kept)
    if memo is not None:
        point_kept = [made[0].wall_s, made[0].s_per_token] if made else memo.get("point")
        memo.clear()
        memo.update(key, point=point_kept if not fresh or made else None, reps=new)
    return _intervals(model, jobs, shares, point, np.array(reps), means, drift)


def _bootstrap(
    model: PilotModel,
    shares: list[int],
    rng: np.random.Generator,
    boot: int,
    budget_s: float,
    kept: list[tuple[float, ...]] | None = None,
) -> tuple[list[list[float]], list[float], list[list[float]]]:
    """Each replicate resamples the pilot's requests and simulates every job again: its
    calibrated walls with the length factor studentized, and that studentized mean length;
    and what each replicate's long-job simulation was (`kept` where a re-plan gives them:
    the long jobs are extended from them, only short ones simulated)."""
    out = model.pool.sample_output
    k = len(out)
    mean = float(out.mean())
    se = float(out.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0
    reps: list[list[float]] = []
    means: list[float] = []
    memo: list[list[float]] = []
    cap = sim_cap(model.concurrency)
    t_end = time.perf_counter() + budget_s
    for rep in range(len(kept) if kept is not None else boot):
        if kept is None and rep >= 20 and time.perf_counter() > t_end:
            break  # enough replicates for a 95% interval; keep the command quick
        if kept is not None and kept[rep][0] > 0:  # the long jobs from the kept replicate
            w_cap, spt, m_r, m_t = kept[rep]
            # each share's wall before calibration, and its length factor's m_t and m_r
            row = {s: (w_cap + (s - cap) * m_r * spt, m_t, m_r) for s in shares if s > cap}
            short = sorted({s for s in shares if s <= cap})
            if short:  # simulated on a fresh resample, at its own length factor
                pool = model.pool.resample(rng)
                m = (_studentized(pool, mean, se, k), float(pool.sample_output.mean()))
                walls = job_walls(short, model.concurrency, pool, model.step, rng)
                row.update({s: (w, *m) for s, w in zip(short, walls, strict=True)})
            reps.append([w * model.calibration * t / r for w, t, r in (row[s] for s in shares)])
            means.append(m_t)
            memo.append(list(kept[rep]))
            continue
        pool = model.pool.resample(rng)
        made: list[Capped] = []
        walls = job_walls(shares, model.concurrency, pool, model.step, rng, keep=made)
        m_r = float(pool.sample_output.mean())
        m_t = _studentized(pool, mean, se, k)
        reps.append([w * model.calibration * m_t / m_r for w in walls])
        means.append(m_t)
        memo.append([made[0].wall_s, made[0].s_per_token, m_r, m_t] if made
                    else [0.0, 0.0, m_r, m_t])  # fmt: skip
    return reps, means, memo


def _studentized(pool: Any, mean: float, se: float, k: int) -> float:
    """Bootstrap-t: the replicate's length factor m_r/mean is replaced by the studentized
    one, mean − t·se with t = (m_r − mean)/se_r, reflected: the replicate's m_t."""
    out_r = pool.sample_output
    m_r = float(out_r.mean())
    se_r = float(out_r.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0
    ok_t = se > 0 and se_r > 0
    m_t = max(mean - (m_r - mean) / se_r * se, 0.05 * mean) if ok_t else m_r
    return m_t


def _intervals(
    model: PilotModel,
    jobs: Sequence[tuple[int, int]],
    shares: list[int],
    point: list[float],
    arr: np.ndarray,
    means: list[float],
    drift: float | None,
) -> list[WallForecast]:
    """Each job's bootstrap interval, widened in quadrature by the speed's (for a job of
    its length) and the replay's half-widths; the output tokens with the studentized mean
    length's interval."""
    pool = model.pool
    mean = float(pool.sample_output.mean())
    wander = model.wander
    lo_q, hi_q = (1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100
    out_lo, out_hi = np.percentile(means, [lo_q, hi_q]) if means else (mean, mean)
    sim_err = max(abs(model.replay_err), MISFIT_FLOOR)
    # the job's tokens: the pilot's mean length is known to its bootstrap's range, and the
    # job's own samples scatter about that mean besides (variance 1/K + 1/N for K pilot
    # samples and N job ones): a job of 300 after a pilot of 256 is not known to the
    # pilot mean's ±3% alone, and generate's verdict holds its tokens to this range
    k = max(len(pool.sample_output), 1)
    own = [math.sqrt(1 + k / max(s, 1)) for s, _ in jobs]
    margin = spread_margin(pool.sample_output)
    skew = skew_share(pool.sample_output, float(out_hi) / mean - 1) if mean > 0 else 0.0
    result = []
    for j, (s, servers) in enumerate(jobs):
        lo, hi = np.percentile(arr[:, j], [lo_q, hi_q]) if len(arr) else (point[j], point[j])
        p = point[j]
        speed = wander.job(p, unseen_drift(p, model.pilot_wall_s) if drift is None else drift)
        speed_hw = min(speed.halfwidth, SPEED_MAX)  # as the live ETA holds its own
        boot_lo, boot_hi = max(p - float(lo), 0.0), max(float(hi) - p, 0.0)
        speed_lo, speed_hi = p - p / (1 + speed_hw), p / max(1 - speed_hw, 0.05) - p
        below = math.hypot(boot_lo, sim_err * p, speed_lo)
        above = math.hypot(boot_hi, sim_err * p, speed_hi)
        wide = ("above", boot_hi, speed_hi) if above >= below else ("below", boot_lo, speed_lo)
        rel = 1 / p if p > 0 else 0.0
        parts = BarParts.of(wide[0], wide[1] * rel, wide[2] * rel, sim_err, speed)
        result.append(
            WallForecast(
                samples=s,
                servers=servers,
                per_server=shares[j],
                seconds=p,
                lo_s=max(p - below, 0.0),
                hi_s=p + above,
                output_tokens=s * mean,
                output_lo=s * max(mean - (mean - float(out_lo)) * own[j], 0.0),
                output_hi=s * (mean + (float(out_hi) - mean) * own[j]),
                thinking_tokens=s * float(pool.per_sample(pool.thinking).mean()),
                prompt_tokens=s * float(pool.per_sample(pool.prompt).mean()),
                length_halfwidth=float(max(out_hi / mean - 1, 1 - out_lo / mean)) if mean else 0.0,
                speed=speed,
                parts=parts,
                spread_margin=margin,
                skew_share=skew,
            )
        )
    return result
