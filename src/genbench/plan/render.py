"""The plan on the console: its tables and notes, and the pilot's progress while it runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from genbench import fmt
from genbench.records import RequestRecord

if TYPE_CHECKING:
    from genbench.plan.pilot import PilotStop


def print_plan(doc: dict[str, Any], console: Console) -> None:
    decision = doc.get("decision")
    if decision and len(decision["configurations"]) > 1:
        _render_comparison(doc, console)
    else:
        {"arithmetic": _render_arithmetic, "result": _render_result, "pilot": _render_pilot}[
            doc["mode"]
        ](doc, console)
        rows = doc["rows"]
        if rows and rows[0]["storage"].get("hidden_state_bytes") is not None:
            console.print(
                "  hidden states = tokens × hidden size × layers captured × bytes per value "
                f"({rows[0]['storage']['hidden_state_tokens'] / rows[0]['samples']:,.0f} "
                "tokens per sample)"
            )
        console.print(f"  storage: {doc['model'].get('storage_basis', '')}")
        if decision:
            _print_decision(decision, console)
    for note in doc.get("notes") or []:
        console.print(f"  [yellow]note:[/] {escape(note)}")


Cell = Callable[[dict[str, Any]], str]


def _table(title: str, rows: list[dict[str, Any]], cols: list[tuple[str, Cell]]) -> Table:
    """A right-aligned table: each column's header beside how a row fills it."""
    t = Table(title=title, title_justify="left")
    for head, _ in cols:
        t.add_column(head, justify="right")
    for row in rows:
        t.add_row(*(cell(row) for _, cell in cols))
    return t


def _samples(row: dict[str, Any]) -> str:
    return f"{row['samples']:,}"


def _time(key: str) -> Cell:
    return lambda row: fmt.duration(row[key]["seconds"])


def _days(key: str) -> Cell:
    return lambda row: fmt.days(row[key]["seconds"])


def _range(key: str) -> Cell:
    return lambda row: fmt.duration_range(row[key]["lo_s"], row[key]["hi_s"])


def _tokens(key: str) -> Cell:
    return lambda row: fmt.tokens(row["tokens"][key])


def _storage_cols(doc: dict[str, Any], parquet: bool = False) -> list[tuple[str, Cell]]:
    cols: list[tuple[str, Cell]] = [("JSONL", lambda r: fmt.nbytes(r["storage"]["jsonl_bytes"]))]
    if parquet:
        cols.append(("Parquet", lambda r: fmt.nbytes(r["storage"].get("parquet_bytes"))))
    if doc["rows"] and doc["rows"][0]["storage"].get("hidden_state_bytes") is not None:
        cols.append(("hidden states", lambda r: fmt.nbytes(r["storage"]["hidden_state_bytes"])))
    return cols


def _render_arithmetic(doc: dict[str, Any], console: Console) -> None:
    i = doc["inputs"]
    console.print(
        f"[bold]genbench plan[/] arithmetic: samples × {i['tokens_per_sample']:,g} tokens / "
        f"{i['tok_per_s']:,g} tok/s"
    )
    cols = [("samples", _samples), ("tokens", _tokens("output"))]
    cols += [("time", _time("one_server")), ("days", _days("one_server"))]
    servers = i["servers"]
    if servers > 1:
        cols += [(f"time ×{servers} servers", _time("at_servers")), ("days", _days("at_servers"))]
    title = "the field's arithmetic (no error bar)"
    console.print(_table(title, doc["rows"], cols + _storage_cols(doc)))


def _tokens_table(doc: dict[str, Any], console: Console, parquet: bool = False) -> None:
    rows = doc["rows"]
    cols = [("samples", _samples), ("output tokens", _tokens("output"))]
    if any("output_lo" in r["tokens"] for r in rows):
        cols.append(
            ("95% range", lambda r: f"{_tokens('output_lo')(r)} – {_tokens('output_hi')(r)}")
        )
    if any(r["tokens"].get("thinking") for r in rows):
        cols += [("thinking", _tokens("thinking")), ("answer", _tokens("answer"))]
    if any(r["tokens"].get("prompt") for r in rows):
        cols.append(("prompt tokens", _tokens("prompt")))
    console.print(_table("tokens and storage", rows, cols + _storage_cols(doc, parquet)))


