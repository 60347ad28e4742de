"""`--drop ... --out CLEAN_DIR`: a filtered copy of the set, and what was dropped and why.

The original is only read. The copy has the same files (names, format), each row that is
kept written byte for byte as it was (JSONL lines are copied, not re-encoded; Parquet
batches are filtered with the original schema), so ids and everything else are
unchanged. Beside the data:

    CLEAN_DIR/manifest.json     schema genbench.clean: source, the rules and thresholds, counts
    CLEAN_DIR/dropped.jsonl     one line per dropped row: id, reasons, the row it copies
                                (dup), file and line in the original
    CLEAN_DIR/regenerate.jsonl  the dropped rows as generate input (id, conversations)
    CLEAN_DIR/.genbench/job*.json, shards.json, errors*.jsonl   copied from a generate
                                directory (each --shard's too), so that generate can resume
                                into CLEAN_DIR (docs/inspect.md)

Each file is written under a temporary name, fsynced and renamed; the manifest last, so a
CLEAN_DIR with a manifest is complete.
"""

from __future__ import annotations

import gzip
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from genbench.atomic import write_atomic, writing
from genbench.errors import OutputError, UsageError
from genbench.generate.store import seal as sealed
from genbench.generate.store.layout import JOB_GLOB, SCHEME_FILE, STATE_DIR, error_files
from genbench.generate.store.lock import OutputLock, refuse_if_held
from genbench.inspect.detect import BIT, DEFECTS
from genbench.inspect.reader import FileStats, parquet_batches, raw_lines
from genbench.inspect.scan import Scan

CLEAN_SCHEMA = "genbench.clean"
CLEAN_SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
DROPPED = "dropped.jsonl"
REGENERATE = "regenerate.jsonl"


def parse_drop(text: str) -> list[str]:
    """`loops,unclosed,dup` (or `all`) -> defect names, checked, each once (a name given
    twice is one rule: the kept rows' mask is a sum of the names' bits)."""
    names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if names == ["all"]:
        return list(DEFECTS)
    bad = [n for n in names if n not in DEFECTS]
    if bad or not names:
        raise UsageError(
            f"--drop {text!r}: expected a comma-separated list of {', '.join(DEFECTS)} (or all)"
        )
    return names


def check_out(source: Path, out: Path) -> None:
    """Refuse a CLEAN_DIR that would overwrite anything, the original above all."""
    src = source.resolve()
    dst = out.resolve()
    src_dir = src if src.is_dir() else src.parent
    if dst == src_dir or (source.is_dir() and src in dst.parents):
        raise UsageError(
            f"--out {out}: inside the set being inspected; the original is never written to: "
            "choose a new directory"
        )
    refuse_if_held(out, out / STATE_DIR)  # a generate writing there is named, not "not empty"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty directory")


def _reasons(bits: int) -> list[str]:
    return [d for d in DEFECTS if bits & BIT[d]]


class _Dropped:
    """Writes dropped.jsonl and regenerate.jsonl as dropped rows are met."""

    def __init__(
        self, out: Path, files: ExitStack, sc: Scan, flags: np.ndarray, first_of: np.ndarray
    ) -> None:
        self.manifest = files.enter_context(writing(out / DROPPED))
        self.regen = files.enter_context(writing(out / REGENERATE))
        self.sc, self.flags, self.first_of = sc, flags, first_of
        self.by_reason: dict[str, int] = dict.fromkeys(DEFECTS, 0)

    def add(self, i: int, obj: dict[str, Any], file: str, where: tuple[str, int]) -> None:
        reasons = _reasons(int(self.flags[i]))
        for r in reasons:
            self.by_reason[r] += 1
        entry: dict[str, Any] = {"id": obj["id"], "reasons": reasons}
        if "dup" in reasons:
            entry["dup_of"] = self.sc.ids[int(self.first_of[i])]
        entry |= {"file": file, where[0]: where[1]}
        self.manifest.write(orjson.dumps(entry) + b"\n")
        self.regen.write(
            orjson.dumps({"id": obj["id"], "conversations": obj["conversations"]}) + b"\n"
        )


