"""Listeners beside the console: several heard at once, and the job's own notes on disk.

`Listeners` passes everything the job says to each listener in order (the console first:
it adds the plan's course to the snapshot the others then see). `RunNotes` appends one
line when a run of the job starts sending and one when it ends to `.genbench/runs.jsonl`:
what the request log cannot say by itself (how many rows the job has, how many were done
before, the plan's forecast and its bar), so `genbench report OUT_DIR` can draw the ETA
against the plan long after the job ended.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from genbench.generate.outcome import JobResult, Listener
from genbench.generate.progress import Snapshot
from genbench.generate.store.layout import Layout
from genbench.records import RequestRecord
from genbench.redact import redact, redact_doc


class Listeners(Listener):
    """Each listener hears everything, in the order given."""

    def __init__(self, *listeners: Listener) -> None:
        self.all = listeners

    def planned(self, info: dict[str, Any]) -> None:
        for one in self.all:
            one.planned(info)

    def note(self, text: str, style: str = "") -> None:
        text = redact(text)  # an engine's command line, its last words, an echoed key
        for one in self.all:
            one.note(text, style)

    def tick(self, snap: Snapshot) -> Snapshot:
        """The snapshot as the last listener saw it (the console's plan course added), so a
        Listeners inside another (the command's in the job's) hands it on too."""
        for one in self.all:
            snap = one.tick(snap) or snap
        return snap

    def record(self, rec: RequestRecord) -> None:
        for one in self.all:
            one.record(rec)

    def finished(self, result: JobResult) -> None:
        for one in self.all:
            one.finished(result)


class RunNotes(Listener):
    """Appends this run's start (at its first tick: the store exists by then) and end."""

    def __init__(self, out_dir: Path, shard_tag: str | None = None) -> None:
        self.path = Layout(out_dir, shard_tag).runs
        self.info: dict[str, Any] = {}
        self.started = False

    def planned(self, info: dict[str, Any]) -> None:
        self.info = info

    def tick(self, snap: Snapshot) -> None:
        if self.started or not self.path.parent.is_dir():
            return
        self.started = True
        plan = snap.plan
        band = {k: plan.get(k) for k in ("seconds", "lo_s", "hi_s")} if plan else None
        i = self.info
        self._append({
            "event": "start",
            "at": round(time.time() - snap.elapsed_s, 3),
            "total": snap.total,
            "done_before": i.get("done_before", 0),
            "failed_before": i.get("failed_before", 0),
            "todo": i.get("todo"),
            "plan": band,
        })  # fmt: skip

    def finished(self, result: JobResult) -> None:
        if not self.started:
            return
        self._append({
            "event": "end",
            "at": round(time.time(), 3),
            "status": result.status,
            "done": result.done,
            "failed": result.failed,
            "sending_s": round(result.sending_s, 3),
            "concurrency": result.concurrency,  # -c auto: each change, when and why
        })  # fmt: skip

    def _append(self, doc: dict[str, Any]) -> None:
        try:
            with open(self.path, "ab") as f:
                f.write(orjson.dumps(redact_doc(doc)) + b"\n")
        except OSError:
            pass  # notes for the report: never worth stopping a job over
