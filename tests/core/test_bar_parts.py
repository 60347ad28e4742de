"""The plan's bar as it is shown: its parts (the pilot's sample, the server's speed, the
model's misfit) add in quadrature to the bar exactly, none is larger than the whole, the
model check shows the calibrated replay its percentage is measured on, and the pilot
size advice says when the misfit, not the pilot, sets the floor."""

from __future__ import annotations

import math

import numpy as np
import pytest
from rich.console import Console
from test_plan_math import model

from genbench.generate.wander import SPEED_MAX
from genbench.plan import SpeedWander, forecast, pilot_size_for
from genbench.plan.from_pilot import _pilot_size, _wall
from genbench.plan.render import _bar_parts, _model_check

pytestmark = pytest.mark.core


def test_the_pilot_size_keeps_the_floor_a_pilot_cannot_narrow():
    # ±10% that narrows as 1/√K at K = 100; a floor of ±3% in quadrature leaves
    # √(0.05² − 0.03²) = 0.04 for the pilot's part: 100 · (0.10 / 0.04)² = 625
    assert pilot_size_for(0.10, 100, 0.05, floor=0.03) == 625
    assert pilot_size_for(0.10, 100, 0.05, floor=0.0) == 400  # as before without a floor
    assert pilot_size_for(0.10, 100, 0.05, floor=0.05) is None  # the floor is the target
    assert pilot_size_for(0.01, 100, 0.05, floor=0.106) is None  # the misfit alone is wider


def test_the_bars_parts_add_up_to_the_bar_in_quadrature():
    # the constructed pilot (test_plan_math.model): every request alike, so the bootstrap
    # adds nothing; the misfit is the calibrated replay's −20%; the speed from 4 stretches
    stretches = [1.0, 1.2, 1.1, 1.3]
    (f,) = forecast(model(stretches, 0.5), [(8, 1)], boot=2)
    parts = f.parts
    assert parts is not None and parts.side == "above"  # p/(1 − h) − p > p − p/(1 + h)
    assert parts.sample == 0.0 and parts.misfit == pytest.approx(0.2, rel=1e-12)
    h = SpeedWander.fit([1 / x for x in stretches], 0.5).job(f.seconds).halfwidth
    assert parts.speed == pytest.approx(1 / (1 - h) - 1, rel=1e-12)
    assert parts.total == pytest.approx(f.rel_halfwidth, rel=1e-12)
    assert max(parts.sample, parts.speed, parts.misfit) <= f.rel_halfwidth
    # what a longer pilot narrows and what it does not, together the whole again
    assert math.hypot(parts.scales, parts.floor) == pytest.approx(f.rel_halfwidth, rel=1e-12)
    assert parts.floor >= parts.misfit


def test_a_misfit_wider_than_the_target_is_named_as_the_floor():
    (f,) = forecast(model(), [(8, 1)], boot=3)  # the bar is the misfit's ±20% alone
    size = _pilot_size(f, 2, 0.05)
    assert size["pilot_size_for_5pct"] is None
    tgt = size["pilot_size_for_target"]
    assert tgt["requests"] is None and tgt["floor_from"] == "misfit"
    assert tgt["floor"] == pytest.approx(0.2, rel=1e-12)
    text = _bar_parts(f.rel_halfwidth, _wall(f)["parts"], tgt)
    assert text.startswith(
        "the bar is ±20.0% (its wider side, the one above the forecast; "
        "its parts add in quadrature)"
    )
    assert "±0.0% from the pilot's sample of requests" in text
    assert "±20.0% from the model's misfit on the pilot" in text
    assert text.endswith(
        "no pilot reaches ±5%: a pilot of all the job's 8 samples still leaves ±20.0%, most of it "
        "the model's misfit on the pilot, which no pilot length removes"
    )


def test_without_a_floor_the_advice_is_a_pilot_length():
    tgt = {"target": 0.05, "requests": 1096, "floor": 0.01, "floor_from": None}
    parts = {"side": "below", "sample": 0.10, "speed": 0.006, "misfit": 0.01}
    text = _bar_parts(math.hypot(0.10, 0.006, 0.01), parts, tgt)
    assert text.startswith("the bar is ±10.1% (its wider side, the one below the forecast")
    assert text.endswith("; ±5% needs a pilot of about 1,096 requests (--pilot 1096)")


