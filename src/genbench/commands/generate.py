"""`genbench generate`: regenerate a prompt file with the target model, resumably.

On a terminal a live panel shows rows, token rates, per-server state and the ETA;
elsewhere (logs, CI) one JSON progress line goes to stderr every --progress-every
seconds, so a job running under nohup or a scheduler can be followed with `tail -f`.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from genbench.commands import common, watch
from genbench.commands.console import err, out
from genbench.errors import UsageError
from genbench.fmt import duration, duration_range, number, rate
from genbench.generate.input import ShardSpec
from genbench.generate.job import JobConfig, JobResult, Listener, run_job
from genbench.generate.params import job_params
from genbench.generate.servers import ServerSpec
from genbench.generate.tools import POLICIES
from genbench.plan.document import JobForecast, job_forecast, read_plan
from genbench.transport.endpoint import load_api_key

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'256MB', '1G', '500k', '1048576' -> bytes (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"--shard-size '{text}': expected a size like 256MB or 1GB")
    n = float(m[1]) * _UNITS[(m[2] or "").lower()[:1]]
    if n < 4096:
        raise UsageError(f"--shard-size '{text}': must be at least 4KB")
    return int(n)


def read_url_file(path: Path, default_c: int) -> list[ServerSpec]:
    """One server per line: `URL [CONCURRENCY]`; blank lines and # comments are skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--url-file {path}: cannot read it ({e})") from None
    specs: list[ServerSpec] = []
    for n, line in enumerate(lines, 1):
        parts = line.split("#", 1)[0].split()
        if not parts:
            continue
        c = default_c
        if len(parts) > 2:
            raise UsageError(f"{path}, line {n}: expected 'URL [CONCURRENCY]'")
        if len(parts) == 2:
            try:
                c = int(parts[1])
            except ValueError:
                c = 0
            if c < 1:
                raise UsageError(f"{path}, line {n}: concurrency '{parts[1]}' is not a number >= 1")
        specs.append(ServerSpec(parts[0], c))
    if not specs:
        raise UsageError(f"--url-file {path}: no URLs in it")
    return specs


