"""Readers of a run (plan --from, compare, report) say what a path that holds no run is,
and plan names a run that stopped early by its status, not by a phase it never reached."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from genbench.errors import UsageError
from genbench.plan.from_result import plan_from_result
from genbench.report import split_inputs
from genbench.run.result import load_result

pytestmark = pytest.mark.core


def _refusal(path: Path) -> str:
    with pytest.raises(UsageError) as e:
        load_result(path)
    msg = str(e.value)
    assert "\n" not in msg and "no such file" not in msg, msg
    return msg


def test_a_directory_that_is_there_is_named_for_what_it_is(tmp_path):
    assert "no such file or run directory" in str(
        pytest.raises(UsageError, load_result, tmp_path / "absent").value
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "an empty directory, not a run" in _refusal(empty)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("x")
    assert "a directory with no result.json, not a run" in _refusal(plain)
    sides = tmp_path / "sides"  # run --serve A --serve B writes sides/a, sides/b
    for name in ("b", "a"):
        (sides / name).mkdir(parents=True)
        (sides / name / "result.json").write_text("{}")
    msg = _refusal(sides)
    assert msg.endswith(f"holds runs, not a run itself: give them ({sides}/a {sides}/b)"), msg
    job = tmp_path / "out"
    (job / ".genbench").mkdir(parents=True)
    (job / ".genbench" / "job.json").write_text("{}")
    assert "a generate output with no request log yet, not a run" in _refusal(job)
    (job / ".genbench" / "requests.jsonl").write_text("")
    msg = _refusal(job)
    assert msg.startswith(f"{job}: a generate output, not a run"), msg
    assert f"genbench report {job}" in msg and "plan --prompts" in msg, msg
    plan = tmp_path / "p"
    plan.mkdir()
    (plan / "plan.json").write_text("{}")
    assert "holds a plan (plan.json), not a run" in _refusal(plan)


def _cut_short(status: str, sustained: dict) -> dict:
    return {
        "schema": "genbench.result", "schema_version": 1, "_path": "runs/kill/result.json",
        "status": status, "config": {"natural": True},
        "status_message": "the server at http://127.0.0.1:1 stopped answering during phase "
        "'single-1024' (connection refused) at 2026-12-01T17:40:00+00:00",
        "phases": [], "sweep": {"sustained": {"by_concurrency": sustained, "knee": None}},
    }  # fmt: skip


def test_a_run_cut_short_before_its_sustained_phases_says_so_and_which_phase_failed():
    with pytest.raises(UsageError) as e:
        plan_from_result(_cut_short("server_down", {}), [1000], 1, None, 100.0, None, None)
    msg = str(e.value)
    assert msg.startswith("runs/kill/result.json: the run was cut short"), msg
    assert "field 'status' is server_down" in msg and "during phase 'single-1024'" in msg, msg
    assert "--shape sustained" not in msg, msg
    assert orjson.dumps(msg)  # one line of text


def test_a_run_cut_short_after_some_sustained_levels_is_rated_with_a_note():
    doc = plan_from_result(_cut_short("server_down", {"1": 50.0}), [1000], 1, None, 100.0,
                           None, None)  # fmt: skip
    assert any("stopped early (status server_down)" in n for n in doc["notes"]), doc["notes"]


def test_report_says_a_copy_without_its_request_log_is_one(tmp_path):
    """merge --out and inspect --drop write the rows, not the requests: the report says so,
    and 'nothing was sent' only of an output that has no rows either."""
    out = tmp_path / "out"
    (out / ".genbench").mkdir(parents=True)
    with pytest.raises(UsageError, match="no request log yet \\(nothing was sent\\)"):
        split_inputs([out])
    (out / "data-00000.jsonl").write_text("{}\n")
    with pytest.raises(UsageError) as e:
        split_inputs([out])
    assert "copy without its request log" in str(e.value), e.value
    assert "nothing was sent" not in str(e.value) and f"genbench inspect {out}" in str(e.value)
