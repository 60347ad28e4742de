"""run's climb (run/knee.py): where doubling the concurrency stops, and which level is
the knee, from the rates and the server's own signs."""

from __future__ import annotations

import pytest

from genbench.run.knee import Level, plan_note, verdict

pytestmark = pytest.mark.core


def climb(*levels: Level, ceiling: int = 4096):
    return verdict(list(levels), ceiling)


def test_a_doubling_that_pays_climbs_on() -> None:
    assert climb(Level(1, 50.0), Level(2, 98.0)) is None


def test_preemptions_make_the_level_below_the_knee_even_when_it_was_faster() -> None:
    stop = climb(Level(256, 2100.0), Level(512, 2145.0, preemptions=525))
    assert stop is not None and (stop.knee, stop.stopped_at, stop.reason) == (
        256,
        512,
        "overloaded",
    )
    assert "525 requests preempted" in stop.why


def test_a_queue_that_forms_and_refusals_are_overload_too() -> None:
    assert climb(Level(8, 10.0), Level(16, 19.0, waiting_peak=2)).reason == "overloaded"
    assert climb(Level(8, 10.0), Level(16, 19.0, waiting_peak=1)) is None  # under an eighth
    assert climb(Level(8, 10.0), Level(16, 19.0, refused=3)).knee == 8


def test_a_gain_within_the_noise_is_flat_and_the_lower_level_is_the_knee() -> None:
    stop = climb(Level(64, 1000.0), Level(128, 1040.0))
    assert (stop.knee, stop.reason) == (64, "flat")
    # 8% gain, but the steady window's halves were 10% apart: still within its noise
    assert climb(Level(64, 1000.0), Level(128, 1080.0, noise=0.10)).knee == 64
    assert climb(Level(64, 1000.0), Level(128, 1080.0, noise=0.02)) is None


def test_a_full_cache_without_loss_is_the_knee_itself() -> None:
    stop = climb(Level(128, 1000.0), Level(256, 1900.0, kv_usage_peak=0.99))
    assert (stop.knee, stop.reason) == (256, "full")


def test_the_ceiling_with_the_rate_still_rising_claims_no_knee() -> None:
    stop = climb(Level(2, 10.0), Level(4, 20.0), ceiling=4)
    assert (stop.knee, stop.reason) == (None, "ceiling")
    assert "stopped below the knee" in plan_note(stop.to_dict(), 4)
