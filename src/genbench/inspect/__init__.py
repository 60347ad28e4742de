"""`genbench inspect`: is what generate wrote fit to train a drafter on?

A regenerated set is only worth training on if it is what the target model really
says. One streaming pass over generate's output (reader) examines every row (detect:
loops, thinking that never closed, empty answers, leftover tags, replacement chars,
rows too short to supervise), keeps a few numbers per row (scan), then compares rows
(duplicates) and servers (distribution: a server whose lengths or thinking differ from the
others'), and writes `inspect.json` (document). `--drop ... --out DIR` writes a filtered
copy and a manifest of what was dropped and why (clean); regenerating the dropped rows
is a separate, documented `genbench generate` command, never a side effect.

docs/inspect.md states every rule and threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genbench.errors import GenbenchError, OutputError, UsageError, positive
from genbench.generate.store.jobfile import unconverted, unconverted_line
from genbench.inspect.clean import REGENERATE, check_out, write_clean
from genbench.inspect.detect import BIT, DEFECTS, Thresholds
from genbench.inspect.document import INSPECT_FILE, Settings, build, storage
from genbench.inspect.fidelity import DRIFT_SAMPLE, Fidelity, check_drift
from genbench.inspect.reader import data_files, engine_servers
from genbench.inspect.scan import scan
from genbench.inspect.states import check_states
from genbench.transport.endpoint import Endpoint

__all__ = [
    "DEFECTS", "INSPECT_FILE", "InspectArgs", "Settings", "Thresholds", "default_save",
    "inspect_data", "settings_from_flags",
]  # fmt: skip


def default_save(path: Path) -> Path:
    """inspect.json in a generate directory; FILE.inspect.json beside a single file."""
    return path / INSPECT_FILE if path.is_dir() else path.with_name(path.name + ".inspect.json")


# which regenerate command fits which case (docs/inspect.md, "Regenerating the dropped rows")
FOLLOW_UP_WHEN = {
    "resume_into_copy": "to make the copy whole again (it becomes the data set): the "
    "original job resumed into the copy generates the dropped ids, skipping the kept ones",
    "regenerate": "to keep the original and the copy as they are: only the dropped rows, "
    "into a new directory (REGEN_DIR); then export the copy and REGEN_DIR together",
}


def follow_up(source: Path, out: Path) -> dict[str, str]:
    """The commands that regenerate the dropped rows, whole: the job's settings from its
    job.json as generate's flags, the servers `--url URL` (docs/inspect.md explains both;
    FOLLOW_UP_WHEN says which fits which case)."""
    from genbench.generate.store.rerun import generate_command, job_flags, read_job

    job = read_job(source) if source.is_dir() else None
    flags = job_flags(job) if job else []
    cmds = {"regenerate": generate_command(out / REGENERATE, "REGEN_DIR", flags)}
    if job and job.get("input"):
        cmds["resume_into_copy"] = generate_command(job["input"], out, flags)
    return cmds


def integrity(path: Path, files: list[Path]) -> dict[str, Any] | None:
    """A generate directory's parts against their seals (None for a single file): a part
    whose bytes changed since it was sealed is refused, with its rows and the command that
    generates them again; inspecting it would judge bytes nobody generated."""
    if not path.is_dir():
        return None
    from genbench.generate.store import seal as sealed

    checks = sealed.verify(files)
    if damage := sealed.damage_lines(path, checks):
        raise GenbenchError("; ".join(damage))
    return {"summary": sealed.summary(checks),
            **{s: [c.part.name for c in checks if c.state == s]
               for s in (sealed.VERIFIED, sealed.UNSEALED)}}  # fmt: skip


def drift(fid: Fidelity, tokenizer: Endpoint) -> dict[str, Any]:
    """The sampled turns' round trip through the server's tokenizer (inspect/fidelity.py)."""
    from genbench.transport.eventloop import run_async

    if not fid.sample:
        return {"url": tokenizer.root, "checked": 0, "note": "no turn with ids to check"}
    return run_async(check_drift(fid.sample, tokenizer, fid.model))


def inspect_data(
    path: Path,
    settings: Settings,
    *,
    drop: list[str] | None = None,
    out: Path | None = None,
    save: Path | None = None,
    progress: Callable[[int], None] | None = None,
    tokenizer: Endpoint | None = None,
    drift_sample: int = DRIFT_SAMPLE,
) -> dict[str, Any]:
    """Inspect a generate output (directory or file); with `drop`, write the clean copy to
    `out`; with `tokenizer` (a server), round-trip `drift_sample` turns' ids through its
    tokenizer. Returns the document, saved as inspect.json (`save`, or the default place:
    beside the data, or, with a clean copy, in it, so nothing is written beside the
    original)."""
    files = data_files(path)
    if drop:
        if out is None:
            raise UsageError("--drop needs --out CLEAN_DIR: the original is never changed")
        check_out(path, out)  # before the long pass, not after it
    elif out is not None:
        raise UsageError("--out needs --drop: which defects to leave out of the copy")
    sample = drift_sample if tokenizer is not None else 0
    parts = integrity(path, files)
    same = engine_servers(path) if path.is_dir() else {}  # an engine's restarts: one server
    sc = scan(files, settings.thresholds, settings.examples, progress, sample, same)
    if sc.rows == 0:
        raise UsageError(f"{path}: no rows to inspect")
    doc, an = build(path, sc, settings)
    if parts is not None:
        doc["integrity"] = parts
    if path.is_dir() and (still_jsonl := unconverted(path)):  # a stopped --format parquet job
        doc.setdefault("notes", []).append(unconverted_line(still_jsonl))
    if tokenizer is not None and sc.fidelity is not None:
        doc["fidelity"]["drift"] = drift(sc.fidelity, tokenizer)
    if (states := check_states(path)) is not None:  # generate --hidden-states: each file
        doc["hidden_states"] = states
    if drop and out is not None:
        manifest = write_clean(path, sc, an.flags, an.first_of, drop, out, doc["settings"])
        kept = (an.flags & sum(BIT[d] for d in drop)) == 0
        doc["clean"] = {
            **{k: manifest[k] for k in ("out", "drop", "rows", "kept", "dropped")},
            "dropped_by_reason": manifest["dropped_by_reason"],
            "storage": storage(sc, an.arrays, kept, settings.hidden),
            # nothing dropped, nothing to regenerate (generate refuses an empty input)
            "follow_up": follow_up(path, out) if manifest["dropped"] else {},
            "follow_up_when": FOLLOW_UP_WHEN if manifest["dropped"] else {},
        }
    # a clean copy's inspection goes under the copy: the original is only read
    target = save or (out / INSPECT_FILE if drop and out is not None else default_save(path))
    doc["saved"] = str(target)
    try:
        from genbench.run.result import write_json_atomic

        write_json_atomic(target, doc)
    except OSError as e:
        if save is not None:
            raise OutputError(f"--save {save}: cannot write it ({e.strerror or e})") from None
        doc["saved"] = None
        doc.setdefault("notes", []).append(
            f"could not write {target} ({e.strerror or e}): use --save PATH"
        )
    return doc


@dataclass(frozen=True)
class InspectArgs:
    """`genbench inspect`'s options as the user typed them, one field per option (the
    command, commands/inspect.py, gives each its flag, default and help); `settings_from_flags`
    checks them and reads the inspection's settings from them."""

    path: Path
    drop: str | None
    out_dir: Path | None
    save: Path | None
    min_tokens: int
    loop_window: int
    loop_cover: float
    loop_repeats: int
    dup_min_chars: int
    tags: str
    server_alpha: float
    server_effect: float
    examples: int
    hidden_size: int | None
    layers_captured: int | None
    dtype_bytes: int
    url: str | None
    drift_sample: int
    key_env: str
    key_file: Path | None
    json: bool


