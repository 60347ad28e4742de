"""Sampling parameters: what every request carries besides the messages.

Precedence, lowest first: the config file, flags, then a row's own `params`. Only what
the user set is sent. A server's defaults (vLLM reads the model's generation_config) are
usually what a data set should be generated with, so genbench adds none of its own.
Dictionaries such as `chat_template_kwargs` merge key by key, so a row can turn
thinking off without repeating the job's other template arguments.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from genbench.errors import UsageError

RESERVED = ("model", "messages", "stream", "stream_options", "n")
MAX_TOKENS_KEYS = ("max_tokens", "max_completion_tokens")
FLAGGED = ("temperature", "top_p", "top_k", "max_tokens")  # the fields with a flag of their own


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_params(p: dict[str, Any]) -> tuple[str, str] | None:
    """(field, problem) for the first bad sampling field, or None."""
    for key in RESERVED:
        if key in p:
            return key, "genbench sets this field itself"
    for key in MAX_TOKENS_KEYS:
        if key in p and not (_is_int(p[key]) and p[key] >= 1):
            return key, f"expected a whole number >= 1, got {p[key]!r}"
    if "temperature" in p and not (_is_num(p["temperature"]) and p["temperature"] >= 0):
        return "temperature", f"expected a number >= 0, got {p['temperature']!r}"
    if "top_p" in p and not (_is_num(p["top_p"]) and 0 < p["top_p"] <= 1):
        return "top_p", f"expected a number in (0, 1], got {p['top_p']!r}"
    if "top_k" in p and not _is_int(p["top_k"]):
        return "top_k", f"expected a whole number, got {p['top_k']!r}"
    ctk = p.get("chat_template_kwargs")
    if ctk is not None and not isinstance(ctk, dict):
        return "chat_template_kwargs", f"expected an object, got {type(ctk).__name__}"
    return None


def merge(base: Mapping[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` wins; nested objects merge one level deep."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = v
    return out


def load_config(path: Path) -> dict[str, Any]:
    """A JSON or TOML object of request fields, e.g. `temperature = 0.6`."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"--config {path}: cannot read it ({e.strerror or e})") from None
    try:
        if path.suffix.lower() == ".toml":
            obj: Any = tomllib.loads(data.decode("utf-8"))
        else:
            obj = orjson.loads(data)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, orjson.JSONDecodeError) as e:
        kind = "TOML" if path.suffix.lower() == ".toml" else "JSON"
        raise UsageError(f"--config {path}: not valid {kind} ({e})") from None
    if not isinstance(obj, dict):
        raise UsageError(f"--config {path}: expected an object of request fields")
    if isinstance(obj.get("sampling"), dict) and len(obj) == 1:
        obj = obj["sampling"]  # a [sampling] table is accepted too
    bad = check_params(obj)
    if bad:
        raise UsageError(f"--config {path}: field '{bad[0]}': {bad[1]}")
    return obj


def parse_param(text: str) -> tuple[str, Any]:
    """`--param KEY=VALUE`; VALUE is read as JSON when it parses (numbers, true, objects)."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise UsageError(f"--param '{text}': expected KEY=VALUE, e.g. top_k=20")
    try:
        value: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = raw
    return key, value


def job_params(
    *,
    base: Mapping[str, Any] | None = None,
    config: Path | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    max_tokens: int | None = None,
    thinking: bool | None = None,
    extra: list[str] | None = None,
) -> dict[str, Any]:
    """The job's sampling fields: `base` (a plan's, generate --plan), the config file, then
    flags."""
    p: dict[str, Any] = dict(base or {})
    if config is not None:
        p = merge(p, load_config(config))
    flags: dict[str, Any] = {}
    for text in extra or []:
        k, v = parse_param(text)
        flags = merge(flags, {k: v})
    for k, v in zip(FLAGGED, (temperature, top_p, top_k, max_tokens), strict=True):
        if v is not None:
            flags[k] = v
    if thinking is not None:
        flags = merge(flags, {"chat_template_kwargs": {"enable_thinking": thinking}})
    p = merge(p, flags)
    bad = check_params(p)
    if bad:
        flag = "--" + bad[0].replace("_", "-")
        raise UsageError(f"{flag}: {bad[1]}")
    return p


@dataclass(kw_only=True)
class RequestFlags:
    """The request fields the flags set, declared once for the commands that take them
    (generate, and plan's pilot: commands/common.py gives each its option)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    thinking: bool | None = None
    param: list[str] | None = None
    config: Path | None = None

    def params(self, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The job's sampling fields these flags give over `base` (a plan's): config file,
        then flags."""
        return job_params(
            base=base, config=self.config, temperature=self.temperature, top_p=self.top_p,
            top_k=self.top_k, max_tokens=self.max_tokens, thinking=self.thinking,
            extra=self.param,
        )  # fmt: skip


def split_max_tokens(p: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """ChatRequest carries max_tokens apart from the other fields."""
    if not any(k in p for k in MAX_TOKENS_KEYS):
        return None, p
    rest = {k: v for k, v in p.items() if k not in MAX_TOKENS_KEYS}
    return p.get("max_tokens", p.get("max_completion_tokens")), rest
