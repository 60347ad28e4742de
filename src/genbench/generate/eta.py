"""The live ETA and its range, from when the job's rows ended.

A server finishes requests in waves: requests sent together with like lengths end
together (the sim's default lengths; a real server's batches). A rate over a window of
time then depends on how many waves the window happens to hold, and the ETA swings with
every wave. Here the rate is measured between *the ends of clusters* of completions
(completions closer together than half the gap a random moment falls in, its lower
quartile, are one cluster), so
that a window always holds whole waves: periodic waves give the exact rate at any moment,
and completions that spread out (continuous batching) are clusters of one or two.

* The rate: rows between two cluster ends over the time between them, over the last
  half of the job's history since its first cluster (at least WINDOW_CLUSTERS clusters;
  the start-up before the first rows end is left out, it is no part of the rate). The
  start-up is a gap of its own in the felt gap: the first wave's rows, read a millisecond
  apart on a busy host, are one cluster, and it counts once it has all arrived (without
  it, 2 rows of a first wave of 32 were a cluster each: a rate of 2,000 rows/s).
* The ETA: the last cluster's time, plus the rows left at that rate, plus the tail (the
  last C requests end when the longest of them does, not at the mean: the quantile
  C/(C + 1) of the durations seen, less their mean, C from Little's law), less now.
  While nothing ends for longer than the longest gap seen between clusters, that time
  is lost time and the ETA stops falling (a stall, a server down).
* The range: the rate in up to PARTS stretches of the same window, their boundaries at
  cluster ends, fitted by the plan's model of the server's speed (`SpeedWander`: scatter
  that averages out, wander that does not) and carried over the time left; the tail
  from none to the quantile 1 − 1/(4C). Two more parts widen it where the job's own
  history says too little: where the stretches' rates have a clear trend (its slope past
  its 95% band), the rate the line reaches halfway through the time left (no further
  ahead than the history is long); and, in quadrature with the speed's half-width,
  UNSEEN × left / (left + history): speed that changes more slowly than what has been
  seen (a server that slows down over hours), 15% at the start, nothing at the end
  (`wander.unseen_drift`: the plan's bar carries the same prior by default, its
  --speed-drift). It narrows as the job goes: less is
  left to be wrong about. With fewer than 3 stretches (the first waves), the rate's
  half-width is its count's alone (early_halfwidth), held to EARLY_MAX. The speed's
  half-width is held to SPEED_MAX (±60%): past it the high end ran to 20 × the time
  left on a short job's few, scattered stretches.
  benchmarks/eta_range.py measures it (benchmarks/README.md).
* Beside the range, the time left at the speeds the job's history shows (`seen`: its
  slowest and fastest thirds, and their largest step carried over the time left), which
  `generate --plan`'s verdict holds a miss to before it says the job has left the plan.

Memory is bounded: at most MAX_POINTS completion points (every other one is dropped
when full, and later ones are kept at that spacing) and the last DURATIONS durations.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from genbench.generate.tail import finish
from genbench.generate.wander import SPEED_MAX, UNSEEN, SpeedWander, unseen_drift
from genbench.stats import t_975

MAX_POINTS = 1024
DURATIONS = 2000
SEEN_PARTS = 3  # the history's parts whose speeds the plan's verdict holds a miss to (seen)
PARTS = 10  # stretches the range is fitted to
WINDOW_CLUSTERS = 20  # the rate's window holds at least this many clusters, where there are
FEW = 5  # with fewer cluster ends, the job's start is taken as one (every stream started)
STALL = 4.0  # a gap between clusters this many times the usual one is a stall: lost time
MERGE = 0.5  # completions closer than this × the felt gap (felt_gap) are one cluster
SLOWEST = 0.05  # a rate range past −95% is held there (the ETA's upper end stays finite)
EARLY_MAX = 0.5  # the rate's half-width from its count alone (early_halfwidth) at most
SINCE_CLUSTERS = 3  # cluster ends after a change of load that make the rate its own


@dataclass(frozen=True, slots=True)
class Eta:
    """Seconds left, and their 95% range (None while too little is known)."""

    seconds: float
    lo_s: float | None = None
    hi_s: float | None = None
    # the seconds left were the rest to run as slowly (fast) as the job's own history says
    # its speed could (`seen`): what the plan's verdict holds a miss to, not the range
    slow_s: float | None = None
    fast_s: float | None = None

    @property
    def err_s(self) -> float | None:
        """Half the range: the '±' of the panel."""
        return None if self.lo_s is None or self.hi_s is None else (self.hi_s - self.lo_s) / 2


class Completions:
    """When the job's rows ended (time, rows ended so far), thinned to MAX_POINTS, and the
    durations of its recent requests."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self.c: list[float] = []
        self.count = 0.0
        self.requests = 0  # every request that ended, rows ended by it or not
        self.events = 0
        self.every = 1  # keep one event in `every`
        self.last: tuple[float, float] | None = None
        self.durations: deque[float] = deque(maxlen=DURATIONS)

    def add(self, t_end: float, units: int, duration: float | None) -> None:
        """One request ended at t_end (records arrive nearly in order: a late one is
        counted at the latest time seen); `units` rows ended with it."""
        self.requests += 1
        if duration is not None and duration >= 0:
            self.durations.append(duration)
        if units <= 0:
            return
        t = max(t_end, self.last[0]) if self.last else t_end
        self.count += units
        self.last = (t, self.count)
        self.events += 1
        if self.events % self.every:
            return
        self.t.append(t)
        self.c.append(self.count)
        if len(self.t) >= MAX_POINTS:
            self.t, self.c = self.t[1::2], self.c[1::2]
            self.every *= 2

    def points(self) -> tuple[list[float], list[float]]:
        """The kept points, the last completion always among them."""
        if self.last is None:
            return [], []
        if self.t and self.t[-1] == self.last[0] and self.c[-1] == self.last[1]:
            return self.t, self.c
        return self.t + [self.last[0]], self.c + [self.last[1]]