def test_a_bar_already_inside_the_target_asks_for_no_pilot_length():
    # seen on the sim: "the bar is ±1.7% ...; ±5% needs a pilot of about 2 requests (--pilot
    # 2)" after a pilot of 287: a pilot of 2 would not know its own bar
    tgt = {"target": 0.05, "requests": 2, "floor": 0.016, "floor_from": None}
    parts = {"side": "above", "sample": 0.001, "speed": 0.0166, "misfit": 0.0007}
    text = _bar_parts(math.hypot(0.001, 0.0166, 0.0007), parts, tgt, 287)
    assert text.endswith("; inside ±5% already with this pilot's 287 requests"), text
    assert "--pilot" not in text
    edge = _bar_parts(0.05, {**parts, "sample": 0.05, "speed": 0.0, "misfit": 0.0},
                      {**tgt, "requests": 287}, 287)  # fmt: skip
    assert "inside ±5% already" in edge


def test_the_model_check_shows_the_calibrated_replay_its_misfit_is_measured_on():
    # model(): the replay takes 8 s, calibrated × 1.25 (the pilot's 10 s over it) to 10 s;
    # to the last send 4 s × 1.25 = 5 s, against the pilot's 6.25 s: 5 / 6.25 − 1 = −20%
    rep = model().describe()["replay"]
    assert rep["calibrated_s"] == 10.0 and rep["error"] == pytest.approx(-0.2)
    assert rep["calibrated_last_send_s"] == 5.0
    console = Console(width=300, record=True)
    console.print(_model_check(rep))
    line = console.export_text().strip()
    assert line == (
        "replaying the pilot to its last send gives 4.0 s, calibrated on its whole time 5.0 s, "
        "against 6.2 s measured (-20.0%: the model's misfit, a part of the bar)"
    )
    # a plan.json of before (calibrated to the last send, checked on the whole) reads as it did
    old = {"simulated_s": 8.0, "calibrated_s": 10.0, "actual_s": 12.5, "error": -0.2}
    console = Console(width=300, record=True)
    console.print(_model_check(old))
    assert console.export_text().strip() == (
        "replaying the pilot gives 8.0 s, calibrated to the pilot's sending 10.0 s, against "
        "12.5 s measured (-20.0%: the model's misfit, a part of the bar)"
    )


def test_the_reports_forecast_reads_the_bar_and_model_check_as_the_console_prints_them():
    """The report (plan.summary, drawn by report.forecast) from plan.json as it is written
    now: the parts with the misfit, in quadrature, and the calibrated replay; never the
    older `length_halfwidth` and `speed.halfwidth` alone (a part larger than the printed
    breakdown's, and the misfit left out)."""
    from genbench.plan.summary import forecast as summary

    rep = model().describe()["replay"]
    parts = {"side": "above", "sample": 0.015, "speed": 0.156, "misfit": 0.048}
    total = math.hypot(0.015, 0.156, 0.048)
    tgt = {"target": 0.05, "requests": None, "floor": 0.163, "floor_from": "speed"}
    doc = {
        "mode": "pilot", "source": {"prompts": "p.jsonl", "model": "m", "server": "s"},
        "inputs": {"servers": 1},
        "model": {"pilot_requests": 200, "concurrency": 32, "replay": rep,
                  "output_tokens": {"mean": 12.0}},
        "rows": [{"samples": 100_000, "ours": {
            "seconds": 89.1, "lo_s": 77.6, "hi_s": 103.8, "rel_halfwidth": total,
            "length_halfwidth": 0.0, "parts": parts, "speed": {"halfwidth": 0.135}}}],
        "pilot_size_for_target": tgt,
    }  # fmt: skip
    f = summary(doc)
    check = dict((label, detail) for label, _, detail in f.figures)["model check"]
    assert check == _model_check(rep) and "calibrated on its whole time 5.0 s" in check
    assert f.bar[0] == f"at 100,000 samples: {_bar_parts(total, parts, tgt)}"
    assert "±4.8% from the model's misfit on the pilot" in f.bar[0]
    assert "each alone" not in " ".join(f.bar) and "±13.5%" not in " ".join(f.bar)


