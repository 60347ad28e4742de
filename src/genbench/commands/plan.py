"""`genbench plan`: the forecast table, from arithmetic, a run result, or a pilot."""

from __future__ import annotations

from pathlib import Path

import typer

from genbench.commands import common
from genbench.commands.console import err, out
from genbench.plan.jobfiles import job_files_dir, write_job_files
from genbench.plan.make import PilotInterrupted, PlanArgs, make_plan
from genbench.plan.render import PlanConsole, next_line, print_plan

SAMPLES = typer.Option(
    None,
    "--samples",
    help="Samples to forecast, comma-separated, K/M suffixes. [default: 100K,200K,500K,900K]",
)
SERVERS = typer.Option(1, "--servers", help="Identical servers sharing the job.")
FROM = typer.Option(
    None,
    "--from",
    help="A `genbench run` result: its directory or result.json. Repeat it with runs of "
    "other configurations of the same model to compare them for the job. Or a pilot's plan "
    "directory: planned again from its recorded requests, nothing sent (other --samples, "
    "--servers, --deadline, --price).",
)
PROMPTS = typer.Option(
    None,
    "--input",
    "-i",
    "--prompts",
    help="The job's prompt file (JSONL or Parquet), as generate's: run a pilot on it "
    "(with --from: its speculative acceptance rescales the run's rate).",
)
RATE = typer.Option(None, "--rate", help="Arithmetic only: output tokens/s of one server.")
TOKENS_PER_SAMPLE = typer.Option(
    None, "--tokens-per-sample", help="Output tokens per sample (thinking included)."
)
CONCURRENCY = typer.Option(
    None,
    "--concurrency",
    "-c",
    help="Requests in flight per server: --prompts, the pilot's and the job's "
    "[default: 32]; --from, also forecast at this measured C.",
)
PILOT = typer.Option(
    None,
    "--pilot",
    help="Pilot requests drawn from --prompts. [default: until the bar reaches "
    "--target-error, at least max(200, 8·C) requests, at most --pilot-max-time]",
)
TARGET_ERROR = typer.Option(
    5.0,
    "--target-error",
    help="Pilot without --pilot: stop once the mean output length is known to ±0.8 × "
    "this percent (95%), leaving the rest of the bar to the server's speed.",
)
PILOT_MIN_TIME = typer.Option(
    0.0,
    "--pilot-min-time",
    help="Pilot without --pilot: run at least this many seconds (a server whose speed "
    "wanders needs minutes).",
)
PILOT_MAX_TIME = typer.Option(
    600.0, "--pilot-max-time", help="Pilot without --pilot: stop after this many seconds."
)
SPEED_DRIFT = typer.Option(
    0.0,
    "--speed-drift",
    help="Pilot: how far (percent, 95%) the server's speed may move over the job for "
    "reasons slower than the pilot can see (a shared host, a thermal limit); added to "
    "the range.",
)
TURNS = typer.Option(
    "all",
    "--turns",
    help="As the job's generate --turns: all (every user turn of a conversation "
    "answered in order) or last.",
)
WARMUP = typer.Option(
    20.0,
    "--warmup-time",
    help="Pilot: seconds of load at C before it, discarded (an idle server starts slow).",
)
SEED = typer.Option(0, "--seed", help="Seed for the pilot's prompts and the bootstrap.")
BOOTSTRAP = typer.Option(200, "--bootstrap", help="Bootstrap replicates for the bar.")
BYTES_PER_TOKEN = typer.Option(
    None,
    "--bytes-per-token",
    help="Output text bytes per token when not measured. [default: 4]",
)
TIMEOUT = typer.Option(
    600.0, "--timeout", help="Pilot: seconds of silence before a request is abandoned."
)
OUT_DIR = typer.Option(
    None,
    "--out",
    "-o",
    help="Where plan.json goes (a pilot's records too). [default: a pilot or several --from: "
    "genbench-runs/TIME-plan; one --from: beside the run's result.json]",
)
DEADLINE = typer.Option(
    None,
    "--deadline",
    help="The job's deadline, e.g. 5d, 36h, 90m, 2d12h: the servers it needs, and the "
    "samples that fit on --servers.",
)
PRICE = typer.Option(
    None,
    "--price",
    help="Price per GPU-hour, for the job's cost. "
    "[default: price_per_gpu_hour in the settings file]",
)
GPUS_PER_SERVER = typer.Option(
    None,
    "--gpus-per-server",
    help="GPUs per server, for the cost: one for all, or one per --from in order. "
    "[default: gpus_per_server in the settings file]",
)
PROGRESS_EVERY = typer.Option(
    30.0, "--progress-every", help="Seconds between the pilot's progress lines off a terminal."
)
JOB_OUT = typer.Option(
    None,
    "--job-out",
    help="The job's output directory (generate -o; need not exist yet): the hidden states' "
    "forecast is held to the free space of its disk. [default: the current directory]",
)
JOB_FILES = typer.Option(
    None,
    "--job-files",
    help="Write the job's files into this directory: a Slurm array script and a Kubernetes "
    "Indexed Job manifest, one task per server the plan decided (docs/cluster.md).",
)


