"""`genbench run`: the benchmark, with a live display and a summary table."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from genbench.commands import common
from genbench.commands.console import err, out
from genbench.errors import UsageError
from genbench.run.flags import CONFIG_FLAGS, default_text, run_config
from genbench.run.render import RunConsole, print_outcome
from genbench.run.session import RunInterrupted, run_benchmark, run_served

LENGTHS = typer.Option(
    None,
    "--lengths",
    help=f"Single-stream output lengths, comma-separated. {default_text('lengths')}",
)
CONCURRENCY = typer.Option(
    None,
    "--concurrency",
    "-c",
    help="Requests in flight: one or a comma-separated list to sweep, or auto: double from "
    "1 until throughput stops rising or the server says it is full (the knee). "
    + default_text("concurrency"),
)
SHAPE = typer.Option("burst,sustained", "--shape", help="Sweep load shapes, comma-separated.")
SWEEP_TOKENS = typer.Option(
    None,
    "--sweep-tokens",
    help=f"Output tokens per sweep request. {default_text('sweep_tokens')}",
)
REQUESTS_PER_SLOT = typer.Option(
    None,
    "--requests-per-slot",
    help=f"Sustained: K·C requests per concurrency C. {default_text('requests_per_slot')}",
)
DURATION = typer.Option(
    None,
    "--duration",
    help="Sustained: seconds per concurrency instead of --requests-per-slot. "
    f"{default_text('duration')}",
)
PROMPTS_PER_LENGTH = typer.Option(
    None,
    "--prompts-per-length",
    help=f"Requests per single-stream length. {default_text('prompts_per_length')}",
)
WARMUP = typer.Option(
    None, "--warmup", help=f"Warm-up requests, discarded. {default_text('warmup')}"
)
WARMUP_TOKENS = typer.Option(
    None,
    "--warmup-tokens",
    help=f"max_tokens of a warm-up request. {default_text('warmup_tokens')}",
)
NATURAL = typer.Option(
    False, "--natural", help="Let the model stop on its own instead of forcing each length."
)
TEMPERATURE = typer.Option(
    None,
    "--temperature",
    help="Sampling temperature, as plan's and generate's. [default: the server's]",
)
TIMEOUT = typer.Option(600.0, "--timeout", help="Seconds of silence before a request is abandoned.")
EXTRA_BODY = typer.Option(
    None,
    "--extra-body",
    metavar="JSON",
    help='Fields merged into every request, e.g. \'{"chat_template_kwargs": '
    '{"enable_thinking": false}}\'.',
)
THINKING = typer.Option(
    None,
    "--thinking/--no-thinking",
    help="Send chat_template_kwargs.enable_thinking. [default: the server's choice]",
)
SKIP = typer.Option(
    "",
    "--skip",
    help="Phases to skip, comma-separated: warmup,single,sweep.",
    show_default=False,
)
QUICK = typer.Option(False, "--quick", help="A short run: fewer lengths and levels.")
OUT_DIR = typer.Option(
    None,
    "--out",
    "-o",
    help="Result directory. [default: genbench-runs/TIME-MODEL]",
)
REPORT = typer.Option(False, "--report", help="Also write report.html beside result.json.")
REPEAT = typer.Option(
    1,
    "--repeat",
    metavar="N",
    help="Run it all N times (OUT/repeat-1 …), so compare measures the drift between runs.",
)
METRICS_URL = typer.Option(
    None,
    "--metrics-url",
    metavar="URL",
    help="A worker's /metrics, summed with the other --metrics-url's per phase (servers "
    "behind a router); repeatable. [default: the server's own /metrics]",
)
PROMPTS = typer.Option(
    None,
    "--workload",
    metavar="FILE",
    help="A prompt file (JSONL or Parquet, as generate's): its requests, one per assistant "
    "turn with the history before it (an agentic row's tools, calls and results too), "
    "in place of the built-in prompts. [default: the built-in prompts]",
)
VERSUS = typer.Option(
    None,
    "--versus",
    metavar="URL",
    help="Also run against URL, alternating repeats with --url (OUT/a, OUT/b, …).",
)


def run(
    url: str | None = common.URL,
    serve: list[str] | None = common.SERVE,
    engine_start_timeout: float = common.ENGINE_START_TIMEOUT,
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    lengths: str | None = LENGTHS,
    concurrency: str | None = CONCURRENCY,
    shape: str = SHAPE,
    sweep_tokens: int | None = SWEEP_TOKENS,
    requests_per_slot: int | None = REQUESTS_PER_SLOT,
    duration: float | None = DURATION,
    prompts_per_length: int | None = PROMPTS_PER_LENGTH,
    warmup: int | None = WARMUP,
    warmup_tokens: int | None = WARMUP_TOKENS,
    natural: bool = NATURAL,
    temperature: float | None = TEMPERATURE,
    timeout: float = TIMEOUT,
    extra_body: str | None = EXTRA_BODY,
    thinking: bool | None = THINKING,
    think_tags: str = common.THINK_TAGS,
    think_dialect: str = common.THINK_DIALECT,
    skip: str = SKIP,
    quick: bool = QUICK,
    out_dir: Path | None = OUT_DIR,
    json: bool = common.JSON,
    report: bool = REPORT,
    repeat: int = REPEAT,
    metrics_url: list[str] | None = METRICS_URL,
    prompts: Path | None = PROMPTS,
    versus: list[str] | None = VERSUS,
) -> None:
    """Benchmark a server: warm-up, single stream by output length, concurrency sweep."""
    flags = dict(locals())  # every option above, by name
    cfg = run_config(**{k: flags[k] for k in CONFIG_FLAGS})
    most = cfg.climb_max if cfg.climb else max(cfg.concurrency)
    common.descriptors(1 if "sweep" in cfg.skip else most)
    console = err if json else out
    if repeat < 1:
        raise UsageError(f"--repeat must be 1 or more, got {repeat}")
    if versus and url is None:
        raise UsageError("--versus needs --url: the server to alternate with")
    urls = [url, *(versus or [])] if url else []
    keys, repeated = (api_key_env, api_key_file), repeat > 1 or bool(versus)
    if serve and (urls or repeat > 1):
        raise UsageError("--serve runs each engine once, in turn: not with --url or --repeat")
    common.positive("--engine-start-timeout", engine_start_timeout)
    try:
        if serve:
            done = run_served(serve, model, keys, cfg, out_dir, RunConsole(console),
                              engine_start_timeout, common.loading(console))  # fmt: skip
        else:
            done = run_benchmark(urls, model, keys, cfg, repeat, out_dir, RunConsole(console),
                                 repeated)  # fmt: skip
    except RunInterrupted as e:
        err.print(f"[red]interrupted[/]: {e}")
        raise typer.Exit(e.exit_code) from None
    if len(done.dirs) > 1:
        _compare_sides(done.dirs, console)
    print_outcome(done, console)
    if (serve and len(serve) > 1) or (versus and repeat == 1):
        console.print(f"the faster configuration for a job: genbench plan --from {done.out}")
    if report:
        from genbench.report import write_report

        console.print(f"report: {write_report(done.dirs, done.out / 'report.html')}")
    if json:
        common.print_json(done.to_json())


def _compare_sides(dirs: list[Path], console: Console) -> None:
    """--versus: the sides compared, as `genbench compare OUT/a OUT/b` prints them."""
    from genbench.compare.render import print_comparison
    from genbench.compare.rule import compare
    from genbench.compare.runs import load_sides

    print_comparison(compare(load_sides(dirs)), console)
