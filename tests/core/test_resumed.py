"""A resumed job is held to its plan whole (generate/resumed.py): the rows a stop leaves
are the long ones that were in flight, so the plan scaled to the rows left undercounts
them. A new-user trial: a plan for 600 rows, Ctrl-C at 29%; the rows written before
averaged 77 output tokens, the 406 left 101, and the resumed run was said 15.8% off,
outside its bar and outside the plan's tokens, on a server that ran as planned (the same
600 rows in one run: -7.6% off, inside its bar)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from rich.console import Console

from genbench.generate.outcome import JobResult
from genbench.generate.render import JobConsole, _course
from genbench.generate.resumed import earlier_time, written_tokens
from genbench.plan.document import job_forecast

pytestmark = pytest.mark.core

# the trial's plan: 23.3 s (21.2 – 26.0 s) and 34.2K – 38.1K tokens for 406 rows, for 600
PLAN = {"mode": "pilot", "_path": "p/plan.json", "rows": [{
    "samples": 600, "ours": {"seconds": 34.4, "lo_s": 31.3, "hi_s": 38.4},
    "tokens": {"output": 53_400, "output_lo": 50_500, "output_hi": 56_300}}]}  # fmt: skip
INFO = {"input": "in.jsonl", "output": "out", "rows": 600, "done_before": 194,
        "failed_before": 0, "todo": 406, "invalid": 0, "derived_ids": 0, "left": 0}  # fmt: skip


def data_file(tmp: Path) -> str:
    """The job's 600 rows: 194 written before the stop at 77 tokens, 406 after at 101."""
    lines = [{"id": f"r{i}", "conversations": [], "meta": {"completion_tokens": 77 if i < 194
              else 101}} for i in range(600)]  # fmt: skip
    path = tmp / "data-00000.jsonl"
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines) + b'{"id": "torn')
    return str(path)


def ending(tmp: Path, earlier_s: float | None) -> tuple[str, JobConsole]:
    console = Console(width=400, record=True, force_terminal=False)
    jc = JobConsole(console, 30.0, True, lambda rows: job_forecast(PLAN, rows, 1))
    jc.planned({**INFO, "earlier_s": earlier_s})
    jc.finished(JobResult("complete", "", total=600, done=600, done_this_run=406,
                          sending_s=27.7, tokens=41_006, files=[data_file(tmp)]))  # fmt: skip
    line = next(ln for ln in console.export_text().splitlines() if "took" in ln)
    return line, jc


def test_a_resumed_job_is_judged_whole_on_its_time_and_tokens(tmp_path):
    line, jc = ending(tmp_path, 10.0)
    o = jc.plan_outcome
    # the plan for all 600 rows, against the two runs' 37.7 s: inside (scaled to the 406
    # rows left it said 23.3 s (21.2 – 26.0 s) and 27.7 s outside)
    assert (o["rows"], o["earlier_rows"], o["earlier_s"]) == (600, 194, 10.0)
    assert o["actual_s"] == pytest.approx(37.7) and o["inside_bar"] is True
    assert o["error"] == pytest.approx(34.4 / 37.7 - 1)
    # every row's tokens, 194 × 77 + 406 × 101, against the plan's for 600 (the 406 rows'
    # 41.0K were outside its 34.2K – 38.1K for as many)
    assert (o["tokens_rows"], o["actual_tokens"]) == (600, 194 * 77 + 406 * 101)
    assert o["tokens_inside_bar"] is True
    assert line == ("  plan: 34.4 s (31.3 – 38.4 s) for 600 rows; the job took 37.7 s over its "
                    "runs (this one 27.7 s): the forecast was -8.8% off, inside its bar; all "
                    "600 rows, this run's and the earlier ones': their 55.9K output tokens "
                    "are inside the plan's 50.5K – 56.3K"), line  # fmt: skip


def test_without_the_earlier_runs_time_a_resumed_run_gets_no_verdict_on_its_time(tmp_path):
    line, jc = ending(tmp_path, None)
    o = jc.plan_outcome
    assert o["rows"] == 406 and o["actual_s"] == pytest.approx(27.7)
    assert o["inside_bar"] is None and o["earlier_s"] is None
    assert o["tokens_rows"] == 600 and o["tokens_inside_bar"] is True  # tokens: whole still
    assert "this run took 27.7 s: the forecast was -16.0% off, not judged: the rows left " \
        "after a stop are the long ones that were in flight" in line  # fmt: skip
    assert "outside" not in line


def test_a_resumed_run_is_never_said_outside_the_plan_scaled_to_the_rows_left():
    f = job_forecast(PLAN, 406, 1)
    fresh = [f.course(t, 30.0 - t, 29.0 - t, 31.0 - t)["verdict"] for t in (5.0, 16.0, 20.0)]
    assert fresh[-1] == "outside"  # 30 s, 29 – 31 s, past 26.0 s for 15 s: held
    jc = JobConsole(Console(record=True), 30.0, True, lambda rows: job_forecast(PLAN, rows, 1))
    jc.planned({**INFO, "earlier_s": None})
    g = jc.forecast
    assert g.rows == 406 and g.earlier_rows == 194
    said = [g.course(t, 30.0 - t, 29.0 - t, 31.0 - t) for t in (5.0, 16.0, 20.0)]
    assert [d["verdict"] for d in said] == ["unsure"] * 3
    # the panel's line says why, not 'said outside once that lasts 10 s'
    assert said[-1]["hold_s"] is None and said[-1]["missed_for_s"] == pytest.approx(15.0)
    line = _course(said[-1]).plain
    assert "a resumed run is never said outside: the rows left after a stop" in line, line


def test_the_earlier_runs_time_only_where_their_notes_account_for_every_row():
    def run(before: int, done: int, s: float) -> list[dict]:
        return [{"event": "start", "done_before": before},
                {"event": "end", "done": done, "sending_s": s}]  # fmt: skip

    runs = run(0, 120, 6.0) + run(120, 194, 4.0)
    assert earlier_time(runs, 194) == pytest.approx(10.0)
    assert earlier_time([], 0) == 0.0
    assert earlier_time(runs, 200) is None  # rows done that no note accounts for
    assert earlier_time(runs[:1] + runs[2:], 194) is None  # a run killed before its end note
    assert earlier_time(run(50, 194, 4.0), 194) is None  # a first run on an older genbench
    assert earlier_time(runs + [{"event": "start", "done_before": 194}], 194) is None


def test_the_jobs_tokens_are_read_from_every_row_written(tmp_path):
    assert written_tokens([data_file(tmp_path)]) == (600, 194 * 77 + 406 * 101, 0)
    (tmp_path / "data-00001.parquet").write_bytes(b"not parquet")  # no count: none judged
    assert written_tokens([data_file(tmp_path), str(tmp_path / "data-00001.parquet")]) \
        == (0, None, 0)  # fmt: skip
