"""What `genbench run` shows a person: the live progress of each phase, the summary tables,
and the comparison of repeats. `commands/run.py` declares the options and calls these."""

from __future__ import annotations

import shlex
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from genbench.fmt import count, counted, duration, ms, number, pct, program, rate
from genbench.records import RequestRecord
from genbench.run.benchmark import Phase, RunListener
from genbench.run.knee import climb_line
from genbench.run.readings import sweep_readings
from genbench.run.result import REQUESTS_FILE
from genbench.run.session import RunOutcome
from genbench.transport.acceptance import lines as accept_lines


class RunConsole(RunListener):
    """Live progress per phase, then one line per finished phase."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task: Any = None
        self.tokens = 0
        self.failed = 0
        self.t0 = 0.0

    def phase_started(self, name: str, total: int | None, duration: float | None) -> None:
        self._stop()
        self.tokens, self.failed, self.t0 = 0, 0, time.perf_counter()
        if not self.console.is_terminal:
            return  # logs get one line per finished phase, not a redrawn bar
        self.progress = Progress(
            TextColumn("  {task.description:<16}"),
            BarColumn(bar_width=24),
            TextColumn(
                "{task.completed:>4.0f}/{task.total:<4.0f}"
                if total
                else "{task.completed:>4.0f} req"
            ),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task(name, total=total or duration, rate="")

    def record(self, rec: RequestRecord) -> None:
        if rec.ok:
            self.tokens += rec.completion_tokens or 0
        else:
            self.failed += 1
        dt = time.perf_counter() - self.t0
        text = rate(self.tokens / dt) if dt > 0 else ""
        if self.failed:
            text += f"  [red]{self.failed} failed[/]"
        if self.progress is not None:
            self.progress.update(self.task, advance=1, rate=text)

    def phase_done(self, phase: Phase) -> None:
        self._stop()
        s = phase.summary
        if phase.kind == "sustained":
            head = f"{rate(s.steady_tps)} sustained"
            if s.steady_window_s:
                a, b = s.steady_window_s
                head += f" (window {duration(b - a)}{'' if s.steady_stable else ', unstable'})"
        elif phase.kind == "single":
            head = f"{rate(s.decode_tps.get('mean'))} decode, TTFT {ms(s.ttft_s.get('mean'))}"
        else:
            head = rate(s.output_tps)
        fail = f", [red]{s.failed} failed[/]" if s.failed else ""
        done = counted(s.ok, "request")
        self.console.print(f"  [green]✓[/] {phase.name:<16} {head}, {done}{fail}")
        for note in phase.notes:
            self.console.print(f"      [yellow]note:[/] {note}")

    def note(self, text: str) -> None:
        self.console.print(f"  [dim]{text}[/]")

    def say(self, line: str) -> None:
        self.console.print(line)

    def stopped(self) -> None:
        self._stop()

    def _stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def print_outcome(done: RunOutcome, console: Console) -> None:
    """After a run: its summary tables, or its repeats' (several sides are compared by the
    command, through compare's renderer); then where the results are."""
    if not done.repeated:
        render_summary(done.states[0][0].doc, console)
        out = done.out
        console.print(f"results: {out / 'result.json'}, {out / REQUESTS_FILE}")
        console.print(next_line(done), soft_wrap=True, markup=False, highlight=False)
        return
    if len(done.dirs) == 1:
        render_repeats([s.doc for s in done.states[0]], console)
    dirs = ", ".join(str(d) for d in done.dirs)
    console.print(f"results: {dirs} ({counted(done.repeats, 'repeat')} each)")


def next_line(done: RunOutcome) -> str:
    """The command that comes next, filled in: a plan from this run (a run that forced its
    lengths needs the samples' mean output length: T), or a pilot on the job's prompts."""
    doc, out, g = done.states[0][0].doc, shlex.quote(str(done.out)), program()
    target = doc.get("target") or {}
    # a server this run started (the local demo, --serve) is gone by now: name none
    gone = target.get("local_demo") or target.get("engine")
    url = "URL" if gone else shlex.quote(str(target.get("url") or "URL"))
    if (doc.get("config") or {}).get("natural"):
        return f"next: {g} plan --from {out} --samples N"
    return (
        f"next: {g} plan --from {out} --samples N --tokens-per-sample T (T: your "
        "samples' mean output tokens, thinking included; this run forced its lengths), or "
        f"measure them on your prompts: {g} plan --prompts FILE --url {url} --samples N"
    )


