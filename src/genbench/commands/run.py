"""`genbench run`: the benchmark, with a live display and a summary table."""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from genbench.commands import common
from genbench.console import err, out
from genbench.errors import ExitCode, UsageError
from genbench.fmt import duration, ms, pct, rate
from genbench.records import RequestRecord
from genbench.run import Listener, Phase, RunConfig, default_out_dir, execute_run


def parse_int_list(flag: str, text: str) -> list[int]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"{flag} '{text}' is empty: expected numbers like 1,4,8")
    out_: list[int] = []
    for t in items:
        try:
            v = int(t)
        except ValueError:
            raise UsageError(f"{flag}: '{t}' is not a whole number (in '{text}')") from None
        if v <= 0:
            raise UsageError(f"{flag}: {v} must be positive (in '{text}')")
        out_.append(v)
    return out_


def parse_extra_body(text: str) -> dict[str, Any]:
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise UsageError(f"--extra-body is not valid JSON ({e}): {text!r}") from None
    if not isinstance(body, dict):
        raise UsageError(f"--extra-body must be a JSON object, got {text!r}")
    reserved = {"model", "messages", "stream", "stream_options"} & body.keys()
    if reserved:
        raise UsageError(f"--extra-body may not set {', '.join(sorted(reserved))}")
    return body


class ConsoleListener(Listener):
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
        self.console.print(f"  [green]✓[/] {phase.name:<16} {head}, {s.ok} requests{fail}")
        for note in phase.notes:
            self.console.print(f"      [yellow]note:[/] {note}")

    def note(self, text: str) -> None:
        self.console.print(f"  [dim]{text}[/]")

    def _stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


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
    phases = doc["phases"]
    singles = [p for p in phases if p["kind"] == "single"]
    if singles:
        t = Table(title="single stream", title_justify="left")
        for col in ("output tokens", "decode tok/s", "e2e tok/s", "TTFT", "requests", "forced"):
            t.add_column(col, justify="right")
        for p in singles:
            s = p["summary"]
            forced = {True: "yes", False: "[red]no[/]", None: "natural"}[p["length_forced"]]
            t.add_row(
                str(p["max_tokens"]),
                rate(s["decode_tps"]["mean"], ""),
                rate(s["output_tps"], ""),
                ms(s["ttft_s"]["mean"]),
                _fails(s),
                forced,
            )
        console.print(t)
    _sweep_table(doc, console)
    spec = [p for p in phases if (p.get("server_metrics") or {}).get("spec_mean_acceptance_length")]
    for p in spec:
        m = p["server_metrics"]
        console.print(
            f"  speculative decoding {p['name']}: acceptance "
            f"{m['spec_acceptance_rate']:.1%}, mean acceptance length "
            f"{m['spec_mean_acceptance_length']:.2f}"
        )
    estimated = [p["name"] for p in phases if p["summary"].get("tokens_estimated")]
    if estimated:
        console.print(
            f"  [yellow]token counts estimated[/] in {len(estimated)} of {len(phases)} phases: "
            "the server sent no usage in its streams, so tokens are counted as one per chunk "
            "(exact without speculative decoding; low with it)"
        )
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
    for col in (
        "C",
        "burst tok/s",
        "sustained tok/s",
        "per-req tok/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "TPOT p50",
        "requests",
    ):
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
    for shape, info in (doc.get("sweep") or {}).items():
        if info.get("knee"):
            console.print(
                f"  {shape}: throughput stops growing after C={info['knee']} (next step adds < 10%)"
            )
    if any(p["kind"] == "sustained" and p["summary"].get("steady_stable") is False for p in phases):
        console.print(
            "  * steady window unstable (halves differ > 5%): use more --requests-per-slot "
            "or --duration"
        )


def local_defaults(cfg: RunConfig, quick: bool) -> None:
    """The local demo target is a CPU model: shorter outputs keep the default run in minutes."""
    cfg.lengths = [128, 256] if quick else [128, 256, 512]
    cfg.concurrency = [1, 4, 16] if quick else [1, 4, 8, 16, 32]
    cfg.sweep_tokens = 64 if quick else 128
    cfg.prompts_per_length = 2 if quick else 3
    cfg.requests_per_slot = 2 if quick else 3
    cfg.warmup = 1


def quick_defaults(cfg: RunConfig) -> None:
    cfg.lengths = [256, 1024]
    cfg.concurrency = [1, 8, 32]
    cfg.sweep_tokens = 256
    cfg.prompts_per_length = 2
    cfg.requests_per_slot = 2
    cfg.warmup = 1


