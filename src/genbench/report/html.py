"""The report page: one HTML file with its CSS and plots inline, readable offline.

Nothing is fetched: no scripts, no fonts, no images by URL. Colours follow the
run (run 1 is always blue in every plot and card), so a reader matches a line
to a run without reading the legend twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

import genbench.report.cards as cards
import genbench.report.decision as decision
import genbench.report.figures as F
import genbench.report.forecast as forecast
import genbench.report.inspection as inspection
from genbench import __version__, fmt
from genbench.compare.runs import Run, workload_differences
from genbench.fmt import when
from genbench.report.parts import table_of, tiles_html
from genbench.report.svg import WIDE, WIDTH, draw, swatch
from genbench.run.readings import sweep_readings

CSS = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#e3e6ec; --bg:#f5f6f8; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", sans-serif; }
main { max-width: 1480px; margin: 0 auto; padding: 28px 32px 60px; }
header h1 { font-size: 26px; margin: 0 0 4px; letter-spacing: -0.01em; }
header p { margin: 0; color: var(--muted); }
h2 { font-size: 19px; margin: 36px 0 6px; padding-bottom: 6px;
  border-bottom: 1px solid var(--line); }
h2 + p.lead { margin: 0 0 14px; color: var(--muted); max-width: 980px; }
.warn { background:#fff6e0; border:1px solid #f0d48a; border-radius:8px; padding:10px 14px;
  margin: 16px 0; }
.cards { display:grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap:16px;
  margin-top: 18px; }
.card { background:white; border-radius:10px; border:1px solid var(--line);
  border-top: 6px solid var(--run); padding: 14px 18px 16px; }
.card h3 { margin:0; font-size:18px; }
.card .meta { color: var(--muted); font-size: 13px; margin: 2px 0 12px;
  overflow-wrap: anywhere; }
.tiles { display:grid; grid-template-columns: repeat(3, 1fr); gap: 10px; }
.tile { background: var(--bg); border-radius: 8px; padding: 8px 10px; }
.tile .k { font-size: 12px; color: var(--muted); }
.tile .v { font-size: 21px; font-weight: 650; font-variant-numeric: tabular-nums; }
.tile .d { font-size: 12px; color: var(--muted); }
.status { display:inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px;
  background:#e5f4e8; color:#1e6b31; margin-left: 6px; vertical-align: middle; }
.status.bad { background:#fde8e8; color:#9b1c1c; }
.grid { display:grid; grid-template-columns: repeat(auto-fill, minmax(600px, 1fr)); gap:16px; }
figure.fig { margin:0; background:white; border-radius:10px; border:1px solid var(--line);
  padding: 14px 16px 8px; }
figure.fig.wide { grid-column: 1 / -1; }
figure.fig h3 { margin:0; font-size:16px; }
figure.fig .sub { margin: 2px 0 6px; color: var(--muted); font-size: 13px; }
.legend { display:flex; flex-wrap:wrap; gap: 4px 16px; font-size: 13px; margin: 4px 0 4px; }
.legend span { display:inline-flex; align-items:center; gap:6px; }
svg.plot { width:100%; height:auto; display:block; }
table { border-collapse: collapse; background:white; font-size: 13.5px;
  font-variant-numeric: tabular-nums; margin: 8px 0 18px; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: right; }
th { background: #f0f2f5; font-weight: 600; }
td.t, th.t { text-align: left; }
p.note { color: var(--muted); font-size: 13px; margin-top: -8px; }
.tablewrap { overflow-x: auto; margin-top: 14px; }
.runtag { display:inline-block; width: 10px; height: 10px; border-radius: 2px;
  background: var(--run); margin-right: 6px; }
pre, code { white-space: pre-wrap; overflow-wrap: anywhere; }
pre { background: white; border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px;
  font-size: 13px; max-width: 100%; }
ul.notes { color: var(--muted); font-size: 13.5px; max-width: 1100px; padding-left: 20px; }
.lead .path { font-size: 13px; overflow-wrap: anywhere; }
footer { margin-top: 40px; color: var(--muted); font-size: 13px; overflow-wrap: anywhere; }
footer dt { font-weight: 600; color: var(--fg); }
footer dd { margin: 0 0 8px 0; }
"""


