"""The job report's table of -c auto's changes, read from a hand-written runs.jsonl."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from genbench.generate.store.runlog import read_runs
from genbench.report.concurrency import changes_html, concurrency_changes, concurrency_figure

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
    # the job page's figure: the same changes as a line per server, a corner at each, flat
    # from its run's first send to its end (seconds since 1000 here)
    fig = concurrency_figure(read_runs(tmp_path), lambda t: t - 1000.0, "s", ["#111"])
    assert fig is not None and [s.label for s in fig.series] == ["http://a/v1"]
    line = fig.series[0]
    assert list(zip(line.xs, line.ys, strict=True)) == [
        (0.0, 16), (2.5, 16), (2.5, 384), (40.0, 384), (40.0, 200), (60.0, 200)]  # fmt: skip
    assert concurrency_figure(notes[2:], lambda t: t, "s", ["#111"]) is None
