"""`-c auto`'s changes of concurrency, as the job's report shows them.

Each run's end note in `.genbench/runs.jsonl` holds its changes (generate/tuner.py's
`Change`: seconds since the run started sending, server, old, new, why). The report reads
them back into wall-clock time (the run's start note's `at`, else its end less the time it
sent), so that a resumed job's runs line up, and shows them in one table: which
concurrency each server ran, when it changed and why (issue #47's "the job report says").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from genbench.report.figures import Figure, Series
from genbench.report.parts import table_of


def concurrency_changes(notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every change of every run, oldest first, each with its wall time `t`; a note that
    lacks a field is skipped (an older genbench wrote none)."""
    out: list[dict[str, Any]] = []
    start: float | None = None
    for note in notes:
        if note.get("event") == "start":
            start = note.get("at")
            continue
        if note.get("event") != "end":
            continue
        at, sending = note.get("at"), note.get("sending_s") or 0.0
        t0 = start if isinstance(start, int | float) else (
            at - sending if isinstance(at, int | float) else None)  # fmt: skip
        start = None
        for c in note.get("concurrency") or []:
            if not isinstance(c, dict) or not all(k in c for k in ("at_s", "old", "new")):
                continue
            out.append({**c, "t": None if t0 is None else t0 + float(c["at_s"])})
    return out


def changes_html(notes: list[dict[str, Any]]) -> str:
    """The table of changes, or nothing when the job ran a fixed concurrency."""
    changes = concurrency_changes(notes)
    if not changes:
        return ""
    rows = [
        [
            "—" if c["t"] is None else time.strftime("%m-%d %H:%M:%S", time.localtime(c["t"])),
            f"{float(c['at_s']):.1f}",
            escape(str(c.get("server", ""))),
            f"{c['old']:,} → {c['new']:,}",
            escape(str(c.get("why", ""))),
        ]
        for c in changes
    ]
    return (
        "<h3>Concurrency (-c auto)</h3><p class='note'>each change of a server's "
        "concurrency: when, seconds since its run started sending, from → to, and why</p>"
        + table_of(["when", "at (s)", "server", "concurrency", "why"], rows, {0, 2, 3, 4})
    )


def concurrency_figure(notes: list[dict[str, Any]], ax: Callable[[float], float],
                       x_label: str, colors: Sequence[str]) -> Figure | None:  # fmt: skip
    """Each server's concurrency over the job's time, from the same changes as the table
    (a line per server, a corner at each change, flat to its run's end); None when the job
    ran a fixed concurrency. `ax` maps wall time to the page's time axis."""
    changes = [c for c in concurrency_changes(notes) if c["t"] is not None]
    if not changes:
        return None
    ends = [n["at"] for n in notes
            if n.get("event") == "end" and isinstance(n.get("at"), int | float)]  # fmt: skip
    fig = Figure("job_concurrency", "Concurrency per server (-c auto)", "requests in flight "
                 "each server was held to: a corner at each change (the table below says why)",
                 x_label, "concurrency", wide=True)  # fmt: skip
    by_server: dict[str, list[dict[str, Any]]] = {}
    for c in changes:
        by_server.setdefault(str(c.get("server", "")), []).append(c)
    for i, (server, cs) in enumerate(by_server.items()):
        start = cs[0]["t"] - float(cs[0]["at_s"])  # its run's first send
        xs, ys = [ax(start)], [float(cs[0]["old"])]
        for c in cs:
            xs += [ax(c["t"]), ax(c["t"])]
            ys += [ys[-1], float(c["new"])]
        end = next((e for e in ends if e >= cs[-1]["t"]), cs[-1]["t"])
        xs.append(ax(end))
        ys.append(ys[-1])
        tips = [f"{server}: {y:,.0f}" for y in ys]
        fig.series.append(Series(server, colors[i % len(colors)], xs, ys, marker="none",
                                 tips=tips))  # fmt: skip
    return fig