def _default(attr: str) -> str:
    """'[default: 1024,2048,4096; --quick 256,1024; local demo 128,256,512]', read from the
    configs themselves so the help cannot drift from what a run does."""
    plain, quick, local = RunConfig(), RunConfig(), RunConfig()
    quick_defaults(quick)
    local_defaults(local, quick=False)

    def text(cfg: RunConfig) -> str:
        v = getattr(cfg, attr)
        return ",".join(map(str, v)) if isinstance(v, list) else str(v)

    parts = [text(plain)]
    if text(quick) != text(plain):
        parts.append(f"--quick {text(quick)}")
    if text(local) != text(plain):
        parts.append(f"local demo {text(local)}")
    return f"[default: {'; '.join(parts)}]"


def run(
    url: str | None = common.URL,
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    lengths: str | None = typer.Option(
        None,
        "--lengths",
        help=f"Single-stream output lengths, comma-separated. {_default('lengths')}",
    ),
    concurrency: str | None = typer.Option(
        None,
        "--concurrency",
        "-c",
        help="Requests in flight: one or a comma-separated list to sweep. "
        + _default("concurrency"),
    ),
    shape: str = typer.Option(
        "burst,sustained", "--shape", help="Sweep load shapes, comma-separated."
    ),
    sweep_tokens: int | None = typer.Option(
        None,
        "--sweep-tokens",
        help=f"Output tokens per sweep request. {_default('sweep_tokens')}",
    ),
    requests_per_slot: int | None = typer.Option(
        None,
        "--requests-per-slot",
        help=f"Sustained: K·C requests per concurrency C. {_default('requests_per_slot')}",
    ),
    duration: float | None = typer.Option(
        None,
        "--duration",
        help="Sustained: seconds per concurrency instead of --requests-per-slot.",
    ),
    prompts_per_length: int | None = typer.Option(
        None,
        "--prompts-per-length",
        help=f"Requests per single-stream length. {_default('prompts_per_length')}",
    ),
    warmup: int | None = typer.Option(
        None, "--warmup", help=f"Warm-up requests, discarded. {_default('warmup')}"
    ),
    warmup_tokens: int | None = typer.Option(
        None,
        "--warmup-tokens",
        help=f"max_tokens of a warm-up request. {_default('warmup_tokens')}",
    ),
    natural: bool = typer.Option(
        False, "--natural", help="Let the model stop on its own instead of forcing each length."
    ),
    temperature: float = typer.Option(0.0, "--temperature", help="Sampling temperature."),
    timeout: float = typer.Option(
        600.0, "--timeout", help="Seconds of silence before a request is abandoned."
    ),
    extra_body: str | None = typer.Option(
        None,
        "--extra-body",
        metavar="JSON",
        help='Fields merged into every request, e.g. \'{"chat_template_kwargs": '
        '{"enable_thinking": false}}\'.',
    ),
    skip: str = typer.Option(
        "",
        "--skip",
        help="Phases to skip, comma-separated: warmup,single,sweep.",
        show_default=False,
    ),
    quick: bool = typer.Option(False, "--quick", help="A short run: fewer lengths and levels."),
    out_dir: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Result directory. [default: genbench-runs/TIME-MODEL]",
    ),
    json: bool = common.JSON,
    report: bool = typer.Option(
        False, "--report", help="Also write report.html beside result.json."
    ),
    repeat: int = typer.Option(
        1,
        "--repeat",
        metavar="N",
        help="Run it all N times (OUT/repeat-1 …), so compare measures the drift between runs.",
    ),
    versus: list[str] | None = typer.Option(
        None,
        "--versus",
        metavar="URL",
        help="Also run against URL, alternating repeats with --url (OUT/a, OUT/b, …).",
    ),
) -> None:
    """Benchmark a server: warm-up, single stream by output length, concurrency sweep."""
    cfg = RunConfig(natural=natural, temperature=temperature, timeout=timeout)
    local = url is None
    if local:
        local_defaults(cfg, quick)
    elif quick:
        quick_defaults(cfg)
    if lengths is not None:
        cfg.lengths = parse_int_list("--lengths", lengths)
    if concurrency is not None:
        cfg.concurrency = parse_int_list("--concurrency", concurrency)
    cfg.shapes = [s.strip() for s in shape.split(",") if s.strip()]
    cfg.skip = [s.strip() for s in skip.split(",") if s.strip()]
    for s in cfg.skip:
        if s not in ("warmup", "single", "sweep"):
            raise UsageError(f"--skip: '{s}' is not one of warmup, single, sweep")
    for name, v in (
        ("sweep_tokens", sweep_tokens),
        ("requests_per_slot", requests_per_slot),
        ("duration", duration),
        ("prompts_per_length", prompts_per_length),
        ("warmup", warmup),
        ("warmup_tokens", warmup_tokens),
    ):
        if v is not None:
            setattr(cfg, name, v)
    if extra_body is not None:
        cfg.extra_body = parse_extra_body(extra_body)
    cfg.validate()
    common.descriptors(1 if "sweep" in cfg.skip else max(cfg.concurrency))
    console = err if json else out
    if repeat < 1:
        raise UsageError(f"--repeat must be 1 or more, got {repeat}")
    if versus and local:
        raise UsageError("--versus needs --url: the server to alternate with")
    if repeat > 1 or versus:
        urls = [url, *(versus or [])] if url else []
        keys = (api_key_env, api_key_file)
        run_repeats(urls, model, keys, cfg, repeat, out_dir, console, json=json, report=report)
        return
    ctx: AbstractContextManager[Any] = nullcontext()
    extra: dict[str, Any] = {}
    if local:
        from genbench.local.llamacpp import LocalLlamaServer

        console.print(
            "[yellow]no --url: starting the local demo target (llama.cpp, tiny "
            "random-weight model built by genbench)[/]"
        )
        ctx = LocalLlamaServer(n_parallel=max(cfg.concurrency))
        extra["local_demo"] = True
    with ctx as server:
        if local:
            url = server.base_url
        assert url is not None
        ep = common.endpoint(url, api_key_env, api_key_file)
        out_path = out_dir or default_out_dir(model or ("local" if local else None))
        listener = ConsoleListener(console)
        console.print(f"[bold]genbench run[/] {ep.base_url} → {out_path}")
        try:
            state = common.run_async(execute_run(ep, model, cfg, out_path, listener, extra))
        except (KeyboardInterrupt, asyncio.CancelledError):
            listener._stop()
            err.print(f"[red]interrupted[/]: partial results saved in {out_path}")
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        finally:
            listener._stop()
    render_summary(state.doc, console)
    console.print(f"results: {out_path / 'result.json'}, {out_path / 'requests.jsonl'}")
    if report:
        from genbench.report import write_report

        console.print(f"report: {write_report([out_path], out_path / 'report.html')}")
    if json:
        typer.echo(orjson.dumps(state.doc, option=orjson.OPT_INDENT_2).decode())


