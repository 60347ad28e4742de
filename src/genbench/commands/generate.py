"""`genbench generate`: regenerate a prompt file with the target model, resumably.

Its options, checked into the job's config (genbench.generate.flags); the job run; its
console (genbench.generate.render: the live panel, or JSON progress lines off a terminal).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import orjson
import typer

from genbench.commands import common, watch
from genbench.commands.console import err, out
from genbench.generate.flags import job_config
from genbench.generate.job import run_job
from genbench.generate.render import JobConsole, one_concurrency, print_start
from genbench.plan.document import job_forecast, read_plan

INPUT = typer.Option(
    ..., "--input", "-i", "--prompts", help="The prompt file: .jsonl[.gz] or .parquet."
    )
OUTPUT = typer.Option(..., "--out", "-o", help="Output directory (resumable).")
URL = typer.Option(
    None, "--url", help="Server base URL; repeat for several servers."
    )
URL_FILE = typer.Option(
    None, "--url-file", help="File of servers, one 'URL [CONCURRENCY]' per line."
    )
CONCURRENCY = typer.Option(
    64, "--concurrency", "-c", help="Requests in flight per server."
    )
TURNS = typer.Option(
    "all", "--turns", help="all: regenerate every assistant turn; last: only the final one."
    )
KEEP_RAW = typer.Option(
    False,
    "--keep-raw",
    help="Also write each answer as generated, thinking and tags in it, where genbench "
    "split it (turn field raw; see docs/generate.md).",
    )
TOKEN_IDS = typer.Option(
    "auto",
    "--token-ids",
    help="Keep the token ids the server generated, and the prompt's: auto (where the "
    "server gives them), on (refuse a server that cannot), off.",
    )
FMT = typer.Option("jsonl", "--format", help="jsonl or parquet.")
SHARD_SIZE = typer.Option("256MB", "--shard-size", help="Start a new file after this.")
SHARD = typer.Option(
    None,
    "--shard",
    metavar="i/N|auto",
    help="Take only this client's share of the ids; auto: from SLURM_ARRAY_TASK_ID, "
    "JOB_COMPLETION_INDEX (auto/N) or RANK (docs/cluster.md).",
    )
SKIP_INVALID = typer.Option(
    False, "--skip-invalid", help="Write bad input rows to the errors file and go on."
    )
RETRIES = typer.Option(3, "--retries", help="Retries per row before it fails.")
RETRY_BACKOFF = typer.Option(
    1.0, "--retry-backoff", help="First retry delay in seconds (doubles each time)."
    )
TIMEOUT = typer.Option(
    600.0, "--timeout", help="Seconds of silence before a request is abandoned."
    )
DOWN_TIMEOUT = typer.Option(
    1800.0, "--down-timeout", help="Stop when every server has been down this long."
    )
DRAIN = typer.Option(
    10.0, "--drain", help="On Ctrl-C, seconds to let rows in flight finish."
    )
TRUNCATED = typer.Option(
    "keep", "--truncated", help="Rows cut by max_tokens: keep (marked) or error."
    )
RETRY_ERRORS = typer.Option(
    False, "--retry-errors", help="Generate the rows of the errors file again."
    )
FORCE = typer.Option(
    False,
    "--force",
    help="Resume even though the model or sampling changed (rows made before are kept, "
    "listed in stale.jsonl).",
    )
INPUT_CHANGED = typer.Option(
    None,
    "--input-changed",
    help="Done rows whose request changed, or that are no longer in the input: "
    "regenerate (old answers to replaced.jsonl) or keep (listed in stale.jsonl). "
    "[default: refuse, saying which]",
    )
LIMIT = typer.Option(None, "--limit", help="Only the first N rows (a trial).")
PROGRESS_EVERY = typer.Option(
    30.0, "--progress-every", help="Seconds between JSON progress lines off a terminal."
    )
ENGINE_RESTARTS = typer.Option(
    10, "--engine-restarts", help="Restarts of a --serve engine that died, at most (0: none)."
    )
ENGINE_BACKOFF = typer.Option(
    5.0, "--engine-backoff", help="Seconds before a dead engine's first restart (doubles, "
    "up to 5 min)."
    )
ENGINE_HANG_TIMEOUT = typer.Option(
    120.0, "--engine-hang-timeout", help="Seconds an engine may be alive but not answer "
    "/health before it is stopped and restarted."
    )
PLAN = typer.Option(
    None,
    "--plan",
    help="A plan.json (or its directory) from genbench plan: its forecast beside the "
    "live ETA, and at the end how far off it was.",
    )


def generate(
    input: Path = INPUT,
    output: Path = OUTPUT,
    url: list[str] | None = URL,
    url_file: Path | None = URL_FILE,
    serve: list[str] | None = common.SERVE,
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    concurrency: int = CONCURRENCY,
    max_tokens: int | None = common.MAX_TOKENS,
    temperature: float | None = common.TEMPERATURE,
    top_p: float | None = common.TOP_P,
    top_k: int | None = common.TOP_K,
    thinking: bool | None = common.THINKING,
    param: list[str] | None = common.PARAM,
    config: Path | None = common.CONFIG,
    turns: str = TURNS,
    tool_policy: str = common.TOOL_POLICY,
    think_tags: str = common.THINK_TAGS,
    think_dialect: str = common.THINK_DIALECT,
    keep_raw: bool = KEEP_RAW,
    token_ids: str = TOKEN_IDS,
    fmt: str = FMT,
    answers: str = watch.ANSWERS,
    shard_size: str = SHARD_SIZE,
    shard: str | None = SHARD,
    skip_invalid: bool = SKIP_INVALID,
    retries: int = RETRIES,
    retry_backoff: float = RETRY_BACKOFF,
    timeout: float = TIMEOUT,
    down_timeout: float = DOWN_TIMEOUT,
    drain: float = DRAIN,
    truncated: str = TRUNCATED,
    retry_errors: bool = RETRY_ERRORS,
    force: bool = FORCE,
    input_changed: str | None = INPUT_CHANGED,
    limit: int | None = LIMIT,
    progress_every: float = PROGRESS_EVERY,
    engine_start_timeout: float = common.ENGINE_START_TIMEOUT,
    engine_restarts: int = ENGINE_RESTARTS,
    engine_backoff: float = ENGINE_BACKOFF,
    engine_hang_timeout: float = ENGINE_HANG_TIMEOUT,
    plan: Path | None = PLAN,
    metrics_port: int | None = watch.METRICS_PORT,
    metrics_host: str = watch.METRICS_HOST,
    json: bool = common.JSON,
) -> None:
    """Regenerate a prompt file with the target model: resumable, exactly once, many servers."""
    flags = dict(locals())  # every option above, by name
    for k in ("plan", "metrics_port", "metrics_host", "json"):
        flags.pop(k)
    cfg = job_config(**flags)
    plan_doc = read_plan(plan) if plan is not None else None
    if plan_doc is not None:
        job_forecast(plan_doc, 1, len(cfg.servers))  # a plan without a usable forecast fails now
    forecast_for = None if plan_doc is None else (
        lambda todo: job_forecast(plan_doc, todo, len(cfg.servers))
    )  # fmt: skip
    console = err if json else out
    print_start(cfg, console)
    listener = JobConsole(
        console, progress_every, json, forecast_for, one_concurrency(cfg), down_timeout
    )
    heard, exporter = watch.listeners(listener, cfg, metrics_host, metrics_port, console)
    try:
        result = common.run_async(run_job(cfg, heard))
    finally:
        listener.stop()
        watch.stop(exporter)
    if json:
        doc = {**result.to_dict(), "exit_code": result.exit_code}
        if listener.forecast is not None:
            doc["plan"] = listener.plan_outcome or asdict(listener.forecast)
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    if result.exit_code:
        raise typer.Exit(result.exit_code)
