"""`genbench generate` on the console: the live panel on a terminal, a JSON progress line
every --progress-every seconds elsewhere (logs, CI: a job under nohup or a scheduler is
followed with `tail -f`), and how the job ended."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from genbench.fmt import counted, duration, duration_range, number, pct, rate
from genbench.generate.apart import apart, figures, tokens_apart
from genbench.generate.ending import LABELS, rows
from genbench.generate.eta import Eta
from genbench.generate.jobconfig import JobConfig
from genbench.generate.outcome import JobResult, Listener
from genbench.generate.prior import PlanPrior
from genbench.generate.progress import Snapshot
from genbench.generate.resumed import STOP_BIAS, written_tokens
from genbench.generate.store.jobfile import unconverted_line

ESTIMATED_NOTE = (
    "token counts estimated: the server sent thinking without counting it (or sent no usage); "
    "shared out by chunks, one chunk a token (meta.tokens_estimated on each such row)"
)


def print_start(cfg: JobConfig, console: Console) -> None:
    where = f" (shard {cfg.shard.index}/{cfg.shard.count})" if cfg.shard else ""
    if cfg.shard and cfg.shard.source:  # --shard auto: the variables it was read from
        where = f" (shard {cfg.shard.index}/{cfg.shard.count}, from {cfg.shard.source})"
    console.print(f"[bold]genbench generate[/] {cfg.input} → {cfg.output}{where}")


class JobConsole(Listener):
    """Live panel on a terminal; JSON progress lines on stderr otherwise. `forecast_for(todo)`
    is the plan's forecast for the rows to do (`plan.document.job_forecast`), when the job
    has a plan: the command makes it, so this package reads no plan itself."""

    def __init__(self, console: Console, progress_every: float, quiet_json: bool,
                 forecast_for: Callable[[int], Any] | None = None,
                 plan_said: tuple[str, list[str]] | None = None,
                 down_timeout: float | None = None,
                 progress_json: bool = False) -> None:  # fmt: skip
        self.console, self.every, self.quiet_json = console, progress_every, quiet_json
        self.progress_json = progress_json  # off a terminal: JSON lines, not a line for people
        # what the job takes of the plan, and the flags that depart from it (flags.plan_lines)
        self.forecast_for, self.plan_said = forecast_for, plan_said
        self.down_timeout = down_timeout
        self.live: Live | None = None
        self.last_line = 0.0
        self.forecast: Any = None  # plan.document.JobForecast
        self.plan_outcome: dict[str, Any] | None = None
        self.whole: Any = None  # a resumed job: the plan's forecast for all its rows
        self.earlier_s: float | None = None  # and its earlier runs' time, where known

    def planned(self, info: dict[str, Any]) -> None:
        c = self.console
        if self.forecast_for is not None:
            self.forecast = self.forecast_for(info["todo"])
            if before := info["done_before"] + info["failed_before"]:  # generate.resumed
                self.whole = replace(self.forecast_for(before + info["todo"]), earlier_rows=before)
                self.forecast = replace(self.forecast, earlier_rows=before)
                self.earlier_s = info.get("earlier_s")
        left, n = info.get("left"), info["rows"]
        if left:  # --limit took the first rows of a longer input
            c.print(f"  input: {n:,} of {n + info['invalid'] + left:,} rows (--limit)")
        else:
            c.print(f"  input: {rows(n)}" + _derived(info["derived_ids"]))
        if (failed := info["failed_before"]) or info["done_before"]:
            again = f", {failed:,} failed earlier (--retry-errors to try them again)"
            c.print(f"  resuming: {rows(info['done_before'])} already done{again if failed else ''}"
                    f"; {info['todo']:,} to go")  # fmt: skip
        if info["invalid"]:
            c.print(f"  [yellow]invalid rows, to the errors file: {info['invalid']:,}[/]")
        f = self.forecast
        if f is not None:
            c.print(f"  plan: {_forecast_text(f)} ({f.basis}; {f.path})")
            if self.whole is not None:  # the rows left are the long ones: judged whole
                c.print(f"  plan for the whole job: {_forecast_text(self.whole)}, this run's "
                        "and the earlier ones' (the end judges the job whole: the rows a stop "
                        "leaves are the long ones that were in flight)")
        if self.plan_said is not None:  # once, before the first request
            runs, departs = self.plan_said
            c.print(f"  plan's configuration: {runs}", markup=False, highlight=False)
            for line in departs:
                c.print(f"  [yellow]{escape(line)}[/]")

    def note(self, text: str, style: str = "") -> None:
        line = f"  [{style}]{text}[/]" if style else f"  {text}"
        self.console.print(line)

    def tick(self, snap: Snapshot) -> Snapshot:
        """Shown, with the plan's course added: the listeners after the console see it."""
        snap = self._on_course(snap)
        if self.console.is_terminal:
            if self.live is None:
                self.live = Live(
                    console=self.console, refresh_per_second=4, transient=True, auto_refresh=False
                )
                self.live.start()
            self.live.update(panel(snap, self.down_timeout, self.console.width), refresh=True)
            return snap
        now = time.monotonic()
        if now - self.last_line >= self.every:
            self.last_line = now
            self._off_terminal(snap)
        return snap

    def _off_terminal(self, snap: Snapshot) -> None:
        """Off a terminal (nohup, a Slurm log): a line for people, or JSON when asked."""
        if self.progress_json:
            _progress_line(snap)
        else:
            self.console.print(progress_text(snap), markup=False, highlight=False,
                               soft_wrap=True)  # fmt: skip

    def _on_course(self, snap: Snapshot) -> Snapshot:
        """The snapshot with the plan's course, when the job has a plan, and its ETA the
        plan's and the job's combined (`generate.prior`); the course is judged on the
        job's own estimate, so that the plan never hides that the job has left it."""
        if self.forecast is None:
            return snap
        f, s = self.forecast, snap
        s = replace(s, plan=f.course(s.elapsed_s, s.eta_s, s.eta_lo_s, s.eta_hi_s,
                                           s.eta_slow_s, s.eta_fast_s))
        if f.lo_s is None or f.hi_s is None or s.eta_note is not None or s.remaining <= 0:
            return s  # no bar to combine by; no server up: no ETA at all
        job = None if s.eta_s is None else Eta(s.eta_s, s.eta_lo_s, s.eta_hi_s)
        e = PlanPrior(*f.prior()).blend(job, s.elapsed_s)
        return replace(s, eta_s=round(e.seconds, 0), eta_lo_s=round(e.lo_s or 0.0, 0),
                       eta_hi_s=round(e.hi_s or 0.0, 0),
                       eta_err_s=round(e.err_s or 0.0, 0))  # fmt: skip

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def finished(self, result: JobResult) -> None:
        self.stop()
        snap = result.snapshot
        if not self.console.is_terminal and snap and result.status != "nothing_to_do":
            self._off_terminal(self._on_course(snap))  # the last line too: where it ended up
        print_result(result, self.console)
        f = self.forecast
        ended = result.status in ("complete", "some_failed", "limit", "unanswered")
        if f is not None and ended and result.sending_s > 0:
            # a stopped job never gets here: it claims nothing of the time or the tokens
            self.console.print("  plan: " + self._against_plan(f, result))

    def _against_plan(self, f: Any, result: JobResult) -> str:
        """The ending's line against the plan (`plan_outcome` its figures): a resumed job
        (`generate.resumed`) is judged whole, or its time shown without a verdict."""
        took_s, whole, est, tok, rows = result.sending_s, self.whole, result.estimated_rows, \
            result.tokens or None, result.done_this_run  # fmt: skip
        if whole is not None:  # every row in the data files, against the plan for all rows
            rows, tok, est = written_tokens(result.files)
            f, took_s = (f, took_s) if self.earlier_s is None else \
                (whole, self.earlier_s + took_s)  # fmt: skip
        o = f.outcome(took_s, tok, rows)
        if whole is not None:  # the earlier time not known: the time not judged
            o.update(whole.tokens_against(tok, rows), earlier_s=self.earlier_s,
                     inside_bar=None if self.earlier_s is None else o["inside_bar"])
        self.plan_outcome = o
        inside = {True: ", inside its bar", False: ", [red]outside its bar[/]", None: ""}
        if f.lo_s is not None and f.hi_s is not None:  # as many decimals as tell them apart
            took, bar, mid = apart(took_s, f.lo_s, f.hi_s, f.seconds)
            said = f"{mid} ({bar}) for {f.rows:,} rows"
        else:  # no bar: as many as make their ratio the error said
            took, _, mid = apart(took_s, f.seconds, f.seconds, f.seconds)
            said = f"{mid} (no bar) for {f.rows:,} rows"
        how = f"the job took {took}: "
        if whole is not None and self.earlier_s is not None:
            how = f"the job took {took} over its runs (this one {duration(result.sending_s)}): "
        elif whole is not None:
            how = f"this run took {took}: "
            inside[o["inside_bar"]] = (f", not judged: {STOP_BIAS}, and the earlier runs' "
                                       "time is not known (.genbench/runs.jsonl)")  # fmt: skip
        planned = whole.rows if whole is not None else f.rows
        return (f"{said}; {how}the forecast was {_signed(o['error'])} off"
                f"{inside[o['inside_bar']]}" + _tokens_verdict(o, planned, est, whole is not None))


