"""`.genbench/runs.jsonl`: one line when a run of a job starts sending, one when it ends.

What the request log cannot say by itself (the job's rows, those done before the run,
the plan's forecast and bar), written by `listeners.RunNotes` and read by the job's
report. Nothing heavy is imported here: the report reads it without the job's machinery.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from genbench.generate.store.layout import Layout


def read_runs(out_dir: Path, shard_tag: str | None = None) -> list[dict[str, Any]]:
    """The notes of every run of the job, oldest first; a torn or bad line is skipped."""
    path = Layout(out_dir, shard_tag).runs  # runs-<i>of<N>.jsonl for one --shard
    runs: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except OSError:
        return runs
    for line in data.splitlines():
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            runs.append(doc)
    return runs
