"""`genbench report`: one self-contained HTML page (and optional PNGs) from one or more runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genbench.atomic import write_atomic
from genbench.compare.runs import Run, load_sides
from genbench.errors import UsageError
from genbench.generate.store.layout import has_data, is_generate_dir
from genbench.inspect.document import is_inspection, load_inspect
from genbench.report import decision, inspection
from genbench.report.figures import MAX_BARS, Figure, focus_phase
from genbench.report.html import figure_html, page, plan_sections
from genbench.report.job import is_job
from genbench.report.job_page import job_sections
from genbench.report.timeline import all_figures

REPORT_FILE = "report.html"


def build(
    runs: list[Run],
    phase: str | None = None,
    max_bars: int = MAX_BARS,
    inspections: list[dict[str, Any]] | None = None,
    plans: list[dict[str, Any]] | None = None,
    jobs: list[Path] | None = None,
) -> tuple[str, list[Figure]]:
    """The page as a string, and its figures; `phase` picks the phase of the timeline plots.
    `inspections` (inspect.json documents) each add a data-set section, `plans` (plan.json
    documents) a forecast section."""
    if runs and phase is not None and not any(r.phase(phase) for r in runs):
        names = sorted({p["name"] for r in runs for p in r.phases if p.get("kind") != "warmup"})
        raise UsageError(f"--phase {phase}: no such phase; the runs have {', '.join(names)}")
    figs = all_figures(runs, phase, max_bars) if runs else []
    docs = inspections or []
    ins_figs = [inspection.figures(doc, i) for i, doc in enumerate(docs)]
    focus = focus_phase(runs, phase) if runs else None
    drawn = [(p, *one) for p in jobs or [] for one in job_sections(p, figure_html)]
    sections = [(name, str(p), html) for p, name, html, _ in drawn]  # generate jobs' logs
    given = [decision.section(doc, i, figure_html) for i, doc in enumerate(plans or [])]
    beside = plan_sections(runs)  # plan.json next to a run's result
    html = page(runs, figs, focus, list(zip(docs, ins_figs, strict=True)),
                [(doc, h) for doc, (h, _) in zip(plans or [], given, strict=True)], sections,
                [h for h, _ in beside])  # fmt: skip
    plan_figs = [f for _, fs in given + beside for f in fs]
    return html, figs + [f for fs in ins_figs for f in fs] + [f for *_, fs in drawn for f in fs] \
        + plan_figs


def split_jobs(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """Generate output directories (their request logs are drawn) apart from the rest; one
    with an inspect.json stays in the rest too, for its data-set section."""
    rest: list[Path] = []
    jobs: list[Path] = []
    for p in paths:
        if is_job(p):
            jobs.append(p)
            if is_inspection(p):
                rest.append(p)
        else:
            rest.append(p)
    return rest, jobs


def split_plans(paths: list[str] | list[Path]) -> tuple[list[Path], list[dict[str, Any]]]:
    """Plans (plan.json, or a directory with one and no result.json) apart from the rest,
    in the order given."""
    rest: list[Path] = []
    plans: list[dict[str, Any]] = []
    for raw in paths:
        if decision.is_plan(raw):
            plans.append(decision.load_plan(raw))
        else:
            rest.append(Path(raw))
    return rest, plans


def split_inputs(paths: list[str] | list[Path]) -> tuple[list[Path], list[dict[str, Any]]]:
    """Run results on one side, inspections (inspect.json, or a directory with one) on the
    other, in the order given."""
    runs: list[Path] = []
    docs: list[dict[str, Any]] = []
    for raw in paths:
        p = Path(raw)
        if is_inspection(p):
            docs.append(load_inspect(p))
        elif p.is_dir() and is_generate_dir(p) and not (p / "result.json").exists():
            why = (
                "a generate output's copy without its request log (merge --out and inspect "
                f"--drop keep the rows, not the requests): nothing to draw; `genbench inspect "
                f"{p}` checks its data"
                if has_data(p)
                else "a generate output with no request log yet (nothing was sent): nothing "
                "to draw"
            )
            raise UsageError(f"{p}: {why}")
        else:
            runs.append(p)
    return runs, docs


def write_report(
    paths: list[str] | list[Path],
    out: Path,
    *,
    png_dir: Path | None = None,
    phase: str | None = None,
    max_bars: int = MAX_BARS,
) -> Path:
    """Load the runs (or sides of repeats), plans and inspections, write the HTML atomically,
    and the PNGs when asked."""
    rest, plans = split_plans(paths)
    rest, jobs = split_jobs(rest)
    run_paths, docs = split_inputs(rest)
    runs = load_sides(run_paths) if run_paths else []
    html, figs = build(runs, phase, max_bars, docs, plans, jobs)
    if png_dir is not None:
        from genbench.report.png import export

        export(figs, png_dir)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, html.encode("utf-8"))
    except OSError as e:
        raise UsageError(f"-o {out}: cannot write it ({e.strerror or e})") from None
    return out