def _legend(fig: F.Figure) -> str:
    items: list[str] = []
    if fig.legend:
        for label, color, style in fig.legend:
            items.append(f"<span>{swatch(color, style)}{escape(label)}</span>")
    else:
        seen = set()
        for s in fig.series:
            if s.label in seen:
                continue
            seen.add(s.label)
            items.append(f"<span>{swatch(s.color, s.dash, s.marker)}{escape(s.label)}</span>")
    return f'<div class="legend">{"".join(items)}</div>' if items else ""


def figure_html(fig: F.Figure) -> str:
    cls = "fig wide" if fig.wide else "fig"
    sub = f'<p class="sub">{escape(fig.subtitle)}</p>' if fig.subtitle else ""
    legend = _legend(fig) if fig.has_data else ""
    return (
        f'<figure class="{cls}" id="fig-{escape(fig.id)}"><h3>{escape(fig.title)}</h3>{sub}'
        f"{legend}{draw(fig, WIDE if fig.wide else WIDTH)}</figure>"
    )


def _ms(v: Any) -> str:
    """Milliseconds without the unit, which the column's head gives."""
    return fmt.ms(v).removesuffix(" ms")


def _tag(run: Run) -> str:
    label = run.label + (" r1" if len(run.repeats) > 1 else "")
    return f'<span class="runtag" style="--run:{run.color}"></span>{escape(label)}'


def card(run: Run) -> str:
    d = run.doc
    status = str(d.get("status") or "?")
    bad = "" if status == "complete" else " bad"
    msg = f" — {escape(str(d['status_message']))}" if d.get("status_message") else ""
    tiles = tiles_html(cards.summary_cards(run))
    url = (d.get("target") or {}).get("url") or ""
    return (
        f'<div class="card" style="--run:{run.color}"><h3>{escape(run.label)}'
        f'<span class="status{bad}">{escape(status)}</span></h3>'
        f'<div class="meta">{escape(run.model)} · {escape(run.server)} · {escape(url)} · '
        f"{escape(when(d.get('created')))}{msg}<br>{escape(str(run.source or run.path))}</div>"
        f'<div class="tiles">{tiles}</div></div>'
    )


def numbers(sides: list[Run]) -> str:
    """The measured numbers as tables, for readers who want them exact: every repeat."""
    rows = []
    runs = [r for side in sides for r in side.repeat_runs]
    for run in runs:
        for p in run.kind("single"):
            s = p.get("summary") or {}
            rows.append(
                [
                    _tag(run),
                    str(p.get("max_tokens")),
                    fmt.rate((s.get("decode_tps") or {}).get("mean"), ""),
                    fmt.rate(s.get("output_tps"), ""),
                    _ms((s.get("ttft_s") or {}).get("p50")),
                    f"{s.get('ok', 0)}" + (f" (+{s['failed']} failed)" if s.get("failed") else ""),
                ]
            )
    out = ""
    if rows:
        out += "<h3>Single stream</h3>" + table_of(
            ["run", "output tokens", "decode tok/s", "e2e tok/s", "TTFT p50 (ms)", "requests"],
            rows,
            {0},
        )
    rows = []
    for run in runs:
        levels = sorted({p["concurrency"] for p in run.phases if p.get("kind") in F.SWEEP})
        for c in levels:
            b, su = run.sweep_phase("burst", c), run.sweep_phase("sustained", c)
            main = su or b or {}
            s = main.get("summary") or {}
            steady = (su or {}).get("summary", {}).get("steady_tps") if su else None
            unstable = su is not None and su.get("summary", {}).get("steady_stable") is False
            rows.append(
                [
                    _tag(run),
                    str(c),
                    fmt.rate((b or {}).get("summary", {}).get("output_tps") if b else None, ""),
                    fmt.rate(steady, "") + ("*" if unstable else ""),
                    fmt.rate((s.get("decode_tps") or {}).get("p50"), ""),
                    _ms((s.get("ttft_s") or {}).get("p50")),
                    _ms((s.get("ttft_s") or {}).get("p99")),
                    _ms((s.get("itl_chunk_s") or {}).get("p50")),
                    _ms((s.get("itl_chunk_s") or {}).get("p99")),
                    _ms((s.get("tpot_s") or {}).get("p50")),
                    f"{s.get('ok', 0)}" + (f" (+{s['failed']} failed)" if s.get("failed") else ""),
                ]
            )
    if rows:
        out += "<h3>Concurrency sweep</h3>" + table_of(
            [
                "run",
                "C",
                "burst tok/s",
                "sustained tok/s",
                "per-request tok/s p50",
                "TTFT p50 (ms)",
                "TTFT p99 (ms)",
                "ITL p50 (ms)",
                "ITL p99 (ms)",
                "TPOT p50 (ms)",
                "requests",
            ],
            rows,
            {0},
        )
        for run in sides:  # the console's words for what seems to disagree
            tag = f"{run.label}: " if len(sides) > 1 else ""
            out += "".join(
                f"<p class='note'>{escape(tag + line)}</p>" for line in sweep_readings(run.doc)
            )
    return out


