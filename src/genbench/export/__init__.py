"""`genbench export`: generate's output as the one file a drafter trainer reads.

`generate` writes a directory of parts (`data-*.jsonl` / `.parquet`) of conversations,
each generated turn with the ids the server generated and the prompt ids it saw. A trainer
wants one file in its own shape: SpecForge's pre-tokenized rows or its conversations file,
or vllm-project/speculators' rows (formats). Which generated turns are written follows
rules a user can change (samples: turns cut by `max_tokens` and turns too short are left
out by default), and every turn is counted either way: printed, and in a small JSON
summary beside the file (`FILE.export.json`).

The file is written under a temporary name, fsynced and renamed: an existing file of the
same name stays whole until the new one is complete. docs/generate.md says which file to
give which trainer and what each format keeps and drops.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genbench.atomic import writing
from genbench.errors import OutputError, UsageError
from genbench.export import specforge, speculators, states  # noqa: F401 (each registers its formats)
from genbench.export.checks import Repeats, nothing_written
from genbench.export.formats import FORMATS, Format, get
from genbench.export.samples import REASONS, Rules, Sample, samples
from genbench.inspect.reader import PART_RE, FileStats, data_files, kind_of, read_rows
from genbench.rows import RowMeta
from genbench.run.result import document_head
from genbench.transport.token_ids import UNCHECKED

__all__ = ["FORMATS", "Rules", "default_out", "export_data", "summary_path"]

SCHEMA = "genbench.export"
SCHEMA_VERSION = 1


def default_out(source: Path, fmt: str) -> Path:
    """SOURCE.FORMAT.jsonl beside a directory; beside a file, its stem's."""
    base = source.resolve()
    stem = base.name if base.is_dir() else base.name.split(".")[0]
    return base.parent / f"{stem}.{fmt}.jsonl"


def summary_path(out: Path) -> Path:
    return out.with_name(out.name + ".export.json")


@dataclass
class Counts:
    """What an export read, wrote and left out."""

    rows: int = 0
    turns: int = 0  # generated turns read
    written: int = 0  # lines written: samples (token formats) or rows (specforge)
    turns_written: int = 0
    kinds: Counter[str] = field(default_factory=Counter)  # every turn a rule applies to
    left_out: Counter[str] = field(default_factory=Counter)  # by the reason named first
    kept: Counter[str] = field(default_factory=Counter)  # written though a rule applies, by
    # the first (the user kept it: --keep-cut, or the text format needs no ids)
    rows_left_out: int = 0
    supervised: int = 0  # generated ids written (the loss is taken on them)
    ids: int = 0  # every id written, prompt included
    longest: int = 0  # ids of the longest sample written
    system: Counter[str] = field(default_factory=Counter)
    history: int = 0
    unchecked: int = 0  # samples written of rows whose ids no usage checked
    history_kept_calls: int = 0  # of `history`: original calls kept by --tool-policy keep


def _row_lines(
    obj: dict[str, Any], fmt: Format, rules: Rules, empty_system: bool, c: Counts
) -> list[bytes]:
    """One output row -> the lines it gives, its turns counted."""
    found = samples(obj)
    c.rows += 1
    c.turns += len(found)
    need_ids = fmt.token_exact
    left: dict[int, str] = {}
    for s in found:
        c.kinds.update(s.kinds(rules.min_tokens))
        why = s.left_out(rules, need_ids)
        if why is not None:
            left[s.turn] = why
            c.left_out[why] += 1
    if fmt.sample is not None:
        kept = [s for s in found if s.turn not in left]
        if not kept:
            c.rows_left_out += 1
        meta = RowMeta.of(obj)
        lines = [fmt.sample(s, meta) for s in kept]
        if meta.token_ids == UNCHECKED:  # the server's ids, no usage to check them
            c.unchecked += len(kept)
        for s in kept:
            _count_sample(s, c)
            c.kept.update(s.kinds(rules.min_tokens)[:1])
        c.turns_written += len(kept)
        return lines
    assert fmt.row is not None
    tr = fmt.row(obj, found, set(left), empty_system)
    # turns after the first left-out one are not written either (their prompt held it)
    c.left_out["after_left_out"] += sum(1 for s in found if s.turn not in left) - tr.turns
    if tr.line is None:
        c.rows_left_out += 1
        return []
    c.turns_written += tr.turns
    for s in [s for s in found if s.turn not in left][: tr.turns]:  # the turns written
        c.kept.update(s.kinds(rules.min_tokens)[:1])
    c.system[tr.system] += 1
    c.history += tr.history
    c.history_kept_calls += tr.history_kept_calls
    return [tr.line]


