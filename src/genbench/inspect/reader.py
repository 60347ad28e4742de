"""Read generate's output, one row at a time: JSON Lines or Parquet, a directory or a file.

A directory is read as `genbench generate` left it: its data parts (`data-00000.jsonl`,
`data-2of4-00001.parquet`, ...) in name order, never the errors file; a part present as
both JSONL and Parquet (a conversion that finished but whose JSONL was not yet removed)
is read once, as Parquet. Rows are parsed one by one (JSONL) or in record batches
(Parquet), so memory does not grow with the file.

A row's format is written and parsed side by side in `genbench.rows`; this
module finds the files and reads them. A row that is not in generate's format stops the
reading with one line naming the file, the line (or Parquet row) and the field. The one
exception is an incomplete last line of a JSONL part, which a job still running or killed
mid-write leaves: it is skipped and said so, as generate's resume would cut it.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.errors import InputFileError, UsageError
from genbench.generate.input.files import open_parquet
from genbench.generate.store.layout import (
    DATA_FILE_RE,
    Layout,
    data_tag,
    engine_tags,
    is_generate_dir,
)
from genbench.rows import OutputRow, RowFormatError, parse_row

PART_RE = DATA_FILE_RE
PARQUET_BATCH = 1024
COLUMNS = ("id", "conversations", "meta")


def kind_of(path: Path) -> str:
    name = path.name.lower()
    return "parquet" if name.endswith((".parquet", ".pq")) else "jsonl"


def data_files(path: Path) -> list[Path]:
    """The files to read: the data parts of a generate output directory, or one file."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    parts: dict[str, dict[str, Path]] = {}
    for p in path.iterdir():
        m = PART_RE.match(p.name)
        if m and p.is_file():
            parts.setdefault(p.name.rsplit(".", 1)[0], {})[m[2]] = p
    if not parts:
        raise UsageError(
            f"{path}: no data files (data-NNNNN.jsonl or .parquet): is it a genbench "
            "generate output directory? Give a file to read any other name"
        )
    return [files.get("parquet") or files["jsonl"] for _, files in sorted(parts.items())]


@dataclass
class FileStats:
    """What reading one file found: rows, bytes, and notes (a skipped incomplete line)."""

    path: Path
    kind: str
    rows: int = 0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)


def _json_problem(line: bytes) -> str:
    """What is wrong with a line orjson refused, said plainly (encoding first)."""
    line = line.rstrip(b"\r\n")
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as u:
        return f"not UTF-8 text (byte 0x{line[u.start]:02x} at column {u.start + 1})"
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError as e:
        return f"not valid JSON ({e.msg} at column {e.colno})"
    return "not valid JSON"


