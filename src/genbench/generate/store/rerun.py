"""A generate job's settings, as kept in its job.json, given back as generate's flags: the
commands genbench prints for a person to run (inspect's regenerate, merge's finish) are
whole, so a rerun is the same job and not one a resume refuses, nor a shard's first run
with other settings than its siblings'.

What job.json does not keep is the servers: a hint names them `--url URL`, the one word a
person fills in (`HINT_URL`)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import orjson

from genbench.generate.store.layout import JOB_GLOB, STATE_DIR

HINT_URL = "URL"  # the servers: not in job.json
_NAMED = {"max_tokens", "temperature", "top_p", "top_k"}  # generate's own flags
_DEFAULTS = {"turns": "all", "format": "jsonl", "token_ids": "auto",
             "answers": "conversations", "tool_policy": "replay"}  # fmt: skip


def job_flags(doc: dict[str, Any], model: bool = True) -> list[str]:
    """A job.json's settings as generate's flags (each quoted for a shell): its model, its
    request fields, and every choice that is not generate's default."""
    flags: list[str] = []
    if model and isinstance(doc.get("model"), str) and doc["model"]:
        flags.append("--model " + shlex.quote(doc["model"]))
    for k, v in (doc.get("params") or {}).items():
        if k in _NAMED:
            flags.append(f"--{k.replace('_', '-')} {shlex.quote(str(v))}")
        else:
            flags.append("--param " + shlex.quote(f"{k}={orjson.dumps(v).decode()}"))
    # --answers batch sets these itself (a format of its own, no ids): not flags to give
    implied = {"format": "batch", "token_ids": "off"} if doc.get("answers") == "batch" else {}
    for k, default in _DEFAULTS.items():
        v = doc.get(k, default)
        if v != default and implied.get(k) != v:
            flags.append(f"--{k.replace('_', '-')} {shlex.quote(str(v))}")
    return flags


def read_job(out: Path) -> dict[str, Any] | None:
    """The directory's first job file (job.json, or a shard's), None where there is none
    or it cannot be read."""
    jobs = sorted((out / STATE_DIR).glob(JOB_GLOB))
    try:
        doc = orjson.loads(jobs[0].read_bytes()) if jobs else None
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def generate_command(input: str | Path, out: str | Path, flags: list[str]) -> str:
    """`genbench generate -i INPUT -o OUT --url URL FLAGS…`, quoted for a shell."""
    head = f"genbench generate -i {shlex.quote(str(input))} -o {shlex.quote(str(out))}"
    return " ".join([head, "--url", HINT_URL, *flags])
