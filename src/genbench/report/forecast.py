"""A plan in the report, drawn as a forecast: where it came from and the figures it used,
its time per sample count with its 95% range (a table and a plot of the bar), tokens and
storage, its decision where it has one (servers, cost, configurations), and its notes.

The text is `plan.summary`'s and `plan.tables`', the same shaping `genbench plan` prints;
plan.json's keys themselves are never shown.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from typing import Any

from genbench import fmt
from genbench.plan.summary import BarMark, Forecast, forecast
from genbench.plan.tables import DecisionTable, decision_tables
from genbench.report.figures import Figure, HBar
from genbench.report.parts import tiles_html
from genbench.report.svg import nice_step

RANGE_COLOR = "#4e79a7"
FORECAST_COLOR = "#1d2330"
FIELD_COLOR = "#f28e2b"


def table_html(t: DecisionTable) -> str:
    """A table of text, its title above and its notes below; a cell's line breaks kept."""
    head = "".join(_cell("th", j, h, t.left) for j, h in enumerate(t.head))
    body = "".join(
        "<tr>" + "".join(_cell("td", j, c, t.left) for j, c in enumerate(row)) + "</tr>"
        for row in t.rows
    )
    foot = "".join(f"<p class='note'>{escape(line)}</p>" for line in t.foot)
    table = f"<div class='tablewrap'><table><tr>{head}</tr>{body}</table></div>"
    return f"<h3>{escape(t.title)}</h3>{table}{foot}"


def _cell(tag: str, j: int, text: str, left: tuple[int, ...]) -> str:
    cls = " class='t'" if j in left else ""
    return f"<{tag}{cls}>{escape(text).replace(chr(10), '<br>')}</{tag}>"


def decision_html(decision: dict[str, Any]) -> str:
    return "".join(table_html(t) for t in decision_tables(decision))


def bar_figure(marks: list[BarMark], fig_id: str) -> Figure | None:
    """Each sample count's 95% range around its forecast, in percent of the forecast (the
    counts differ by orders of magnitude; their bars are comparable this way), and the
    field's number beside it. None when the plan has no range."""
    ranged = [m for m in marks if m.lo_s is not None and m.hi_s is not None]
    if not ranged:
        return None
    bars: list[HBar] = []
    spans = [abs(v) for m in ranged for v in _offsets(m) if v is not None]
    tick = max(max(spans, default=1.0) * 0.006, 0.02)
    for i, m in enumerate(ranged):
        lo, hi, other = _offsets(m)
        assert m.lo_s is not None and m.hi_s is not None
        rng = fmt.duration_range(m.lo_s, m.hi_s)
        tip = f"95% range: {rng} ({fmt.pct(lo / 100, True)} to {fmt.pct(hi / 100, True)})"
        bars.append(HBar(i, lo, hi, RANGE_COLOR, 0.35, tip, rng))
        bars.append(HBar(i, -tick, tick, FORECAST_COLOR, 1.0,
                         f"forecast: {fmt.duration(m.seconds)}"))  # fmt: skip
        if other is not None and m.other is not None:
            bars.append(HBar(i, other - tick, other + tick, FIELD_COLOR, 1.0,
                             f"{m.other[0]}: {fmt.duration(m.other[1])} "
                             f"({fmt.pct(other / 100, True)})"))  # fmt: skip
    reach = max(spans, default=1.0) * 1.1
    step = nice_step(2 * reach, 6)
    ticks = [k * step for k in range(-math.ceil(reach / step), math.ceil(reach / step) + 1)]
    legend = [("95% range", RANGE_COLOR, "light"), ("forecast", FORECAST_COLOR, "block")]
    if any(m.other for m in ranged):
        legend.append((next(m.other[0] for m in ranged if m.other), FIELD_COLOR, "block"))
    return Figure(
        id=fig_id,
        title="The forecast's bar",
        subtitle="per sample count, in percent of its forecast: where the job's time lands "
        "(95%)",
        x_label="% from the forecast",
        x_ticks=ticks,
        bars=bars,
        bar_height=0.55,
        y_categories=[fmt.counted(m.samples, "sample") for m in ranged],
        legend=legend,
        height=max(150, 70 + 46 * len(ranged)),
        wide=True,
    )


def _offsets(m: BarMark) -> tuple[float, float, float | None]:
    """The range's ends and the field's number, in percent from the forecast."""
    assert m.lo_s is not None and m.hi_s is not None
    pct = 100 / m.seconds
    other = (m.other[1] * pct - 100) if m.other else None
    return m.lo_s * pct - 100, m.hi_s * pct - 100, other


def section(
    doc: dict[str, Any], title: str, fig_id: str, figure_html: Callable[[Figure], str]
) -> tuple[str, list[Figure]]:
    """The plan's HTML under an <h2> of `title`, and its figures (for --png)."""
    f: Forecast = forecast(doc)
    fig = bar_figure(f.marks, fig_id)
    decision = doc.get("decision")
    parts = [
        f"<h2>{escape(title)}</h2><p class='lead'>{escape(f.what)} "
        f"<span class='path'>{escape(str(doc.get('_path', '')))}</span></p>",
        f"<section class='cards'><div class='card plan' style='--run:{RANGE_COLOR}'>"
        f"<div class='tiles'>{tiles_html(f.figures)}</div></div></section>",
        table_html(f.time),
        "".join(f"<p class='note'>{escape(line)}</p>" for line in f.bar),
        f"<div class='grid'>{figure_html(fig)}</div>" if fig else "",
        table_html(f.tokens),
    ]
    if decision:
        parts.append(decision_html(decision))
    else:
        parts.append(
            "<p class='note'>No decision in this plan: <code>genbench plan</code> with "
            "<code>--deadline</code> adds the servers the job needs, <code>--price</code> its "
            "cost, several <code>--from</code> the fastest configuration.</p>"
        )
    if f.notes:
        parts.append(
            "<h3>Notes</h3><ul class='notes'>"
            + "".join(f"<li>{escape(n)}</li>" for n in f.notes)
            + "</ul>"
        )
    return "".join(parts), [fig] if fig else []
