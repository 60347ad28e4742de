"""A plan's decision as tables of text (servers for a deadline, cost, which configuration):
one shaping, which the console (`plan.render`) and the HTML report (`report.decision`)
both draw."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from genbench import fmt


@dataclass
class DecisionTable:
    """One table of the decision, as text: the console and the HTML report both show it."""

    title: str
    head: list[str]
    rows: list[list[str]]
    left: tuple[int, ...]  # the columns of text (left-aligned); the rest are numbers
    foot: list[str]


def decision_tables(decision: dict[str, Any]) -> list[DecisionTable]:
    """One configuration: a row per sample count. Several: a table per sample count, a row
    per configuration, fastest first, the best marked."""
    configs = decision["configurations"]
    if len(configs) == 1:
        return [_one_config_table(decision, configs[0])]
    return [_comparison_table(decision, i) for i in range(len(decision["samples"]))]


def _money(x: float) -> str:
    return fmt.number(x, 2 if abs(x) < 100 else 0)


def _asked(decision: dict[str, Any], gpus: int | None) -> str:
    """What the decision was asked, in words: the deadline, the price."""
    parts = []
    d = decision.get("deadline")
    if d:
        parts.append(f"deadline {d['text']} ({fmt.duration(d['seconds'])})")
    p = decision.get("price")
    if p:
        per = f" × {gpus} GPUs per server" if gpus else ""
        parts.append(f"{_money(p['per_gpu_hour'])} per GPU-hour{per} (from {p['from']})")
    return "; ".join(parts)


def _at_forecast(hi: int, forecast: int, sep: str = " ") -> str:
    """A count at the range's slow end, with the forecast's beside it when it differs."""
    if hi == forecast:
        return fmt.count(hi)
    return f"{fmt.count(hi)}{sep}({fmt.count(forecast)} at the forecast)"


def _cells(
    decision: dict[str, Any], conf: dict[str, Any], row: dict[str, Any], ranged: bool
) -> list[str]:
    """Time on M servers, servers for the deadline, cost: the columns `_heads` names, each
    with a second line, its range, when the table has ranges (`ranged`)."""
    at, own = row["at_servers"], conf["has_range"]
    time = fmt.duration(at["seconds"])
    if ranged:
        time += "\n" + (fmt.duration_range(at["lo_s"], at["hi_s"]) if own else "no range")
    cells = [time]
    if decision.get("deadline"):
        need = row["servers_needed"]
        cells.append(_at_forecast(need["servers"], need["at_forecast"], "\n"))
    if "cost" in row:
        cost = row["cost"]
        text = _money(cost["forecast"])
        if ranged:
            text += "\n" + (f"{_money(cost['lo'])} – {_money(cost['hi'])}" if own else "")
        cells.append(text)
    return cells


def _heads(decision: dict[str, Any], ranged: bool, priced: bool) -> list[str]:
    m = decision["servers"]
    bracket = "\n(95% range)" if ranged else ""
    head = [("time" if m == 1 else f"time on {m} servers") + bracket]
    d = decision.get("deadline")
    if d:
        head.append(f"servers\nfor {d['text']}")
    if priced:
        head.append("cost" + bracket)
    return head


def _one_config_table(decision: dict[str, Any], conf: dict[str, Any]) -> DecisionTable:
    ranged, priced = conf["has_range"], "cost" in conf["rows"][0]
    rows = [[fmt.count(r["samples"]), *_cells(decision, conf, r, ranged)] for r in conf["rows"]]
    asked = _asked(decision, conf["gpus_per_server"])
    return DecisionTable(
        "the decision" + (f": {asked}" if asked else ""),
        ["samples", *_heads(decision, ranged, priced)],
        rows,
        (),
        _fit_lines(decision) + list(decision["basis"].values()),
    )


def _single_stream_line(configs: list[dict[str, Any]], best: dict[str, Any], i: int) -> list[str]:
    """When single-stream speed, the field's comparison, would pick another configuration."""
    if any(c["single_stream_tps"] is None for c in configs):
        return []
    single = max(configs, key=lambda c: c["single_stream_tps"])
    fastest = next(c for c in configs if c["name"] == best["fastest"])
    if single is fastest:
        return []
    ratio = single["rows"][i]["seconds"] / fastest["rows"][i]["seconds"]
    return [
        f"single-stream speed would pick {single['name']} ({fmt.rate(single['single_stream_tps'])}"
        f" against {fmt.rate(fastest['single_stream_tps'])}); for this job it takes "
        f"{fmt.number(ratio, 1)}× as long as {fastest['name']}"
    ]


def _fit_lines(decision: dict[str, Any]) -> list[str]:
    """The samples each configuration fits in the deadline on M servers."""
    d, m = decision.get("deadline"), decision["servers"]
    if not d:
        return []
    on = f"in {d['text']} on {fmt.counted(m, 'server')}"
    configs = decision["configurations"]
    if len(configs) == 1:
        fit = configs[0]["fit"]
        fits = fmt.count(fit["samples"]) + " samples fit"
        if fit["at_forecast"] != fit["samples"]:
            fits += f" ({fmt.count(fit['at_forecast'])} at the forecast)"
        return [f"{on}: {fits}"]
    fits = [
        f"{c['name']} {_at_forecast(c['fit']['samples'], c['fit']['at_forecast'])}"
        for c in sorted(configs, key=lambda c: -c["fit"]["samples"])
    ]
    return [f"samples that fit {on}: {', '.join(fits)}"]


def _comparison_table(decision: dict[str, Any], i: int) -> DecisionTable:
    configs = decision["configurations"]
    best = decision["best"][i]
    ranged = any(c["has_range"] for c in configs)
    priced = "cost" in configs[0]["rows"][i]
    rows, foot = [], []
    for conf in sorted(configs, key=lambda c: c["rows"][i]["seconds"]):
        marks = [k for k in ("fastest", "cheapest") if best.get(k) == conf["name"]]
        rows.append(
            [
                conf["name"] + (" *" if conf["notes"] else ""),
                fmt.rate(conf["single_stream_tps"], ""),
                fmt.count(conf["concurrency"]),
                fmt.rate(conf["tok_per_s"], ""),
                *_cells(decision, conf, conf["rows"][i], ranged),
                "\n".join(marks),
            ]
        )
        foot += [f"* {conf['name']}: {note}" for note in conf["notes"]]
    foot += _single_stream_line(configs, best, i)
    if best["overlap"]:
        foot.append(
            f"{', '.join(best['overlap'])}: the range overlaps {best['fastest']}'s, so the "
            "measurements cannot tell them apart"
        )
    gpus = {c["gpus_per_server"] for c in configs}
    asked = _asked(decision, gpus.pop() if len(gpus) == 1 else None)
    head = [
        "configuration",
        "1-stream\ntok/s",
        "C",
        "tok/s\nat C",
        *_heads(decision, ranged, priced),
        "best",
    ]
    return DecisionTable(
        f"which configuration: {fmt.count(best['samples'])} samples"
        + (f"; {asked}" if asked else ""),
        head,
        rows,
        (0, len(head) - 1),
        foot + _fit_lines(decision) + list(decision["basis"].values()),
    )