def _count_sample(s: Sample, c: Counts) -> None:
    assert s.prompt is not None and s.generated is not None
    n = len(s.prompt) + len(s.generated)
    c.supervised += len(s.generated)
    c.ids += n
    c.longest = max(c.longest, n)


def _check_out(files: list[Path], out: Path) -> None:
    dst = out.resolve()
    if any(p.resolve() == dst for p in files):
        raise UsageError(f"--out {out}: that is one of the files being read")
    if PART_RE.match(dst.name) and any(p.resolve().parent == dst.parent for p in files):
        raise UsageError(
            f"--out {out}: a data shard's name in the set's directory: name it otherwise"
        )
    if dst.is_dir():
        raise UsageError(f"--out {out}: is a directory; give the file to write")
    if not dst.parent.is_dir():
        raise UsageError(f"--out {out}: no such directory {dst.parent}")


def export_data(
    source: Path | list[Path],
    fmt: str,
    out: Path,
    rules: Rules,
    *,
    empty_system: bool = True,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Write `source` (a generate directory or one of its files, or several: one file of
    them all, in order) as `fmt` to `out`; return the summary, also saved beside `out`."""
    form = get(fmt)
    sources = source if isinstance(source, list) else [source]
    files = [f for src in sources for f in data_files(src)]
    _check_out(files, out)
    c = Counts()
    repeats = Repeats()
    stats: list[FileStats] = []
    try:
        with writing(out, buffering=1 << 20) as f:
            for path in files:
                fs = FileStats(path, kind_of(path))
                stats.append(fs)
                for _, _row, obj in read_rows(path, fs):
                    if not repeats.first(obj.get("id")):
                        continue  # an earlier source's row of this id was written
                    lines = _row_lines(obj, form, rules, empty_system, c)
                    c.written += len(lines)
                    f.writelines(lines)
                    if progress is not None and not c.rows & 0xFFF:
                        progress(c.rows)
            if c.rows == 0:
                raise UsageError(f"{', '.join(map(str, sources))}: no rows to export")
            if c.written == 0:  # never an empty file for the trainer, nor one over a good one
                left_out = dict(c.left_out)
                raise nothing_written(form.token_exact, left_out, c.rows, rules.min_tokens)
    except OSError as e:
        raise OutputError(f"--out {out}: cannot write it ({e.strerror or e})") from None
    doc = document(sources, fmt, out, rules, empty_system, c, stats)
    doc["repeated"] = repeats.describe()
    _save(doc)
    return doc


def document(
    sources: list[Path],
    fmt: str,
    out: Path,
    rules: Rules,
    empty_system: bool,
    c: Counts,
    stats: list[FileStats],
) -> dict[str, Any]:
    """The summary: what was read, written and left out, and why (docs/generate.md)."""
    doc: dict[str, Any] = {
        **document_head(SCHEMA, SCHEMA_VERSION, created_first=True),
        "source": {
            "paths": [str(p) for p in sources],
            "files": [str(s.path) for s in stats],
            "notes": [n for s in stats for n in s.notes],
        },
        "format": fmt,
        "out": str(out),
        "rules": {
            **rules.describe(),
            "empty_system": empty_system if not FORMATS[fmt].token_exact else None,
        },
        "rows": c.rows,
        "turns": c.turns,
        "written": c.written,
        "turns_written": c.turns_written,
        "rows_without_a_sample": c.rows_left_out,
        "counted": {k: c.kinds.get(k, 0) for k in REASONS},
        "left_out": {k: c.left_out.get(k, 0) for k in (*REASONS, "after_left_out")},
        "kept": {k: c.kept.get(k, 0) for k in REASONS},
    }
    if FORMATS[fmt].token_exact:
        doc["ids"] = {"written": c.ids, "supervised": c.supervised, "longest_sample": c.longest}
        doc["ids"]["unchecked_samples"] = c.unchecked
        del doc["left_out"]["after_left_out"]
    else:
        doc["system"] = {k: c.system.get(k, 0) for k in ("sent", "empty", "none")}
        doc["history_turns"] = c.history
        doc["history_by_cause"] = {
            "tool_policy_keep": c.history_kept_calls,  # the input's calls, kept as history
            "turns_last": c.history - c.history_kept_calls,  # earlier turns kept as written
        }
    doc["summary"] = str(summary_path(out))
    return doc


def _save(doc: dict[str, Any]) -> None:
    from genbench.run.result import write_json_atomic

    target = Path(doc["summary"])
    try:
        write_json_atomic(target, doc)
    except OSError as e:
        raise OutputError(f"{target}: cannot write the summary ({e.strerror or e})") from None
