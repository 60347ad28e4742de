"""The plan on the console: its tables and notes, and the pilot's progress while it runs."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from genbench import fmt
from genbench.plan.jobfiles import tasks_for
from genbench.plan.rescale import lines as rescale_lines
from genbench.plan.tables import decision_tables
from genbench.records import RequestRecord
from genbench.transport.acceptance import lines as accept_lines

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
                "tokens per sample); in FP8 a byte a value and a 4-byte scale per token"
            )
        console.print(f"  storage: {doc['model'].get('storage_basis', '')}")
        if line := asked_line(doc):
            console.print(f"  [bold]{line}[/]")
        if decision:
            _print_decision(decision, console)
    for note in doc.get("notes") or []:
        console.print(f"  [yellow]note:[/] {escape(note)}")


Cell = Callable[[dict[str, Any]], str]


def next_line(doc: dict[str, Any], saved: Any) -> str | None:
    """The command that comes next, filled in: the job, run by the plan (`generate --plan`:
    its configuration, its forecast beside the ETA). None for arithmetic, which is not saved."""
    if saved is None:
        return None
    src, i = doc.get("source") or {}, doc.get("inputs") or {}
    prompts = src.get("prompts") or "PROMPTS.jsonl"
    # the servers generate --plan will hold the job to: a deadline's need, else --servers
    servers = tasks_for(doc, int(i.get("servers") or 1))[0]
    url = src.get("url") if doc.get("mode") == "pilot" else None
    urls = " ".join(f"--url {shlex.quote(url or 'URL')}" for _ in range(1 if url else servers))
    # the job's rows: the largest count planned, where the file holds more (--limit N)
    job = max((int(r.get("samples") or 0) for r in doc.get("rows") or []), default=0)
    in_file = src.get("prompts_in_file")
    limit = f" --limit {job}" if isinstance(in_file, int) and 0 < job < in_file else ""
    where = Path(str(saved)).parent
    out = shlex.quote(str(Path("out") / where.name))  # plans/job: out/job, one per plan
    line = (f"next: {fmt.program()} generate -i {shlex.quote(str(prompts))} -o {out} {urls} "
            f"--plan {shlex.quote(str(where))}{limit}")  # fmt: skip
    if url and servers > 1:  # a shell comment: the line still runs as printed
        line += f"  # the plan is for {servers} servers: a --url for each"
    return line


def asked_line(doc: dict[str, Any]) -> str | None:
    """The figure asked for, in words: the largest sample count on the servers asked for,
    in hours and days, with its range (None: the plan has no `asked` figure)."""
    rows = [r for r in doc.get("rows") or [] if isinstance(r.get("asked"), dict)]
    if not rows:
        return None
    row = max(rows, key=lambda r: r["samples"])
    a = row["asked"]
    n = a["servers"]
    text = f"the job: {row['samples']:,} samples on {fmt.counted(n, 'server')}: "
    lo, hi = a.get("lo_s"), a.get("hi_s")
    if a["hours"] < 24:  # not "0.0 h = 0.00 days (95%: 0.00 – 0.00 days)"
        text += fmt.duration(a["hours"] * 3600)
        return text + (f" (95%: {fmt.duration_range(lo, hi)})" if lo is not None
                       and hi is not None else "")  # fmt: skip
    text += f"{a['hours']:,.1f} h = {a['days']:,.2f} days"
    if lo is not None and hi is not None:
        for nd in (2, 3, 4):  # as many decimals as tell the ends apart
            ends = f"{lo / 86400:,.{nd}f}", f"{hi / 86400:,.{nd}f}"
            if ends[0] != ends[1] or lo == hi:
                break
        text += f" (95%: {ends[0]} – {ends[1]} days)"
    return text


def _table(title: str, rows: list[dict[str, Any]], cols: list[tuple[str, Cell]]) -> Table:
    """A right-aligned table: each column's header beside how a row fills it. A days
    column where every row is under a day is left out ('0.00' says nothing its time
    column, in s, min or h, does not say better)."""
    cols = [(h, c) for h, c in cols if not (isinstance(c, _Days) and c.under_a_day(rows))]
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


class _Days:
    """A days column's cell: the row's `key` time in days."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, row: dict[str, Any]) -> str:
        return fmt.days(row[self.key]["seconds"])

    def under_a_day(self, rows: list[dict[str, Any]]) -> bool:
        return all(fmt.under_a_day(row[self.key].get("seconds")) for row in rows)


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
        cols.append(("… in FP8", lambda r: fmt.nbytes(r["storage"].get("hidden_state_bytes_fp8"))))
    return cols


