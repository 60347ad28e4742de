"""`genbench compare` on the console: each side, the metrics side by side with ratios to
the first, the failures, and how to read the noise marks."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from genbench import fmt
from genbench.compare.rule import FLOOR, Comparison, MetricRow, Z, failures
from genbench.compare.runs import Run
from genbench.fmt import when

SECTIONS = {
    "single": "single stream, by output length",
    "throughput": "throughput, by concurrency",
    "latency": "latency under load, by concurrency",
    "speculative": "speculative decoding (per request where the server says it, else its counters)",
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


def _spread(row: MetricRow, i: int) -> str:
    """' ±2.1%': the spread between a side's repeats (one standard deviation), if it has any."""
    side = row.sides[i]
    spread = side.spread if side else None
    return "" if spread is None else f" [dim]±{fmt.pct(spread)}[/]"


def _ratio(row: MetricRow, i: int) -> str:
    d = row.diffs[i]
    if d is None:
        return "—"
    text = f"{d.ratio:.2f}×"
    mark = "" if d.drift_measured else " [yellow]†[/]"
    verdict = row.verdicts[i]
    if verdict == "same":
        return f"[dim]≈{text}[/]{mark}"
    if verdict == "better":
        return f"[green]{text} better[/]{mark}"
    if verdict == "worse":
        return f"[red]{text} worse[/]{mark}"
    return f"{text} ?{mark}"


def _interval(row: MetricRow, i: int) -> str:
    d = row.diffs[i]
    if d is None or d.interval is None:
        return "—"
    lo, hi = d.interval
    return f"{lo:.2f}–{hi:.2f}"


def _needed(row: MetricRow, i: int) -> str:
    d = row.diffs[i]
    if d is None or not d.within_noise:
        return ""
    return "—" if d.repeats_needed is None else f"{d.repeats_needed:,}"


def _table(title: str, rows: list[MetricRow], cmp: Comparison) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("metric")
    measured = cmp.drift_measured
    base = cmp.runs[0].label
    for i, run in enumerate(cmp.runs):
        n = len(run.repeat_runs)
        head = run.label + (" (base)" if i == 0 else "")
        t.add_column(head + (f"\n{n} repeats" if n > 1 else ""), justify="right")
        if i:
            t.add_column(f"÷ {base}", justify="right")
            if measured:
                t.add_column("95% interval", justify="right")
                t.add_column("repeats\nto tell", justify="right")
    last_group = None
    for row in rows:
        if last_group is not None and row.group != last_group:
            t.add_section()
        last_group = row.group
        cells = [row.label]
        for i, est in enumerate(row.estimates):
            cells.append(_value(est.value if est else None, row.unit) + _spread(row, i))
            if i:
                cells.append(_ratio(row, i))
                if measured:
                    cells += [_interval(row, i), _needed(row, i)]
        t.add_row(*cells)
    return t


def _span(run: Run) -> str:
    reps = run.repeat_runs
    if len(reps) == 1:
        return when(run.doc.get("created"))
    first, last = when(reps[0].doc.get("created")), when(reps[-1].doc.get("created"))
    return f"{len(reps)} repeats, {first}" + (f" to {last}" if last != first else "")


def print_comparison(cmp: Comparison, console: Console) -> None:
    runs = cmp.runs
    console.print()
    for i, r in enumerate(runs):
        bad = [x for x in r.repeat_runs if x.doc.get("status") != "complete"]
        flag = "".join(
            f"  [yellow]status{' of ' + x.label if x is not r else ''}: {x.doc.get('status')}[/]"
            for x in bad
        )
        console.print(
            f"[bold]{r.label}[/]{' (baseline)' if i == 0 else ''}: {r.model} on {r.server}, "
            f"{_span(r)}, {r.source or r.path}{flag}"
        )
    if cmp.differences:
        console.print("[yellow]workloads differ (--force):[/] " + "; ".join(cmp.differences))
    if not cmp.drift_measured:
        console.print(
            "[yellow]† one run per side: how far the servers' speed moves between runs is "
            f"unmeasured, so differences under {cmp.allowance:.0%} show ≈ (--allowance). "
            "Measure it: genbench run --repeat 3 on each side, or --versus to alternate them.[/]"
        )
    sections: dict[str, list[MetricRow]] = {}
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
    if cmp.drift_measured:
        console.print(
            f"  ratios are side ÷ {runs[0].label}, of the means of each side's repeats "
            "([dim]±[/] their spread, one standard deviation); 95% interval from the spread "
            "between repeats (Student t), the runs' own error as a floor; [dim]≈[/] cannot "
            f"tell at this noise (or under {FLOOR:.0%}); repeats to tell: per side, to resolve "
            "the difference seen at this spread; ? no noise estimate "
            "(see docs/compare-and-report.md)"
        )
        singles = [r.label for r in runs if len(r.repeat_runs) == 1]
        if singles:
            console.print(
                f"  one run only: {', '.join(singles)}; it borrows the spread of the other side"
            )
    else:
        console.print(
            f"  ratios are run ÷ {runs[0].label}; [dim]≈[/] within the runs' own noise "
            f"(|difference| under {Z:g} combined standard errors, or under {FLOOR:.0%}) or "
            f"under the {cmp.allowance:.0%} allowed for drift between runs [yellow]†[/]; "
            "? no noise estimate (see docs/compare-and-report.md)"
        )
    missing = [x.label for r in runs for x in r.repeat_runs if not x.has_records]
    if missing:
        console.print(f"  no requests.jsonl for {', '.join(missing)}: per-request noise unknown")
