"""`genbench run`'s flags, read into a `RunConfig`: the defaults of a plain, a quick and a
local-demo run (which the help reads too, so it cannot drift), and every flag checked
with a one-line error naming it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from genbench.check.server_metrics import metrics_target
from genbench.errors import UsageError, checked, positive
from genbench.run.runconfig import RunConfig
from genbench.transport.thinking import parse_dialect, parse_tags


@dataclass(frozen=True)
class RunArgs:
    """`genbench run`'s options as the user typed them, one field per option (the command,
    commands/run.py, gives each its flag, default and help): `run_config` checks them all
    and reads the run's config from them; the rest choose what to run, not how."""

    url: str | None
    serve: list[str] | None
    engine_start_timeout: float
    model: str | None
    api_key_env: str
    api_key_file: Path | None
    lengths: str | None
    concurrency: str | None
    shape: str
    sweep_tokens: int | None
    requests_per_slot: int | None
    duration: float | None
    prompts_per_length: int | None
    warmup: int | None
    warmup_tokens: int | None
    natural: bool
    temperature: float | None
    timeout: float
    extra_body: str | None
    thinking: bool | None
    think_tags: str
    think_dialect: str
    skip: str
    quick: bool
    out_dir: Path | None
    json: bool
    report: bool
    repeat: int
    metrics_url: list[str] | None
    input: Path | None  # the prompt file (--input; --workload its old spelling)
    versus: list[str] | None


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
    """The local demo target is a CPU model: shorter outputs keep the default run near a
    minute. Its sustained phases run for a fixed time, not K·C requests: K = 3 gave C=1 a
    window of under a second, which one scheduler hiccup moves by 5%; 5 s at every level
    averages the noise of a shared CPU over the same minute."""
    cfg.lengths = [128, 256] if quick else [128, 256, 512]
    cfg.concurrency = [1, 4, 16] if quick else [1, 4, 8, 16, 32]
    cfg.climb = False
    cfg.sweep_tokens = 64 if quick else 128
    cfg.prompts_per_length = 2 if quick else 3
    cfg.requests_per_slot = 2 if quick else 3
    cfg.duration = 3.0 if quick else 5.0
    cfg.warmup = 1


def quick_defaults(cfg: RunConfig) -> None:
    cfg.lengths = [256, 1024]
    cfg.concurrency = [1, 8, 32]
    cfg.climb = False
    cfg.sweep_tokens = 256
    cfg.prompts_per_length = 2
    cfg.requests_per_slot = 2
    cfg.warmup = 1


def default_text(attr: str) -> str:
    """'[default: 1024,2048,4096; --quick 256,1024; local demo 128,256,512]', read from the
    configs themselves so the help cannot drift from what a run does."""
    plain, quick, local = RunConfig(), RunConfig(), RunConfig()
    quick_defaults(quick)
    local_defaults(local, quick=False)

    def text(cfg: RunConfig) -> str:
        v = getattr(cfg, attr)
        if attr == "concurrency" and cfg.climb:
            return "auto"
        if v is None:
            return "none"
        if isinstance(v, list):
            return ",".join(map(str, v))
        return f"{v:g}" if isinstance(v, float) else str(v)

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


def run_config(a: RunArgs) -> RunConfig:
    """`genbench run`'s options as the run's config, every one checked (a UsageError names
    it) before anything is started or sent."""
    _check_run(a)
    cfg = RunConfig(natural=a.natural, temperature=a.temperature, timeout=a.timeout,
                    thinking=a.thinking)  # fmt: skip
    cfg.think_tags = list(checked(parse_tags, a.think_tags))
    cfg.think_dialect = checked(parse_dialect, a.think_dialect)
    local = a.url is None
    if local:
        local_defaults(cfg, a.quick)
    elif a.quick:
        quick_defaults(cfg)
    if a.lengths is not None:
        cfg.lengths = parse_int_list("--lengths", a.lengths)
    if a.concurrency is not None and a.concurrency.strip().lower() == "auto":
        cfg.climb = True  # even with --quick or the local demo
    elif a.concurrency is not None:
        cfg.concurrency, cfg.climb = parse_int_list("--concurrency", a.concurrency), False
    cfg.shapes = [s.strip() for s in a.shape.split(",") if s.strip()]
    cfg.skip = [s.strip() for s in a.skip.split(",") if s.strip()]
    for s in cfg.skip:
        if s not in ("warmup", "single", "sweep"):
            raise UsageError(f"--skip: '{s}' is not one of warmup, single, sweep")
    for name in ("sweep_tokens", "requests_per_slot", "duration", "prompts_per_length",
                 "warmup", "warmup_tokens"):  # fmt: skip
        if getattr(a, name) is not None:
            setattr(cfg, name, getattr(a, name))
    if a.requests_per_slot is not None and a.duration is None:
        cfg.duration = None  # K·C requests, as asked, not the local demo's default time
    if a.extra_body is not None:
        cfg.extra_body = parse_extra_body(a.extra_body)
    cfg.metrics_urls = checked_metrics_urls(a.metrics_url or [])
    cfg.prompts = str(a.input) if a.input is not None else None
    cfg.validate()
    return cfg


def _check_run(a: RunArgs) -> None:
    """The options that choose what to run, against each other."""
    if a.repeat < 1:
        raise UsageError(f"--repeat must be 1 or more, got {a.repeat}")
    if a.versus and a.url is None:
        raise UsageError("--versus needs --url: the server to alternate with")
    if a.serve and (a.url or a.repeat > 1):
        raise UsageError("--serve runs each engine once, in turn: not with --url or --repeat")
    positive("--engine-start-timeout", a.engine_start_timeout)
