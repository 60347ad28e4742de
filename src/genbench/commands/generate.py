"""`genbench generate`: regenerate a prompt file with the target model, resumably.

Its options, checked into the job's config (genbench.generate.flags); the job run; its
console (genbench.generate.render: the live panel, or JSON progress lines off a terminal).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import typer

from genbench.commands import common, watch
from genbench.commands.console import err, out
from genbench.generate.flags import GenerateArgs, job_config, plan_lines
from genbench.generate.job import run_job
from genbench.generate.render import JobConsole, print_start
from genbench.plan.document import job_forecast, plan_settings, read_plan

# one per field of GenerateArgs (generate/flags.py), in --help's order: its typer option, or
# (default, help) for an option spelled as its field is (common.signature)
OPTIONS: dict[str, Any] = {
    "input": typer.Option(
        ..., "--input", "-i", "--prompts", metavar="FILE",
        help="The prompt file: .jsonl[.gz] or .parquet."
    ),
    "output": typer.Option(..., "--out", "-o", metavar="DIR",
                           help="Output directory (resumable; made with its parents)."),
    "url": (None, "Server base URL; repeat for several servers.", "URL"),
    "url_file": (None, "File of servers, one 'URL [CONCURRENCY]' per line.", "FILE"),
    "serve": common.SERVE,
    "model": common.MODEL,
    "api_key_env": common.KEY_ENV,
    "api_key_file": common.KEY_FILE,
    "concurrency": typer.Option(
        None,
        "--concurrency",
        "-c",
        metavar="N|auto",
        help="Requests in flight per server: N, held for the whole job, or auto: found and "
        "held per server (climbs while throughput rises and the server has room, steps back "
        "on preemptions, a queue, 429/503; docs/generate.md). [default: auto; --plan: the "
        "plan's]",
    ),
    "max_tokens": common.MAX_TOKENS,
    "temperature": common.TEMPERATURE,
    "top_p": common.TOP_P,
    "top_k": common.TOP_K,
    "thinking": common.THINKING,
    "param": common.PARAM,
    "config": common.CONFIG,
    "turns": (None, "all: regenerate every assistant turn; last: only the final one. "
              "[default: all; --plan: the plan's]"),
    "tool_policy": typer.Option(None, "--tool-policy", help=common.TOOL_POLICY.help
                                + " [default: replay; --plan: the plan's]"),
    "think_tags": common.THINK_TAGS,
    "think_dialect": common.THINK_DIALECT,
    "keep_raw": (False, "Also write each answer as generated, thinking and tags in it, where "
        "genbench split it (turn field raw; see docs/generate.md)."),
    "token_ids": ("auto", "Keep the token ids the server generated, and the prompt's: auto (where "
        "the server gives them), on (refuse a server that cannot), off."),
    "fmt": typer.Option("jsonl", "--format", help="jsonl or parquet."),
    "answers": watch.ANSWERS,
    "part_size": ("256MB", "Start a new data file (a part) after this size."),
    "shard": typer.Option(
        None, "--shard", metavar="i/N|auto", help="Take only this client's share of the ids; "
        "auto: from SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX (auto/N) or RANK (docs/cluster.md).",
    ),
    "skip_invalid": (False, "Write bad input rows to the errors file and go on."),
    "retries": (3, "Retries per row before it fails."),
    "retry_backoff": (1.0, "First retry delay in seconds (doubles each time)."),
    "timeout": (600.0, "Seconds of silence before a request is abandoned."),
    "down_timeout": (1800.0, "Stop when every server has been down this long."),
    "drain": (10.0, "On Ctrl-C, seconds to let requests in flight finish."),
    "truncated": ("keep", "Rows cut by max_tokens: keep (marked) or error."),
    "retry_errors": (False, "Generate the rows of the errors file again."),
    "force": (False, "Resume even though the model or sampling changed (rows made before are "
        "kept, listed in stale.jsonl)."),
    "input_changed": (None, "Done rows whose request changed, or that are no longer in the input: "
        "regenerate (old answers to replaced.jsonl) or keep (listed in stale.jsonl). [default: "
        "refuse, saying which]"),
    "limit": (None, "Only the first N rows (a trial)."),
    "progress_every": (30.0, "Seconds between progress lines off a terminal."),
    "progress_json": (False, "Off a terminal, progress as JSON lines on stderr (one object "
        "a line, for a machine) instead of a line for people."),
    "engine_start_timeout": common.ENGINE_START_TIMEOUT,
    "engine_restarts": (10, "Restarts of a --serve engine that died, at most (0: none)."),
    "engine_backoff": (5.0, "Seconds before a dead engine's first restart (doubles, up to 5 min)."),
    "engine_hang_timeout": (120.0, "Seconds an engine may be alive but not answer /health before "
        "it is stopped and restarted."),
    "plan": (None, "A plan.json (or its directory) from genbench plan: the job runs its "
        "configuration (concurrency, servers, sampling, max tokens) unless a flag says "
        "otherwise, its forecast beside the live ETA, and at the end how far off it was.", "PLAN"),
    "metrics_port": watch.METRICS_PORT,
    "metrics_host": watch.METRICS_HOST,
    "json": common.JSON,
    "hidden_states": (False, "Keep each generated turn's hidden states, written by the engine "
        "(vLLM's extract_hidden_states; docs/hidden-states.md)."),
    "layers": (None, "--hidden-states: the layer ids, vLLM's numbering (e.g. 2,16,29,32)."),
    "for_trainer": typer.Option(None, "--for", metavar="eagle3|dflash", help="--hidden-states: "
        "the trainer whose default layers to take for the --serve model's depth."),
    "states_fp8": (False, "--hidden-states: FP8 files with a scale per token (hs-connectors' "
        "format, speculators' FP8Transfer), half bf16's bytes; genbench's connector writes them."),
}


def generate(**options: Any) -> None:
    """Regenerate a prompt file with the target model: resumable, exactly once, many servers."""
    a = GenerateArgs(**options)
    plan_doc = read_plan(a.plan) if a.plan is not None else None
    planned = plan_settings(plan_doc) if plan_doc is not None else None
    cfg = job_config(a, planned)  # the plan's configuration, where no flag says otherwise
    if plan_doc is not None:
        job_forecast(plan_doc, 1, len(cfg.servers))  # a plan without a usable forecast fails now
    forecast_for = None if plan_doc is None else (
        lambda todo: job_forecast(plan_doc, todo, len(cfg.servers))
    )  # fmt: skip
    console = err if a.json else out
    print_start(cfg, console)
    said = plan_lines(a, planned, cfg) if planned is not None else None
    listener = JobConsole(console, a.progress_every, a.json, forecast_for, said, a.down_timeout,
                          a.progress_json)  # fmt: skip
    heard, metrics = watch.listeners(listener, cfg, a.metrics_host, a.metrics_port, console)
    try:
        result = common.run_async(run_job(cfg, heard))
    finally:
        listener.stop()
        watch.stop(metrics)
    if a.json:
        doc = {**result.to_dict(), "exit_code": result.exit_code}
        if listener.forecast is not None:
            doc["plan"] = listener.plan_outcome or asdict(listener.forecast)
            doc["plan"]["departures"] = said[1] if said else []
        common.print_json(doc)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


generate.__signature__ = common.signature(GenerateArgs, OPTIONS)  # type: ignore[attr-defined]