def _render_arithmetic(doc: dict[str, Any], console: Console) -> None:
    i = doc["inputs"]
    console.print(
        f"[bold]genbench plan[/] arithmetic: samples × {i['tokens_per_sample']:,g} tokens / "
        f"{i['tok_per_s']:,g} tok/s"
    )
    cols = [("samples", _samples), ("tokens", _tokens("output"))]
    servers = i["servers"]
    one = " (1 server)" if servers > 1 else ""
    cols += [("time" + one, _time("one_server")), ("days" + one, _Days("one_server"))]
    if servers > 1:
        cols += [(f"time ×{servers} servers", _time("at_servers")),
                 (f"days ×{servers} servers", _Days("at_servers"))]  # fmt: skip
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
    if parquet and rows and all(r["storage"].get("parquet_bytes") is None for r in rows):
        console.print(f"  Parquet: — {escape(parquet_why())}")  # [parquet] is no markup


def parquet_why() -> str:
    """Why a plan shows no Parquet size: pyarrow is not installed, or nothing was kept to
    write (every pilot request failed)."""
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        return "not measured: pyarrow is not installed (pip install 'genbench[parquet]')"
    return "not measured: the pilot kept no output to write"


def _render_result(doc: dict[str, Any], console: Console) -> None:
    m, src, i = doc["model"], doc["source"], doc["inputs"]
    console.print(
        f"[bold]genbench plan[/] from {src['path']} ({src.get('model')} on "
        f"{src.get('server') or 'unknown server'})"
    )
    for line in accept_lines(doc["acceptance"], " in the run") if doc.get("acceptance") else ():
        console.print(f"  {escape(line)}")
    for line in rescale_lines(doc):
        console.print(f"  {escape(line)}")
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
    rescaled = "acceptance_rescale" in doc
    ours = f"ours C={m['best_concurrency']}" + (" (your acceptance)" if rescaled else "")
    cols = [("samples", _samples), (ours, _time("ours_best"))]
    has_bar = any("lo_s" in row["ours_best"] for row in doc["rows"])
    if has_bar:
        cols.append(
            ("95% range", lambda r: _range("ours_best")(r) if "lo_s" in r["ours_best"] else "—")
        )
    cols.append(("days" + (" (1 server)" if i["servers"] > 1 else ""), _Days("ours_best")))
    if rescaled:
        unscaled: Cell = lambda r: fmt.duration(r["ours_best"]["unscaled"]["seconds"])  # noqa: E731
        cols.append(("at the run's acceptance", unscaled))
    if i.get("concurrency") is not None:
        cols.append((f"ours C={i['concurrency']}", _time("ours_chosen")))
    if i["servers"] > 1:
        cols.append((f"×{i['servers']} servers", _time("at_servers")))
        cols.append((f"days ×{i['servers']} servers", _Days("at_servers")))
    if f["concurrency"]:
        vs: Cell = lambda r: f"{r['field']['seconds'] / r['ours_best']['seconds'] - 1:+.0%}"  # noqa: E731
        cols += [(f"field: burst C={f['concurrency']}", _time("field")), ("days", _Days("field"))]
        cols.append(("field vs ours", vs))
    title = "time: sustained rate (ours) beside the field's burst"
    console.print(_table(title, doc["rows"], cols))
    if has_bar:
        console.print(f"  range: {m['bar_basis']}")
    _tokens_table(doc, console)


