"""The end of a job: when its last requests end, from the requests in flight and the
durations seen so far (issue #48's tail model).

Near the end of a job, the time left is not "rows left over a rate": it is when the
longest of the requests still running ends, and a request 30 s into a heavy-tailed
distribution is likely to run long. The durations seen so far are *censored*: the long
requests of the first waves have not ended yet, so the durations that did end are the
short ones, and no empirical quantile reaches past the longest seen. So:

* the durations' distribution is a Kaplan–Meier estimate over the requests that ended
  (events) and those in flight (censored at their age), with a lognormal tail beyond the
  longest seen, its (μ, σ) fitted by EM to the same censored sample (`fit_censored`);
* each request in flight ends at a draw of D | D > its age from that distribution; each
  of the last rows to send (the last few waves) starts when a stream frees (list
  scheduling on the up servers' streams, at least as many as are in flight now: it
  follows `-c auto` and servers lost) and lasts an unconditional draw; the rows before
  them add their work to every stream alike (one by one, 2,000 rows cost 112 ms a
  tick, on the job's event loop);
* DRAWS such futures, seeded (the same inputs give the same ETA tick after tick): their
  finish times' median and 2.5% / 97.5% quantiles are the time left and its range.

The speed of the server is in the durations seen; a speed that will change is the
caller's to add. `generate.eta` uses it where its rate has no estimate yet (before two
clusters of rows have ended: the first waves of a short job, where there was no ETA at
all), and after as the least its range's high end reaches (the simulated median: the
rate counts the rows that ended, early on the short ones), while few enough rows are
yet to send (MAX_ROWS). Measured on benchmarks/eta_range.py --short 32
(benchmarks/README.md): the 10–20% tenth holds the end 90.6% of the time against 76.2%,
every tenth ≥ 90%, at the same widths; as the whole ETA it held 93.6–95.6% but twice as
wide (median 0.50–0.75 of the job, p90 2.6–3.1: the simulated heavy tail is honest
about the few rows ten times the median), and for the last wave only it widened the
last tenth (median 0.41 against 0.28) and held it no more often.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

DRAWS = 200  # simulated futures
MAX_ROWS = 2000  # rows not yet sent, at most, for the simulation (its cost is linear in them)
POOL = 4096  # draws that give the distribution's mean and spread for the bulk
LAST_PER_STREAM, LAST_ROWS = 4, 160  # rows scheduled one by one: the last waves, at most
# (a tick's simulation stays under ~30 ms up to 512 requests in flight, on the job's event
# loop; it grows with them: ~90 ms at 4,096, DRAWS × in flight draws, most of it the
# search of each draw's survival in the Kaplan–Meier)
MIN_SEEN = 10  # durations that ended, at least, before there is a distribution to draw from
EM_STEPS = 30
_N = NormalDist()


def fit_censored(ended: np.ndarray, ages: np.ndarray) -> tuple[float, float]:
    """(μ, σ) of a lognormal fitted to durations that ended and ages of requests still
    running (each only known to be longer), by EM on the log scale: a censored log-age c
    contributes E[X | X > c] and E[X² | X > c] of the current normal."""
    x, c = np.log(ended), np.log(np.maximum(ages, 1e-6))
    mu, sd = float(x.mean()), max(float(x.std()), 1e-3)
    n = len(x) + len(c)
    for _ in range(EM_STEPS if len(c) else 0):
        a = (c - mu) / sd
        sf = np.maximum(0.5 * _erfc(a / math.sqrt(2)), 1e-300)
        lam = np.exp(-0.5 * a * a) / math.sqrt(2 * math.pi) / sf  # the inverse Mills ratio
        e1 = mu + sd * lam
        e2 = mu * mu + sd * sd + sd * (c + mu) * lam
        mu_new = (x.sum() + e1.sum()) / n
        var = ((x * x).sum() + e2.sum()) / n - mu_new * mu_new
        mu, sd = float(mu_new), max(math.sqrt(max(var, 0.0)), 1e-3)
    return mu, sd


def _erfc(z: np.ndarray) -> np.ndarray:
    """erfc for arrays (numpy has none), to a relative 1.2e-7 everywhere, far tails
    included (the inverse Mills ratio divides by it): the Chebyshev fit t·exp(−z² + P(t)),
    t = 1/(1 + |z|/2), of Press et al., Numerical Recipes §6.2; erfc(−z) = 2 − erfc(z).
    Element by element with math.erfc, the EM's 30 steps over 4,096 requests in flight
    cost 25 ms a tick."""
    z = np.asarray(z, dtype=float)
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.5 * a)
    poly = 0.0
    for c in _ERFC_COEF:  # Horner, the highest power first
        poly = c + t * poly
    out = t * np.exp(-a * a + poly)
    return np.where(z >= 0, out, 2.0 - out)


_ERFC_COEF = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
              0.09678418, 0.37409196, 1.00002368, -1.26551223)  # fmt: skip


def _sf(z: np.ndarray) -> np.ndarray:
    """The standard normal's upper tail P(Z > z), for arrays."""
    return 0.5 * _erfc(np.asarray(z, dtype=float) / math.sqrt(2))