def plan(
    samples: str | None = SAMPLES,
    servers: int = SERVERS,
    from_: list[Path] | None = FROM,
    prompts: Path | None = PROMPTS,
    rate: float | None = RATE,
    tokens_per_sample: float | None = TOKENS_PER_SAMPLE,
    concurrency: int | None = CONCURRENCY,
    url: str | None = common.URL,
    model: str | None = common.MODEL,
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    pilot: int | None = PILOT,
    target_error: float = TARGET_ERROR,
    pilot_min_time: float = PILOT_MIN_TIME,
    pilot_max_time: float = PILOT_MAX_TIME,
    speed_drift: float = SPEED_DRIFT,
    max_tokens: int | None = common.MAX_TOKENS,
    temperature: float | None = common.TEMPERATURE,
    top_p: float | None = common.TOP_P,
    top_k: int | None = common.TOP_K,
    thinking: bool | None = common.THINKING,
    think_tags: str = common.THINK_TAGS,
    think_dialect: str = common.THINK_DIALECT,
    param: list[str] | None = common.PARAM,
    config: Path | None = common.CONFIG,
    turns: str = TURNS,
    tool_policy: str = common.TOOL_POLICY,
    warmup: float = WARMUP,
    seed: int = SEED,
    bootstrap: int = BOOTSTRAP,
    hidden_size: int | None = common.HIDDEN_SIZE,
    layers_captured: int | None = common.LAYERS_CAPTURED,
    dtype_bytes: int = common.DTYPE_BYTES,
    job_out: Path | None = JOB_OUT,
    bytes_per_token: float | None = BYTES_PER_TOKEN,
    timeout: float = TIMEOUT,
    out_dir: Path | None = OUT_DIR,
    deadline: str | None = DEADLINE,
    price: float | None = PRICE,
    gpus_per_server: str | None = GPUS_PER_SERVER,
    job_files: Path | None = JOB_FILES,
    progress_every: float = PROGRESS_EVERY,
    json: bool = common.JSON,
) -> None:
    """Forecast hours, tokens and bytes of a generation job, with an error bar; servers for a
    deadline, cost, and the fastest of several configurations."""
    flags = dict(locals())  # every option above, by name
    console = err if flags.pop("json") else out
    jobs, every = flags.pop("job_files"), flags.pop("progress_every")
    common.positive("--progress-every", every)
    if jobs is not None:
        job_files_dir(jobs)  # before the plan's pilot, not after
    args = PlanArgs(**flags)
    try:
        doc, saved = make_plan(args, PlanConsole(console, every))
    except PilotInterrupted as e:
        err.print(f"[red]interrupted[/]: {e}")
        raise typer.Exit(e.exit_code) from None
    print_plan(doc, console)
    if saved is not None:
        console.print(f"plan: {saved}")
    if jobs is not None:
        paths, why = write_job_files(jobs, doc, args, servers)
        console.print(f"job files for {why}: {', '.join(map(str, paths))} (fill in FILL_IN)")
    if line := next_line(doc, saved):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    if json:
        common.print_json(doc)