def cluster_ends(
    t: list[float], c: list[float], now: float | None = None, t0: float | None = None
) -> list[tuple[float, float]]:
    """(time, rows so far) at the last completion of each cluster: completions closer
    than MERGE × the felt gap are one cluster (a wave). With `now`, a last cluster that
    may still be forming (its last row within that of now) is left out. With `t0`, the
    job's start: the time before the first row ended is a gap too (the first wave's)."""
    n = len(t)
    gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
    if n and t0 is not None and t[0] > t0:
        gaps.append(t[0] - t0)
    if not gaps:
        return list(zip(t, c, strict=True))
    thr = MERGE * felt_gap(gaps)
    ends = [(t[i], c[i]) for i in range(n - 1) if t[i + 1] - t[i] > thr]
    if (ends or t0 is not None) and now is not None and now - t[-1] <= thr:
        return ends
    return ends + [(t[-1], c[-1])]


def felt_gap(gaps: list[float]) -> float:
    """The gap between completions a moment picked at random falls in, its lower quartile:
    a wave's rows arrive milliseconds apart and the waves seconds apart, so most gaps are
    the small ones, but most of the time is spent in the large ones; the quartile, not the
    median, so that a server down for as long as it was up does not make the whole
    history one gap."""
    g = sorted(gaps)
    quarter, acc = sum(g) / 4, 0.0
    for x in g:
        acc += x
        if acc >= quarter:
            return x
    return 0.0


def usual_gap(gaps: list[float]) -> float:
    """The 90th percentile of the gaps between clusters: a gap far past it is a stall.
    Of n gaps, the one at 0.9·(n − 1): with fewer than 11 the largest is never the usual
    one (an outage among 9 waves was the 90th percentile, and so no stall)."""
    g = sorted(gaps)
    return g[int(0.9 * (len(g) - 1))] if g else 0.0


