"""`genbench run`: the benchmark, with a live display and a summary table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from genbench.commands import common
from genbench.commands.console import err, out
from genbench.run.flags import RunArgs, default_text, run_config
from genbench.run.render import RunConsole, print_outcome
from genbench.run.session import RunInterrupted, run_benchmark, run_served

# one per field of RunArgs (run/flags.py), in --help's order: its typer option, or
# (default, help) for an option spelled as its field is (common.signature)
OPTIONS: dict[str, Any] = {
    "url": common.URL,
    "serve": common.SERVE,
    "engine_start_timeout": common.ENGINE_START_TIMEOUT,
    "model": common.MODEL,
    "api_key_env": common.KEY_ENV,
    "api_key_file": common.KEY_FILE,
    "lengths": (None, f"Single-stream output lengths, comma-separated. {default_text('lengths')}",
                "N,..."),
    "concurrency": typer.Option(
        None, "--concurrency", "-c", metavar="C,...|auto", help=
        "Requests in flight: one or a comma-separated list to "
        "sweep, or auto: double from 1 until throughput stops rising or the server says it is "
        "full (the knee). " + default_text("concurrency"),
    ),
    "shape": ("burst,sustained", "Sweep load shapes, comma-separated."),
    "sweep_tokens": (None, f"Output tokens per sweep request. {default_text('sweep_tokens')}"),
    "requests_per_slot": (None, "Sustained: K·C requests per concurrency C. "
                          + default_text("requests_per_slot")),
    "duration": (None, "Sustained: seconds per concurrency instead of --requests-per-slot. "
                 + default_text("duration")),
    "prompts_per_length": (None, "Requests per single-stream length. "
                           + default_text("prompts_per_length")),
    "warmup": (None, f"Warm-up requests, discarded. {default_text('warmup')}"),
    "warmup_tokens": (None, f"max_tokens of a warm-up request. {default_text('warmup_tokens')}"),
    "natural": (False, "Let the model stop on its own instead of forcing each length."),
    "temperature": (None, "Sampling temperature, as plan's and generate's. [default: the "
                    "server's]"),
    "timeout": (600.0, "Seconds of silence before a request is abandoned."),
    "extra_body": typer.Option(
        None, "--extra-body", metavar="JSON", help='Fields merged into every request, e.g. '
        '\'{"chat_template_kwargs": {"enable_thinking": false}}\'.',
    ),
    "thinking": typer.Option(
        None, "--thinking/--no-thinking",
        help="Send chat_template_kwargs.enable_thinking. [default: the server's choice]",
    ),
    "think_tags": common.THINK_TAGS,
    "think_dialect": common.THINK_DIALECT,
    "skip": typer.Option("", "--skip", show_default=False,
                         help="Phases to skip, comma-separated: warmup,single,sweep."),
    "quick": (False, "A short run: fewer lengths and levels."),
    "out_dir": typer.Option(
        None, "--out", "-o", metavar="DIR",
        help="Result directory. [default: genbench-runs/TIME-MODEL]"
    ),
    "json": common.JSON,
    "report": (False, "Also write report.html beside result.json."),
    "repeat": typer.Option(1, "--repeat", metavar="N", help="Run it all N times (OUT/repeat-1 "
                           "…), so compare measures the drift between runs."),
    "metrics_url": typer.Option(
        None, "--metrics-url", metavar="URL", help="A worker's /metrics, summed with the other "
        "--metrics-url's per phase (servers behind a router); repeatable. [default: the "
        "server's own /metrics]",
    ),
    "input": typer.Option(
        None, "--input", "-i", metavar="FILE", help=
        "The prompt file (JSONL or Parquet, as generate's): its "
        "requests, one per assistant turn with the history before it (an agentic row's tools, "
        "calls and results too), in place of the built-in prompts. [default: the built-in "
        "prompts]",
    ),
    "versus": typer.Option(
        None, "--versus", metavar="URL",
        help="Also run against URL, alternating repeats with --url (OUT/a, OUT/b, …).",
    ),
}  # fmt: skip


def run(**options: Any) -> None:
    """Benchmark a server: warm-up, single stream by output length, concurrency sweep."""
    a = RunArgs(**options)
    cfg = run_config(a)  # every option checked
    most = cfg.climb_max if cfg.climb else max(cfg.concurrency)
    common.descriptors(1 if "sweep" in cfg.skip else most)
    console = err if a.json else out
    urls = [a.url, *(a.versus or [])] if a.url else []
    keys, repeated = (a.api_key_env, a.api_key_file), a.repeat > 1 or bool(a.versus)
    try:
        if a.serve:
            done = run_served(a.serve, a.model, keys, cfg, a.out_dir, RunConsole(console),
                              a.engine_start_timeout, common.loading(console))  # fmt: skip
        else:
            done = run_benchmark(urls, a.model, keys, cfg, a.repeat, a.out_dir,
                                 RunConsole(console), repeated)  # fmt: skip
    except RunInterrupted as e:
        err.print(f"[red]interrupted[/]: {e}")
        raise typer.Exit(e.exit_code) from None
    if len(done.dirs) > 1:
        _compare_sides(done.dirs, console)
    print_outcome(done, console)
    if (a.serve and len(a.serve) > 1) or (a.versus and a.repeat == 1):
        console.print(f"the faster configuration for a job: genbench plan --from {done.out}")
    if a.report:
        from genbench.report import write_report

        console.print(f"report: {write_report(done.dirs, done.out / 'report.html')}")
    if a.json:
        common.print_json(done.to_json())


run.__signature__ = common.signature(RunArgs, OPTIONS)  # type: ignore[attr-defined]


def _compare_sides(dirs: list[Path], console: Console) -> None:
    """--versus: the sides compared, as `genbench compare OUT/a OUT/b` prints them."""
    from genbench.compare.render import print_comparison
    from genbench.compare.rule import compare
    from genbench.compare.runs import load_sides

    print_comparison(compare(load_sides(dirs)), console)