def _copy_jsonl(fs: FileStats, start: int, drop: np.ndarray, out: Path, d: _Dropped) -> int:
    with writing(out / fs.path.name) as raw:
        if fs.path.name.lower().endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb") as gz:
                return _copy_lines(fs, start, drop, gz, d)
        return _copy_lines(fs, start, drop, raw, d)


def _copy_lines(fs: FileStats, start: int, drop: np.ndarray, dst: IO[bytes], d: _Dropped) -> int:
    kept, i = 0, start
    end = start + fs.rows
    for line_no, line in raw_lines(fs.path, FileStats(fs.path, fs.kind)):
        if i >= end:  # rows appended since the scan are not part of this inspection
            break
        if drop[i]:
            d.add(i, orjson.loads(line), fs.path.name, ("line", line_no))
        else:
            dst.write(line if line.endswith(b"\n") else line + b"\n")
            kept += 1
        i += 1
    return kept


def _copy_parquet(fs: FileStats, start: int, drop: np.ndarray, out: Path, d: _Dropped) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pq.ParquetFile(fs.path).schema_arrow
    kept, i = 0, start
    dst = out / fs.path.name
    with writing(dst) as f, pq.ParquetWriter(f, schema, compression="zstd") as w:
        for batch in parquet_batches(fs.path, None):
            n = min(batch.num_rows, start + fs.rows - i)
            if n <= 0:
                break
            batch = batch.slice(0, n)
            gone = drop[i : i + n]
            w.write_table(pa.Table.from_batches([batch]).filter(pa.array(~gone)))
            kept += int((~gone).sum())
            for j in map(int, np.flatnonzero(gone)):
                row = batch.slice(j, 1).to_pylist()[0]
                d.add(i + j, row, fs.path.name, ("row", i + j - start + 1))
            i += n
    return kept


def _copy_state(source: Path, out: Path) -> list[str]:
    """generate's job settings and errors files, so generate can resume into the copy."""
    copied = []
    if not source.is_dir():
        return copied
    state = source / STATE_DIR  # the job's settings, each --shard's, and the shard scheme
    for p in [*sorted(state.glob(JOB_GLOB)), *state.glob(SCHEME_FILE)]:
        copy = out / STATE_DIR / p.name
        copy.parent.mkdir(exist_ok=True)
        write_atomic(copy, p.read_bytes())
        copied.append(str(copy.relative_to(out)))
    for p in error_files(source):
        write_atomic(out / p.name, p.read_bytes())
        copied.append(p.name)
    return copied


def write_clean(
    source: Path,
    sc: Scan,
    flags: np.ndarray,
    first_of: np.ndarray,
    drop_names: list[str],
    out: Path,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """Write the filtered copy; return the manifest (also written as manifest.json)."""
    mask = 0
    for name in drop_names:
        mask |= BIT[name]
    drop = (flags & mask) != 0
    check_out(source, out)
    lock = OutputLock(out, out / STATE_DIR)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()  # one writer: a generate or another --drop started now is refused
        with ExitStack() as side:
            d = _Dropped(out, side, sc, flags & mask, first_of)
            files, start = [], 0
            for fs in sc.files:
                copy = _copy_parquet if fs.kind == "parquet" else _copy_jsonl
                kept = copy(fs, start, drop, out, d)
                sealed.seal(out / fs.path.name)  # written whole: merge and a resume verify it
                files.append({"name": fs.path.name, "rows": fs.rows, "kept": kept})
                start += fs.rows
        state = _copy_state(source, out)
        manifest = {
            "schema": CLEAN_SCHEMA,
            "schema_version": CLEAN_SCHEMA_VERSION,
            "source": str(source),
            "out": str(out),
            "drop": drop_names,
            "settings": settings,
            "rows": sc.rows,
            "kept": int((~drop).sum()),
            "dropped": int(drop.sum()),
            "dropped_by_reason": d.by_reason,
            "files": files,
            "copied": state,
            "dropped_file": DROPPED,
            "regenerate_file": REGENERATE,
        }
        write_atomic(out / MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n")
    except OSError as e:  # every file not finished was removed: no half-written one left
        raise OutputError(
            f"--out {out}: cannot write the clean copy ({e.strerror or e}); the original is "
            "untouched"
        ) from None
    finally:
        lock.release(remove_empty=False)
    return manifest
