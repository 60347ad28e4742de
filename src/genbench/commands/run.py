"""`genbench run`: the benchmark, with a live display and a summary table."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, TypeVar

import orjson
import typer
from rich.console import Console

from genbench.check.server_metrics import metrics_target
from genbench.commands import common
from genbench.commands.console import err, out
from genbench.errors import ExitCode, UsageError
from genbench.run.benchmark import RunConfig, default_out_dir, execute_run
from genbench.run.render import RunConsole, render_repeats, render_summary

T = TypeVar("T")


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


def checked_metrics_urls(urls: list[str]) -> list[str]:
    for u in urls:
        try:
            metrics_target(u)
        except UsageError as e:
            raise UsageError(f"--metrics-url: {e}".replace("--url ", "")) from None
    return list(urls)


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
    thinking: bool | None = typer.Option(
        None,
        "--thinking/--no-thinking",
        help="Send chat_template_kwargs.enable_thinking. [default: the server's choice]",
    ),
    think_tags: str = common.THINK_TAGS,
    think_dialect: str = common.THINK_DIALECT,
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
    metrics_url: list[str] | None = typer.Option(
        None,
        "--metrics-url",
        metavar="URL",
        help="A worker's /metrics, summed with the other --metrics-url's per phase (servers "
        "behind a router); repeatable. [default: the server's own /metrics]",
    ),
    prompts: Path | None = typer.Option(
        None,
        "--workload",
        metavar="FILE",
        help="A prompt file (JSONL or Parquet, as generate's): its requests, one per assistant "
        "turn with the history before it (an agentic row's tools, calls and results too), "
        "in place of the built-in prompts. [default: the built-in prompts]",
    ),
    versus: list[str] | None = typer.Option(
        None,
        "--versus",
        metavar="URL",
        help="Also run against URL, alternating repeats with --url (OUT/a, OUT/b, …).",
    ),
) -> None:
    """Benchmark a server: warm-up, single stream by output length, concurrency sweep."""
    cfg = RunConfig(natural=natural, temperature=temperature, timeout=timeout, thinking=thinking)
    cfg.think_tags = list(common.think_tags(think_tags))
    cfg.think_dialect = common.think_dialect(think_dialect)
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
    cfg.metrics_urls = checked_metrics_urls(metrics_url or [])
    cfg.prompts = str(prompts) if prompts is not None else None
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
        listener = RunConsole(console)
        console.print(f"[bold]genbench run[/] {ep.base_url} → {out_path}")
        state = _drive(execute_run(ep, model, cfg, out_path, listener, extra), listener, out_path)
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
    from genbench.run.repeats import execute_repeats

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
        listener = RunConsole(console)
        for _, ep, d in targets:
            console.print(f"[bold]genbench run[/] {ep.base_url} → {d}/repeat-1 … {repeats}")
        sides = _drive(
            execute_repeats(targets, model, cfg, repeats, listener, extra), listener, out_path
        )
    dirs = [d for _, _, d in targets]
    if len(dirs) > 1:
        from genbench.commands.compare import print_comparison
        from genbench.compare.rule import compare
        from genbench.compare.runs import load_sides

        print_comparison(compare(load_sides(dirs)), console)
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


def _drive(coro: Coroutine[Any, Any, T], listener: RunConsole, out_path: Path) -> T:
    """Run the measurement; on Ctrl-C stop the live display, say where the partial results
    are, and exit 130."""
    try:
        return common.run_async(coro)
    except (KeyboardInterrupt, asyncio.CancelledError):
        listener._stop()
        err.print(f"[red]interrupted[/]: partial results saved in {out_path}")
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    finally:
        listener._stop()