def _render_pilot(doc: dict[str, Any], console: Console) -> None:
    m, src, i = doc["model"], doc["source"], doc["inputs"]
    out_d = m["output_tokens"]
    server = src.get("server") or "unknown server"
    on = src.get("model") if server == src.get("model") else f"{src.get('model')} ({server})"
    console.print(  # the sim's model is its server's name: 'on genbench-sim', said once
        f"[bold]genbench plan[/] pilot of {fmt.counted(m['pilot_requests'], 'request')} at "
        f"C={m['concurrency']} on {on}: "
        f"{fmt.duration(m['pilot_wall_s'])}, {fmt.pct(m['fail_rate'])} failed"
    )
    think = m["thinking_tokens"]["mean"] or 0
    console.print(
        f"  output tokens per sample: mean {out_d['mean']:,.0f}, p50 {out_d['p50']:,.0f}, "
        f"p90 {out_d['p90']:,.0f}, max {out_d['max']:,.0f} (thinking {think:,.0f} of it{_how(m)})"
    )
    steady = m.get("pilot_steady_tps")
    console.print(
        f"  server: {fmt.rate(m['job_tps'])} over the simulated job at C={m['concurrency']}"
        + (f" (the pilot's steady window: {fmt.rate(steady)})" if steady else "")
    )
    if acc := doc.get("acceptance"):
        for line in accept_lines(acc, " on your prompts (the pilot's requests)"):
            console.print(f"  {escape(line)}")
    rep = m.get("replay")
    if rep:
        console.print(f"  model check: {_model_check(rep)}")
    conf = f"{doc['rows'][0]['ours']['confidence']:.0%} range"
    m_servers = i["servers"]
    one = " (1 server)" if m_servers > 1 else ""
    cols = [("samples", _samples), ("ours" + one, _time("ours")), (conf, _range("ours"))]
    cols += [("±", lambda r: f"{r['ours']['rel_halfwidth']:.1%}"), ("days" + one, _Days("ours"))]
    if m_servers > 1:
        cols += [(f"×{m_servers} servers", _time("at_servers")), (conf, _range("at_servers")),
                 (f"days ×{m_servers} servers", _Days("at_servers"))]  # fmt: skip
    cols.append(("naive: pilot × N/K" + one, _time("naive_pilot")))
    console.print(_table("time: the job simulated from the pilot", doc["rows"], cols))
    console.print(
        f"  naive: the pilot's wall time × N samples / its K = {m['pilot_samples']:,} samples "
        "(the field's extrapolation, beside ours)"
    )
    _tokens_table(doc, console, parquet=True)
    tgt = doc.get("pilot_size_for_target") or {}
    row = max(doc["rows"], key=lambda r: r["ours"]["rel_halfwidth"])["ours"]
    if "parts" in row and "floor" in tgt:
        pilot = doc["model"].get("pilot_samples")
        drift = bool((row.get("speed") or {}).get("drift"))
        console.print(f"  {_bar_parts(row['rel_halfwidth'], row['parts'], tgt, pilot, drift)}")


def _how(m: dict[str, Any]) -> str:
    """How the pilot's thinking was had where the server did not count it, as run and
    generate say it (the report's forecast says it alike: `plan.summary`)."""
    est, counted = m.get("thinking_estimated_requests"), m.get("thinking_counted_requests")
    out = f", estimated by chunks on {fmt.counted(est, 'request')}" if est else ""
    if counted:
        out += f", counted by the server's /tokenize on {fmt.counted(counted, 'request')}"
    return out


FLOOR_FROM = {  # what is most of the bar a pilot as long as the job still leaves
    "misfit": "the model's misfit on the pilot, which no pilot length removes",
    "speed": "the server's speed as it wanders, which a longer pilot does not average away",
    "unseen": "speed the pilot cannot see (--speed-drift: genbench's default allowance, 15% × "
    "the job's time over the job's and the pilot's, or yours; 0 for a server known to hold "
    "its speed)",
    "sample": "the spread of the samples' lengths and times, which a job this small does not "
    "average away",
}


def _model_check(rep: dict[str, Any]) -> str:
    """The replay of the pilot, the calibrated figure the misfit is measured on, and the
    pilot: every figure shown is the one the bar uses."""
    if rep.get("calibrated_last_send_s") is not None:  # calibrated on the whole pilot
        return (
            f"replaying the pilot to its last send gives "
            f"{fmt.duration(rep['simulated_last_send_s'])}, calibrated on its whole time "
            f"{fmt.duration(rep['calibrated_last_send_s'])}, against "
            f"{fmt.duration(rep['actual_last_send_s'])} measured "
            f"({fmt.pct(rep['error'], signed=True)}: the model's misfit, a part of the bar)"
        )
    # a plan.json written before: calibrated to the last send, checked on the whole
    cal = rep.get("calibrated_s", rep["simulated_s"] * rep.get("calibration", 1.0))
    return (
        f"replaying the pilot gives {fmt.duration(rep['simulated_s'])}, calibrated to the "
        f"pilot's sending {fmt.duration(cal)}, against {fmt.duration(rep['actual_s'])} "
        f"measured ({fmt.pct(rep['error'], signed=True)}: the model's misfit, a part of the "
        "bar)"
    )