def render_summary(doc: dict[str, Any], console: Console) -> None:
    target = doc["target"]
    server = target.get("server") or {}
    console.print()
    console.print(
        f"[bold]genbench run[/] {target['url']}  model [bold]{target['model']}[/]  "
        f"({server_label(server)})"
    )
    if target.get("local_demo"):
        console.print(
            "[yellow]local demo target: a tiny random-weight model on llama.cpp; the "
            "numbers show the method, not a real model's speed[/]"
        )
    wl = doc.get("workload") or {}
    if wl.get("prompts") == "file":  # --input: say whose requests these numbers are
        agentic = f", {wl.get('agentic_rows', 0):,} agentic" if wl.get("agentic_rows") else ""
        console.print(
            f"  workload {wl.get('path')}: {counted(wl.get('rows', 0), 'row')}{agentic}, "
            f"{counted(wl.get('requests', 0), 'request')} (one per assistant turn)"
        )
    probe = (target.get("check") or {}).get("metrics") or {}
    if probe.get("status") == "absent":
        console.print(f"  [yellow]no server counters[/]: no /metrics; {probe.get('hint')}")
    phases = doc["phases"]
    singles = [p for p in phases if p["kind"] == "single"]
    if singles:
        t = Table(title="single stream", title_justify="left")
        for col in ("output tokens", "decode tok/s", "e2e tok/s", "TTFT", "requests", "forced"):
            t.add_column(col, justify="right")
        for p in singles:
            s = p["summary"]
            forced = {True: "yes", False: "[red]no[/]", None: "natural"}[p["length_forced"]]
            t.add_row(str(p["max_tokens"]), rate(s["decode_tps"]["mean"], ""),
                      rate(s["output_tps"], ""), ms(s["ttft_s"]["mean"]), _fails(s), forced)
        console.print(t)
    _sweep_table(doc, console)
    spec = [p for p in phases if (p.get("server_metrics") or {}).get("spec_mean_acceptance_length")]
    for p in spec:
        console.print(f"  speculative decoding {p['name']}: {spec_line(p['server_metrics'])}")
    for p in phases:
        if acc := p["summary"].get("acceptance"):
            for line in accept_lines(acc, f" per request, {p['name']}"):
                console.print(f"  {escape(line)}")
    estimated = [p["name"] for p in phases if p["summary"].get("tokens_estimated")]
    if estimated:
        console.print(
            f"  [yellow]token counts estimated[/] in {len(estimated)} of "
            f"{len(phases)} phases: "
            "the server sent no usage in its streams, so tokens are counted as one per chunk "
            "(exact without speculative decoding; low with it)"
        )
    thinking_table(doc, console)
    status = doc["status"]
    colour = "green" if status == "complete" else "red"
    console.print(
        f"[{colour}]{status}[/]"
        + (f": {doc['status_message']}" if doc.get("status_message") else "")
    )


def server_label(server: dict[str, Any]) -> str:
    """'vLLM 0.32.0', or what is known when the server did not say what it is."""
    kind, version = server.get("kind"), server.get("version")
    if kind:
        return f"{kind} {version}" if version else kind
    return "server kind not identified: no known /version, /props or /get_server_info"


def _fails(s: dict[str, Any]) -> str:
    return f"{s['ok']}" + (f" [red](+{s['failed']} failed)[/]" if s["failed"] else "")


def _sweep_table(doc: dict[str, Any], console: Console) -> None:
    phases = [p for p in doc["phases"] if p["kind"] in ("burst", "sustained")]
    if not phases:
        return
    by_c: dict[int, dict[str, Any]] = {}
    for p in phases:
        by_c.setdefault(p["concurrency"], {})[p["kind"]] = p
    t = Table(
        title=f"concurrency sweep ({phases[0]['max_tokens']} output tokens)", title_justify="left"
    )
    for col in ("C", "burst tok/s", "sustained tok/s", "per-req tok/s", "TTFT p50", "TTFT p99",
                "ITL p50", "TPOT p50", "requests"):  # fmt: skip
        t.add_column(col, justify="right")
    for c in sorted(by_c):
        b, su = by_c[c].get("burst"), by_c[c].get("sustained")
        main = su or b
        assert main is not None
        s = main["summary"]
        steady = rate(su["summary"]["steady_tps"], "") if su else "—"
        if su and su["summary"].get("steady_stable") is False:
            steady += "*"
        t.add_row(
            str(c),
            rate(b["summary"]["output_tps"], "") if b else "—",
            steady,
            rate(s["decode_tps"]["p50"], ""),
            ms(s["ttft_s"]["p50"]),
            ms(s["ttft_s"]["p99"]),
            ms(s["itl_chunk_s"]["p50"]),
            ms(s["tpot_s"]["p50"]),
            _fails(s),
        )
    console.print(t)
    climb = doc.get("climb")
    if climb is not None:
        console.print(f"  climb: {climb_line(climb)}")
    for shape, info in (doc.get("sweep") or {}).items():
        if climb is not None:
            continue  # the climb's knee, said above
        if info.get("knee"):
            console.print(
                f"  {shape}: throughput stops growing after C={info['knee']} "
                "(no higher level adds 10% or more)"
            )
        elif info.get("knee_unstable"):
            levels = ", ".join(f"C={c}" for c in info["knee_unstable"])
            console.print(f"  {shape}: no knee claimed: the steady window is unstable at {levels}")
    for line in sweep_readings(doc):  # why its numbers differ where they seem to disagree
        console.print(f"  {line}")