SERVER_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("generation_tokens", "generated tokens (server)", "int"),
    ("prompt_tokens", "prompt tokens (server)", "int"),
    ("kv_cache_usage_peak", "KV cache peak (%)", "pct"),
    ("running_peak", "running peak", "int"),
    ("waiting_peak", "waiting peak", "int"),
    ("preemptions", "preemptions", "int"),
    ("spec_acceptance_rate", "draft acceptance", "pct"),
    ("spec_mean_acceptance_length", "acceptance length", "f2"),
)


def server_table(runs: list[Run]) -> str:
    phases = [(r, p) for r in runs for p in r.phases if p.get("server_metrics")]
    if not phases:
        return ""
    cols = [
        c for c in SERVER_COLUMNS if any(c[0] in (p.get("server_metrics") or {}) for _, p in phases)
    ]
    rows = []
    for run, p in phases:
        m = p["server_metrics"]
        cells = [_tag(run), escape(p["name"])]
        for key, _, kind in cols:
            v = m.get(key)
            if v is None:
                cells.append("—")
            elif kind == "pct":
                cells.append(f"{v:.1%}")
            elif kind == "f2":
                cells.append(f"{v:.2f}")
            else:
                cells.append(f"{v:,.0f}")
        rows.append(cells)
    return table_of(["run", "phase", *[c[1] for c in cols]], rows, {0, 1})


def plan_sections(runs: list[Run]) -> list[tuple[str, list[F.Figure]]]:
    """Each run's plan.json (written by `plan --from` beside its result) as a forecast."""
    return [
        forecast.section(r.plan, f"Forecast from {r.label}: plan.json", f"forecast_run_{i}",
                         figure_html)  # fmt: skip
        for i, r in enumerate(runs)
        if r.plan is not None
    ]


def _count(runs: list[Run]) -> str:
    n = sum(len(r.repeat_runs) for r in runs)
    if n == len(runs):
        return fmt.counted(n, "run")
    return f"{fmt.counted(len(runs), 'side')}, {fmt.counted(n, 'run')}"


def title(
    runs: list[Run],
    plans: list[dict[str, Any]],
    jobs: list[tuple[str, str, str]],
    inspections: list[dict[str, Any]],
) -> str:
    """What the page holds, each by the path the user gave and what it is; a generate
    output that was also inspected is named once."""
    items: dict[str, list[str]] = {r.label: [] for r in runs}
    for doc in plans:
        items.setdefault(decision.label(doc), []).append("plan")
    for _, path, _ in jobs:
        if "generate job" not in items.setdefault(path, []):
            items[path].append("generate job")
    for doc in inspections:
        kinds = items.setdefault(inspection.directory(doc), [])
        kind = "inspected" if "generate job" in kinds else "data set"
        if kind not in kinds:  # inspected twice (its own inspect.json, a clean copy's)
            kinds.append(kind)
    names = [f"{k} ({', '.join(v)})" if v else k for k, v in items.items()]
    return "genbench report — " + ", ".join(names)


