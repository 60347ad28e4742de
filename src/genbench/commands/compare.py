"""`genbench compare`: runs side by side, ratios to the first, differences inside noise marked."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer
from rich.console import Console
from rich.table import Table

from genbench import fmt
from genbench.commands import common
from genbench.compare import FLOOR, Comparison, Row, Z, compare, failures
from genbench.console import out
from genbench.report.html import when
from genbench.report.runs import load_runs

SECTIONS = {
    "single": "single stream, by output length",
    "throughput": "throughput, by concurrency",
    "latency": "latency under load, by concurrency",
    "speculative": "speculative decoding (server counters)",
}


def _value(x: float | None, unit: str) -> str:
    """A row's value in its unit: tok/s, ms (the row holds milliseconds), or tokens (a mean
    acceptance length, two decimals)."""
    if x is None:
        return fmt.MISSING
    if unit == "tokens":
        return fmt.number(x, 2)
    if unit == "ms":
        return fmt.ms(x / 1000)
    return fmt.rate(x, "")


def _ratio(row: Row, i: int) -> str:
    r = row.ratios[i]
    if r is None:
        return "—"
    text = f"{r:.2f}×"
    verdict = row.verdicts[i]
    if verdict == "same":
        return f"[dim]≈{text}[/]"
    if verdict == "better":
        return f"[green]{text} better[/]"
    if verdict == "worse":
        return f"[red]{text} worse[/]"
    return f"{text} ?"


def _table(title: str, rows: list[Row], cmp: Comparison) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("metric")
    for i, run in enumerate(cmp.runs):
        t.add_column(run.label + (" (base)" if i == 0 else ""), justify="right")
        if i:
            t.add_column(f"÷ {cmp.runs[0].label}", justify="right")
    last_group = None
    for row in rows:
        if last_group is not None and row.group != last_group:
            t.add_section()
        last_group = row.group
        cells = [row.label]
        for i, est in enumerate(row.estimates):
            cells.append(_value(est.value if est else None, row.unit))
            if i:
                cells.append(_ratio(row, i))
        t.add_row(*cells)
    return t


def render(cmp: Comparison, console: Console) -> None:
    runs = cmp.runs
    console.print()
    for i, r in enumerate(runs):
        status = r.doc.get("status")
        flag = "" if status == "complete" else f"  [yellow]status: {status}[/]"
        console.print(
            f"[bold]{r.label}[/]{' (baseline)' if i == 0 else ''}: {r.model} on {r.server}, "
            f"{when(r.doc.get('created'))}, {r.path}{flag}"
        )
    if cmp.differences:
        console.print("[yellow]workloads differ (--force):[/] " + "; ".join(cmp.differences))
    sections: dict[str, list[Row]] = {}
    for row in cmp.rows:
        sections.setdefault(row.section, []).append(row)
    for key, rows in sections.items():
        console.print(_table(SECTIONS.get(key, key), rows, cmp))
    t = Table(title="failures (all measured phases)", title_justify="left")
    for col in ("run", "failed", "requests", "errors"):
        t.add_column(col, justify="left" if col in ("run", "errors") else "right")
    for r in runs:
        f = failures(r)
        errors = ", ".join(f"{k} ×{v}" for k, v in sorted(f["errors"].items())) or "—"
        failed = f"[red]{f['failed']}[/]" if f["failed"] else "0"
        t.add_row(r.label, failed, str(f["requests"]), errors)
    console.print(t)
    console.print(
        f"  ratios are run ÷ {runs[0].label}; [dim]≈[/] within the runs' own noise "
        f"(|difference| under {Z:g} combined standard errors, or under {FLOOR:.0%}); "
        "? no noise estimate (see docs/compare-and-report.md)"
    )
    if any(not r.has_records for r in runs):
        missing = ", ".join(r.label for r in runs if not r.has_records)
        console.print(f"  no requests.jsonl for {missing}: per-request noise unknown")


def compare_cmd(
    runs: list[Path] = typer.Argument(
        ..., help="Run directories or result.json files; the first is the baseline."
    ),
    force: bool = typer.Option(
        False, "--force", help="Compare runs of different workloads (lengths, prompts, ...)."
    ),
    json: bool = common.JSON,
) -> None:
    """Compare runs: the same metrics side by side with ratios to the first run."""
    cmp = compare(load_runs(runs), force=force)
    if json:
        typer.echo(orjson.dumps(cmp.to_dict(), option=orjson.OPT_INDENT_2).decode())
        return
    render(cmp, out)