def _headline(doc: dict[str, Any], key: tuple[str, ...]) -> float | None:
    """A number from result.json by its path, e.g. ("sweep", "sustained", "by_concurrency", "8")."""
    v: Any = doc
    for k in key:
        v = v.get(k) if isinstance(v, dict) else None
    return v if isinstance(v, int | float) else None


def render_repeats(docs: list[dict[str, Any]], console: Console) -> None:
    """One line per repeat: the headline rates, then their mean and spread."""
    cols: list[tuple[str, tuple[str, ...]]] = []
    if any(p["kind"] == "single" for p in docs[0]["phases"]):
        cols.append(("single-stream decode tok/s", ("single_stream", "mean_decode_tps")))
    for shape, info in (docs[0].get("sweep") or {}).items():
        for c in info["by_concurrency"]:
            cols.append((f"{shape} tok/s C={c}", ("sweep", shape, "by_concurrency", c)))
    t = Table(title=f"{len(docs)} repeats", title_justify="left")
    t.add_column("repeat")
    for name, _ in cols:
        t.add_column(name, justify="right")
    values = [[_headline(d, key) for _, key in cols] for d in docs]
    for i, row in enumerate(values, start=1):
        t.add_row(str(i), *[rate(v, "") for v in row])
    t.add_section()
    means, spreads = [], []
    for j in range(len(cols)):
        xs = [row[j] for row in values if row[j] is not None]
        m = sum(xs) / len(xs) if xs else None
        means.append(rate(m, ""))
        if m and len(xs) > 1:
            sd = (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5
            spreads.append(f"±{pct(sd / m)}")
        else:
            spreads.append("—")
    t.add_row("mean", *means)
    t.add_row("spread (sd)", *spreads)
    console.print(t)


def spec_line(m: dict[str, Any]) -> str:
    """Acceptance as the server counted it, saying when it came from an averaging gauge."""
    accepted = m.get("spec_acceptance_rate")
    parts = [f"acceptance {pct(accepted)}"] if accepted is not None else []
    parts.append(f"mean acceptance length {number(m['spec_mean_acceptance_length'], 2)}")
    text = ", ".join(parts)
    if m.get("spec_acceptance_source") == "gauge":
        n = m.get("spec_gauge_samples", 1)
        text += (
            f" (server gauge, mean of {counted(n, 'sample')} of its last decode steps, not the "
            "whole phase)"
        )
    return text


THINKING_FROM = {
    "server usage": "counted by the server",
    "tokenizer": "counted by the server's /tokenize",
    "estimate": "estimated by chunks, one chunk a token (the server counted only "
    "completion tokens; no /tokenize of the server's answered)",
}


def thinking_table(doc: dict[str, Any], console: Console) -> None:
    """Thinking and answer tokens per phase, and the time to the first answer token beside
    TTFT; under it, where the thinking arrived and who counted its tokens."""
    phases = [p for p in doc["phases"] if p["kind"] != "warmup"]
    # no thinking anywhere: a table of zeros says less than the line under it
    info = doc.get("thinking") or {}
    if any(p["summary"]["thinking_tokens"] for p in phases):
        _thinking_rows(phases, console, info.get("tokens_from") == "estimate")
    if info.get("dialect"):
        from genbench.transport.thinking import ThinkMode, describe

        tags = info.get("tags") or ["<think>", "</think>"]
        line = describe(ThinkMode(info["dialect"], (tags[0], tags[1])), bool(info.get("learned")))
        counted = THINKING_FROM.get(info.get("tokens_from") or "")
        console.print(f"  thinking: {line}" + (f"; its tokens {counted}" if counted else ""))


def _thinking_rows(phases: list[dict[str, Any]], console: Console, estimated: bool) -> None:
    title = "thinking and answer" + (" (token counts estimated)" if estimated else "")
    t = Table(title=title, title_justify="left")
    for col in ("phase", "thinking tok", "answer tok", "thinking", "TTFT p50", "TTFT p99",
                "to answer p50", "to answer p99"):  # fmt: skip
        t.add_column(col, justify="right")
    for p in phases:
        s = p["summary"]
        out = s["output_tokens"]
        t.add_row(
            p["name"],
            count(s["thinking_tokens"]),
            count(s["answer_tokens"]),
            pct(s["thinking_tokens"] / out) if out else "—",
            ms(s["ttft_s"].get("p50")),
            ms(s["ttft_s"].get("p99")),
            ms(s["ttft_answer_s"].get("p50")),
            ms(s["ttft_answer_s"].get("p99")),
        )
    console.print(t)
