"""The plan as the live ETA's prior (`generate --plan`).

Early in a job its own evidence is thin: a few clusters of rows, a rate that the next wave
moves, a range wider than the job. The plan measured the same server on the same prompts
(a pilot) or the same configuration (a run): before the job has shown otherwise, its
forecast is the best guess there is. So with a plan the ETA is the two combined, each by
how much it knows:

* the plan's view of the time left: its time for the job less the time gone, its bar
  likewise. The plan knows the job's whole time, its last requests' tail included, and
  its bar's width in seconds does not shrink as the job goes: the plan weighs less and
  less against the job's own estimate, which narrows as rows end. (Its time for the rows
  still to do, its bar scaled alike, claimed to know the time left to ±10% to the last
  row: the tail's stragglers fell outside, and the range held the finish 45% of the time
  on benchmarks/eta_range.py --short 32);
* the job's own estimate (`generate.eta.estimate`), with its range;
* both read on a log scale (a time is a rate's inverse: its errors are relative), each
  side's spread its range's half over 1.96, and combined by their precisions: the range
  is never wider than the plan's while the job agrees with the plan, and narrows past it
  as the job's evidence grows;
* the plan's weight falls as the two centres part: exp(−2 z²), z their distance in
  combined spreads (half at z = 0.59, a tenth at 1.07, nothing left by 2): a plan that is
  wrong must not hold the range to itself while the job's own evidence is still thin
  (exp(−(z − 1)²), full trust within one spread, held a plan 40% off: the range held the
  finish 56% of the time on short jobs, against 86% now and 92% with no plan); the plan's
  verdict (`JobForecast.course`, judged on the job's own estimate, never on this blend)
  says when the job has left the plan's range.

Without a plan, or a plan without a bar, the job's estimate is shown as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from genbench.generate.eta import Eta

Z95 = 1.959964
SHARP = 2.0  # the plan's weight: exp(−SHARP z²), z the centres' distance in combined spreads
NO_RANGE = math.log(2.0) / Z95  # a job's ETA without a range yet: known to a factor of 2
TINY = 1e-9


@dataclass(frozen=True, slots=True)
class PlanPrior:
    """The plan's forecast for the rows this run of the job does: seconds and 95% bar."""

    seconds: float
    lo_s: float
    hi_s: float

    def left(self, elapsed_s: float) -> Eta:
        """The plan's view of the seconds left: its time less the `elapsed_s` gone."""
        return Eta(*(max(x - elapsed_s, 0.0) for x in (self.seconds, self.lo_s, self.hi_s)))

    def blend(self, job: Eta | None, elapsed_s: float) -> Eta:
        """The ETA shown: the plan's view and the job's estimate, combined (the module's
        docstring); the plan's alone while the job has none, the job's once past the plan."""
        return combine(job, self.left(elapsed_s))


def combine(job: Eta | None, plan: Eta) -> Eta:
    """`job` and `plan`, two estimates of the seconds left, combined by their precisions on
    a log scale, the plan's weight falling where the two disagree."""
    p = _spread(plan)
    if job is None:
        return plan if p is not None else Eta(plan.seconds)
    j = _spread(job)
    if p is None or j is None:
        return job
    (mu_p, dn_p, up_p), (mu_j, dn_j, up_j) = p, j
    z = abs(mu_j - mu_p) / math.hypot((dn_j + up_j) / 2, (dn_p + up_p) / 2)
    k = math.exp(-SHARP * z**2)  # the plan's weight, by how far the job is from it
    sj, sp = ((dn_j + up_j) / 2) ** -2, k * ((dn_p + up_p) / 2) ** -2
    mu = (mu_j * sj + mu_p * sp) / (sj + sp)
    dn = (dn_j**-2 + k * dn_p**-2) ** -0.5
    up = (up_j**-2 + k * up_p**-2) ** -0.5
    return Eta(math.exp(mu), math.exp(mu - Z95 * dn), math.exp(mu + Z95 * up))


def _spread(e: Eta) -> tuple[float, float, float] | None:
    """(log of the centre, spread below, spread above) of an ETA, None where it has no
    positive centre (nothing left: nothing to combine)."""
    if e.seconds <= 0:
        return None
    mu = math.log(e.seconds)
    if e.lo_s is None or e.hi_s is None:
        return mu, NO_RANGE, NO_RANGE
    lo = max(e.lo_s, e.seconds * 0.01)  # a low end at 0: known to within 100×, not forever
    dn = max((mu - math.log(lo)) / Z95, TINY)
    up = max((math.log(max(e.hi_s, e.seconds)) - mu) / Z95, TINY)
    return mu, dn, up