def _signed(x: float) -> str:
    """'+2.1%'; '+0.0%' for an error under a twentieth of a percent, never '-0.0%'."""
    return pct(x, signed=True)


def _tokens_verdict(o: dict[str, Any], planned_rows: int, estimated_rows: int = 0,
                   earlier: bool = False) -> str:  # fmt: skip
    """The job's output tokens against the plan's range ('; its 71.2K output tokens are
    outside the plan's 58.1K – 61.9K', in red), for the rows it answered; a resumed job's
    (`earlier`) for all its rows, this run's and the earlier ones'; nothing where there is
    nothing to judge (`JobForecast.tokens_against`)."""
    inside = o.get("tokens_inside_bar")
    if inside is None:
        return ""
    x, bar = tokens_apart(o["actual_tokens"], o["tokens_lo"], o["tokens_hi"])
    est = " (estimated)" if estimated_rows else ""
    where = "inside" if inside else "outside"
    rows = o["tokens_rows"]
    whole = f"all {planned_rows:,} rows, this run's and the earlier ones': " if earlier else ""
    if rows == planned_rows:
        said = f"{whole}{'their' if earlier else 'its'} {x} output tokens{est} are {where} " \
               f"the plan's {bar}"  # fmt: skip
    else:  # some failed: the plan's figures for the rows answered
        said = (f"{whole}{'the' if earlier else 'its'} {rows:,} rows answered hold {x} output "
                f"tokens{est}, {where} the plan's {bar} for as many")  # fmt: skip
    return "; " + (said if inside else f"[red]{said}[/]")


