"""Every plot's x axis is labelled, and a plan's forecast reads as figures, not keys."""

from __future__ import annotations

import re

import pytest

from genbench.plan.summary import forecast
from genbench.report.figures import Figure, Series
from genbench.report.svg import draw, log_ticks

pytestmark = pytest.mark.core


@pytest.mark.parametrize(
    ("lo", "hi"), [(1100, 1900), (210, 480), (2100, 2965), (3, 4), (40, 60000), (1, 1e7)]
)
def test_a_log_axis_has_at_least_two_labels_inside_its_range(lo, hi):
    ticks = log_ticks(lo, hi)
    assert len(ticks) >= 2 and all(lo <= t <= hi for t in ticks), ticks


def test_the_lengths_plot_of_a_narrow_range_has_its_tick_labels():
    # output lengths of 1,100 to 1,900 tokens: no 1-2-5 tick falls inside
    fig = Figure("job_lengths", "Lengths", x_label="tokens", x_log=True, y_max=1.0)
    fig.series.append(Series("output tokens", "#4e79a7", [1100, 1500, 1900], [0.2, 0.6, 1.0],
                             step=True, marker="none"))  # fmt: skip
    labels = re.findall(r'<text class="xtick"[^>]*>([^<]+)</text>', draw(fig))
    assert len(labels) >= 2, labels


def test_a_pilot_plan_reads_as_its_forecast():
    doc = {
        "mode": "pilot",
        "source": {"prompts": "p.jsonl", "prompts_in_file": 1, "model": "m", "server": "s"},
        "inputs": {"servers": 1},
        "model": {"pilot_requests": 1, "concurrency": 1, "pilot_wall_s": 3.0, "fail_rate": 0.0,
                  "output_tokens": {"mean": 100.0}, "thinking_tokens": {"mean": 0.0}},
        "rows": [{"samples": 1, "tokens": {"output": 100.0},
                  "ours": {"seconds": 7200.0, "lo_s": 6480.0, "hi_s": 7920.0,
                           "rel_halfwidth": 0.1, "confidence": 0.95, "length_halfwidth": 0.08,
                           "speed": {"halfwidth": 0.05}},
                  "naive_pilot": {"seconds": 9000.0}}],
        "pilot_size_for_target": {"target": 0.05, "requests": 4},
    }  # fmt: skip
    f = forecast(doc)
    assert f.what.startswith("A pilot of 1 request at C=1 on m on s, from p.jsonl (1 row)")
    # a job of hours has no days column ('0.08' said nothing '2.0 h' does not)
    assert f.time.head == ["samples", "time on 1 server\nat C=1", "95% range", "±",
                           "naive: pilot × N/K", "vs ours"]  # fmt: skip
    assert f.time.rows == [["1", "2.0 h", "1.8 – 2.2 h", "±10.0%", "2.5 h", "+25.0%"]]
    long = {**doc["rows"][0], "samples": 30, "ours": {**doc["rows"][0]["ours"],
            "seconds": 216_000.0, "lo_s": 194_400.0, "hi_s": 237_600.0}}  # fmt: skip
    f2 = forecast({**doc, "rows": [doc["rows"][0], long]})
    assert f2.time.head[4] == "days" and [r[4] for r in f2.time.rows] == ["0.08", "2.50"]
    assert f.bar[0] == ("the 95% range is ±10.0% at 1 sample; its parts, each alone: ±8.0% "
                        "from the mean output length, ±5.0% from the server's speed")  # fmt: skip
    assert f.bar[-1] == "±5% needs a pilot of about 4 requests (--pilot 4)"
    (m,) = f.marks
    assert (m.samples, m.seconds, m.lo_s, m.hi_s, m.other) == (
        1, 7200.0, 6480.0, 7920.0, ("naive: pilot × N/K", 9000.0))  # fmt: skip