class ConsoleListener(Listener):
    """Live panel on a terminal; JSON progress lines on stderr otherwise."""

    def __init__(
        self,
        console: Console,
        progress_every: float,
        quiet_json: bool,
        plan: dict[str, Any] | None = None,
        servers: int = 1,
        concurrency: int | None = None,
        down_timeout: float | None = None,
    ) -> None:
        self.console = console
        self.down_timeout = down_timeout
        self.every = progress_every
        self.live: Live | None = None
        self.last_line = 0.0
        self.quiet_json = quiet_json
        self.plan, self.servers, self.concurrency = plan, servers, concurrency
        self.forecast: JobForecast | None = None
        self.plan_outcome: dict[str, Any] | None = None

    def planned(self, info: dict[str, Any]) -> None:
        c = self.console
        if self.plan is not None:
            self.forecast = job_forecast(self.plan, info["todo"], self.servers)
        c.print(f"  input: {info['rows']:,} rows" + _derived(info["derived_ids"]))
        if info["done_before"] or info["failed_before"]:
            failed = (
                f", {info['failed_before']:,} failed earlier (--retry-errors to try them again)"
                if info["failed_before"]
                else ""
            )
            c.print(
                f"  resuming: {info['done_before']:,} rows already done{failed}; "
                f"{info['todo']:,} to go"
            )
        if info["invalid"]:
            c.print(f"  [yellow]{info['invalid']:,} invalid rows go to the errors file[/]")
        f = self.forecast
        if f is not None:
            c.print(f"  plan: {_forecast_text(f)} ({f.basis}; {f.path})")
            if None not in (f.concurrency, self.concurrency) and f.concurrency != self.concurrency:
                c.print(
                    f"  [yellow]the plan forecast C={f.concurrency} and this job runs "
                    f"C={self.concurrency} per server: it is a forecast for another load[/]"
                )

    def note(self, text: str, style: str = "") -> None:
        line = f"  [{style}]{text}[/]" if style else f"  {text}"
        self.console.print(line)

    def tick(self, snap: dict[str, Any]) -> None:
        f = self.forecast
        if f is not None:
            snap["plan"] = f.course(
                snap["elapsed_s"], snap.get("eta_s"), snap.get("eta_lo_s"), snap.get("eta_hi_s")
            )
        if self.console.is_terminal:
            if self.live is None:
                self.live = Live(
                    console=self.console, refresh_per_second=4, transient=True, auto_refresh=False
                )
                self.live.start()
            self.live.update(render(snap, self.down_timeout), refresh=True)
            return
        now = time.monotonic()
        if now - self.last_line >= self.every:
            self.last_line = now
            line = orjson.dumps({"event": "progress", **snap}).decode()
            print(line, file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def finished(self, result: JobResult) -> None:
        self.stop()
        if not self.console.is_terminal and result.snapshot and result.status != "nothing_to_do":
            snap = dict(result.snapshot)
            if self.forecast is not None:  # the last line too says where the job ended up
                e = snap.get
                snap["plan"] = self.forecast.course(
                    e("elapsed_s") or 0.0, e("eta_s"), e("eta_lo_s"), e("eta_hi_s")
                )
            line = orjson.dumps({"event": "progress", **snap}).decode()
            print(line, file=sys.stderr, flush=True)
        render_result(result, self.console)
        f = self.forecast
        if f is not None and result.status == "complete" and result.sending_s > 0:
            self.plan_outcome = o = f.outcome(result.sending_s)
            inside = {True: ", inside its bar", False: ", [red]outside its bar[/]", None: ""}
            self.console.print(
                f"  plan: {_forecast_text(f)}; the job took {duration(result.sending_s)}: "
                f"the forecast was {o['error']:+.1%} off{inside[o['inside_bar']]}"
            )


def _with_bar(seconds: float, lo: float | None, hi: float | None, none: str = "") -> str:
    """'5.2 h (4.9 – 5.5 h)', or the time and `none` when there is no bar."""
    bar = f" ({duration_range(lo, hi)})" if lo is not None and hi is not None else none
    return duration(seconds) + bar


def _forecast_text(f: JobForecast) -> str:
    return f"{_with_bar(f.seconds, f.lo_s, f.hi_s, ' (no bar)')} for {f.rows:,} rows"


def _derived(n: int) -> str:
    if not n:
        return ""
    return (
        f" ({n:,} without an 'id': genbench derived a stable one from each row's content, "
        "a hash of its messages)"
    )


def render(snap: dict[str, Any], down_timeout: float | None = None) -> Group:
    total = snap["total"] or 1
    resolved = snap["done"] + snap["failed"]
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=total, completed=resolved, width=40),
        Text(f"{resolved:,}/{snap['total']:,} rows ({resolved / total:.1%})"),
        Text(
            f"failed {snap['failed']:,}  truncated {snap['truncated_this_run']:,}",
            style="red" if snap["failed"] else "",
        ),
    )
    eta = snap.get("eta_s")
    err_s = snap.get("eta_err_s")
    eta_text = "ETA " + duration(eta) + (f" ± {duration(err_s)}" if err_s is not None else "")
    all_down = snap.get("all_down_s")
    if all_down is not None:
        eta_text += "  (held while no server is up)"
    elif eta is not None and snap["remaining"]:
        eta_text += (
            "  (finishes ~" + time.strftime("%a %H:%M", time.localtime(time.time() + eta)) + ")"
        )
    rates = Text(
        f"{number(snap['rows_per_s'], 2)} rows/s   {rate(snap['tokens_per_s'])} "
        f"(thinking {rate(snap['thinking_tokens_per_s'])}, answer "
        f"{rate(snap['answer_tokens_per_s'])})"
    )
    plan = snap.get("plan")
    if plan:
        eta_text += "   plan " + _with_bar(plan["seconds"], plan["lo_s"], plan["hi_s"])
    eta_line = Text(f"{eta_text}   elapsed {duration(snap['elapsed_s'])}")
    course = _course(plan) if plan else None
    t = Table(box=None, padding=(0, 2), show_edge=False)
    for col in ("server", "state", "in flight", "rows/s", "tok/s"):
        t.add_column(col, justify="left" if col in ("server", "state") else "right")
    for s in snap["servers"]:
        state = (
            "[green]up[/]"
            if s["state"] == "up"
            else f"[red]down {duration(s['down_s'])}[/] (polling)"
        )
        t.add_row(
            s["url"],
            state,
            f"{s['in_flight']}/{s['concurrency']}",
            number(s["rows_per_s"], 2),
            rate(s["tokens_per_s"], ""),
        )
    lines = [bar, rates, eta_line] + ([course] if course is not None else [])
    if all_down is None:
        return Group(*lines, t)
    gives_up = f", gives up after {duration(down_timeout)}" if down_timeout else ""
    down_line = Text(f"all servers down for {duration(all_down)}; waiting{gives_up}", style="red")
    return Group(*lines, down_line, t)


