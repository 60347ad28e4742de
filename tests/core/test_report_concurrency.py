"""The job report's table of -c auto's changes, read from a hand-written runs.jsonl."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from genbench.generate.store.runlog import read_runs
from genbench.report.concurrency import changes_html, concurrency_changes

pytestmark = pytest.mark.core


def test_changes_read_from_run_notes_into_wall_time(tmp_path: Path) -> None:
    notes = [
        {"event": "start", "at": 1000.0, "total": 10},
        {"event": "end", "at": 1060.0, "status": "done", "sending_s": 60.0, "concurrency": [
            {"at_s": 2.5, "server": "http://a/v1", "old": 16, "new": 384, "why": "room"},
            {"at_s": 40.0, "server": "http://a/v1", "old": 384, "new": 200,
             "why": "12 requests preempted"},
        ]},
        {"event": "start", "at": 2000.0},  # a resumed run, fixed concurrency: no changes
        {"event": "end", "at": 2010.0, "sending_s": 10.0, "concurrency": []},
    ]  # fmt: skip
    (tmp_path / ".genbench").mkdir()
    runs = tmp_path / ".genbench" / "runs.jsonl"
    runs.write_bytes(b"".join(orjson.dumps(n) + b"\n" for n in notes))
    got = concurrency_changes(read_runs(tmp_path))
    assert [(c["t"], c["old"], c["new"]) for c in got] == [(1002.5, 16, 384), (1040.0, 384, 200)]
    page = changes_html(read_runs(tmp_path))
    assert "384 → 200" in page and "12 requests preempted" in page
    assert changes_html(notes[2:]) == ""  # a fixed -c: no table