def _bar_parts(
    total: float,
    parts: dict[str, Any],
    tgt: dict[str, Any],
    pilot: int | None = None,
    drift: bool = False,
) -> str:
    """The bar and its parts as the bar combines them (in quadrature), and the pilot
    length a target asks for, or what sets the floor no pilot length passes. A bar
    already inside the target asks for nothing (not 'a pilot of 2 requests': a pilot
    that short would not know its own bar)."""
    goal, need = tgt.get("target", 0.05), tgt.get("requests")
    text = (
        f"the bar is ±{total:.1%} (its wider side, the one {parts['side']} the forecast; "
        f"its parts add in quadrature): ±{parts['sample']:.1%} from the pilot's sample of "
        f"requests (their lengths, TTFTs, failures), ±{parts['speed']:.1%} from the server's "
        f"speed, ±{parts['misfit']:.1%} from the model's misfit on the pilot"
    )
    if total <= goal:  # a pilot that short would not know its own bar: no length asked
        return (
            text
            + f"; inside ±{goal:.0%} already"
            + (f" with this pilot's {pilot:,} requests" if pilot else "")
        )
    if need:
        return text + (
            f"; ±{goal:.0%} needs a pilot of about {fmt.counted(need, 'request')} (--pilot {need})"
        )
    what = FLOOR_FROM.get(tgt.get("floor_from") or "", "what a longer pilot does not narrow")
    if tgt.get("floor_from") == "speed" and drift:
        what += ", and speed the pilot cannot see (--speed-drift)"
    job = tgt.get("job_samples")
    longest = (
        "this one is as long as the job and" if job and pilot and pilot >= job
        else f"a pilot of all the job's {job:,} samples" if job else "one as long as the job"
    )
    closer = (f"; a pilot of about {fmt.counted(near, 'request')} (--pilot {near}) takes the "
              f"sample's part to ±{goal:.0%}" if (near := tgt.get("sample_at")) else "")
    return text + (
        f"; no pilot reaches ±{goal:.0%}: {longest} still leaves ±{tgt['floor']:.1%}, most of "
        f"it {what}{closer}"
    )


class PilotProgress:
    """K of total for a fixed pilot; for an open-ended one, the mean length's bar so far."""

    def __init__(self, console: Console, total: int | None, stop: PilotStop | None,
                 every: float = 30.0) -> None:  # fmt: skip
        self.tokens = self.failed = self.ended = 0
        self.stop_rule, self.total, self.console, self.every = stop, total, console, every
        self.t0 = self.last_line = time.perf_counter()
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
        self.ended += 1
        if rec.ok:
            self.tokens += rec.completion_tokens or 0
        else:
            self.failed += 1
        if rec.t_send and self.ended == 1:  # the pilot's clock starts after the warm-up
            self.t0 = rec.t_send
        elif rec.t_send:
            self.t0 = min(self.t0, rec.t_send)
        now = time.perf_counter()
        if self.progress is None and now - self.last_line >= self.every:  # off a terminal
            self.last_line = now
            self.console.print(self.line(now - self.t0), markup=False, highlight=False)
        if self.progress is not None:
            dt = now - self.t0
            rate = fmt.rate(self.tokens / dt) if dt > 0 else ""
            if self.stop_rule is not None and self.stop_rule.count >= 2:
                hw = self.stop_rule.halfwidth
                goal = self.stop_rule.target * self.stop_rule.length_share
                rate += f"  mean length ±{hw:.1%} (→ ±{goal:.1%})"
            if self.failed:
                rate += f"  [red]{self.failed} failed[/]"
            self.progress.update(self.task, advance=1, rate=rate)

    def line(self, elapsed: float) -> str:
        """Off a terminal (nohup, a Slurm log), every `every` seconds: where the pilot is."""
        of = f"/{self.total:,}" if self.total is not None else ""
        text = (f"  pilot: {self.ended:,}{of} requests in {fmt.duration(elapsed)}, "
                f"{fmt.rate(self.tokens / elapsed) if elapsed > 0 else '—'}")  # fmt: skip
        rule = self.stop_rule
        if rule is not None and rule.count >= 2:
            goal = rule.target * rule.length_share
            text += f", mean length ±{rule.halfwidth:.1%} (stops at ±{goal:.1%})"
        return text + (f", {self.failed:,} failed" if self.failed else "")

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class PlanConsole:
    """What `make_plan` tells while it works, on the console (`genbench.plan.make.PilotWatch`)."""

    def __init__(self, console: Console, progress_every: float = 30.0) -> None:
        self.console, self.every = console, progress_every
        self.bar: PilotProgress | None = None

    def say(self, line: str) -> None:
        self.console.print(line)

    def pilot_started(self, total: int | None, stop: PilotStop | None) -> None:
        self.bar = PilotProgress(self.console, total, stop, self.every)

    def record(self, rec: RequestRecord) -> None:
        if self.bar is not None:
            self.bar.record(rec)

    def pilot_ended(self) -> None:
        if self.bar is not None:
            self.bar.stop()


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