def progress_text(snap: Snapshot) -> str:
    """One line for people, off a terminal: rows, the rate, the ETA and its range, and the
    plan's verdict, in that order of what a person reading a log wants."""
    resolved = snap.done + snap.failed
    total = snap.total or 1
    eta = "—" if snap.eta_s is None else _with_bar(snap.eta_s, snap.eta_lo_s, snap.eta_hi_s)
    parts = [
        time.strftime("%H:%M:%S"),
        f"rows {resolved:,}/{snap.total:,} ({resolved / total:.1%})"
        + (f", {snap.failed:,} failed" if snap.failed else ""),
        f"{number(snap.rows_per_s, 2)} rows/s, {rate(snap.tokens_per_s)}",
        f"ETA {eta}",
    ]
    plan = snap.plan
    if plan and plan.get("verdict"):
        parts.append(_verdict_text(plan))
    if snap.all_down_s is not None:
        parts.append(f"all servers down for {duration(snap.all_down_s)}")
    return "  " + " · ".join(parts)


def _verdict_text(plan: dict[str, Any]) -> str:
    """The plan's verdict for a log line: 'plan: inside, the plan's 3.6 min (2.7 – 5.0 min)'
    (not brackets in brackets, 'plan: inside (3.6 min (2.7 – 5.0 min))'), and
    past the plan's range which way and where to, at the job's own rate (the ETA beside it
    is the plan's and the job's combined), in one unit: 'plan: outside, faster: at its own
    rate on course for 2.1 min against the plan's 3.6 min (2.7 – 5.0 min)' (a trial read
    'on course for 2.02 min against 106 s (95 – 118 s)' beside 'ETA 101 s' 5 s in)."""
    way, on = plan.get("direction"), plan.get("on_course_s")
    if plan["verdict"] == "inside" or way is None or on is None:
        bar = _with_bar(plan["seconds"], plan["lo_s"], plan["hi_s"])
        return f"plan: {plan['verdict']}, the plan's {bar}"
    on_text, bar, mid = apart(on, plan["lo_s"], plan["hi_s"], plan["seconds"], agree=False)
    return (f"plan: {plan['verdict']}, {way}: at its own rate on course for {on_text} against "
            f"the plan's {mid} ({bar})")  # fmt: skip


