"""The end's verdict against the plan judges the job's output tokens too: a pilot's plan
forecasts them with a 95% range, and a job whose time was inside its bar but whose outputs
ran 18% longer than the plan said is a plan not to trust for the next job's tokens and
bytes (a new user's: 'the forecast was +2.1% off, inside its bar' said nothing of them)."""

from __future__ import annotations

import pytest
from rich.console import Console

from genbench.generate.outcome import JobResult
from genbench.generate.render import JobConsole
from genbench.plan.document import JobForecast, job_forecast

pytestmark = pytest.mark.core


def pilot_doc() -> dict:
    """A pilot's plan for 100 and 1,000 samples on one server and on 2."""

    def row(samples: int) -> dict:
        k = samples / 100
        return {"samples": samples,
                "tokens": {"output": 20_000 * k, "output_lo": 19_400 * k,
                           "output_hi": 20_600 * k},
                "ours": {"seconds": 30.0 * k, "lo_s": 28.0 * k, "hi_s": 32.0 * k},
                "at_servers": {"servers": 2, "seconds": 16.0 * k, "lo_s": 15.0 * k,
                               "hi_s": 17.0 * k}}  # fmt: skip

    return {"mode": "pilot", "_path": "p/plan.json", "rows": [row(100), row(1000)]}


def test_the_plans_tokens_are_scaled_to_the_jobs_rows_as_its_time_is():
    f = job_forecast(pilot_doc(), 300, 1)  # the 100 samples' row, three times
    assert f.seconds == pytest.approx(90.0)
    assert (f.output_tokens, f.output_lo, f.output_hi) == pytest.approx((60_000, 58_200, 61_800))
    # on 2 servers the time is shared, the tokens are not: the same rows, the same tokens
    f2 = job_forecast(pilot_doc(), 800, 2)  # the 1,000 samples' row
    assert f2.seconds == pytest.approx(160 * 0.8)
    assert (f2.output_tokens, f2.output_lo, f2.output_hi) == pytest.approx(
        (160_000, 155_200, 164_800)
    )
    # a plan without a token range (a run's, the field's arithmetic): a figure, no bar
    doc = pilot_doc()
    for r in doc["rows"]:
        r["tokens"] = {"output": r["tokens"]["output"]}
    bare = job_forecast(doc, 300, 1)
    assert bare.output_tokens == pytest.approx(60_000) and bare.output_lo is None
    o = bare.outcome(90.0, 71_200, 300)
    assert o["tokens_inside_bar"] is None and o["tokens_forecast"] == pytest.approx(60_000)


def test_the_outcome_holds_the_jobs_tokens_against_the_plans_range():
    f = job_forecast(pilot_doc(), 300, 1)
    o = f.outcome(91.0, 71_200, 300)
    assert o["inside_bar"] is True and o["tokens_inside_bar"] is False
    assert (o["actual_tokens"], o["tokens_rows"]) == (71_200, 300)
    assert (o["tokens_forecast"], o["tokens_lo"], o["tokens_hi"]) == pytest.approx(
        (60_000, 58_200, 61_800)
    )
    assert o["tokens_error"] == pytest.approx(60_000 / 71_200 - 1)
    assert f.outcome(91.0, 60_500, 300)["tokens_inside_bar"] is True
    # 290 rows answered, 10 failed: held against the plan's figures for 290 rows
    o = f.outcome(91.0, 58_000, 290)
    assert o["tokens_lo"] == pytest.approx(58_200 * 290 / 300) and o["tokens_inside_bar"]
    # nothing counted, nothing answered: nothing judged
    assert f.outcome(91.0)["tokens_inside_bar"] is None
    assert f.outcome(91.0, 0, 300)["tokens_inside_bar"] is None
    assert f.outcome(91.0, 500, 0)["tokens_inside_bar"] is None


def ending(f: JobForecast, result: JobResult) -> tuple[str, JobConsole]:
    console = Console(width=300, record=True, force_terminal=False)
    jc = JobConsole(console, 30.0, True, lambda todo: f)
    jc.forecast = f  # as planned() sets it
    jc.finished(result)
    return console.export_text(), jc


def done(tokens: int, rows: int = 300, status: str = "complete", **kw) -> JobResult:
    return JobResult(status, "", total=300, done=rows, done_this_run=rows, sending_s=35.0,
                     tokens=tokens, **kw)  # fmt: skip


def test_the_ending_says_when_the_jobs_tokens_are_outside_the_plans_range():
    f = JobForecast("p.json", "pilot", 300, 1, 34.0, 32.0, 37.0, "b", None,
                    output_tokens=60_000, output_lo=58_100, output_hi=61_900)  # fmt: skip
    text, jc = ending(f, done(71_200))
    line = next(ln for ln in text.splitlines() if "the job took" in ln)
    assert line.endswith("inside its bar; its 71.2K output tokens are outside the plan's "
                         "58.1K – 61.9K"), line  # fmt: skip
    assert jc.plan_outcome["tokens_inside_bar"] is False
    inside = ending(f, done(60_200))[0]
    assert "its 60.2K output tokens are inside the plan's 58.1K – 61.9K" in inside
    # a count just past an end, which three digits would print as that end: exact
    past = ending(f, done(61_930))[0]
    assert "its 61,930 output tokens are outside the plan's 58,100 – 61,900" in past
    # some rows failed: the rows answered, against the plan's figures for as many
    said = ending(f, done(57_000, 290, "some_failed", failed=10, failed_this_run=10))[0]
    assert "its 290 rows answered hold 57.0K output tokens, inside the plan's 56.2K – 59.8K" \
        in said  # fmt: skip
    # fixed lengths: the plan's range is one figure, said once ('60.0K – 60.0K' was seen)
    fixed = JobForecast("p.json", "pilot", 300, 1, 34.0, 32.0, 37.0, "b", None,
                        output_tokens=60_000, output_lo=60_000, output_hi=60_000)  # fmt: skip
    assert "its 60.0K output tokens are inside the plan's 60.0K" in ending(fixed, done(60_000))[0]


def test_a_plan_without_a_token_range_and_a_stopped_job_claim_nothing_of_tokens():
    bare = JobForecast("p.json", "arithmetic", 300, 1, 34.0, 32.0, 37.0, "b", None,
                       output_tokens=60_000)  # fmt: skip
    text, jc = ending(bare, done(71_200))
    assert "the job took" in text and "output tokens" not in text
    assert jc.plan_outcome["tokens_forecast"] == pytest.approx(60_000)
    f = JobForecast("p.json", "pilot", 300, 1, 34.0, 32.0, 37.0, "b", None,
                    output_tokens=60_000, output_lo=58_100, output_hi=61_900)  # fmt: skip
    text, jc = ending(f, done(30_000, 150, "interrupted"))
    assert "output tokens are" not in text and "the job took" not in text
    assert jc.plan_outcome is None  # --json's plan: the forecast alone, no verdict