def test_the_speed_note_gives_the_speed_part_the_breakdown_shows():
    """Seen on the sim: the note said '±37.3% from the speed' and the breakdown '±59.5% from
    the server's speed' for one plan: the first a speed's half-width, the second its
    effect on the time (above the forecast). The note now gives both, the second the
    breakdown's figure."""
    from genbench.plan.from_pilot import _speed_notes

    stretches = [1.0, 1.6, 1.5, 0.7, 0.6, 1.4, 1.7, 0.8, 0.5, 1.3]  # wanders widely
    (f,) = forecast(model(stretches, 3.0), [(8, 1)], boot=2)
    notes = _speed_notes(model(stretches, 3.0), {}, f)
    h = f.speed.halfwidth
    (said,) = [n for n in notes if "the range includes it" in n]
    assert f"±{h:.1%} in speed for 8 samples" in said
    # the default allowance the next note gives is inside that ±, and said so (a trial
    # read '±37.8%' and '±13.6%' as two parts to add)
    assert f.speed.drift == 0 and "below for speed it cannot see" not in said
    (g,) = forecast(model(stretches, 3.0), [(8, 1)], boot=2, drift=None)  # the default's
    (said,) = [n for n in _speed_notes(model(stretches, 3.0), {}, g)
               if "the range includes it" in n]  # fmt: skip
    assert g.speed.drift > 0
    assert f"the ±{g.speed.drift:.1%} below for speed it cannot see among it" in said, said
    held = min(h, SPEED_MAX)  # on the time, held as the live ETA holds it
    assert f"+{f.parts.speed:.1%} / −{1 - 1 / (1 + held):.1%} on the time" in said, said
    text = _bar_parts(f.rel_halfwidth, _wall(f)["parts"], _pilot_size(f, 2, 0.05)[
        "pilot_size_for_target"])  # fmt: skip
    assert f"±{f.parts.speed:.1%} from the server's speed" in text


def test_the_speed_floor_names_speed_drift_only_where_it_was_given():
    tgt = {"target": 0.05, "requests": None, "floor": 0.3, "floor_from": "speed"}
    parts = {"side": "above", "sample": 0.0, "speed": 0.3, "misfit": 0.007}
    plain = _bar_parts(0.3, parts, tgt)
    assert plain.endswith("one as long as the job still leaves ±30.0%, most of it the "
                          "server's speed as it wanders, which a longer pilot does not "
                          "average away")  # fmt: skip
    assert "--speed-drift" not in plain
    said = _bar_parts(0.3, parts, tgt, drift=True)
    assert "average away, and speed the pilot cannot see (--speed-drift)" in said


def test_a_tiny_pilots_stretches_are_said_in_milliseconds_not_as_zero_seconds():
    """Seen on a tiny pilot: 'across the pilot's 0.0 s stretches'."""
    from genbench.plan.from_pilot import _speed_notes

    stretches = [1.0, 1.6, 1.5, 0.7, 0.6, 1.4, 1.7, 0.8, 0.5, 1.3]
    (f,) = forecast(model(stretches, 0.02), [(8, 1)], boot=2)
    said = " ".join(_speed_notes(model(stretches, 0.02), {"speed_drift": 0.0}, f))
    assert "the pilot's 20 ms stretches" in said and "the pilot's 0.0 s" not in said, said


def _parts_of(sample: float, noise: float, wander: float, drift: float, misfit: float):
    """BarParts and SpeedBar for a speed whose own parts are given (on the time alike)."""
    from genbench.generate.wander import SpeedBar
    from genbench.plan.bar import BarParts

    hw = math.hypot(noise, wander, drift)
    bar = SpeedBar(hw, noise, wander, drift)
    return BarParts.of("above", sample, hw, misfit, bar), bar


def test_the_pilot_size_with_no_unseen_speed_is_the_closed_form():
    from genbench.plan.bar import pilot_reach

    parts, bar = _parts_of(0.08, 0.06, 0.0, 0.0, 0.01)
    got = pilot_reach(parts, bar, 100, 1_000_000, 0.05)
    assert got.requests == pilot_size_for(0.1, 100, 0.05, floor=0.01)  # √(.08² + .06²) = .1