def _progress_line(snap: Snapshot) -> None:
    print(orjson.dumps({"event": "progress", **snap.to_dict()}).decode(), file=sys.stderr,
          flush=True)  # fmt: skip


def _with_bar(seconds: float, lo: float | None, hi: float | None, none: str = "") -> str:
    """'5.2 h (4.9 – 5.5 h)', or the time and `none` when there is no bar; the time in the
    bar's unit and decimals ('102.0 s (1.4 – 2.0 min)' was one ETA), none where it is a
    whole number in it ('102 s', the live ETA's whole seconds)."""
    if lo is None or hi is None:
        return apart(seconds, seconds, seconds)[0] + none
    x, low, high, _, unit = figures(seconds, lo, hi)
    if low == high:  # a range under the figure's last digit: 'ETA 9 s', not '(9 – 9 s)'
        return f"{x} {unit}"
    return f"{x} {unit} ({low} – {high} {unit})"


def _forecast_text(f: Any) -> str:
    return f"{_with_bar(f.seconds, f.lo_s, f.hi_s, ' (no bar)')} for {f.rows:,} rows"


def _derived(n: int) -> str:
    if not n:
        return ""
    return (
        f" ({n:,} without an 'id': genbench derived a stable one from each row's content, "
        "a hash of its messages)"
    )


NARROW = 100  # columns: below, the ETA line keeps the ETA and the plan's verdict only


