"""A plan in the report: its forecast and its decision (servers for a deadline, cost, the
fastest of several configurations), drawn by `report.forecast` from plan.json.

A plan reaches the report two ways: next to a run's result.json (the run's Forecast
section), or given on its own (a plan.json, or a directory holding one and no
result.json: a comparison of several runs, or a pilot), which adds a section of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import genbench.report.forecast as forecast
from genbench.plan.document import PLAN_FILE, PLAN_SCHEMA, PLAN_SCHEMA_VERSION
from genbench.report.figures import Figure
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
    """The plan's directory as the user gave it (plans/job), not its last name alone."""
    path = Path(str(doc.get("_path") or PLAN_FILE))
    return str(path.parent) if path.name == PLAN_FILE and str(path.parent) != "." else str(path)


def section(
    doc: dict[str, Any], i: int, figure_html: Callable[[Figure], str]
) -> tuple[str, list[Figure]]:
    """A plan given to the report on its own: its forecast and decision, and its figures."""
    src = doc.get("source") or {}
    kind = f"{len(src['compared'])} configurations compared" if src.get("compared") else "plan"
    html, figs = forecast.section(doc, f"Forecast: {label(doc)} ({kind})", f"forecast_{i}",
                                  figure_html)  # fmt: skip
    if src.get("compared"):
        html += (
            "<p class='note'>Each configuration is rated at its sustained rate at the job's "
            "concurrency, not at its single-stream speed.</p>"
        )
    return html, figs