def test_the_default_allowance_narrows_as_the_pilot_grows_so_a_size_can_reach_the_target():
    """Speed the pilot cannot see, by genbench's default 15% × job / (job + pilot), is no
    floor: a pilot 20× longer takes it from ±13.6% to ±10% of that. The old rule counted it
    as one and said no pilot length reaches ±5% beside a note that a longer pilot narrows
    it."""
    from genbench.generate.wander import unseen_drift
    from genbench.plan.bar import pilot_reach

    job_s, wall_s = 1000.0, 100.0
    d = unseen_drift(job_s, wall_s)  # 0.136
    parts, bar = _parts_of(0.02, 0.0, 0.0, d, 0.01)
    fixed = pilot_reach(parts, bar, 100, 1_000_000, 0.05)  # a user's --speed-drift: fixed
    assert fixed.requests is None and fixed.floor_from == "unseen"
    got = pilot_reach(parts, bar, 100, 1_000_000, 0.05, wall_s, job_s, unseen=True)
    assert got.requests is not None
    r = got.requests / 100  # the bar at that size is inside ±5%, one request less is not
    at = math.hypot(0.02 / math.sqrt(r), 0.01, unseen_drift(job_s, wall_s * r))
    assert at <= 0.05 + 1e-9
    r = (got.requests - 1) / 100
    assert math.hypot(0.02 / math.sqrt(r), 0.01, unseen_drift(job_s, wall_s * r)) > 0.05


def test_no_pilot_longer_than_the_job_is_asked_for():
    """Seen by a new user: '±5% needs a pilot of about 2,298 requests' for a job of 300
    samples. A pilot is shorter than its job: past the job's length the plan says what a
    pilot as long as the job still leaves, and what is most of it."""
    from genbench.plan.bar import pilot_reach

    parts, bar = _parts_of(0.14, 0.0, 0.0, 0.0, 0.01)  # ±14% from 256 requests' lengths
    assert pilot_reach(parts, bar, 256, 10_000, 0.05).requests == 2_091  # 256·.14²/(.05²−.01²)
    short = pilot_reach(parts, bar, 256, 300, 0.05)
    assert short.requests is None and short.floor_from == "sample"
    assert short.floor == pytest.approx(math.hypot(0.14 * math.sqrt(256 / 300), 0.01))
    tgt = {"target": 0.05, "requests": None, "floor": short.floor, "floor_from": "sample",
           "job_samples": 300}  # fmt: skip
    text = _bar_parts(parts.total, {"side": "above", "sample": 0.14, "speed": 0.0,
                                    "misfit": 0.01}, tgt, 256)  # fmt: skip
    assert "--pilot" not in text
    assert text.endswith(
        f"no pilot reaches ±5%: a pilot of all the job's 300 samples still leaves "
        f"±{short.floor:.1%}, most of it the spread of the samples' lengths and times, which "
        "a job this small does not average away"
    )
    # a pilot already longer than its job (1,052 for 300 was seen): its own bar is the
    # floor, never one wider than the bar printed beside it
    over = pilot_reach(parts, bar, 1052, 300, 0.05)
    assert over.requests is None and over.floor == pytest.approx(parts.total)
    said = _bar_parts(parts.total, {"side": "above", "sample": 0.14, "speed": 0.0,
                                    "misfit": 0.01}, {**tgt, "floor": over.floor},
                      1052)  # fmt: skip
    assert ("no pilot reaches ±5%: this one is as long as the job and still leaves "
            f"±{over.floor:.1%}") in said


def test_a_small_pilot_of_a_heavy_tail_sizes_the_next_on_its_spreads_upper_end():
    """Seen by a new user (--speed-drift 0, lognormal σ 0.8): a pilot of 64 asked for 1,206,
    whose pilot showed ±7.4% and asked for 2,697. 64 requests see little of a long tail, so
    their spread is most often short of the lengths' own and 1/√K from it falls short.
    Over 300 such pilots, the size each asks for is held to the lengths' true spread: the
    bar a pilot of that size gets (1.96 × the true CV / √K', with the 1% misfit) reaches
    ±5% for most of them, where sized on each pilot's own spread it does for under half."""
    from genbench.plan.bar import length_halfwidth, pilot_reach, spread_margin

    rng = np.random.default_rng(5)
    sigma = 0.8
    cv = math.sqrt(math.exp(sigma**2) - 1)  # the lengths' own: 0.947
    reached = {1: 0, 2: 0}
    for _ in range(300):
        x = rng.lognormal(math.log(40), sigma, 64)
        parts, bar = _parts_of(length_halfwidth(64, x.sum(), (x * x).sum()), 0, 0, 0, 0.01)
        for way, spread in ((1, 1.0), (2, spread_margin(x))):
            need = pilot_reach(parts, bar, 64, 10**6, 0.05, spread=spread).requests
            assert need is not None
            reached[way] += math.hypot(1.96 * cv / math.sqrt(need), 0.01) <= 0.05
    assert reached[1] < 0.45 * 300  # its own spread: about a third (the tail unseen)
    assert reached[2] >= 0.85 * 300  # on the spread's upper end (one-sided 97.5%): 91%


