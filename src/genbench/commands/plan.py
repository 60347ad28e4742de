"""`genbench plan`: the forecast table, from arithmetic, a run result, or a pilot."""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from genbench.commands import common
from genbench.commands.console import err, out
from genbench.plan.make import PlanArgs, make_plan
from genbench.plan.render import print_plan


def plan(
    samples: str | None = typer.Option(
        None,
        "--samples",
        help="Samples to forecast, comma-separated, K/M suffixes. [default: 100K,200K,500K,900K]",
    ),
    servers: int = typer.Option(1, "--servers", help="Identical servers sharing the job."),
    from_: list[Path] | None = typer.Option(
        None,
        "--from",
        help="A `genbench run` result: its directory or result.json. Repeat it with runs of "
        "other configurations of the same model to compare them for the job.",
    ),
    prompts: Path | None = typer.Option(
        None,
        "--input",
        "-i",
        "--prompts",
        help="The job's prompt file (JSONL or Parquet), as generate's: run a pilot on it.",
    ),
    rate: float | None = typer.Option(
        None, "--rate", help="Arithmetic only: output tokens/s of one server."
    ),
    tokens_per_sample: float | None = typer.Option(
        None, "--tokens-per-sample", help="Output tokens per sample (thinking included)."
    ),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        "-c",
        help="Requests in flight per server: --prompts, the pilot's and the job's "
        "[default: 32]; --from, also forecast at this measured C.",
    ),
    url: str | None = common.URL,
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    pilot: int | None = typer.Option(
        None,
        "--pilot",
        help="Pilot requests drawn from --prompts. [default: until the bar reaches "
        "--target-error, at least max(200, 8·C) requests, at most --pilot-max-time]",
    ),
    target_error: float = typer.Option(
        5.0,
        "--target-error",
        help="Pilot without --pilot: stop once the mean output length is known to ±0.8 × "
        "this percent (95%), leaving the rest of the bar to the server's speed.",
    ),
    pilot_min_time: float = typer.Option(
        0.0,
        "--pilot-min-time",
        help="Pilot without --pilot: run at least this many seconds (a server whose speed "
        "wanders needs minutes).",
    ),
    pilot_max_time: float = typer.Option(
        600.0, "--pilot-max-time", help="Pilot without --pilot: stop after this many seconds."
    ),
    speed_drift: float = typer.Option(
        0.0,
        "--speed-drift",
        help="Pilot: how far (percent, 95%) the server's speed may move over the job for "
        "reasons slower than the pilot can see (a shared host, a thermal limit); added to "
        "the range.",
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", help="The job's max_tokens. [default: none, natural length]"
    ),
    temperature: float | None = typer.Option(
        None, "--temperature", help="The job's temperature. [default: the server's]"
    ),
    top_p: float | None = typer.Option(
        None, "--top-p", help="The job's top_p. [default: the server's]"
    ),
    top_k: int | None = typer.Option(
        None, "--top-k", help="The job's top_k. [default: the server's]"
    ),
    thinking: bool | None = typer.Option(
        None,
        "--thinking/--no-thinking",
        help="The job's chat_template_kwargs.enable_thinking. [default: the server's choice]",
    ),
    think_tags: str = common.THINK_TAGS,
    think_dialect: str = common.THINK_DIALECT,
    param: list[str] | None = typer.Option(
        None, "--param", help="Another request field of the job, KEY=JSON; repeatable."
    ),
    config: Path | None = typer.Option(
        None, "--config", help="The job's JSON or TOML file of request fields, as generate's."
    ),
    turns: str = typer.Option(
        "all",
        "--turns",
        help="As the job's generate --turns: all (every user turn of a conversation "
        "answered in order) or last.",
    ),
    tool_policy: str = common.TOOL_POLICY,
    warmup: float = typer.Option(
        20.0,
        "--warmup-time",
        help="Pilot: seconds of load at C before it, discarded (an idle server starts slow).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed for the pilot's prompts and the bootstrap."),
    bootstrap: int = typer.Option(200, "--bootstrap", help="Bootstrap replicates for the bar."),
    hidden_size: int | None = typer.Option(
        None, "--hidden-size", help="Hidden-state storage: the target model's hidden size."
    ),
    layers_captured: int | None = typer.Option(
        None, "--layers-captured", help="Hidden-state storage: layers kept per token."
    ),
    dtype_bytes: int = typer.Option(2, "--dtype-bytes", help="Hidden-state storage: bytes/value."),
    bytes_per_token: float | None = typer.Option(
        None,
        "--bytes-per-token",
        help="Output text bytes per token when not measured. [default: 4]",
    ),
    timeout: float = typer.Option(
        600.0, "--timeout", help="Pilot: seconds of silence before a request is abandoned."
    ),
    out_dir: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Pilot: directory for its records and plan.json; several --from: for plan.json. "
        "[default: genbench-runs/TIME-plan]",
    ),
    deadline: str | None = typer.Option(
        None,
        "--deadline",
        help="The job's deadline, e.g. 5d, 36h, 90m, 2d12h: the servers it needs, and the "
        "samples that fit on --servers.",
    ),
    price: float | None = typer.Option(
        None,
        "--price",
        help="Price per GPU-hour, for the job's cost. "
        "[default: price_per_gpu_hour in the settings file]",
    ),
    gpus_per_server: str | None = typer.Option(
        None,
        "--gpus-per-server",
        help="GPUs per server, for the cost: one for all, or one per --from in order. "
        "[default: gpus_per_server in the settings file]",
    ),
    json: bool = common.JSON,
) -> None:
    """Forecast hours, tokens and bytes of a generation job, with an error bar; servers for a
    deadline, cost, and the fastest of several configurations."""
    flags = dict(locals())  # every option above, by name
    console = err if flags.pop("json") else out
    doc, saved = make_plan(PlanArgs(**flags), console)
    print_plan(doc, console)
    if saved is not None:
        console.print(f"plan: {saved}")
    if json:
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
