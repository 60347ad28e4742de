"""A plan in the report: its decision (servers for a deadline, cost, the fastest of several
configurations) as the same tables `genbench plan` prints, from plan.json.

A plan reaches the report two ways: next to a run's result.json (the run's Forecast
section), or given on its own (a plan.json, or a directory holding one and no
result.json: a comparison of several runs, or a pilot), which adds a section of its own.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from genbench.plan.document import PLAN_FILE, PLAN_SCHEMA, PLAN_SCHEMA_VERSION
from genbench.plan.tables import decision_tables
from genbench.run.result import has_schema, read_document


def is_plan(path: str | Path) -> bool:
    """Is this (a directory with) a plan.json rather than a run's result.json?"""
    return has_schema(path, PLAN_FILE, PLAN_SCHEMA)


def load_plan(path: str | Path) -> dict[str, Any]:
    """A plan.json (or a directory with one), with its path in `_path`."""
    p = Path(path)
    return read_document(
        p / PLAN_FILE if p.is_dir() else p, PLAN_SCHEMA, PLAN_SCHEMA_VERSION, "plan"
    )


def label(doc: dict[str, Any]) -> str:
    path = Path(str(doc.get("_path") or PLAN_FILE))
    return path.parent.name or str(path)


def tables_html(decision: dict[str, Any]) -> str:
    """The decision's tables, each with its title above and its notes below."""
    out = []
    for t in decision_tables(decision):
        head = "".join(_cell("th", j, h, t.left) for j, h in enumerate(t.head))
        body = "".join(
            "<tr>" + "".join(_cell("td", j, c, t.left) for j, c in enumerate(row)) + "</tr>"
            for row in t.rows
        )
        foot = "".join(f"<p class='note'>{escape(line)}</p>" for line in t.foot)
        out.append(
            f"<h3>{escape(t.title)}</h3><div class='tablewrap'><table><tr>{head}</tr>{body}"
            f"</table></div>{foot}"
        )
    return "".join(out)


def _cell(tag: str, j: int, text: str, left: tuple[int, ...]) -> str:
    cls = " class='t'" if j in left else ""
    return f"<{tag}{cls}>{escape(text).replace(chr(10), '<br>')}</{tag}>"


def section(doc: dict[str, Any]) -> str:
    """A plan given to the report on its own: its decision, or a line saying it has none."""
    src = doc.get("source") or {}
    what = (
        f"{len(src['compared'])} configurations of {src.get('model')}"
        if src.get("compared")
        else f"a {doc.get('mode')} plan for {src.get('model') or 'the job'}"
    )
    decision = doc.get("decision")
    body = (
        tables_html(decision)
        if decision
        else "<p>This plan has no decision: run <code>genbench plan</code> with "
        "<code>--deadline</code>, <code>--price</code>, or several <code>--from</code>.</p>"
    )
    why = (
        " Each configuration is rated at its sustained rate at the job's concurrency, not at "
        "its single-stream speed."
        if src.get("compared")
        else ""
    )
    return (
        f"<h2>Decision: {escape(label(doc))}</h2><p class='lead'>genbench plan: {escape(what)}, "
        f"from {escape(str(doc.get('_path', '')))}.{why}</p>" + body
    )