def page(
    runs: list[Run],
    figs: list[F.Figure],
    focus: str | None,
    inspections: list[tuple[dict[str, Any], list[F.Figure]]] | None = None,
    plans: list[tuple[dict[str, Any], str]] | None = None,
    jobs: list[tuple[str, str, str]] | None = None,
    run_plans: list[str] | None = None,
) -> str:
    """The page; `plans`: (plan.json, its section HTML) of each plan given on its own;
    `jobs`: (label, path, section HTML) of each generate job drawn; `run_plans`: the
    sections of the runs' own plans."""
    inspections = inspections or []
    plans = plans or []
    jobs = jobs or []
    head = title(runs, [d for d, _ in plans], jobs, [d for d, _ in inspections])
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    what = [_count(runs)] if runs else []
    if plans:
        what.append(fmt.counted(len(plans), "plan"))
    if jobs:
        what.append(fmt.counted(len({j[1] for j in jobs}), "generate job"))
    if inspections:
        what.append(fmt.counted(len(inspections), "data set"))
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{escape(head)}</title><style>{CSS}</style></head><body><main>",
        f"<header><h1>{escape(head)}</h1><p>generated {now} by genbench {__version__}; "
        f"{'; '.join(what)}; hover a mark for its value</p></header>",
    ]
    parts += [html for _, html in plans]
    if runs:
        parts += _run_sections(runs, figs, focus, run_plans or [])
    parts += [j[2] for j in jobs]
    for doc, doc_figs in inspections:
        parts.append(inspection.section(doc, doc_figs, figure_html))
    files = [str(x.path) for r in runs for x in r.repeat_runs]
    files += [str(doc.get("_path", "")) for doc, _ in plans]
    files += list(dict.fromkeys(j[1] for j in jobs))
    files += [str(doc.get("_path", "")) for doc, _ in inspections]
    terms = (
        "<dl><dt>sustained tok/s</dt><dd>tokens arriving inside the steady window, "
        "in which every worker had a request in flight</dd><dt>burst tok/s</dt><dd>output "
        "tokens / wall time from the first send to the last end</dd><dt>TTFT, ITL, TPOT</dt>"
        "<dd>time to first token; gap between streamed chunks; decode time per output token "
        "after the first</dd></dl>"
        if runs
        else ""
    )
    parts.append(
        f"<footer>{terms}Files: " + escape(", ".join(files)) + "</footer></main></body></html>"
    )
    return "".join(parts)


def _run_sections(
    runs: list[Run], figs: list[F.Figure], focus: str | None, plans: list[str]
) -> list[str]:
    by_id = {f.id: f for f in figs}
    gantts = [f for f in figs if f.id.startswith("gantt_")]
    servers = [f for f in figs if f.id.startswith("server_")]
    every = [x for r in runs for x in r.repeat_runs]
    diffs = workload_differences(every) if len(every) > 1 else []
    parts: list[str] = []
    if diffs:
        parts.append(
            "<div class='warn'><b>These runs measured different workloads</b>, so their "
            "numbers answer different questions: " + escape("; ".join(diffs)) + "</div>"
        )
    parts.append(f"<section class='cards'>{''.join(card(r) for r in runs)}</section>")
    parts.append(
        "<h2>Throughput</h2><p class='lead'>What the server delivers as load grows. "
        "Sustained throughput is what a long job gets; a burst under-fills the batch as its "
        "last requests finish. Per-request speed is what each user sees.</p><div class='grid'>"
        + figure_html(by_id["throughput"])
        + figure_html(by_id["per_request"])
        + "</div>"
    )
    parts.append(
        "<h2>Latency</h2><p class='lead'>How long until the first token (TTFT), and the gaps "
        "between streamed chunks (ITL), as cumulative distributions: the further left and "
        "the steeper, the better; the top of each curve is the tail.</p><div class='grid'>"
        + figure_html(by_id["ttft_cdf"])
        + figure_html(by_id["itl_cdf"])
        + "</div>"
    )
    parts.append(
        f"<h2>Timeline of {escape(focus or 'a sweep phase')}</h2><p class='lead'>The sustained "
        "rate is measured only in the steady window: after every worker has its first token "
        "(ramp) and before the first request finishes once sending stopped (tail)."
        + (
            " For a side of repeats, these plots and the latency distributions show its first "
            "repeat; the throughput plots and the numbers show them all."
            if any(len(r.repeats) > 1 for r in runs)
            else ""
        )
        + "</p>"
        "<div class='grid'>"
        + figure_html(by_id["tokens_over_time"])
        + "".join(figure_html(g) for g in gantts)
        + "</div>"
    )
    parts.append(
        "<h2>Output tokens</h2><p class='lead'>Reasoning models spend part of every answer "
        "thinking; these tokens cost the same time but are not the answer.</p>"
        "<div class='grid'>" + figure_html(by_id["token_split"]) + "</div>"
    )
    table = server_table(runs)
    parts.append("<h2>Server metrics</h2>")
    if servers or table:
        parts.append(
            "<p class='lead'>The server's own counters (/metrics), scraped around each phase: "
            "gauges are peaks sampled during the phase.</p>"
        )
        if servers:
            parts.append("<div class='grid'>" + "".join(figure_html(f) for f in servers) + "</div>")
        parts.append(table)
    else:
        parts.append("<p class='lead'>The servers exposed no /metrics genbench reads.</p>")
    parts += plans
    parts.append("<h2>Numbers</h2>" + numbers(runs))
    return parts