def run_repeats(
    urls: list[str],
    model: str | None,
    keys: tuple[str, Path | None],
    cfg: RunConfig,
    repeats: int,
    out_dir: Path | None,
    console: Console,
    *,
    json: bool,
    report: bool,
) -> None:
    """`--repeat N` / `--versus URL`: the whole run N times per server, alternating servers.

    One server: OUT/repeat-1 … OUT/repeat-N. Several (--url A --versus B): OUT/a/repeat-i
    and OUT/b/repeat-i, run A1 B1 A2 B2 …, so a drift of the host hits both alike; then the
    comparison, as `genbench compare OUT/a OUT/b` prints it."""
    from genbench.run import execute_repeats

    ctx: AbstractContextManager[Any] = nullcontext()
    extra: dict[str, Any] = {}
    if not urls:
        from genbench.local.llamacpp import LocalLlamaServer

        console.print(
            "[yellow]no --url: starting the local demo target (llama.cpp, tiny "
            "random-weight model built by genbench)[/]"
        )
        ctx = LocalLlamaServer(n_parallel=max(cfg.concurrency))
        extra["local_demo"] = True
    with ctx as server:
        eps = [common.endpoint(u, *keys) for u in (urls or [server.base_url])]
        out_path = out_dir or default_out_dir(model or ("local" if not urls else None))
        labels = [chr(ord("a") + i) for i in range(len(eps))] if len(eps) > 1 else [""]
        targets = [
            (label, ep, out_path / label if label else out_path)
            for label, ep in zip(labels, eps, strict=True)
        ]
        listener = ConsoleListener(console)
        for _, ep, d in targets:
            console.print(f"[bold]genbench run[/] {ep.base_url} → {d}/repeat-1 … {repeats}")
        try:
            sides = common.run_async(execute_repeats(targets, model, cfg, repeats, listener, extra))
        except (KeyboardInterrupt, asyncio.CancelledError):
            listener._stop()
            err.print(f"[red]interrupted[/]: partial results saved in {out_path}")
            raise typer.Exit(ExitCode.INTERRUPTED) from None
        finally:
            listener._stop()
    dirs = [d for _, _, d in targets]
    if len(dirs) > 1:
        from genbench.commands.compare import render
        from genbench.compare import compare
        from genbench.report.runs import load_sides

        render(compare(load_sides(dirs)), console)
    else:
        render_repeats([s.doc for s in sides[0]], console)
    console.print(f"results: {', '.join(str(d) for d in dirs)} ({repeats} repeats each)")
    if report:
        from genbench.report import write_report

        console.print(f"report: {write_report(dirs, out_path / 'report.html')}")
    if json:
        doc = {
            "sides": [
                {"label": label or None, "dir": str(d), "repeats": [s.doc for s in states]}
                for (label, _, d), states in zip(targets, sides, strict=True)
            ]
        }
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())


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