def _render_result(doc: dict[str, Any], console: Console) -> None:
    m, src, i = doc["model"], doc["source"], doc["inputs"]
    console.print(
        f"[bold]genbench plan[/] from {src['path']} ({src.get('model')} on "
        f"{src.get('server') or 'unknown server'})"
    )
    console.print(
        f"  tokens per sample: {fmt.number(m['tokens_per_sample'])} "
        f"({m['tokens_per_sample_basis']}); "
        f"thinking share {fmt.pct(m['thinking_share'])}"
        + (f" ({m['thinking_share_basis']})" if m.get("thinking_share_basis") else "")
    )
    rates = ", ".join(
        f"C={c}: {fmt.rate(r, '')}" for c, r in m["sustained_tps_by_concurrency"].items()
    )
    console.print(f"  sustained tok/s by concurrency: {rates}")
    f = m["field"]
    if f["concurrency"]:
        console.print(
            f"  field's method: burst {fmt.rate(f['tok_per_s'])} at C={f['concurrency']} × "
            f"{fmt.number(f['tokens_per_sample'])} tokens/sample"
        )
    cols = [("samples", _samples), (f"ours C={m['best_concurrency']}", _time("ours_best"))]
    has_bar = any("lo_s" in row["ours_best"] for row in doc["rows"])
    if has_bar:
        cols.append(
            ("95% range", lambda r: _range("ours_best")(r) if "lo_s" in r["ours_best"] else "—")
        )
    cols.append(("days", _days("ours_best")))
    if i.get("concurrency") is not None:
        cols.append((f"ours C={i['concurrency']}", _time("ours_chosen")))
    if i["servers"] > 1:
        cols.append((f"×{i['servers']} servers", _time("at_servers")))
    if f["concurrency"]:
        cols += [(f"field: burst C={f['concurrency']}", _time("field")), ("days", _days("field"))]
        cols.append(
            (
                "field vs ours",
                lambda r: f"{r['field']['seconds'] / r['ours_best']['seconds'] - 1:+.0%}",
            )
        )
    title = "time: sustained rate (ours) beside the field's burst"
    console.print(_table(title, doc["rows"], cols))
    if has_bar:
        console.print(f"  range: {m['bar_basis']}")
    _tokens_table(doc, console)


def _render_pilot(doc: dict[str, Any], console: Console) -> None:
    m, src, i = doc["model"], doc["source"], doc["inputs"]
    out_d = m["output_tokens"]
    console.print(
        f"[bold]genbench plan[/] pilot of {m['pilot_requests']} requests at C={m['concurrency']} "
        f"on {src.get('model')} ({src.get('server') or 'unknown server'}): "
        f"{fmt.duration(m['pilot_wall_s'])}, {fmt.pct(m['fail_rate'])} failed"
    )
    think = m["thinking_tokens"]["mean"] or 0
    console.print(
        f"  output tokens per sample: mean {out_d['mean']:,.0f}, p50 {out_d['p50']:,.0f}, "
        f"p90 {out_d['p90']:,.0f}, max {out_d['max']:,.0f} (thinking {think:,.0f} of it)"
    )
    steady = m.get("pilot_steady_tps")
    console.print(
        f"  server: {fmt.rate(m['job_tps'])} over the simulated job at C={m['concurrency']}"
        + (f" (the pilot's steady window: {fmt.rate(steady)})" if steady else "")
    )
    rep = m.get("replay")
    if rep:
        console.print(
            f"  model check: replaying the pilot gives {fmt.duration(rep['simulated_s'])} against "
            f"{fmt.duration(rep['actual_s'])} measured ({fmt.pct(rep['error'], signed=True)}; "
            "in the bar)"
        )
    conf = f"{doc['rows'][0]['ours']['confidence']:.0%} range"
    cols = [("samples", _samples), ("ours", _time("ours")), (conf, _range("ours"))]
    cols += [("±", lambda r: f"{r['ours']['rel_halfwidth']:.1%}"), ("days", _days("ours"))]
    if i["servers"] > 1:
        cols += [(f"×{i['servers']} servers", _time("at_servers")), (conf, _range("at_servers"))]
    cols.append(("naive: pilot × N/K", _time("naive_pilot")))
    console.print(_table("time: the job simulated from the pilot", doc["rows"], cols))
    _tokens_table(doc, console, parquet=True)
    tgt = doc.get("pilot_size_for_target") or {}
    need, goal = tgt.get("requests", doc.get("pilot_size_for_5pct")), tgt.get("target", 0.05)
    if need:
        row = max(doc["rows"], key=lambda r: r["ours"]["rel_halfwidth"])["ours"]
        length = max(r["ours"].get("length_halfwidth", 0.0) for r in doc["rows"])
        speed = (row.get("speed") or {}).get("halfwidth")
        console.print(
            f"  the bar is ±{row['rel_halfwidth']:.1%}, ±{length:.1%} of it from the mean "
            "output length"
            + (f", ±{speed:.1%} from the server's speed" if speed is not None else "")
            + f"; ±{goal:.0%} needs a pilot of about {need:,} requests (--pilot {need})"
        )


