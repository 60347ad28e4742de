"""The engines a job started (`generate --serve`), drawn from `.genbench/engines.jsonl`: each
engine's up and down time on the job's time axis, each death with its cause and the line
that named it (the kernel's OOM line, a signal, an exit status, a hang), and the restarts.
"""

from __future__ import annotations

import time
from html import escape
from pathlib import Path
from typing import Any

import orjson

from genbench import fmt
from genbench.generate.store.layout import Layout
from genbench.report.figures import FAIL_COLOR, Figure, HBar
from genbench.report.job import _Axis, _color
from genbench.report.joblog import JobHistory
from genbench.report.parts import table_of

CAUSE_TEXT = {"oom": "OOM kill", "signal": "signal", "exit": "exited", "hang": "hang",
              "start_failed": "start failed"}  # fmt: skip


def read_events(path: Path, tag: str | None = None) -> list[dict[str, Any]]:
    """The engine events of a job (or one --shard), oldest first; [] when it started none."""
    try:
        data = Layout(path, tag).engine_events.read_bytes()
    except OSError:
        return []
    out = []
    for line in data.splitlines():
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line torn by a crash
        if isinstance(doc, dict) and "engine" in doc and "at" in doc:
            out.append(doc)
    return out


def intervals(events: list[dict[str, Any]], end: float) -> dict[str, list[list[Any]]]:
    """Per engine: [start, end, 'up' | 'down', the event that began it] spans."""
    spans: dict[str, list[list[Any]]] = {}
    for ev in events:
        mine = spans.setdefault(ev["engine"], [])
        kind = {"up": "up", "down": "down", "stop": "stopped"}.get(ev["event"])
        if kind is None or (mine and mine[-1][2] == kind):
            continue
        at = ev.get("since", ev["at"]) if kind == "down" else ev["at"]  # a hang: since
        if mine and mine[-1][1] is None:  # it last answered
            mine[-1][1] = max(at, mine[-1][0])
        if kind != "stopped":
            mine.append([at, None, kind, ev])
    for mine in spans.values():
        if mine and mine[-1][1] is None:
            mine[-1][1] = max(end, mine[-1][0])
    return spans


def engines_figure(h: JobHistory, events: list[dict[str, Any]], tag: str | None = None
                   ) -> Figure | None:  # fmt: skip
    """Each engine up (coloured) and down (red, its cause written in), or None when the
    job started no engine."""
    if not events:
        return None
    end = max(h.end, events[-1]["at"])
    spans = intervals(events, end)
    names = list(spans)
    ax = _Axis(h)
    fig = Figure("job_engines" + (f"_{tag}" if tag else ""), "Engines up and down, and why",
                 "the engines genbench started (--serve): coloured while healthy, red from "
                 "a death to healthy again, with its cause", ax.label, wide=True,
                 y_categories=names, height=max(160, 60 + 44 * len(names)))  # fmt: skip
    for i, name in enumerate(names):
        for a, z, kind, ev in spans[name]:
            if kind == "up":
                tip = f"{name} up {fmt.duration(z - a)} (pid {ev.get('pid')})"
                fig.bars.append(HBar(i, ax(a), ax(z), _color(i), 0.85, tip))
                continue
            cause = CAUSE_TEXT.get(ev.get("cause"), str(ev.get("cause")))
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a))
            tip = f"{ev.get('line', '')} — down {fmt.duration(z - a)} from {when}"
            fig.bars.append(HBar(i, ax(a), ax(z), FAIL_COLOR, 1.0, tip, cause))
    fig.legend = [("up", _color(0), ""), ("down", FAIL_COLOR, "")]
    return fig


def events_table(events: list[dict[str, Any]]) -> str:
    """Every death and restart of the engines, one row each, with the line that named it."""
    rows = []
    for ev in events:
        if ev["event"] not in ("down", "start_failed", "gave_up"):
            continue
        when = time.strftime("%m-%d %H:%M:%S", time.localtime(ev["at"]))
        cause = CAUSE_TEXT.get(ev.get("cause"), ev["event"].replace("_", " "))
        rows.append([when, escape(ev["engine"]), escape(cause), escape(str(ev.get("line") or ""))])
    if not rows:
        return "<p class='note'>engines: never down</p>"
    return table_of(["when", "engine", "cause", "why"], rows, range(4))