def window(ends: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The cluster ends of the rate's window: the last half of the history, or the last
    WINDOW_CLUSTERS clusters where the half holds fewer."""
    t_first, t_last = ends[0][0], ends[-1][0]
    start = t_last - (t_last - t_first) / 2
    i = next(k for k, (t, _) in enumerate(ends) if t >= start)
    return ends[max(0, min(i, len(ends) - 1 - WINDOW_CLUSTERS)) :]


def stretches(
    ends: list[tuple[float, float]], parts: int, usual: float = math.inf
) -> tuple[list[float], float]:
    """The rate in up to `parts` stretches of the window, each between two cluster ends
    nearest equal busy times, and the busy seconds one spans on average. Busy time: a gap
    between clusters longer than STALL × `usual` (a stall) counts as `usual`, as the rate
    counts it; the rest is lost time, not speed. (Counted as 4 × usual, an outage made its
    stretch a slow one; split by clock time, it was a stretch of its own, one cluster
    over the usual gap, a rate 4 times the job's: either way the range 6 times the job
    wide after a server came back.)"""
    m = min(parts, len(ends) - 1)
    if m < 3:
        return [], 0.0
    busy = [ends[0][0]]  # the clock with the stalls' lost time taken out
    for (a, _), (b, _) in zip(ends, ends[1:], strict=False):
        busy.append(busy[-1] + (usual if b - a > STALL * usual else b - a))
    t0, span, last = busy[0], busy[-1] - busy[0], len(ends) - 1
    idx = [0]
    for j in range(1, m):
        goal = t0 + span * j / m
        k = bisect.bisect_left(busy, goal, idx[-1] + 1, last)
        if k > idx[-1] + 1 and goal - busy[k - 1] < busy[k] - goal:
            k -= 1  # the nearer of the two around the goal
        if k < last:
            idx.append(k)
    idx.append(last)
    spans = [
        (busy[b] - busy[a], ends[b][1] - ends[a][1]) for a, b in zip(idx, idx[1:], strict=False)
    ]
    rates = [rows / s for s, rows in spans if s > 0]
    return rates, span / max(len(rates), 1)


def residual_quantiles(durations: deque[float], n: float, probs: tuple[float, ...]) -> list[float]:
    """Quantiles of the longest of `n` requests in flight, each with the time left of a
    request caught at a random moment (the equilibrium residual: long requests are more
    often in flight, P(R > x) = Σ max(d − x, 0) / Σ d over the durations d seen); for
    each p, the x with P(longest ≤ x) = p."""
    d = sorted(durations, reverse=True)
    total = sum(d)
    if len(d) < 10 or n < 1 or total <= 0:
        return [0.0 for _ in probs]
    out = []
    for p in probs:
        goal = (1 - p ** (1 / n)) * total  # Σ max(d − x, 0) at the quantile
        acc, k = 0.0, 0  # Σ over the k longest of (d_i − x) = acc − k·x
        x = 0.0
        for k, di in enumerate(d, start=1):
            acc += di
            nxt = d[k] if k < len(d) else 0.0
            if acc - k * nxt >= goal:
                x = (acc - goal) / k
                break
        out.append(max(x, 0.0))
    return out


TAIL_SHARE = 0.01  # of the job's event loop, at most, for the tail's simulation


class TailBudget:
    """The tail's simulation (`generate.tail`) runs on the job's event loop: while it
    runs no chunk is read and no request sent (10–90 ms a tick, more streams more; run
    at each progress tick, the vLLM CPU test server's jobs ran 4.7% slower, 3 pairs of
    runs alike). Here it runs again only once the job's clock has moved TAIL_SHARE⁻¹
    times its last cost (30 ms: every 3 s), and between runs its last result is carried
    forward on the job's clock (the same end, nearer by the time gone); at once where the
    streams changed (a server down or back, `-c auto`)."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.value: Eta | None = None
        self.cost_s = 0.0
        self.key: object = None

    def get(self, now: float, compute: Callable[[], Eta | None], key: object = None) -> Eta | None:
        fresh = self.at is not None and key == self.key
        if fresh and now - self.at < self.cost_s / TAIL_SHARE:  # type: ignore[operator]
            if self.value is None:
                return None
            gone = now - self.at
            v = self.value
            return Eta(*(None if x is None else max(x - gone, 0.0)
                         for x in (v.seconds, v.lo_s, v.hi_s)))  # type: ignore[arg-type]  # fmt: skip
        t = time.perf_counter()
        self.value = compute()
        self.cost_s, self.at, self.key = time.perf_counter() - t, now, key
        return self.value


def estimate(
    done: Completions,
    remaining: int,
    now: float,
    t0: float = 0.0,
    since: float | None = None,
    ages: Sequence[float] | None = None,
    streams: int = 0,
    budget: TailBudget | None = None,
) -> Eta | None:
    """Seconds left and their 95% range, from the completions so far (see the module's
    docstring). None before two clusters have ended. `since`: the load changed then
    (`generate -c auto`): the rate is read from the last cluster end before it on, once
    SINCE_CLUSTERS have ended after it (not from the job's start: the rows counted
    since the start, over the time since the change, made an ETA 3 × too short).
    `ages`: the requests in flight, seconds since each was sent,
    on `streams` streams in all (the servers' concurrency; at least as many as in flight):
    with them the end is simulated (`generate.tail`): the ETA before two clusters have
    ended (instead of none), and after, the least the range's high end reaches (the
    rate counts the rows that ended, the short ones early on: the long ones still
    running, which the simulation counts, ended past the high end 12% of the time in the
    first tenths of heavy-tailed short jobs)."""
    if remaining <= 0:
        return Eta(0.0, 0.0, 0.0)
    e, h = _estimate(done, remaining, now, t0, since)
    sim = None
    if ages:  # `budget`: not at every tick (TailBudget)
        run = lambda: _simulated(done, remaining, ages, streams, h)  # noqa: E731
        sim = run() if budget is None else budget.get(now, run, (streams, since))
    if e is None:  # no rate yet (the first waves): the end simulated (generate.tail)
        return sim
    if sim is not None and e.hi_s is not None:  # the high end reaches the simulated median
        return Eta(e.seconds, e.lo_s, max(e.hi_s, sim.seconds), e.slow_s, e.fast_s)
    return e


def _estimate(
    done: Completions, remaining: int, now: float, t0: float, since: float | None
) -> tuple[Eta | None, float]:
    """The rate's estimate (the module's docstring) and the speed's relative half-width
    over the time left (UNSEEN's alone where there is no estimate yet)."""
    ends = cluster_ends(*done.points(), now, t0)
    cut = since is not None and sum(e[0] >= since for e in ends) >= SINCE_CLUSTERS
    if cut:  # the new rate's: from the last cluster end before the change on
        ends = ends[max(next(i for i, e in enumerate(ends) if e[0] >= since) - 1, 0) :]
    elif 0 < len(ends) < FEW and ends[0][0] > t0:  # a few waves: the start is one's start
        ends = [(t0, 0.0), *ends]
    early = UNSEEN  # no history yet: the unseen speed's whole share
    if len(ends) < 2:
        return None, early
    win = window(ends)
    (t_a, c_a), (t_b, c_b) = win[0], win[-1]
    if t_b <= t_a or c_b <= c_a:
        return None, early
    remaining += round(done.count - c_b)  # the rows of a cluster still forming: from t_b
    gaps = [b[0] - a[0] for a, b in zip(win, win[1:], strict=False)]
    usual = usual_gap(gaps)
    lost = sum(g - usual for g in gaps if g > STALL * usual)  # stalls: nothing ended
    rate = (c_b - c_a) / max(t_b - t_a - lost, 1e-9)
    gap = max(g for g in gaps if g <= STALL * usual)
    per_row = done.requests / done.count if done.count else 1.0
    mean_d = sum(done.durations) / len(done.durations) if done.durations else 0.0
    in_flight = mean_d * rate * per_row  # Little's law: requests in flight
    last = min(in_flight / per_row, remaining)  # rows the tail finishes
    q_lo, q_mid = residual_quantiles(done.durations, last * per_row, (0.025, 0.5))
    # the high end: the longest of all C that were in flight at the last send (the rows
    # still running at the end are the long ones among them)
    (q_hi,) = residual_quantiles(done.durations, in_flight, (0.975,))
    if q_mid <= 0:
        last = 0.0
    # nothing ended for longer than the longest usual gap: lost time (not in the tail,
    # where the last requests end further and further apart)
    stall = _quiet(done, t_b, now, gap) if remaining > last else 0.0
    bulk = (remaining - last) / rate
    base = t_b + stall - now
    point = max(base + bulk + q_mid, 0.0)
    parts, part_s = stretches(win, PARTS, usual)
    if len(parts) < 3:  # too few stretches to fit: the rate's own count says how well known
        h = early_halfwidth(c_b - c_a)
    else:
        h = SpeedWander.fit(parts, part_s).job(bulk + q_mid).halfwidth
    unseen = unseen_drift(bulk, ends[-1][0] - ends[0][0])
    h = min(math.hypot(h, unseen), SPEED_MAX)
    drift = trend(stretches(ends, PARTS, usual), ends[-1][0], bulk, rate)
    lo = base + bulk / max(1 + h, drift) + q_lo - usual
    hi = base + bulk / max(min(1 - h, drift), SLOWEST) + q_hi + gap
    slow, fast = seen(ends, usual, rate, bulk)
    return Eta(point, min(max(lo, 0.0), point), max(hi, point),
               point + bulk * (slow - 1), point - bulk * (1 - fast)), h


def seen(ends: list[tuple[float, float]], usual: float, rate: float,
         left: float) -> tuple[float, float]:  # fmt: skip
    """How much slower and faster than `rate` the rest of the job could run, by what its
    own history shows of its speed (the time a row takes, relative to `rate`'s; (1, 1)
    with fewer than three thirds): as slowly (fast) as the slowest (fastest) third of the
    history, and as far as the largest step between two neighbouring thirds carried over
    the `left` seconds as a random walk (× √(left / a third's span), on a log scale), the
    step less what a third's count of rows alone moves it (a variance of 1/rows each:
    taken whole, a plan 40% off was said outside at 32% of a steady job done, not 21%;
    so, at 26%). Not a range of the time left (the ETA's is 95%): what the plan's verdict
    holds a miss to before it says the job has left the plan (`JobForecast.course`). A
    job that ran 60% fast for its first quarter on a server whose speed swings as a sine
    was said outside its plan for 14 s and ended inside it (benchmarks/eta_range.py
    --swing: 8 of 80 jobs said outside and ended inside before, 1 now)."""
    rates, part_s = stretches(ends, SEEN_PARTS, usual)
    if len(rates) < SEEN_PARTS or rate <= 0 or min(rates) <= 0 or part_s <= 0:
        return 1.0, 1.0
    step = max(abs(math.log(b / a)) for a, b in zip(rates, rates[1:], strict=False))
    rows = max((ends[-1][1] - ends[0][1]) / len(rates), 1.0)  # a third's rows
    step = math.sqrt(max(step * step - 2 / rows, 0.0))  # less what its count alone moves
    walk = step * math.sqrt(max(left / part_s, 1.0))
    return (max(rate / min(rates), math.exp(walk)),
            min(rate / max(rates), math.exp(-walk)))  # fmt: skip


def _simulated(
    done: Completions, remaining: int, ages: Sequence[float], streams: int, h: float
) -> Eta | None:
    """The end simulated from the requests in flight and the durations seen
    (`generate.tail.finish`), its range widened by the speed's half-width `h` (the
    durations drawn are those seen: a speed that changes later is not in them). One
    request a row only (a row of several turns sends its next request after each answer:
    not one duration a row)."""
    if done.count == 0 or done.requests > 1.05 * done.count:
        return None
    unsent = max(remaining - len(ages), 0)
    q = finish(done.durations, ages, unsent, (0.025, 0.5, 0.975), streams)
    if q is None:
        return None
    lo, mid, hi = q
    return Eta(mid, min(lo / (1 + h), mid), max(hi / max(1 - h, SLOWEST), mid))


def early_halfwidth(rows: float) -> float:
    """The rate's relative 95% half-width from the rows it counts alone, before there are
    stretches enough to fit the speed's model: 1.96/√rows (the count of completions in
    a window is Poisson-like), held to EARLY_MAX. Not a width that grows without bound on
    few completions (a range of 14 × the job at 10% done, #48), nor none (a point ETA
    holds the end nowhere)."""
    return min(1.96 / math.sqrt(max(rows, 1.0)), EARLY_MAX)


def _quiet(done: Completions, t_b: float, now: float, gap: float) -> float:
    """Seconds lost since the last cluster end `t_b`: quiet past the longest usual `gap`
    before the first row of a cluster still forming (a server back after an outage: its
    first wave) and since the last row."""
    t, _ = done.points()
    seen = done.last[0] if done.last else t_b
    k = bisect.bisect_right(t, t_b)
    first = t[k] if k < len(t) else seen
    return max(first - t_b - gap, 0.0) + max(now - max(seen, t_b) - gap, 0.0)


def trend(parts: tuple[list[float], float], t_last: float, left: float,
          rate: float) -> float:  # fmt: skip
    """Where the job's trend so far takes the rate, relative to the rate used: a line
    through its stretches' rates over the whole history, taken halfway through the time
    left but no further ahead than the history is long, where its slope is clear of the
    stretches' scatter (95%); 1 where it is not. A server that has been slowing down all
    along is likely to go on, and the range reaches that far."""
    rates, part_s = parts
    m = len(rates)
    if m < 4 or part_s <= 0 or rate <= 0:
        return 1.0
    xs = [t_last - part_s * (m - i - 0.5) for i in range(m)]
    mx, my = sum(xs) / m, sum(rates) / m
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, rates, strict=True)) / sxx
    resid = sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(xs, rates, strict=True))
    if abs(slope) <= t_975(m - 2) * math.sqrt(resid / (m - 2) / sxx):
        return 1.0
    x0 = t_last + min(left, part_s * m) / 2
    return max(my + slope * (x0 - mx), 0.0) / rate