def _isf(q: np.ndarray) -> np.ndarray:
    """The z with P(Z > z) = q, for arrays, q in (0, 1): a rational start (Abramowitz and
    Stegun 26.2.23, ±4.5e-4) then three Newton steps on `_sf` (to its own precision)."""
    q = np.asarray(q, dtype=float)
    lo = np.minimum(q, 1.0 - q)  # the nearer tail; symmetric
    t = np.sqrt(-2.0 * np.log(lo))
    x = t - (2.515517 + 0.802853 * t + 0.010328 * t * t) / (
        1.0 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t**3
    )
    x = np.where(q <= 0.5, x, -x)
    for _ in range(3):
        x = x + (_sf(x) - q) / (np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
    return x


class Durations:
    """The durations' distribution: Kaplan–Meier over ended and censored, lognormal past
    the longest that ended. `draw(after, u)`: the duration D with S(D) = S(after) · u."""

    def __init__(self, ended: Sequence[float], ages: Sequence[float]) -> None:
        ev = np.sort(np.asarray([d for d in ended if d > 0], dtype=float))
        ag = np.sort(np.asarray(ages, dtype=float))
        self.mu, self.sigma = fit_censored(ev, ag)
        # at risk at each event time: events and censored ages not before it
        at_risk = (len(ev) - np.arange(len(ev))) + (len(ag) - np.searchsorted(ag, ev, "left"))
        self.t = ev
        self.s = np.cumprod(1.0 - 1.0 / at_risk)  # S just after each event
        # past the longest that ended, the lognormal's share: Kaplan–Meier's last step to 0
        # (nothing in flight older) would say no request ever runs longer than one seen
        z = (math.log(ev[-1]) - self.mu) / self.sigma
        before = float(self.s[-2]) if len(ev) > 1 else 1.0
        self.s[-1] = max(float(self.s[-1]), min(1 - _N.cdf(z), before))
        self.last = float(ev[-1])
        self.s_last = float(self.s[-1])

    def survival(self, t: np.ndarray) -> np.ndarray:
        """S(t) by Kaplan–Meier (flat past the last event: the tail takes over there)."""
        k = np.searchsorted(self.t, t, "right")
        return np.where(k > 0, self.s[np.maximum(k - 1, 0)], 1.0)

    def draw(self, after: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Durations D > `after` (element-wise, broadcast with u in (0, 1))."""
        # S(after) on `after`'s own shape (one per request in flight), then broadcast: not
        # one search per draw of every future
        s_after = np.broadcast_to(self.survival(after), u.shape)
        after = np.broadcast_to(after, u.shape)
        goal = s_after * u  # the survival the draw ends at
        # the first event with S ≤ goal (s decreasing: search on −s)
        k = np.searchsorted(-self.s, -goal, "left")
        body = self.t[np.minimum(k, len(self.t) - 1)]
        out = np.maximum(body, after)
        tail = goal < self.s_last
        if tail.any():
            b = np.maximum(after[tail], self.last)  # D | D > b from the lognormal
            frac = goal[tail] / np.minimum(s_after[tail], self.s_last)
            out[tail] = self._tail(b, frac)
        return out

    def _tail(self, b: np.ndarray, frac: np.ndarray) -> np.ndarray:
        """The lognormal's D with P(D > d | D > b) = frac, element-wise."""
        sf_b = _sf((np.log(b) - self.mu) / self.sigma)
        q = np.clip(frac * sf_b, 1e-12, np.maximum(sf_b, 1e-12))  # P(D > d), unconditional
        return np.maximum(np.exp(self.mu + self.sigma * _isf(q)), b)


def finish(
    ended: Sequence[float],
    ages: Sequence[float],
    unsent: int,
    probs: Sequence[float],
    streams: int = 0,
) -> list[float] | None:
    """Quantiles of the seconds until the last request ends: the requests in flight (their
    `ages`), then `unsent` rows each sent as one of `streams` frees (at least as many as
    in flight: a stream whose request just ended is free now). None where there is too
    little to go on (fewer than MIN_SEEN ended, nothing in flight, too many to send)."""
    ended = [d for d in ended if d > 0]  # a record without a send time has no duration
    if len(ended) < MIN_SEEN or not ages or unsent > MAX_ROWS:
        return None
    dist = Durations(ended, ages)
    rng = np.random.default_rng(48)
    a = np.asarray(ages, dtype=float)
    u = rng.random((DRAWS, len(a)))
    free = dist.draw(a, np.maximum(u, 1e-12)) - a  # each stream's time until it is free
    idle = min(max(streams - len(a), 0), unsent)  # streams free now: the next rows' first
    free = np.hstack([free, np.zeros((DRAWS, idle))])
    rest = None  # the latest of the streams no last row can reach (below)
    if unsent:
        # the rows before the last few waves: their work shared by the streams alike, its
        # sum per future normal (n of them: n × mean, √n × sd, of the distribution's own
        # draws); the last ones scheduled one by one, where the stragglers are
        bulk = max(unsent - min(LAST_PER_STREAM * free.shape[1], LAST_ROWS), 0)
        if bulk:
            pool = dist.draw(np.zeros(POOL), np.maximum(rng.random(POOL), 1e-12))
            work = bulk * pool.mean() + math.sqrt(bulk) * pool.std() * rng.standard_normal(DRAWS)
            free += np.maximum(work, 0.0)[:, None] / free.shape[1]
        last = unsent - bulk
        new = dist.draw(np.zeros((DRAWS, last)), np.maximum(rng.random((DRAWS, last)), 1e-12))
        # only the `last` streams free first can take one of the last rows (a stream later
        # than them is never the earliest while one of them is untouched): the others
        # keep their time; the same end, at 4,096 streams a (DRAWS, last) loop, not 4,096
        if 0 < last < free.shape[1]:
            part = np.partition(free, last - 1, axis=1)
            rest, free = part[:, last:].max(axis=1), part[:, :last]
        rows = np.arange(DRAWS)
        for k in range(last):
            j = free.argmin(axis=1)
            free[rows, j] += new[:, k]
    end = free.max(axis=1) if rest is None else np.maximum(free.max(axis=1), rest)
    return [float(np.quantile(end, p)) for p in probs]