def _course(plan: dict[str, Any]) -> Text | None:
    """Where the job is headed against the plan's range, once there is an ETA: a line only
    when it is not inside (`JobForecast.course`)."""
    verdict, on = plan.get("verdict"), plan.get("on_course_s")
    if verdict not in ("outside", "unsure") or on is None:
        return None
    span = duration_range(plan["on_course_lo_s"], plan["on_course_hi_s"])
    plan_range = duration_range(plan["lo_s"], plan["hi_s"])
    way = "slower" if on > plan["hi_s"] else "faster"
    if verdict == "outside":
        return Text(
            f"the job's speed has left the plan's range: it runs {way} than the plan allowed, "
            f"on course for {duration(on)} ({span}) against the plan's {plan_range}",
            style="red",
        )
    return Text(
        f"on course for {duration(on)}, outside the plan's {plan_range} (the ETA's own "
        f"range, {span}, still reaches it)",
        style="yellow",
    )


def render_result(r: JobResult, console: Console) -> None:
    colour = {"complete": "green", "nothing_to_do": "green"}.get(r.status, "red")
    console.print(f"[{colour}]{r.status.replace('_', ' ')}[/]: {r.message}")
    console.print(
        f"  rows: {r.done:,} done, {r.failed:,} failed of {r.total:,}"
        + (
            f" (this run: {r.done_this_run:,} done, {r.failed_this_run:,} failed, "
            f"{r.truncated_this_run:,} cut by max_tokens)"
            if r.done_this_run or r.failed_this_run
            else ""
        )
    )
    if r.sending_s > 0 and r.tokens:
        console.print(
            f"  tokens: {r.tokens:,} ({r.thinking_tokens:,} thinking) in "
            f"{duration(r.sending_s)}: {rate(r.tokens / r.sending_s)}"
        )
    if r.thinking:
        console.print(f"  thinking: {r.thinking}")
    if r.files:
        shown = r.files if len(r.files) <= 3 else [r.files[0], "…", r.files[-1]]
        console.print(f"  data: {len(r.files)} files: {', '.join(shown)}")
    if r.errors_file:
        console.print(f"  failures: {r.errors_file}")
    if r.status in ("interrupted", "servers_down"):
        when = " once they are back" if r.status == "servers_down" else ""
        console.print(
            f"  rerun the same command{when} to resume: finished rows are kept and skipped"
        )