def panel(snap: Snapshot, down_timeout: float | None = None, width: int = 200) -> Group:
    """The live panel: rows, rates, the ETA (and the plan's), each server's state. On a
    narrow terminal the ETA line keeps the ETA and the plan's verdict and drops the rest
    (the finishing time, elapsed): they are what a person looks for."""
    total = snap.total or 1
    resolved = snap.done + snap.failed
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=total, completed=resolved, width=40),
        Text(f"{resolved:,}/{snap.total:,} rows ({resolved / total:.1%})"),
        Text(
            f"failed {snap.failed:,}  truncated {snap.truncated_this_run:,}",
            style="red" if snap.failed else "",
        ),
    )
    eta, all_down = snap.eta_s, snap.all_down_s
    # the range, not ± half of it: its two sides differ (a slow side, the tail)
    eta_text = "ETA " + (duration(eta) if eta is None else _with_bar(eta, snap.eta_lo_s,
                                                                     snap.eta_hi_s))  # fmt: skip
    if snap.eta_note:
        eta_text = f"ETA — ({snap.eta_note} up: nothing can run)"
    elif eta is not None and snap.remaining:
        eta_text += (
            "  (finishes ~" + time.strftime("%a %H:%M", time.localtime(time.time() + eta)) + ")"
        )
    rates = Text(
        f"{number(snap.rows_per_s, 2)} rows/s   {rate(snap.tokens_per_s)} "
        f"(thinking {rate(snap.thinking_tokens_per_s)}, answer "
        f"{rate(snap.answer_tokens_per_s)})"
    )
    plan = snap.plan
    if width < NARROW:
        eta_text = "ETA " + (
            duration(eta) if eta is None else _with_bar(eta, snap.eta_lo_s, snap.eta_hi_s)
        )
        if plan and plan.get("verdict"):
            way = plan.get("direction") if plan["verdict"] != "inside" else None
            eta_text += f"  plan: {plan['verdict']}" + (f", {way}" if way else "")
        eta_line = Text(eta_text, no_wrap=True, overflow="ellipsis")
    else:
        if plan:
            eta_text += "   plan " + _with_bar(plan["seconds"], plan["lo_s"], plan["hi_s"])
        eta_line = Text(f"{eta_text}   elapsed {duration(snap.elapsed_s)}")
    course = _course(plan) if plan else None
    t = Table(box=None, padding=(0, 2), show_edge=False)
    for col in ("server", "state", "in flight", "rows/s", "tok/s"):
        t.add_column(col, justify="left" if col in ("server", "state") else "right")
    for s in snap.servers:
        up = s.state == "up"
        state = "[green]up[/]" if up else f"[red]down {duration(s.down_s)}[/] (polling)"
        t.add_row(s.url, state, f"{s.in_flight}/{s.concurrency}", number(s.rows_per_s, 2),
                  rate(s.tokens_per_s, ""))  # fmt: skip
    lines = [bar, rates, eta_line] + ([course] if course is not None else [])
    lines += engine_lines(snap)
    if all_down is None:
        return Group(*lines, t)
    gives_up = f", gives up after {duration(down_timeout)}" if down_timeout else ""
    down_line = Text(f"all servers down for {duration(all_down)}; waiting{gives_up}", style="red")
    return Group(*lines, down_line, t)


def engine_lines(snap: Snapshot) -> list[Text]:
    """--serve: how long the engines were down and why, and the availability the ETA uses;
    nothing while none has been down."""
    engines = [e for e in snap.engines or () if e.down_s or not e.up]
    if not engines:
        return []
    parts = []
    for e in engines:
        why = ", ".join(f"{c} ×{n}" for c, n in e.restarts_by_cause.items())
        state = "up again," if e.up else "down now,"
        parts.append(f"{e.engine} {state} down {duration(e.down_s)}"
                     + (f" ({why})" if why else ""))  # fmt: skip
    avail = snap.engines_availability
    tail = f"; the ETA counts {avail:.1%} availability" if avail is not None else ""
    return [Text("engines: " + "; ".join(parts) + tail, style="yellow")]


def _course(plan: dict[str, Any]) -> Text | None:
    """Where the job is headed against the plan's range, once there is an ETA: a line only
    when it is not inside (`JobForecast.course`)."""
    verdict, on = plan.get("verdict"), plan.get("on_course_s")
    if verdict not in ("outside", "unsure") or on is None:
        return None
    on_text, plan_range, _ = apart(on, plan["lo_s"], plan["hi_s"])
    if plan.get("on_course_lo_s") is None or plan.get("on_course_hi_s") is None:
        return Text(
            f"on course for {on_text}, past the plan's {plan_range}, but the ETA has no "
            "range yet (too few rows have ended): too early to tell"
        )
    span = duration_range(plan["on_course_lo_s"], plan["on_course_hi_s"])
    way = plan.get("direction") or ("slower" if on > plan["hi_s"] else "faster")
    if verdict == "outside":
        return Text(
            f"the job's speed has left the plan's range: it runs {way} than the plan allowed, "
            f"on course for {on_text} ({span}) against the plan's {plan_range}",
            style="red",
        )
    missed = plan.get("missed_for_s")
    if missed is None and not (plan["on_course_lo_s"] > plan["hi_s"]
                               or plan["on_course_hi_s"] < plan["lo_s"]):  # fmt: skip
        return Text(
            f"on course for {on_text}, past the plan's {plan_range}, but the ETA's own "
            f"range ({span}) still reaches it: no sign yet that the job left the plan",
        )
    if missed is None:  # the ETA's range misses; the speeds the job has run at do not
        reach = duration_range(plan["reach_lo_s"], plan["reach_hi_s"])
        return Text(
            f"on course for {on_text} ({span}), past the plan's {plan_range}, but its speed "
            f"has moved enough that it could still end in it ({reach} at the speeds its "
            "own history shows): no sign yet that the job left the plan",
        )
    hold = plan.get("hold_s")  # None: a resumed run, never said outside (generate.resumed)
    end = f"said outside once that lasts {duration(hold)}" if hold is not None else \
        f"a resumed run is never said outside: {STOP_BIAS}"  # fmt: skip
    return Text(f"on course for {on_text} ({span}), past the plan's {plan_range} for "
                f"{duration(missed)}: {end}", style="yellow")  # fmt: skip


