"""The plan as the live ETA's prior (generate/prior.py): exact, in memory."""

from __future__ import annotations

import math
from io import StringIO

import pytest
from rich.console import Console

from genbench.generate.eta import Eta
from genbench.generate.prior import PlanPrior, combine
from genbench.generate.progress import Snapshot
from genbench.generate.render import JobConsole
from genbench.plan.document import JobForecast

pytestmark = pytest.mark.core

PLAN = PlanPrior(seconds=100.0, lo_s=85.0, hi_s=115.0)


def width(e: Eta) -> float:
    assert e.lo_s is not None and e.hi_s is not None
    return e.hi_s - e.lo_s


def test_before_the_job_knows_anything_the_eta_is_the_plans():
    assert PLAN.blend(None, 10.0) == Eta(90.0, 75.0, 105.0)
    # the plan knows the whole job, its tail too: its bar keeps its width in seconds
    assert PLAN.left(70.0) == Eta(30.0, 15.0, 45.0)
    # past the plan's whole range: the plan says nothing more, and no range is made up
    assert PLAN.blend(None, 120.0) == Eta(0.0)


def test_a_wide_early_range_that_agrees_is_held_to_the_plans():
    job = Eta(95.0, 10.0, 1400.0)  # a few clusters: a range 14 times the job
    e = PLAN.blend(job, 5.0)
    assert width(e) <= width(PLAN.left(5.0))
    assert 85.0 <= e.seconds <= 100.0


def test_both_narrow_and_agreeing_the_range_is_narrower_than_either():
    job = Eta(52.0, 47.0, 57.0)
    plan = PLAN.left(50.0)  # 50 s, 35 – 65
    e = combine(job, plan)
    assert width(e) < min(width(job), width(plan))
    assert 50.0 < e.seconds < 52.0  # the job's narrower estimate weighs more


def test_a_job_that_has_left_the_plan_is_shown_as_the_job_says():
    job = Eta(200.0, 180.0, 220.0)  # twice the plan's view, far outside both ranges
    e = combine(job, PLAN.left(0.0))
    assert e.seconds == pytest.approx(200.0, rel=1e-3)
    assert (e.lo_s, e.hi_s) == pytest.approx((180.0, 220.0), rel=1e-3)


def test_the_plans_weight_falls_smoothly_as_the_job_departs():
    plan = PLAN.left(0.0)
    centres = [combine(Eta(m, m * 0.8, m * 1.25), plan).seconds for m in range(100, 400, 10)]
    assert all(b > a for a, b in zip(centres, centres[1:], strict=False))  # no step back
    jumps = [b - a for a, b in zip(centres, centres[1:], strict=False)]
    assert max(jumps) < 40  # no jump from the plan's to the job's at a threshold


def test_nothing_left_or_no_range_is_left_alone():
    assert combine(Eta(0.0, 0.0, 0.0), PLAN.left(99.0)) == Eta(0.0, 0.0, 0.0)
    job = Eta(80.0)  # the job's ETA without a range yet: a factor of 2 either way
    e = combine(job, PLAN.left(0.0))
    assert 80.0 < e.seconds < 100.0 and width(e) < 0.5 * width(Eta(80.0, 40.0, 160.0))
    assert math.isfinite(e.hi_s or math.inf)


def snap(**kw: object) -> Snapshot:
    base: dict[str, object] = dict(
        elapsed_s=20.0, total=1000, done=200, failed=0, done_this_run=200, failed_this_run=0,
        truncated_this_run=0, remaining=800, rows_per_s=10.0, tokens_per_s=None,
        thinking_tokens_per_s=None, answer_tokens_per_s=None, tokens=0, thinking_tokens=0,
        eta_s=90.0, eta_err_s=870.0, eta_lo_s=10.0, eta_hi_s=1750.0, all_down_s=None,
    )  # fmt: skip
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def test_the_console_shows_the_combined_eta_and_judges_the_plan_on_the_jobs_own():
    jc = JobConsole(Console(file=StringIO()), 1e9, True)
    jc.forecast = JobForecast("p", "pilot", 1000, 1, 100.0, 85.0, 115.0, "b", None)
    got = jc.tick(snap())
    assert got.eta_hi_s is not None and got.eta_lo_s is not None
    assert got.eta_hi_s - got.eta_lo_s <= 115.0 - 85.0 + 1  # the plan's 30 s, not 1,740 s
    assert got.plan is not None and got.plan["on_course_hi_s"] == 20.0 + 1750.0  # the job's
    # every server down: no ETA, and none is made up from the plan
    down = jc.tick(snap(eta_s=None, eta_err_s=None, eta_lo_s=None, eta_hi_s=None,
                        all_down_s=3.0, eta_note="no server"))  # fmt: skip
    assert down.eta_s is None
