"""`genbench report`: one HTML file that opens offline, with every plot of one or more runs."""

from __future__ import annotations

from pathlib import Path

import typer

from genbench.commands.console import out
from genbench.errors import UsageError
from genbench.report import REPORT_FILE, write_report
from genbench.report.figures import MAX_BARS
from genbench.run.result import result_path


def report_cmd(
    runs: list[Path] = typer.Argument(
        ...,
        metavar="RUN",
        help="Run directories or result.json files (colours follow this order); generate "
        "output directories with an inspect.json, or inspect.json files, add a data-set section; "
        "a plan.json (or its directory), a forecast section.",
    ),
    output: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        metavar="FILE",
        help="HTML file to write. [default: RUN/report.html for one run, "
        "./genbench-report.html for more]",
    ),
    png: Path | None = typer.Option(
        None, "--png", metavar="DIR", help="Also write each plot as a PNG here (needs matplotlib)."
    ),
    phase: str | None = typer.Option(
        None,
        "--phase",
        help="Phase for the timeline plots, e.g. sustained-c16. [default: the highest "
        "concurrency all runs share]",
    ),
    max_bars: int = typer.Option(
        MAX_BARS, "--max-bars", help="Requests drawn at most in a timeline; more are sampled."
    ),
) -> None:
    """Write an HTML report: throughput, latency CDFs, request timeline, server metrics."""
    if max_bars < 1:
        raise UsageError(f"--max-bars must be positive, got {max_bars}")
    if output is None:
        output = (
            result_path(runs[0]).parent / REPORT_FILE
            if len(runs) == 1
            else Path("genbench-report.html")
        )
    path = write_report(runs, output, png_dir=png, phase=phase, max_bars=max_bars)
    out.print(f"report: {path}" + (f"; plots: {png}/" if png else ""))
