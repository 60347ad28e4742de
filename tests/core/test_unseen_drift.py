"""Speed that changes more slowly than what was watched: one prior for the plan and the
live ETA (`generate.wander.unseen_drift`). The plan's bar carries it by default (a pilot
that ran in a slow spell of a wandering server forecast jobs 12–20% long inside bars of
±1%), `--speed-drift` puts the user's figure in its place; the live ETA takes the plan's
bar as its prior without it, since the job's own estimate carries it itself."""

from __future__ import annotations

import math

import pytest
from test_plan_math import model

from genbench.generate.wander import UNSEEN, unseen_drift
from genbench.plan import forecast
from genbench.plan.document import JobForecast
from genbench.plan.from_pilot import _notes

pytestmark = pytest.mark.core


def test_the_allowance_is_all_of_unseen_with_nothing_watched_and_half_with_as_much():
    assert unseen_drift(3600.0, 0.0) == UNSEEN
    assert unseen_drift(60.0, 60.0) == pytest.approx(UNSEEN / 2)
    assert unseen_drift(0.0, 60.0) == 0.0  # nothing left to run: nothing to be wrong about
    # a week-long job after a 5-minute pilot: nearly all of it
    assert unseen_drift(7 * 86400.0, 300.0) == pytest.approx(UNSEEN, rel=1e-3)
    assert unseen_drift(100.0, 10.0) < unseen_drift(1000.0, 10.0) < UNSEEN


def test_the_plans_bar_carries_the_default_allowance_and_the_users_figure_in_its_place():
    stretches = [1.0, 1.0, 1.0, 1.0]  # a steady server: the speed's own part is nothing
    m = model(stretches, 0.5)
    (dflt,) = forecast(m, [(8, 1)], boot=2, drift=None)
    (none,) = forecast(m, [(8, 1)], boot=2, drift=0.0)
    (given,) = forecast(m, [(8, 1)], boot=2, drift=0.03)
    assert none.speed is not None and none.speed.drift == 0.0
    assert dflt.speed is not None and given.speed is not None
    assert dflt.speed.drift == pytest.approx(unseen_drift(dflt.seconds, m.pilot_wall_s))
    assert given.speed.drift == 0.03 < dflt.speed.drift
    assert dflt.seconds == none.seconds == given.seconds  # the point forecast is the same
    assert none.rel_halfwidth < given.rel_halfwidth < dflt.rel_halfwidth
    # the speed's part is the allowance, in quadrature, on the time's wider side
    h = dflt.speed.halfwidth
    assert dflt.parts is not None and dflt.parts.speed == pytest.approx(1 / (1 - h) - 1)


def test_the_note_says_the_default_allowance_and_how_to_leave_it_out():
    m = model([1.0, 1.0, 1.0, 1.0], 0.5)
    (f,) = forecast(m, [(8, 1)], boot=2, drift=None)
    said = " ".join(_notes(m, {"speed_drift": None}, 4, f))
    assert f"the range includes ±{f.speed.drift:.1%} in speed for 8 samples" in said
    assert "--speed-drift 0 leaves it out" in said
    # a pilot too short to cut into stretches sees no speed at all: the allowance is said
    few = model([1.0, 1.0], 0.5)
    (f2,) = forecast(few, [(8, 1)], boot=2, drift=None)
    assert f2.speed is not None and f2.speed.drift > 0
    assert f"the range includes ±{f2.speed.drift:.1%}" in " ".join(
        _notes(few, {"speed_drift": None}, 4, f2))
    (g,) = forecast(m, [(8, 1)], boot=2, drift=0.0)
    said = " ".join(_notes(m, {"speed_drift": 0.0}, 4, g))
    assert "is not in the range (--speed-drift 0)" in said


def test_the_live_prior_is_the_plans_bar_without_its_drift():
    fc = JobForecast("plan.json", "pilot", 1000, 1, 100.0, 80.0, 125.0, "b", 32, drift=0.15)
    s, lo, hi = fc.prior()
    assert s == 100.0
    up, down = 100 / 0.85 - 100, 100 - 100 / 1.15  # the drift's part on each side
    assert hi == pytest.approx(100 + math.sqrt(25**2 - up**2))
    assert lo == pytest.approx(100 - math.sqrt(20**2 - down**2))
    assert 80.0 < lo < s < hi < 125.0
    # a bar that is the drift alone leaves the forecast; none leaves the bar as it is
    alone = JobForecast("p", "pilot", 1000, 1, 100.0, 100 - down, 100 + up, "b", 32, drift=0.15)
    assert alone.prior() == pytest.approx((100.0, 100.0, 100.0))
    plain = JobForecast("p", "pilot", 1000, 1, 100.0, 80.0, 125.0, "b", 32)
    assert plain.prior() == (100.0, 80.0, 125.0)


def test_a_wild_wander_is_held_on_the_time_as_the_live_eta_holds_it():
    """A pilot whose stretches swing (a server ±60% over 100 s, a new-user trial) fitted a
    speed half-width of ±92%: the plan said +1,132% on the time (3.6 min, 1.9 – 45.0 min)
    for a job that ran 0.4 × its speed at worst. The speed's part is held to SPEED_MAX
    (× 2.5 on the time), as the live ETA holds its own, and the note says so."""
    from genbench.generate.wander import SPEED_MAX

    m = model([0.4, 0.6, 1.0, 1.5, 2.2, 2.6, 2.2, 1.4, 0.9, 0.5], 0.5)
    (f,) = forecast(m, [(400, 1)], boot=2, drift=None)
    assert f.speed is not None and f.speed.halfwidth > SPEED_MAX  # the fit's own figure
    assert f.parts is not None and f.parts.speed == pytest.approx(1 / (1 - SPEED_MAX) - 1)
    assert f.hi_s is not None and f.hi_s <= f.seconds * 2.6  # not 12 ×
    said = " ".join(_notes(m, {"speed_drift": None}, 10, f))
    assert f"held to ±{SPEED_MAX:.0%}: +150.0% / −37.5% on the time" in said, said
