"""The settings a job keeps in `.genbench/job.json`, as a resumed run compares them.

`store.Store.check_job` refuses a resume whose model, sampling, turns, format or tool
policy changed (a data set must not mix them); this module names such a change the way
the person set it (the flag, both values), reads a key an older job.json lacks as the
default it had, and says what a change of `--token-ids` means for the rows; and which
parts of a `--format parquet` job are JSONL still, and why (`unconverted`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import orjson

from genbench.errors import UsageError
from genbench.generate.input.params import FLAGGED
from genbench.generate.store.layout import SHARD_TAG_RE, STATE_DIR, Layout

# what a job.json made before a setting was kept had: that setting's default then
DEFAULTS = {"tool_policy": "replay"}


def job_setting(job: dict[str, Any], key: str) -> Any:
    """A setting of job.json, a key it lacks read as its default of the time."""
    return job.get(key, DEFAULTS.get(key))


def setting_change(old: dict[str, Any], new: dict[str, Any], key: str) -> tuple[str, str, str]:
    """A changed setting as the person set it: (its name, was, now). The data format
    `batch` is `--answers batch`, so a change to or from it names --answers (a job.json
    older than its `answers` key was made with conversations or both)."""
    if key == "format" and "batch" in (old.get(key), new.get(key)):
        return "--answers", _answers(old), _answers(new)
    if key == "tool_policy":
        return "--tool-policy", str(job_setting(old, key)), str(job_setting(new, key))
    if key == "params" and isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
        return _param_change(old[key], new[key])
    return key, _show(old.get(key)), _show(new.get(key))


def _param_change(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, str, str]:
    """The first request field that changed, by the flag that sets it: `--temperature
    was not set, now 0.7`, not `params was {}, now {"temperature":0.7}`."""
    key = next(k for k in dict.fromkeys((*old, *new)) if old.get(k) != new.get(k))
    return param_flag(key), shown(old.get(key)), shown(new.get(key))


def param_flag(key: str) -> str:
    """The flag that sets a request field: its own (`--top-p`), else `--param KEY`."""
    return f"--{key.replace('_', '-')}" if key in FLAGGED else f"--param {key}"


def shown(v: Any) -> str:
    """A setting's value as a person reads it: 'not set', the text, or JSON."""
    return "not set" if v is None else _show(v)


def _answers(job: dict[str, Any]) -> str:
    fallback = "batch" if job.get("format") == "batch" else "conversations"
    return str(job.get("answers") or fallback)


def _show(v: Any) -> str:
    return orjson.dumps(v).decode() if not isinstance(v, str) else v


def token_ids_change(old: dict[str, Any] | None, new: str, force: bool) -> str | None:
    """A resume that changes --token-ids: None when it does not (or the job.json is older
    than the key); a note when the rows keep ids as before (auto and on both keep them
    where the server gives them); refused without --force when it turns them off or on,
    since the data set would then mix token-exact rows with text-only ones unmarked by
    any setting. With --force: the note says so (rows made before keep what they had)."""
    was = (old or {}).get("token_ids")
    if was is None or was == new:
        return None
    line = f"--token-ids was {was}, now {new}"
    if (was == "off") == (new == "off"):
        return f"{line}: rows keep token ids where the server gives them, as before"
    if not force:
        raise UsageError(
            f"{line}: the rows made before {'have none' if was == 'off' else 'keep theirs'} "
            f"and the new ones would {'keep them' if was == 'off' else 'have none'}, a data "
            f"set of both; resume with --token-ids {was}, or --force to mix them"
        )
    return f"{line} (--force): rows made before keep what they had, the new ones " + (
        "keep token ids where the server gives them" if was == "off" else "have none"
    )


def first_change(
    old: dict[str, Any], new: dict[str, Any], keys: tuple[str, ...], sibling: bool = False
) -> str | None:
    """The first setting that makes `new` another job than `old` (a resume compares every
    setting as it was written). A `sibling` shard's model is not compared while it is not
    known yet (a shard's first look, before the servers answer); one loaded from a directory
    is compared by its name, not the directory (each node may copy it to its own disk), but
    two served names are compared whole (`org-a/m` and `org-b/m` are two models)."""
    for k in keys:
        a, b = job_setting(old, k), job_setting(new, k)
        if k == "model" and sibling:
            if a is None or b is None:
                continue
            a, b = model_names([a, b])
        if a != b:
            return k
    return None


def model_names(models: list[Any]) -> list[Any]:
    """The shards' models as compared: by name where any was loaded from a directory, whole
    where all are served names (`org-a/m` and `org-b/m` are two models)."""
    if not any(_loaded_from_disk(m) for m in models if m is not None):
        return models
    return [m if m is None else str(m).rstrip("/").rpartition("/")[2] for m in models]


def _loaded_from_disk(model: object) -> bool:
    """A model named by the path it was loaded from (`/scratch/x/Qwen3-8B`, `./Qwen3-8B`)."""
    return str(model).startswith(("/", "./", "../", "~"))


def read_jobs(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """The shards' job files that read as one (an unreadable one is its own shard's to say)."""
    jobs = []
    for p in paths:
        with contextlib.suppress(OSError, ValueError):
            doc = orjson.loads(p.read_bytes())
            if isinstance(doc, dict):
                jobs.append((p, doc))
    return jobs


def unconverted(out: Path) -> list[Path]:
    """The data parts of a `--format parquet` job in `out` (each --shard's job file read)
    that are JSONL still: the part a stopped job was writing, kept so that its resume
    appends to it, and converted when the job finishes. Converting it at the stop would
    hold a Ctrl-C or SIGTERM for as long as a part takes (up to --part-size: tens of
    seconds, past a scheduler's grace period) and leave one short part per stop."""
    found: list[Path] = []
    for p in sorted((out / STATE_DIR).glob("job*.json")):
        tag = p.stem.removeprefix("job").removeprefix("-") or None
        if tag is not None and not SHARD_TAG_RE.fullmatch(tag):
            continue
        jobs = read_jobs([p])
        if jobs and jobs[0][1].get("format") == "parquet":
            found += [f for f in Layout(out, tag).data_files() if f.suffix == ".jsonl"]
    return sorted(found)


def unconverted_line(parts: list[Path] | list[str]) -> str:
    """What a person reads of `unconverted` parts, and how to finish them."""
    names = [Path(p).name for p in parts]
    shown = ", ".join(names if len(names) <= 3 else [names[0], "…", names[-1]])
    one = len(names) == 1
    it, stays = ("it", "stays") if one else ("them", "stay")
    return (
        f"{shown} {stays} JSONL until the --format parquet job resumes or finishes (a stop "
        f"converts nothing, so the resume appends to {it}): rerun the same genbench generate "
        f"command to finish the job; with every row done, that run only converts {it} to "
        "Parquet"
    )
