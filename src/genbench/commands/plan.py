"""`genbench plan`: the forecast table, from arithmetic, a run result, or a pilot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from genbench.commands import common
from genbench.commands.console import err, out
from genbench.plan.jobfiles import job_files_dir, write_job_files
from genbench.plan.make import PilotInterrupted, PlanArgs, make_plan
from genbench.plan.render import PlanConsole, next_line, print_plan

# one per field of PlanOptions (below), in --help's order: its typer option, or
# (default, help) for an option spelled as its field is (common.signature)
OPTIONS: dict[str, Any] = {
    "samples": (None, "Samples to forecast, comma-separated, K/M suffixes. [default: "
                "100K,200K,500K,900K]", "N,..."),
    "servers": (1, "Identical servers sharing the job."),
    "from_": typer.Option(
        None, "--from", metavar="RUN", help="A `genbench run` result: its directory or "
        "result.json. Repeat it "
        "with runs of other configurations of the same model to compare them for the job. Or "
        "a pilot's plan directory: planned again from its recorded requests, nothing sent "
        "(other --samples, --servers, --deadline, --price).",
    ),
    "prompts": typer.Option(
        None, "--input", "-i", "--prompts", metavar="FILE", help=
        "The job's prompt file (JSONL or Parquet), as "
        "generate's: run a pilot on it (with --from: its speculative acceptance rescales the "
        "run's rate).",
    ),
    "rate": (None, "Arithmetic only: output tokens/s of one server."),
    "tokens_per_sample": (None, "Output tokens per sample (thinking included)."),
    "concurrency": typer.Option(
        None, "--concurrency", "-c", metavar="N|auto", help="Requests in flight per server: "
        "--prompts, the pilot's and the job's [default: 32], or auto: the pilot first climbs "
        "to the server's knee (as run without -c) and runs there; --from, also forecast at "
        "this measured C.",
    ),
    "url": common.URL,
    "model": common.MODEL,
    "api_key_env": common.KEY_ENV,
    "api_key_file": common.KEY_FILE,
    "pilot": (None, "Pilot requests drawn from --prompts. [default: until the bar reaches "
              "--target-error, at least max(200, 8·C) requests, at most --pilot-max-time]"),
    "target_error": (None, "The bar the plan sizes a pilot for ('±5% needs a pilot of about "
                     "…'); a pilot without --pilot also stops once the mean output length "
                     "is known to ±0.8 × this percent (95%), leaving the rest of the bar to "
                     "the server's speed. [default: 5; a re-plan (--from) keeps its pilot's]"),
    "pilot_min_time": (0.0, "Pilot without --pilot: run at least this many seconds (a server "
                       "whose speed wanders needs minutes)."),
    "pilot_max_time": (600.0, "Pilot without --pilot: stop after this many seconds."),
    "speed_drift": (None, "Pilot: how far (percent, 95%) the server's speed may move over "
                    "the job for reasons slower than the pilot can see (a shared host, a "
                    "thermal limit); added to the range; 0 for a server known to hold its "
                    "speed; `default` asks for genbench's allowance. [default: 15 × job / (job "
                    "+ pilot), as the live ETA assumes; --from a pilot's plan: that plan's]",
                    "PCT|default"),
    "max_tokens": common.MAX_TOKENS,
    "temperature": common.TEMPERATURE,
    "top_p": common.TOP_P,
    "top_k": common.TOP_K,
    "thinking": common.THINKING,
    "think_tags": common.THINK_TAGS,
    "think_dialect": common.THINK_DIALECT,
    "param": common.PARAM,
    "config": common.CONFIG,
    "turns": ("all", "As the job's generate --turns: all (every user turn of a conversation "
              "answered in order) or last."),
    "tool_policy": common.TOOL_POLICY,
    "warmup": typer.Option(20.0, "--warmup-time", help="Pilot: seconds of load at C before "
                           "it, discarded (an idle server starts slow)."),
    "seed": (0, "Seed for the pilot's prompts and the bootstrap."),
    "bootstrap": (200, "Bootstrap replicates for the bar."),
    "hidden_size": common.HIDDEN_SIZE,
    "layers_captured": common.LAYERS_CAPTURED,
    "dtype_bytes": common.DTYPE_BYTES,
    "job_out": typer.Option(
        None, "--job-out", metavar="DIR", help=
        "The job's output directory (generate -o; need not exist yet): "
        "the hidden states' forecast is held to the free space of its disk. [default: the "
        "current directory]",
    ),
    "bytes_per_token": (None, "Output text bytes per token when not measured. [default: 4]"),
    "timeout": (600.0, "Pilot: seconds of silence before a request is abandoned."),
    "out_dir": typer.Option(
        None, "--out", "-o", metavar="DIR", help=
        "Where plan.json goes (a pilot's records too). [default: a "
        "pilot or several --from: genbench-runs/TIME-plan; one --from: beside the run's "
        "result.json]",
    ),
    "deadline": (None, "The job's deadline, e.g. 5d, 36h, 90m, 2d12h: the servers it needs, "
                 "and the samples that fit on --servers.", "DURATION"),
    "price": (None, "Price per GPU-hour, for the job's cost. [default: price_per_gpu_hour in "
              "the settings file]"),
    "gpus_per_server": (None, "GPUs per server, for the cost: one for all, or one per --from "
                        "in order. [default: gpus_per_server in the settings file]"),
    "job_files": (None, "Write the job's files into this directory: a Slurm array script and "
                  "a Kubernetes Indexed Job manifest, one task per server the plan decided "
                  "(docs/cluster.md).", "DIR"),
    "progress_every": (30.0, "Seconds between the pilot's progress lines off a terminal."),
    "json": common.JSON,
}  # fmt: skip


@dataclass
class PlanOptions(PlanArgs):
    """`genbench plan`'s options as typed: the plan's (PlanArgs, which `make_plan` reads)
    and the command's own (the job files it writes, how it shows the pilot)."""

    job_files: Path | None = None
    progress_every: float = 30.0
    json: bool = False


def plan(**options: Any) -> None:
    """Forecast hours, tokens and bytes of a generation job, with an error bar; servers for a
    deadline, cost, and the fastest of several configurations."""
    a = PlanOptions(**options)
    console = err if a.json else out
    common.positive("--progress-every", a.progress_every)
    if a.job_files is not None:
        job_files_dir(a.job_files)  # before the plan's pilot, not after
    try:
        doc, saved = make_plan(a, PlanConsole(console, a.progress_every))
    except PilotInterrupted as e:
        err.print(f"[red]interrupted[/]: {e}")
        raise typer.Exit(e.exit_code) from None
    print_plan(doc, console)
    if saved is not None:
        console.print(f"plan: {saved}")
    if a.job_files is not None:
        paths, why = write_job_files(a.job_files, doc, a, a.servers)
        console.print(f"job files for {why}: {', '.join(map(str, paths))} (fill in FILL_IN)")
    if line := next_line(doc, saved):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if a.json:
        common.print_json(doc)


plan.__signature__ = common.signature(PlanOptions, OPTIONS)  # type: ignore[attr-defined]