def generate(
    input: Path = typer.Option(
        ..., "--input", "-i", "--prompts", help="The prompt file: .jsonl[.gz] or .parquet."
    ),
    output: Path = typer.Option(..., "--out", "-o", help="Output directory (resumable)."),
    url: list[str] | None = typer.Option(
        None, "--url", help="Server base URL; repeat for several servers."
    ),
    url_file: Path | None = typer.Option(
        None, "--url-file", help="File of servers, one 'URL [CONCURRENCY]' per line."
    ),
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    concurrency: int = typer.Option(
        64, "--concurrency", "-c", help="Requests in flight per server."
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="Output token cap per turn. [default: none]"
    ),
    temperature: float | None = typer.Option(
        None, "--temperature", help="Sampling temperature. [default: the server's]"
    ),
    top_p: float | None = typer.Option(None, "--top-p", help="top_p. [default: the server's]"),
    top_k: int | None = typer.Option(None, "--top-k", help="top_k. [default: the server's]"),
    thinking: bool | None = typer.Option(
        None,
        "--thinking/--no-thinking",
        help="Send chat_template_kwargs.enable_thinking. [default: the server's choice]",
    ),
    param: list[str] | None = typer.Option(
        None, "--param", metavar="KEY=VALUE", help="Any other request field (JSON value)."
    ),
    config: Path | None = typer.Option(
        None, "--config", help="JSON or TOML file of request fields (flags override it)."
    ),
    turns: str = typer.Option(
        "all", "--turns", help="all: regenerate every assistant turn; last: only the final one."
    ),
    tool_policy: str = common.TOOL_POLICY,
    think_tags: str = common.THINK_TAGS,
    think_dialect: str = common.THINK_DIALECT,
    keep_raw: bool = typer.Option(
        False,
        "--keep-raw",
        help="Also write each answer as generated, thinking and tags in it, where genbench "
        "split it (turn field raw; see docs/generate.md).",
    ),
    token_ids: str = typer.Option(
        "auto",
        "--token-ids",
        help="Keep the token ids the server generated, and the prompt's: auto (where the "
        "server gives them), on (refuse a server that cannot), off.",
    ),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or parquet."),
    answers: str = watch.ANSWERS,
    shard_size: str = typer.Option("256MB", "--shard-size", help="Start a new file after this."),
    shard: str | None = typer.Option(
        None, "--shard", metavar="i/N", help="Take only this client's share of the ids."
    ),
    skip_invalid: bool = typer.Option(
        False, "--skip-invalid", help="Write bad input rows to the errors file and go on."
    ),
    retries: int = typer.Option(3, "--retries", help="Retries per row before it fails."),
    retry_backoff: float = typer.Option(
        1.0, "--retry-backoff", help="First retry delay in seconds (doubles each time)."
    ),
    timeout: float = typer.Option(
        600.0, "--timeout", help="Seconds of silence before a request is abandoned."
    ),
    down_timeout: float = typer.Option(
        1800.0, "--down-timeout", help="Stop when every server has been down this long."
    ),
    drain: float = typer.Option(
        10.0, "--drain", help="On Ctrl-C, seconds to let rows in flight finish."
    ),
    truncated: str = typer.Option(
        "keep", "--truncated", help="Rows cut by max_tokens: keep (marked) or error."
    ),
    retry_errors: bool = typer.Option(
        False, "--retry-errors", help="Generate the rows of the errors file again."
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Resume even though the model or sampling changed (rows made before are kept, "
        "listed in stale.jsonl).",
    ),
    input_changed: str | None = typer.Option(
        None,
        "--input-changed",
        help="Done rows whose request changed, or that are no longer in the input: "
        "regenerate (old answers to replaced.jsonl) or keep (listed in stale.jsonl). "
        "[default: refuse, saying which]",
    ),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N rows (a trial)."),
    progress_every: float = typer.Option(
        30.0, "--progress-every", help="Seconds between JSON progress lines off a terminal."
    ),
    plan: Path | None = typer.Option(
        None,
        "--plan",
        help="A plan.json (or its directory) from genbench plan: its forecast beside the "
        "live ETA, and at the end how far off it was.",
    ),
    metrics_port: int | None = watch.METRICS_PORT,
    metrics_host: str = watch.METRICS_HOST,
    json: bool = common.JSON,
) -> None:
    """Regenerate a prompt file with the target model: resumable, exactly once, many servers."""
    for name, v in (
        ("--concurrency", concurrency),
        ("--max-tokens", max_tokens),
        ("--timeout", timeout),
        ("--down-timeout", down_timeout),
        ("--limit", limit),
        ("--progress-every", progress_every),
    ):
        common.positive(name, v)
    if retries < 0 or retry_backoff < 0 or drain < 0:
        raise UsageError("--retries, --retry-backoff and --drain must be 0 or more")
    _choice("--turns", turns, ("all", "last"))
    _choice("--tool-policy", tool_policy, POLICIES)
    _choice("--format", fmt, ("jsonl", "parquet"))
    _choice("--truncated", truncated, ("keep", "error"))
    fmt, turns = watch.answers_format(answers, fmt, input, turns)
    if watch.is_batch_file(input):
        tool_policy = "keep"  # a Batch line's calls and results too: nothing replayed
    _choice("--token-ids", token_ids, ("auto", "on", "off"))
    if input_changed is not None:
        _choice("--input-changed", input_changed, ("regenerate", "keep"))
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError(
                "--format parquet needs pyarrow: pip install 'genbench[parquet]'"
            ) from None
    plan_doc = read_plan(plan) if plan is not None else None
    servers = [ServerSpec(u, concurrency) for u in url or []]
    if url_file is not None:
        servers += read_url_file(url_file, concurrency)
    if not servers:
        raise UsageError("no server: give --url URL (repeatable) or --url-file FILE")
    if plan_doc is not None:
        job_forecast(plan_doc, 1, len(servers))  # a plan without a usable forecast fails now
    from genbench.transport.endpoint import Endpoint

    for s in servers:
        Endpoint.parse(s.url)  # a bad URL fails now, with its own message
    common.descriptors(sum(s.concurrency for s in servers), len(servers), "-c/--concurrency")
    params = job_params(
        config=config,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        max_tokens=max_tokens,
        thinking=thinking,
        extra=param,
    )
    cfg = JobConfig(
        input=input,
        output=output,
        servers=servers,
        api_key=load_api_key(api_key_env, api_key_file),
        model=model,
        params=params,
        turns=turns,
        tool_policy=tool_policy,
        fmt=fmt,
        shard=ShardSpec.parse(shard) if shard else None,
        shard_bytes=parse_size(shard_size),
        skip_invalid=skip_invalid,
        retries=retries,
        retry_backoff=retry_backoff,
        timeout=timeout,
        down_timeout=down_timeout,
        drain=drain,
        on_truncated=truncated,
        retry_errors=retry_errors,
        force=force,
        input_changed=input_changed,
        limit=limit,
        think_tags=common.think_tags(think_tags),
        think_dialect=common.think_dialect(think_dialect),
        keep_raw=keep_raw,
        token_ids=token_ids,
    )
    console = err if json else out
    where = f" (shard {cfg.shard.index}/{cfg.shard.count})" if cfg.shard else ""
    console.print(f"[bold]genbench generate[/] {input} → {output}{where}")
    cs = {s.concurrency for s in servers}
    listener = ConsoleListener(
        console,
        progress_every,
        json,
        plan_doc,
        len(servers),
        cs.pop() if len(cs) == 1 else None,
        down_timeout,
    )
    heard, exporter = watch.listeners(listener, cfg, metrics_host, metrics_port, console)
    try:
        result = common.run_async(run_job(cfg, heard))
    finally:
        listener.stop()
        watch.stop(exporter)
    watch.batch_output(cfg, answers, console)
    if json:
        doc = {**asdict(result), "exit_code": result.exit_code}
        if listener.forecast is not None:
            doc["plan"] = listener.plan_outcome or asdict(listener.forecast)
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"{flag} '{value}': expected one of {', '.join(allowed)}")
