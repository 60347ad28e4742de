"""A resumed job against its plan: judged whole, its earlier runs and this one together.

The rows a stopped job leaves are not a fair sample of it: the long requests are the ones
still in flight when it stopped, so the rows a resumed run has to do are longer than the
plan's average row, and a plan scaled to the rows left undercounts them (a new-user trial:
a plan for 600 rows, Ctrl-C at 29%; the rows written before averaged 77 output tokens, the
406 left 101; the resumed run was said 15.8% off its time and outside the plan's tokens,
where the same 600 rows in one run were 7.6% off, inside its bar). So a resumed job is held
to the plan for all its rows: its output tokens are every row in its data files
(`written_tokens`), its time the sum of its runs' spans (first request sent to last row
written, each run's `sending_s` in `.genbench/runs.jsonl`: `earlier_time`) where the runs'
notes account for every row done before this run. Where they do not, this run's time is
shown against the plan scaled to its rows without a verdict.

The sum counts, for each stop, the time the requests then in flight had run before the
last row of that run was written: work the next run does again. A job of thousands of rows
per stream pays a fraction of a percent for it.

Nothing heavy is imported: Parquet parts are read (their `meta` column alone) only where
the job wrote Parquet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from genbench.rows import RowMeta

STOP_BIAS = ("the rows left after a stop are the long ones that were in flight, so a plan "
             "scaled to the rows left undercounts them")  # fmt: skip


def earlier_time(runs: list[dict[str, Any]], done_before: int) -> float | None:
    """The earlier runs' time: the sum of their `sending_s`, where their notes (oldest
    first, this run's not yet among them) account for every row done before this run:
    each start note followed by its end note, each run starting with the rows the one before
    ended with, the first with none, the last ending with `done_before`. None where they do
    not: a run killed before its end note, a job begun on a genbench without run notes, rows
    taken out or set aside between runs."""
    spans, done, open_ = 0.0, 0, False
    for note in runs:
        event = note.get("event")
        if event == "start":
            if open_ or note.get("done_before") != done:
                return None
            open_ = True
        elif event == "end":
            s, d = note.get("sending_s"), note.get("done")
            if not open_ or not isinstance(s, int | float) or not isinstance(d, int):
                return None
            spans, done, open_ = spans + s, d, False
    return spans if not open_ and done == done_before else None


def written_tokens(files: list[str]) -> tuple[int, int | None, int]:
    """(rows, their output tokens, rows whose count is estimated) of the job's data files,
    as each row's `meta` says them; a line that is not a row is passed over. (0, None, 0)
    where a file cannot be read: a count of some rows is no count of the job's."""
    rows = total = estimated = 0
    try:
        for f in files:
            metas = _parquet_metas(Path(f)) if f.endswith(".parquet") else _jsonl_metas(Path(f))
            for m in metas:
                meta = RowMeta.read(m)
                rows += 1
                total += meta.completion_tokens or 0
                estimated += bool(meta.tokens_estimated)
    except Exception:  # OSError, pyarrow's own: the job is done; its tokens are not judged
        return 0, None, 0
    return rows, total, estimated


def _jsonl_metas(path: Path) -> Any:
    with open(path, "rb") as f:
        for line in f:
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict) and "id" in obj:
                yield obj.get("meta")


def _parquet_metas(path: Path) -> Any:
    import pyarrow.parquet as pq

    yield from pq.read_table(path, columns=["meta"]).column("meta").to_pylist()