def raw_lines(path: Path, stats: FileStats) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a JSONL file's non-blank lines. An incomplete last line (no
    newline, not JSON) is skipped with a note; a bad line elsewhere raises."""
    opener: Any = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb", buffering=1 << 20) as f:
            for n, line in enumerate(f, 1):
                if line.endswith(b"\n") or not line.strip():
                    if line.strip():
                        yield n, line
                    continue
                try:  # the last line, without its newline: complete only if it parses
                    orjson.loads(line)
                except orjson.JSONDecodeError:
                    stats.notes.append(
                        f"{path.name}, line {n}: incomplete last line ({len(line)} bytes, no "
                        "newline): skipped (a job still running, or killed mid-write)"
                    )
                    return
                yield n, line
    except OSError as e:
        raise InputFileError(path, None, f"cannot read it ({e.strerror or e})") from None


BATCH_SHAPE = (
    "a Batch output (genbench generate --answers batch): its lines are OpenAI Batch "
    "answers, not conversations; generate with --answers both for a data set the trainers "
    "and inspect read (the conversations, and batch_output.jsonl beside them)"
)


def _is_batch_answer(obj: Any) -> bool:
    """A line of the OpenAI Batch output shape (`custom_id`, `response`), not a row."""
    return isinstance(obj, dict) and "custom_id" in obj and "conversations" not in obj


def repair_hint(path: Path) -> str:
    """What repairs an unreadable line of a generate output's JSONL part: generate's own
    resume moves it to the quarantine file and generates its row again (readback.py)."""
    m = PART_RE.match(path.name)
    if not m or m[2] != "jsonl" or not is_generate_dir(path.parent):
        return ""
    tag = data_tag(path).removeprefix("-") or None
    quarantine = Layout(path.parent, tag).quarantine.name
    return (
        f"; rerunning the job's genbench generate with --out {path.parent} repairs it (the "
        f"line goes to {quarantine}, a torn last line is cut, and its row is "
        "generated again)"
    )


def _jsonl_rows(path: Path, stats: FileStats) -> Iterator[tuple[int, OutputRow, Any]]:
    loads = orjson.loads
    for n, line in raw_lines(path, stats):
        try:
            obj = loads(line)
        except orjson.JSONDecodeError:
            raise InputFileError(path, n, _json_problem(line) + repair_hint(path)) from None
        try:
            row = parse_row(obj, len(line) + (0 if line.endswith(b"\n") else 1))
        except RowFormatError as b:
            if _is_batch_answer(obj):
                raise UsageError(f"{path}: {BATCH_SHAPE}") from None
            # a line without an id is one generate's resume cannot place: it sets it aside
            hint = repair_hint(path) if b.field == "id" or not isinstance(obj, dict) else ""
            raise InputFileError(path, n, b.problem + hint, b.field) from None
        stats.rows += 1
        stats.bytes += row.nbytes
        yield n, row, obj


def parquet_batches(
    path: Path, columns: tuple[str, ...] | None = COLUMNS, optional: tuple[str, ...] = ()
) -> Iterator[Any]:
    """Record batches of a Parquet file, with one-line errors for what pyarrow refuses;
    the `optional` columns too where the file has them."""
    pf = open_parquet(path)
    if columns is not None:
        missing = [c for c in columns if c not in pf.schema_arrow.names]
        if missing:
            raise InputFileError(path, None, "no such column in generate's format", missing[0])
        columns = (*columns, *(c for c in optional if c in pf.schema_arrow.names))
    try:
        yield from pf.iter_batches(batch_size=PARQUET_BATCH, columns=list(columns or ()) or None)
    except OSError as e:
        raise InputFileError(path, None, f"cannot read it ({e})") from None


def _parquet_rows(path: Path, stats: FileStats) -> Iterator[tuple[int, OutputRow, Any]]:
    dumps = orjson.dumps
    for batch in parquet_batches(path, optional=("tools",)):  # an agentic row's
        for obj in batch.to_pylist():
            n = stats.rows + 1
            try:
                # the line generate wrote for it: Parquet's one schema gives every row every
                # column, null where the row had none (50% more bytes than its line)
                row = parse_row(obj, len(dumps(_unnulled(obj))) + 1)
            except RowFormatError as b:
                raise InputFileError(f"{path}, row {n}", None, b.problem, b.field) from None
            stats.rows = n
            yield n, row, obj
    stats.bytes = path.stat().st_size


def _unnulled(x: Any) -> Any:
    """`x` without the null fields Parquet's schema added (a JSONL line leaves them out)."""
    if isinstance(x, dict):
        return {k: _unnulled(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_unnulled(v) for v in x]
    return x


def read_rows(path: Path, stats: FileStats) -> Iterator[tuple[int, OutputRow, Any]]:
    """(line or row number, row, the decoded object) for every row of one file, in order."""
    if stats.kind == "parquet":
        return _parquet_rows(path, stats)
    return _jsonl_rows(path, stats)


def engine_servers(path: Path) -> dict[str, str]:
    """A --serve engine's URLs across the job's runs (each run may draw it a new port), each
    mapped to the first it had (its events file says which engine listened where): one
    engine is one server to compare, however often it was started."""
    from genbench.transport.endpoint import Endpoint

    first: dict[tuple[str | None, str], str] = {}
    same: dict[str, str] = {}
    for tag in engine_tags(path):
        try:
            lines = Layout(path, tag).engine_events.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                doc = orjson.loads(line)
                url = Endpoint.parse(doc["url"]).base_url  # as the rows name their server
            except (ValueError, TypeError, KeyError, UsageError):
                continue
            if isinstance(doc.get("engine"), str):
                same.setdefault(url, first.setdefault((tag, doc["engine"]), url))
    return same