def test_the_spread_margin_asks_little_more_of_light_tails_and_of_long_pilots():
    from genbench.plan.bar import spread_margin

    rng = np.random.default_rng(6)
    light = [spread_margin(rng.gamma(4.0, 10.0, 64)) ** 2 for _ in range(200)]
    heavy = [spread_margin(rng.lognormal(3.7, 0.8, 64)) ** 2 for _ in range(200)]
    assert 1.3 < float(np.median(light)) < 1.8 < float(np.median(heavy)) < 2.4  # 1.60, 2.09
    long = [spread_margin(rng.lognormal(3.7, 0.8, 2000)) ** 2 for _ in range(20)]
    assert float(np.median(long)) < 1.3  # a pilot that saw the tail: ×1.22
    assert spread_margin([55.0] * 64) == 1.0  # fixed lengths: no spread to be wrong about
    assert spread_margin([10.0, 90.0, 40.0]) == 1.0  # too few to say


def test_the_plan_asks_for_the_pilot_its_lengths_spread_could_need():
    """The plan's advice, from a forecast on a pilot of heavy-tailed lengths: sized on the
    upper end of their spread (`spread_margin` in plan.json), which the sample's part of
    the bar narrows from; a pilot as long as its job is its own floor, as measured."""
    from test_plan_math import pool

    from genbench.plan.bar import pilot_reach, spread_margin

    rng = np.random.default_rng(7)
    m = model()
    m.pool = pool(rng.lognormal(math.log(40), 0.8, 64))
    m.pilot_samples = m.pilot_requests = 64
    m.replay_send_s = 5.0  # the replay to the last send on time: the misfit is its 1% floor
    (f,) = forecast(m, [(100_000, 1)], boot=40)
    margin = spread_margin(m.pool.sample_output)
    assert f.spread_margin == margin > 1.2
    size = _pilot_size(f, 64, 0.05)["pilot_size_for_target"]
    assert size["spread_margin"] == margin
    skew = f.skew_share  # the skew's share narrows as 1/K, with or without the margin
    assert size["skew_share"] == skew > 0
    plain = pilot_reach(f.parts, f.speed, 64, 100_000, 0.05, skew=skew).requests
    wide = pilot_reach(f.parts, f.speed, 64, 100_000, 0.05, spread=margin, skew=skew).requests
    assert size["requests"] == wide > 1.2 * plain
    # a pilot already as long as its job: the bar it measured, no margin on it
    own = pilot_reach(f.parts, f.speed, 64, 64, 0.05, spread=margin)
    assert own.floor == pytest.approx(f.parts.total)


def test_the_skews_share_of_the_sample_narrows_as_one_over_k():
    """The upper side of a bootstrap-t of a right-skewed mean is its symmetric part, z × the
    standard error (1/√K), and what the skew adds (Hall's term and past it, 1/K). ±40% at
    K = 100, half of it the skew's: a pilot r times as long has 0.2/√r + 0.2/r, ±5% at
    r = 23.3 (u = 1/√r solves 0.2u² + 0.2u = 0.05), where all of it as 1/√K asks for 64."""
    from genbench.plan.bar import pilot_reach

    parts, bar = _parts_of(0.4, 0.0, 0.0, 0.0, 0.0)
    u = (-0.2 + math.sqrt(0.2**2 + 4 * 0.2 * 0.05)) / (2 * 0.2)
    got = pilot_reach(parts, bar, 100, 10**6, 0.05, skew=0.5)
    assert got.requests == math.ceil(100 / u**2)  # 2,332
    assert pilot_reach(parts, bar, 100, 10**6, 0.05).requests == 6400
    # the margin takes both shares wider: 1.5 × (0.2/√r + 0.2/r)
    wide = pilot_reach(parts, bar, 100, 10**6, 0.05, spread=1.5, skew=0.5).requests
    u = (-0.3 + math.sqrt(0.3**2 + 4 * 0.3 * 0.05)) / (2 * 0.3)
    assert wide == math.ceil(100 / u**2)
    # the side below: a right skew narrows it, so none of it is taken as the skew's
    from genbench.plan.bar import BarParts

    below = BarParts.of("below", 0.4, 0.0, 0.0, bar)
    assert pilot_reach(below, bar, 100, 10**6, 0.05, skew=0.5).requests == 6400
    # a pilot as long as its job: its own bar, whatever its shares
    assert pilot_reach(parts, bar, 100, 100, 0.05, skew=0.5).floor == pytest.approx(0.4)