def settings_from_flags(a: InspectArgs) -> Settings:
    """`genbench inspect`'s thresholds, each checked (a UsageError names the flag)."""
    for name in ("min_tokens", "loop_window", "dup_min_chars", "examples", "hidden_size",
                 "layers_captured", "dtype_bytes", "drift_sample"):  # fmt: skip
        positive("--" + name.replace("_", "-"), getattr(a, name))
    if not 0 < a.loop_cover <= 1:
        raise UsageError(f"--loop-cover must be in (0, 1], got {a.loop_cover}")
    if a.loop_repeats < 2:
        raise UsageError(f"--loop-repeats must be at least 2, got {a.loop_repeats}")
    if not 0 < a.server_alpha < 1 or not 0 <= a.server_effect <= 1:
        raise UsageError("--server-alpha must be in (0, 1) and --server-effect in [0, 1]")
    tag_list = tuple(t for t in (x.strip() for x in a.tags.split(",")) if t)
    hidden = None
    if a.hidden_size is not None or a.layers_captured is not None:
        if a.hidden_size is None or a.layers_captured is None:
            raise UsageError("hidden-state storage needs both --hidden-size and --layers-captured")
        from genbench.plan import HiddenStates

        hidden = HiddenStates(a.hidden_size, a.layers_captured, a.dtype_bytes)
    th = Thresholds(a.min_tokens, a.loop_window, a.loop_cover, a.loop_repeats, a.dup_min_chars,
                    tag_list)  # fmt: skip
    return Settings(th, a.server_alpha, a.server_effect, a.examples, hidden)
