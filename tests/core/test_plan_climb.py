"""plan's pilot climb (plan/climb.py): its -c, a level's rate read while the load is whole,
and the C it runs at when it stops below the knee."""

from __future__ import annotations

import pytest

from genbench.errors import UsageError
from genbench.plan.climb import chosen, climb_note, level_rate, plan_concurrency
from genbench.records import RequestRecord
from genbench.run.knee import Level, Stop

pytestmark = pytest.mark.core


def test_plan_c_is_a_number_or_auto_and_anything_else_is_a_clear_error() -> None:
    assert plan_concurrency(None) == (None, False)
    assert plan_concurrency("64") == (64, False)
    assert plan_concurrency("AUTO") == (None, True)
    for bad in ("0", "x", "-3"):
        with pytest.raises(UsageError, match=f"-c/--concurrency '{bad}': expected a number"):
            plan_concurrency(bad)


def _rec(i: int, send: float, end: float, tokens: int) -> RequestRecord:
    return RequestRecord(id=f"r{i}", phase="pilot", t_send=send, t_end=end,
                         completion_tokens=tokens)  # fmt: skip


def test_a_level_rate_leaves_out_the_first_wave_and_the_drain() -> None:
    # C=2, 8 answers of 100 tokens, two ending each second; the first wave ends late (a
    # cold start) and the last answers straggle: neither is the whole load's rate
    ends = [5.0, 5.0, 6.0, 6.0, 7.0, 7.0, 8.0, 30.0]
    recs = [_rec(i, e - 1.0, e, 100) for i, e in enumerate(ends)]
    rate, noise = level_rate(recs, 2)
    assert rate == pytest.approx(400 / 2.0)  # answers 3..6 ending over 5 s -> 7 s
    assert noise == pytest.approx(0.0)


def test_a_climb_out_of_time_runs_its_highest_level_without_overload_and_says_so() -> None:
    levels = [Level(1, 50.0), Level(2, 98.0), Level(4, 190.0, preemptions=3)]
    stop = Stop(None, 4, "budget", "the climb's time ran out", levels)
    assert chosen(stop) == 2
    note = climb_note({**stop.to_dict(), "chosen": 2, "wall_s": 9.5, "requests": 56})
    assert note.startswith("C=2 chosen: the pilot's climb stopped below the knee at C=4")
    assert "a higher C may be faster" in note