def test_the_skews_share_is_what_the_upper_side_has_past_the_normal_one():
    from genbench.plan.bar import length_halfwidth, skew_share

    x = np.array([10.0, 20.0, 30.0, 40.0, 200.0])
    plain = length_halfwidth(5, x.sum(), (x * x).sum())
    assert skew_share(x, 2 * plain) == pytest.approx(0.5)
    assert skew_share(x, plain) == 0.0  # no wider than the normal approximation
    assert skew_share(x, 0.5 * plain) == 0.0  # narrower (a left skew, or the side below)
    assert skew_share([55.0] * 64, 0.1) == 0.0  # fixed lengths: no spread, no share
    assert skew_share([55.0], 0.1) == 0.0  # one length: no interval to split


def test_a_pilot_that_drew_a_far_outlier_still_finds_a_pilot_for_a_long_job():
    """Seen on the sim (benchmarks/README.md, "A small pilot's advice, followed"): 64
    requests of lognormal σ 1.0 that drew a far outlier showed ±210%, three quarters of it
    the skew's, and the plan said no pilot short of the 100K-sample job reaches ±5%, where
    100K requests of that shape know their mean to ±0.8%: all of the bar was carried to the
    longer pilot as 1/√K, the skew's share with it, and on the spread's upper end. Here 63
    such lengths and one at e^3.5 × the median (1,324 tokens, 33 × the median): the skew's
    share narrows as 1/K, and the advice is a pilot, a large one, short of the job."""
    from test_plan_math import pool

    from genbench.plan.bar import pilot_reach

    rng = np.random.default_rng(3)
    x = rng.lognormal(math.log(40), 1.0, 64)
    x[0] = 40 * math.exp(3.5)
    m = model()
    m.pool = pool(x)
    m.pilot_samples = m.pilot_requests = 64
    m.replay_send_s = 5.0  # the replay to the last send on time: the misfit is its 1% floor
    (f,) = forecast(m, [(100_000, 1)], boot=40)
    assert f.parts is not None and f.parts.side == "above" and f.rel_halfwidth > 1.5
    assert f.skew_share > 0.6
    size = _pilot_size(f, 64, 0.05)["pilot_size_for_target"]
    assert size["skew_share"] == f.skew_share
    assert size["requests"] is not None and 64 * 100 < size["requests"] < 100_000
    # all of it as 1/√K, on the same margin: none short of the job, as before
    old = pilot_reach(f.parts, f.speed, 64, 100_000, 0.05, spread=f.spread_margin)
    assert old.requests is None and old.floor > 0.1


def test_where_no_pilot_reaches_the_target_the_one_that_takes_its_sample_part_there():
    """A trial's 64 requests left ±29.5% from their sample beside speed no pilot sees (a
    floor of ±7.5%), and the plan said only that no pilot reaches ±5%: the part a longer
    pilot does narrow got no size. Now it names the pilot whose sample part is ±5%; none
    where even the job's length would not get it there, or this pilot has it already."""
    from genbench.plan.bar import pilot_reach

    parts, bar = _parts_of(0.295, 0.0, 0.0, 0.15, 0.01)  # --speed-drift 15: a fixed floor
    got = pilot_reach(parts, bar, 64, 100_000, 0.05)
    assert got.requests is None and got.floor_from == "unseen"
    assert got.sample_at == math.ceil(64 * (0.295 / 0.05) ** 2)  # 2,228: as 1/√K
    tgt = {"target": 0.05, "requests": None, "floor": got.floor, "floor_from": "unseen",
           "job_samples": 100_000, "sample_at": got.sample_at}  # fmt: skip
    text = _bar_parts(parts.total, {"side": "above", "sample": 0.295, "speed": 0.15,
                                    "misfit": 0.01}, tgt, 64)  # fmt: skip
    assert text.endswith(f"; a pilot of about {got.sample_at:,} requests (--pilot "
                         f"{got.sample_at}) takes the sample's part to ±5%"), text
    assert pilot_reach(parts, bar, 64, 1_000, 0.05).sample_at is None  # past the job
    small, bar = _parts_of(0.04, 0.0, 0.0, 0.15, 0.01)
    assert pilot_reach(small, bar, 64, 100_000, 0.05).sample_at is None  # there already
