"""Why an open-ended pilot stopped, as the plan says it: the mean length reaching its
target, or --pilot-min-time holding it past the target it had reached already."""

from __future__ import annotations

import time

import pytest

from genbench.plan.pilot import PilotRun, PilotStop, _ended
from genbench.plan.pilot_doc import stop_reason

pytestmark = pytest.mark.core


def answered(stop: PilotStop, ran_s: float) -> bool:
    """The stop asked after `ran_s` seconds of the pilot (its clock set back, not waited)."""
    stop.started = time.perf_counter() - ran_s
    return stop.done()


def steady(min_s: float) -> PilotStop:
    """A pilot of three requests at least, all of one length: its target met at once."""
    stop = PilotStop(min_requests=3, min_s=min_s)
    for _ in range(3):
        stop.add_sample(100)
    return stop


def test_a_pilot_the_minimum_time_held_past_its_target_says_so():
    """Seen by a new user: `plan --pilot-min-time 60` said the pilot stopped because the
    mean length reached its target, though the target was met in seconds and the minimum
    time held it to a minute."""
    stop = steady(min_s=60)
    assert not answered(stop, 5)  # met, held
    assert answered(stop, 61) and stop.reason == "min_time"
    run = _ended(PilotRun([], 0.0, []), stop, [])
    assert run.stopped == "min_time" and run.stopped_at["target_reached_s"] < 60
    said = stop_reason(run, stop)
    assert said.startswith("--pilot-min-time 60 s held it past its target, reached at ")
    assert "reached its target" not in said


def test_a_pilot_that_met_its_target_after_its_minimum_time_stopped_at_the_target():
    stop = steady(min_s=60)
    assert answered(stop, 70) and stop.reason == "target"  # first met after the minimum
    run = _ended(PilotRun([], 0.0, []), stop, [])
    assert stop_reason(run, stop) == "the mean length reached its target"
    assert "target_reached_s" not in run.stopped_at
    plain = steady(min_s=0)
    assert answered(plain, 1) and plain.reason == "target"


def test_a_pilot_out_of_time_after_a_climb_says_what_the_climb_took():
    """Seen by a new user: `plan -c auto --pilot-max-time 60` said '--pilot-max-time 32.1 s
    reached': what the climb had left of the 60 s, not what was given."""
    plain = PilotRun([], 0.0, [], stopped="time")
    assert stop_reason(plain, PilotStop(max_s=60.0)) == "--pilot-max-time 60 s reached"
    climbed = PilotStop(max_s=32.1, climb_s=27.9)
    assert stop_reason(plain, climbed) == (
        "--pilot-max-time reached: the 32.1 s left of it after the climb's 27.9 s")