class PilotProgress:
    """K of total for a fixed pilot; for an open-ended one, the mean length's bar so far."""

    def __init__(self, console: Console, total: int | None, stop: PilotStop | None) -> None:
        self.tokens = self.failed = 0
        self.stop_rule = stop
        self.t0 = time.perf_counter()
        self.progress: Progress | None = None
        if console.is_terminal:
            self.progress = Progress(
                TextColumn("  pilot"),
                BarColumn(bar_width=24),
                TextColumn(
                    "{task.completed:>5.0f}/{task.total:<5.0f}"
                    if total is not None
                    else "{task.completed:>6.0f} requests"
                ),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            self.progress.start()
            self.task = self.progress.add_task("pilot", total=total, rate="")

    def record(self, rec: RequestRecord) -> None:
        if rec.ok:
            self.tokens += rec.completion_tokens or 0
        else:
            self.failed += 1
        if self.progress is not None:
            dt = time.perf_counter() - self.t0
            rate = fmt.rate(self.tokens / dt) if dt > 0 else ""
            if self.stop_rule is not None and self.stop_rule.count >= 2:
                hw = self.stop_rule.halfwidth
                goal = self.stop_rule.target * self.stop_rule.length_share
                rate += f"  mean length ±{hw:.1%} (→ ±{goal:.1%})"
            if self.failed:
                rate += f"  [red]{self.failed} failed[/]"
            self.progress.update(self.task, advance=1, rate=rate)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


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
    on = f"in {d['text']} on {m} server{'s' if m > 1 else ''}"
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


def _print_decision(decision: dict[str, Any], console: Console) -> None:
    # the text is plain (a settings file's path reads "… [plan] …"), never markup
    for table in decision_tables(decision):
        t = Table(title=escape(table.title), title_justify="left")
        for j, head in enumerate(table.head):
            t.add_column(escape(head), justify="left" if j in table.left else "right")
        for row in table.rows:
            t.add_row(*(escape(cell) for cell in row))
        console.print(t)
        for line in table.foot:
            console.print(f"  {escape(line)}")


def _render_comparison(doc: dict[str, Any], console: Console) -> None:
    m, decision = doc["model"], doc["decision"]
    c = decision.get("concurrency")
    console.print(
        f"[bold]genbench plan[/] {len(decision['configurations'])} configurations of "
        f"{doc['source'].get('model')}, each at its sustained rate at "
        + (f"the job's C={c}" if c else "its best measured C")
        + f"; {fmt.count(m['tokens_per_sample'])} tokens per sample: "
        + m["tokens_per_sample_basis"]
    )
    _print_decision(decision, console)
