"""`genbench report`: one self-contained HTML page (and optional PNGs) from one or more runs."""

from __future__ import annotations

import os
from pathlib import Path

from genbench.errors import UsageError
from genbench.report.figures import MAX_BARS, Figure, all_figures, focus_phase
from genbench.report.html import page
from genbench.report.runs import Run, load_sides

REPORT_FILE = "report.html"


def build(
    runs: list[Run], phase: str | None = None, max_bars: int = MAX_BARS
) -> tuple[str, list[Figure]]:
    """The page as a string, and its figures; `phase` picks the phase of the timeline plots."""
    if phase is not None and not any(r.phase(phase) for r in runs):
        names = sorted({p["name"] for r in runs for p in r.phases if p.get("kind") != "warmup"})
        raise UsageError(f"--phase {phase}: no such phase; the runs have {', '.join(names)}")
    figs = all_figures(runs, phase, max_bars)
    return page(runs, figs, focus_phase(runs, phase)), figs


def write_report(
    paths: list[str] | list[Path],
    out: Path,
    *,
    png_dir: Path | None = None,
    phase: str | None = None,
    max_bars: int = MAX_BARS,
) -> Path:
    """Load the runs, write the HTML atomically, and the PNGs when asked."""
    runs = load_sides(paths)
    html, figs = build(runs, phase, max_bars)
    if png_dir is not None:
        from genbench.report.png import export

        export(figs, png_dir)
    tmp = out.with_name(out.name + ".tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, out)
    except OSError as e:
        raise UsageError(f"-o {out}: cannot write it ({e.strerror or e})") from None
    return out
