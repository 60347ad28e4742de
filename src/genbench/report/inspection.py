"""The report's section for a `genbench inspect` document: is the generated set fit to train on?

Figures (defects per kind, output-token and thinking-share CDFs per server) are built from
inspect.json alone, which carries each group's quantiles, so the report never rereads the
data set.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from genbench import fmt
from genbench.compare.runs import PALETTE
from genbench.fmt import nbytes
from genbench.inspect.detect import DEFECTS
from genbench.report.figures import Figure, HBar, Series, slug
from genbench.report.parts import table_of, tiles_html

BAD = "#e15759"


def _label(name: str) -> str:
    return "too short" if name == "short" else DEFECTS[name].label  # a figure's row is narrow


def label(doc: dict[str, Any]) -> str:
    src = Path(str(doc.get("source", {}).get("path") or doc.get("_path") or "inspection"))
    return src.name or str(src)


def directory(doc: dict[str, Any]) -> str:
    """The inspected output's directory as the report was given it (out), to name it once
    when it is also drawn as a generate job."""
    path = Path(str(doc.get("_path") or label(doc)))
    here = path.parent if path.name == "inspect.json" else path
    clean, source = doc.get("clean") or {}, (doc.get("source") or {}).get("path")
    if source and clean.get("out") and Path(str(clean["out"])) == here:
        return str(source)  # saved in its clean copy (inspect --drop): the source's inspection
    return str(here)


def defects_figure(doc: dict[str, Any], key: str) -> Figure:
    defects = doc.get("defects") or {}
    names = [n for n in DEFECTS if n in defects]
    n_rows = max(int(doc.get("rows") or 0), 1)
    fig = Figure(
        f"inspect_defects_{key}",
        "Rows with each defect",
        f"of {n_rows:,} rows, by --drop name; a row can have several; hover a bar for more",
        "rows",
        "",
        y_categories=names,
        bar_height=0.6,
        height=max(200, 70 + 34 * len(names)),
    )
    for i, name in enumerate(names):
        rows = int(defects[name].get("rows") or 0)
        if rows:
            tip = f"{_label(name)}: {fmt.counted(rows, 'row')} ({rows / n_rows:.2%})"
            fig.bars.append(HBar(i, 0, rows, BAD, 0.85, tip, f"{rows:,}"))
    if not fig.bars:
        fig.empty = "no defects found"
    return fig


def cdf_figure(doc: dict[str, Any], key: str, metric: str) -> Figure:
    """One CDF per server (and all rows, dashed) from the stored quantiles."""
    tokens = metric == "output_tokens"
    fig = Figure(
        f"inspect_{metric}_{key}",
        "Output tokens per row" if tokens else "Thinking share per row",
        "one line per server; dashed: all rows" + ("; log x axis" if tokens else ""),
        "output tokens (thinking + answer)" if tokens else "thinking tokens / output tokens",
        "fraction of rows ≤ x",
        y_max=1.0,
        x_log=tokens,
        x_max=None if tokens else 1.0,
    )
    dist = doc.get("distributions") or {}
    groups = list((dist.get("by_server") or {}).items())
    odd = {o["server"] for o in (doc.get("servers") or {}).get("odd", [])}
    for i, (server, g) in enumerate(groups):
        cdf = (g.get(metric) or {}).get("cdf")
        if not cdf:
            continue
        ys = [k / (len(cdf) - 1) for k in range(len(cdf))]
        name = server + (" (differs)" if server in odd else "")
        xs = [max(x, 1.0) for x in cdf] if tokens else cdf
        fig.series.append(Series(name, PALETTE[i % len(PALETTE)], xs, ys, marker="none", step=True))
    overall = (dist.get("overall") or {}).get(metric, {}).get("cdf")
    if overall and len(groups) > 1:
        ys = [k / (len(overall) - 1) for k in range(len(overall))]
        xs = [max(x, 1.0) for x in overall] if tokens else overall
        fig.series.append(
            Series("all rows", "#555555", xs, ys, dash="dash", marker="none", step=True)
        )
    if tokens and fig.series:
        fig.x_min = max(1.0, min(min(s.xs) for s in fig.series) / 1.3)
    if not fig.series:
        fig.empty = "no rows" if tokens else "the servers reported no thinking tokens"
    return fig


def figures(doc: dict[str, Any], index: int) -> list[Figure]:
    key = f"{index}_{slug(label(doc))}"
    return [
        defects_figure(doc, key),
        cdf_figure(doc, key, "output_tokens"),
        cdf_figure(doc, key, "thinking_share"),
    ]


def _pct(x: Any) -> str:
    return "—" if x is None else f"{x:.0%}"


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _tiles(doc: dict[str, Any]) -> str:
    o = doc["distributions"]["overall"]
    st = doc.get("storage") or {}
    n = doc["rows"]
    bad = doc["rows_with_defects"]
    tiles = [
        ("rows", f"{n:,}", fmt.counted(len(doc["source"]["files"]), "file")),
        ("rows with a defect", f"{bad:,}", f"{bad / max(n, 1):.1%}"),
        ("output tokens p50", _num(o["output_tokens"].get("p50")),
         f"p95 {_num(o['output_tokens'].get('p95'))}"),
        ("thinking share p50", _pct(o["thinking_share"].get("p50")),
         f"p5–p95 {_pct(o['thinking_share'].get('p5'))}–{_pct(o['thinking_share'].get('p95'))}"),
        ("JSONL", nbytes(st.get("jsonl_bytes")), f"Parquet {nbytes(st.get('parquet_bytes'))}"),
        ("hidden states", nbytes(st.get("hidden_state_bytes")),
         f"{_num((st.get('tokens') or {}).get('hidden_state'))} tokens"),
    ]  # fmt: skip
    tiles += _fidelity_tiles(doc.get("fidelity"))
    return tiles_html(tiles)


def _fidelity_tiles(f: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """Token-exact rows, and the drift when inspect measured it (inspect/fidelity.py)."""
    if not f:
        return []
    cut, short = f"{f['turns_cut']:,}", f"{f['turns_short']:,}"
    exact = f"{f['rows_token_exact']:,} of {f['rows']:,}"
    note = f"turns cut {cut}, under {f['min_tokens']} ids {short}"
    if f.get("rows_unchecked"):  # ids, but no usage to check them: never token-exact
        note = f"unchecked (no usage) {f['rows_unchecked']:,}; " + note
    out = [("token-exact rows", exact, note)]
    d = f.get("drift") or {}
    if d.get("checked"):
        of = f"{d['drifted']:,} of {d['checked']:,} turns re-tokenize to other ids"
        out.append(("retokenization drift", _pct(d["rate"]), of))
    return out


def _defect_rows(doc: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name in DEFECTS:
        d, lab = (doc.get("defects") or {}).get(name), _label(name)
        if d is None:
            continue
        ex = ", ".join(escape(str(e["id"])) for e in d.get("examples", [])[:5])
        rows.append(
            [
                escape(f"{lab} ({name})"),
                f"{d['rows']:,}",
                f"{d['share']:.2%}",
                escape(d.get("rule", "")),
                ex or "—",
            ]
        )
    return rows


def _server_rows(doc: dict[str, Any]) -> list[list[str]]:
    dist = doc["distributions"]["by_server"]
    servers = doc.get("servers") or {}
    tests = {m: {t["server"]: t for t in ts} for m, ts in (servers.get("tests") or {}).items()}
    odd = {(o["server"], o["metric"]) for o in servers.get("odd", [])}
    by_server = {n: d.get("by_server", {}) for n, d in (doc.get("defects") or {}).items()}
    rows = []
    for server, g in dist.items():
        cells = [escape(server), f"{g['rows']:,}", _num(g["output_tokens"].get("p50")),
                 _pct(g["thinking_share"].get("p50"))]  # fmt: skip
        for metric in ("output_tokens", "thinking_share"):
            t = tests.get(metric, {}).get(server)
            if t is None:
                cells.append("—")
                continue
            text = f"p={t['p']:.1e}, r={t['effect']:+.2f}"
            if (server, metric) in odd:
                text = f"<b style='color:{BAD}'>differs: {text}</b>"
            cells.append(text)
        defects = sum(v.get(server, 0) for v in by_server.values())
        cells.append(f"{defects:,}")
        rows.append(cells)
    return rows


def section(doc: dict[str, Any], figs: list[Figure], figure_html: Any) -> str:
    """The HTML of one inspection; `figure_html` draws a figure as the page does."""
    servers = doc.get("servers") or {}
    odd = servers.get("odd", [])
    verdict = (
        "; ".join(
            f"{o['server']} differs in {o['metric'].replace('_', ' ')} (median "
            + (f"{o['median']:,.0f} vs {o['median_others']:,.0f}" if o["metric"] == "output_tokens"
               else f"{o['median']:.0%} vs {o['median_others']:.0%}")
            + f", p={o['p']:.1e}, effect {o['effect']:+.2f})"
            for o in odd
        )
        if odd
        else "no server differs from the others beyond noise"
    )  # fmt: skip
    dups = doc.get("duplicates") or {}
    parts = [
        f"<h2>Data set: {escape(label(doc))}</h2><p class='lead'>genbench inspect of "
        f"{escape(str(doc['source']['path']))}: is what was generated fit to train a drafter "
        "on? Each defect has a rule and threshold (below, and docs/inspect.md).</p>",
        f"<section class='cards'><div class='card' style='--run:{BAD}'><h3>"
        f"{escape(label(doc))}</h3><div class='meta'>{escape(str(doc.get('created', '')))} · "
        f"{escape(str(doc.get('_path', '')))}</div><div class='tiles'>{_tiles(doc)}</div>"
        "</div></section>",
        "<div class='grid'>" + "".join(figure_html(f) for f in figs) + "</div>",
        "<h3>Defects</h3>"
        + table_of(
            ["defect", "rows", "share", "rule", "examples (ids)"], _defect_rows(doc), {0, 3, 4}
        ),
        f"<p class='note'>duplicates: {dups.get('exact', 0):,} exact and "
        f"{dups.get('near_only', 0):,} more up to case and whitespace, among "
        f"{dups.get('rows_checked', 0):,} answers checked</p>",
        f"<h3>Servers</h3><p>{escape(verdict)}</p>"
        + table_of(
            [
                "server",
                "rows",
                "output tokens p50",
                "thinking share p50",
                "output tokens vs others",
                "thinking share vs others",
                "rows with defects",
            ],
            _server_rows(doc),
            {0},
        )  # fmt: skip
        + f"<p class='note'>{escape(str(servers.get('test', '')))}. A server is named when "
        f"p &lt; {servers.get('alpha', 0):g} and |r| ≥ {servers.get('min_effect', 0):g}, in "
        "rounds: an odd server makes the others look different from 'the rest' too (the "
        "rest holds it), so the one with the largest effect is named, left out, and the "
        "others compared again. The columns show the first round.</p>",
    ]
    clean = doc.get("clean")
    if clean:
        parts.append(
            f"<h3>Clean copy</h3><p>{fmt.counted(clean['kept'], 'row')} kept, "
            f"{clean['dropped']:,} dropped "
            f"({escape(', '.join(clean['drop']))}) → {escape(str(clean['out']))}."
            + (
                "</p>"
                if not clean.get("follow_up")
                else " Regenerate the dropped rows "
                "with:</p><pre>" + escape("\n".join(clean["follow_up"].values())) + "</pre>"
            )
        )
    return "".join(parts)
