"""`genbench generate`'s flags, read into a `JobConfig`: every flag checked with a one-line
error naming it, before the input is opened or a server asked."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from genbench.engines.command import EngineCommand, parse_command
from genbench.engines.hs_flags import (
    TRAINERS,
    check_layers,
    default_layers,
    model_depth,
    parse_layers,
    served_model,
)
from genbench.engines.supervisor import EngineOptions
from genbench.errors import UsageError, checked, positive
from genbench.generate.hidden import CaptureSpec
from genbench.generate.input.batch import is_batch_file
from genbench.generate.input.modes import Answers, DataFormat, OnTruncated, ToolPolicy, Turns
from genbench.generate.input.params import RequestFlags
from genbench.generate.input.reader import ShardSpec
from genbench.generate.input.tools import POLICIES
from genbench.generate.jobconfig import AsTyped, JobConfig
from genbench.generate.planned import Planned, departures, resolve, resolve_concurrency, taken
from genbench.generate.recipe import ALL, REPLAY, TURNS
from genbench.generate.servers import ServerSpec
from genbench.generate.store import changes
from genbench.generate.tuner import CEILING, SAFE_START
from genbench.transport.endpoint import Endpoint, key_source, load_api_key
from genbench.transport.open_files import fit_descriptors
from genbench.transport.thinking import parse_dialect, parse_tags
from genbench.transport.token_ids import MODES, IdsMode

ANSWERS = tuple(Answers)


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'256MB', '1G', '500k', '1048576' -> bytes (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise UsageError(f"--part-size '{text}': expected a size like 256MB or 1GB")
    n = float(m[1]) * _UNITS[(m[2] or "").lower()[:1]]
    if n < 4096:
        raise UsageError(f"--part-size '{text}': must be at least 4KB")
    return int(n)


def server_spec(text: str, plan_c: int | None = None) -> ServerSpec:
    """`-c`: a number is exactly that, held for the whole job; `auto` (the default) starts
    at the plan's concurrency (`plan_c`), or the tuner's safe value, and finds the server's
    best (generate/tuner.py). The spec's URL is left empty: the caller's servers take it."""
    value = str(text).strip().lower()
    if value == "auto":
        return ServerSpec("", plan_c or SAFE_START, auto=True)
    try:
        c = int(value)
    except ValueError:
        c = 0
    if c < 1:
        raise UsageError(f"-c/--concurrency '{text}': expected a number >= 1 or auto")
    return ServerSpec("", c)


def read_url_file(path: Path, default: ServerSpec) -> list[ServerSpec]:
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
        spec = replace(default, url=parts[0])
        if len(parts) > 2:
            raise UsageError(f"{path}, line {n}: expected 'URL [CONCURRENCY]'")
        if len(parts) == 2:
            try:
                c = int(parts[1])
            except ValueError:
                c = 0
            if c < 1:
                raise UsageError(f"{path}, line {n}: concurrency '{parts[1]}' is not a number >= 1")
            spec = ServerSpec(parts[0], c)
        specs.append(spec)
    if not specs:
        raise UsageError(f"--url-file {path}: no URLs in it")
    return specs


@dataclass
class GenerateArgs(AsTyped, RequestFlags):
    """`genbench generate`'s options as the user typed them, one field per option (the
    command, commands/generate.py, gives each its flag, default and help): those the job
    keeps as typed (AsTyped), those `job_config` reads into the job's other settings, and
    those of the command (how the job is watched)."""

    url: list[str] | None
    url_file: Path | None
    serve: list[str] | None
    api_key_env: str
    api_key_file: Path | None
    concurrency: str | None  # N or auto; None: the plan's, else auto (planned.py)
    turns: str | None  # None: the plan's, else all
    tool_policy: str | None  # None: the plan's, else replay
    think_tags: str
    think_dialect: str
    token_ids: str
    fmt: str
    part_size: str
    shard: str | None
    truncated: str
    progress_every: float
    progress_json: bool
    engine_start_timeout: float
    engine_restarts: int
    engine_backoff: float
    engine_hang_timeout: float
    plan: Path | None
    metrics_port: int | None
    metrics_host: str
    json: bool
    hidden_states: bool = False
    layers: str | None = None
    for_trainer: str | None = None
    states_fp8: bool = False


def with_plan(a: GenerateArgs, planned: Planned | None) -> GenerateArgs:
    """The options with what the flags left open taken from the plan (`--plan`), else from
    the defaults `plan` shares: the concurrency, --turns and --tool-policy."""
    p = planned or Planned("")
    return replace(
        a,
        concurrency=resolve_concurrency(a.concurrency, planned),
        turns=resolve(a.turns, p.turns, ALL),
        tool_policy=resolve(a.tool_policy, p.tool_policy, REPLAY),
    )


def job_config(a: GenerateArgs, planned: Planned | None = None) -> JobConfig:
    """The job the options ask for (over the plan's settings, `--plan`), each flag checked (a
    UsageError names it); the servers' URLs parsed and the open-file limit fitted to their
    streams before anything is sent."""
    a = with_plan(a, planned)
    assert a.concurrency is not None and a.turns is not None and a.tool_policy is not None
    _check_flags(a)
    fmt, turns, tool_policy = _answers_format(a.answers, a.fmt, a.input, a.turns, a.tool_policy)
    token_ids = _batch_ids(a.answers, a.token_ids)
    c = server_spec(a.concurrency, planned.concurrency if planned else None)
    servers = [replace(c, url=u) for u in a.url or []]
    if a.url_file is not None:
        servers += read_url_file(a.url_file, c)
    keys = (a.api_key_env, a.api_key_file)
    key, source = load_api_key(*keys), key_source(*keys)  # an engine's start check sends it
    engines = [parse_command(e).keyed(key, source) for e in a.serve or []]
    servers += [replace(c, url=e.url) for e in engines]
    if not servers:
        raise UsageError(
            "no server: give --url URL (repeatable), --url-file FILE or --serve CMD"
        )
    for s in servers:
        Endpoint.parse(s.url)  # a bad URL fails now, with its own message
    fit_streams(servers)
    return JobConfig(
        **a.as_typed(), servers=servers, api_key=key,
        params=a.params(planned.params if planned else None), turns=turns,
        tool_policy=tool_policy, fmt=fmt,
        shard=ShardSpec.parse(a.shard) if a.shard else None,
        part_bytes=parse_size(a.part_size), on_truncated=a.truncated,
        think_tags=checked(parse_tags, a.think_tags),
        think_dialect=checked(parse_dialect, a.think_dialect), token_ids=token_ids,
        engines=engines, engine=EngineOptions(a.engine_start_timeout, a.engine_restarts,
                                              a.engine_backoff, a.engine_hang_timeout),
        capture=_capture(a, engines, token_ids),
    )  # fmt: skip


def plan_lines(a: GenerateArgs, planned: Planned, cfg: JobConfig) -> tuple[str, list[str]]:
    """What the job takes of the plan (one line), and each flag that departs from it, with
    what it does to the forecast: said once, before the first request."""
    c = str(resolve_concurrency(a.concurrency, planned))
    n = len(cfg.servers)
    lines = departures(planned, concurrency=c, servers=n, params=cfg.params, turns=cfg.turns,
                       tool_policy=cfg.tool_policy)  # fmt: skip
    return taken(planned, c, n, cfg.params), lines


def _capture(a: GenerateArgs, engines: list[EngineCommand], token_ids: str) -> CaptureSpec | None:
    """`--hidden-states` with its layers: `--layers`, else `--for`'s default for the depth
    of the model the `--serve` engines load (docs/hidden-states.md)."""
    if not a.hidden_states:
        if a.layers is not None or a.for_trainer is not None or a.states_fp8:
            raise UsageError("--layers, --for and --states-fp8 shape --hidden-states: add it")
        return None
    if token_ids == IdsMode.OFF:
        raise UsageError("--hidden-states needs the token ids (the states are held to them): "
                         "drop --token-ids off")  # fmt: skip
    if a.for_trainer is not None and a.for_trainer not in TRAINERS:
        raise UsageError(f"--for {a.for_trainer!r}: expected one of {', '.join(TRAINERS)}")
    depths = {model_depth(m) for m in map(served_model, engines) if m is not None}
    depth = depths.pop() if len(depths) == 1 else None
    if a.layers is not None:
        layers = check_layers(parse_layers(a.layers), depth)
    elif a.for_trainer is not None and depth is not None:
        layers = default_layers(a.for_trainer, depth)
    elif a.for_trainer is not None:
        raise UsageError(f"--for {a.for_trainer}: genbench cannot tell the model's depth "
                         "(no --serve engine loads a model directory): give --layers")  # fmt: skip
    else:
        raise UsageError("--hidden-states: give --layers (the ids the engine captures, vLLM's "
                         "numbering) or --for eagle3|dflash")  # fmt: skip
    return CaptureSpec(tuple(layers), a.for_trainer, fp8=a.states_fp8)


def fit_streams(servers: list[ServerSpec]) -> None:
    """The open-file limit for every stream: a -c auto server's as high as it may climb
    where the limit allows, else its start (its streams are shed if it climbs short)."""
    fixed = sum(s.concurrency for s in servers if not s.auto)
    auto = [s for s in servers if s.auto]
    try:
        fit_descriptors(fixed + CEILING * len(auto), len(servers), "-c/--concurrency")
    except UsageError:
        if not auto:
            raise
        fit_descriptors(fixed + sum(s.concurrency for s in auto), len(servers), "-c/--concurrency")


def _check_flags(a: GenerateArgs) -> None:
    for name in ("max_tokens", "timeout", "down_timeout", "limit",
                 "progress_every", "engine_start_timeout", "engine_hang_timeout"):  # fmt: skip
        positive("--" + name.replace("_", "-"), getattr(a, name))
    if a.engine_restarts < 0 or a.engine_backoff < 0:
        raise UsageError("--engine-restarts and --engine-backoff must be 0 or more")
    if a.retries < 0 or a.retry_backoff < 0 or a.drain < 0:
        raise UsageError("--retries, --retry-backoff and --drain must be 0 or more")
    _choice("--turns", a.turns, TURNS)
    _choice("--tool-policy", a.tool_policy, POLICIES)
    _choice("--format", a.fmt, (DataFormat.JSONL, DataFormat.PARQUET))
    _choice("--truncated", a.truncated, tuple(OnTruncated))
    _choice("--answers", a.answers, ANSWERS)
    _choice("--token-ids", a.token_ids, MODES)
    if a.input_changed is not None:
        _choice("--input-changed", a.input_changed, changes.POLICIES)
    if a.fmt == DataFormat.PARQUET:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UsageError(
                "--format parquet needs pyarrow: pip install 'genbench[parquet]'"
            ) from None


def _answers_format(
    answers: str, fmt: str, input: Path, turns: str, tool_policy: str
) -> tuple[str, str, str]:
    """The job's data format, turns and tool policy for `--answers` and the input: Batch
    output lines are a format of their own on disk (a job keeps one); a Batch request line
    is one request, sent as its body has it, so every turn but the last is context and its
    calls and results are history (nothing replayed)."""
    if answers == Answers.BATCH and fmt != DataFormat.JSONL:
        raise UsageError("--answers batch writes JSON Lines: leave --format at jsonl")
    if is_batch_file(input):
        turns, tool_policy = Turns.LAST, ToolPolicy.KEEP
    return (DataFormat.BATCH if answers == Answers.BATCH else fmt), turns, tool_policy


def _batch_ids(answers: str, token_ids: str) -> str:
    """OpenAI's Batch output shape has no place for token ids: `--answers batch` asks for
    none (auto) or is refused with them required (on); `--answers both` keeps them in the
    conversations, beside batch_output.jsonl."""
    if answers != Answers.BATCH:
        return token_ids
    if token_ids == IdsMode.ON:
        raise UsageError(
            "--token-ids on: --answers batch writes OpenAI's Batch shape, which keeps no "
            "token ids; use --answers both (the conversations keep them, batch_output.jsonl "
            "beside them)"
        )
    return IdsMode.OFF


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"{flag} '{value}': expected one of {', '.join(allowed)}")