def print_result(r: JobResult, console: Console) -> None:
    """How the job ended: rows, tokens, files, and what to do next."""
    colour = {"complete": "green", "nothing_to_do": "green", "limit": "green",
              "some_failed": "yellow", "unanswered": "yellow"}.get(r.status, "red")  # fmt: skip
    label = LABELS.get(r.status, r.status.replace("_", " "))
    console.print(f"[{colour}]{label}[/]: {r.message}")
    this_run = (f" (this run: {r.done_this_run:,} done, {r.failed_this_run:,} failed, "
                f"{r.truncated_this_run:,} cut by max_tokens)")  # fmt: skip
    console.print(f"  rows: {r.done:,} done, {r.failed:,} failed of {r.total:,}"
                  + (this_run if r.done_this_run or r.failed_this_run else ""))  # fmt: skip
    if r.sending_s > 0 and r.tokens:
        est = f", estimated on {counted(r.estimated_rows, 'row')}" if r.estimated_rows else ""
        if r.tokenized_rows:
            est += f", counted by the server's /tokenize on {counted(r.tokenized_rows, 'row')}"
        console.print(
            f"  tokens: {r.tokens:,} ({r.thinking_tokens:,} thinking{est}) in "
            f"{duration(r.sending_s)}: {rate(r.tokens / r.sending_s)} (this run's rows)"
        )
        if r.estimated_rows:
            console.print(f"  {ESTIMATED_NOTE}")
    if r.engines_line:  # after the tokens/s its downtime lowered
        console.print(f"  [yellow]{r.engines_line}[/]")
    for server, line in concurrency_lines(r.concurrency):  # -c auto: what it ran, and why
        console.print(f"  concurrency {server}: {line}")
    if r.thinking:
        console.print(f"  thinking: {r.thinking}")
    if r.ids_line and r.status != "no_token_ids":  # there the status line says it
        console.print(f"  [yellow]token ids: {r.ids_line}[/]")
    if r.files:
        shown = r.files if len(r.files) <= 3 else [r.files[0], "…", r.files[-1]]
        console.print(f"  data: {counted(len(r.files), 'file')}: {', '.join(shown)}")
    if r.failure:
        f = r.failure
        console.print(f"  most common failure: {f['kind']} ({rows(f['rows'])}): {f['message']}")
    if r.errors_file:
        console.print(f"  failures: {r.errors_file}")
    if r.status in ("interrupted", "servers_down", "engines_gone"):
        when = " once they are back" if r.status == "servers_down" else ""
        console.print(
            f"  rerun the same command{when} to resume: finished rows are kept and skipped"
        )
    if r.unconverted:
        console.print(f"  {escape(unconverted_line(r.unconverted))}", soft_wrap=True)


def concurrency_lines(changes: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """-c auto's changes per server, in one line each: 16 → 384 at 0.1 s (why) → ..."""
    by: dict[str, list[dict[str, Any]]] = {}
    for c in changes:
        by.setdefault(c["server"], []).append(c)
    return [
        (server, f"{cs[0]['old']}" + "".join(
            f" → {c['new']} at {duration(c['at_s'])} ({c['why']})" for c in cs))
        for server, cs in by.items()
    ]  # fmt: skip
