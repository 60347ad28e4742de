"""Read generate's output, one row at a time: JSON Lines or Parquet, a directory or a file.

A directory is read as `genbench generate` left it: its data shards (`data-00000.jsonl`,
`data-2of4-00001.parquet`, ...) in name order, never the errors file; a shard present as
both JSONL and Parquet (a conversion that finished but whose JSONL was not yet removed)
is read once, as Parquet. Rows are parsed one by one (JSONL) or in record batches
(Parquet), so memory does not grow with the file.

A row that is not in generate's format stops the reading with one line naming the file,
the line (or Parquet row) and the field. The one exception is an incomplete last line of
a JSONL shard, which a job still running or killed mid-write leaves: it is skipped and
said so, as generate's resume would cut it.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.errors import InputFileError, UsageError
from genbench.generate.input import open_parquet

SHARD_RE = re.compile(r"^data(?:-[A-Za-z0-9]+)*-(\d{5})\.(jsonl|parquet)$")
PARQUET_BATCH = 1024
COLUMNS = ("id", "conversations", "meta")
MAX_COUNT = 1 << 31  # token counts are kept as int32


def kind_of(path: Path) -> str:
    name = path.name.lower()
    return "parquet" if name.endswith((".parquet", ".pq")) else "jsonl"


def data_files(path: Path) -> list[Path]:
    """The files to read: the data shards of a generate output directory, or one file."""
    if not path.exists():
        raise UsageError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    shards: dict[str, dict[str, Path]] = {}
    for p in path.iterdir():
        m = SHARD_RE.match(p.name)
        if m and p.is_file():
            shards.setdefault(p.name.rsplit(".", 1)[0], {})[m[2]] = p
    if not shards:
        raise UsageError(
            f"{path}: no data files (data-NNNNN.jsonl or .parquet): is it a genbench "
            "generate output directory? Give a file to read any other name"
        )
    return [files.get("parquet") or files["jsonl"] for _, files in sorted(shards.items())]


@dataclass(slots=True)
class Turn:
    """One assistant turn: its thinking (reasoning_content) and its answer (content)."""

    thinking: str
    answer: str
    calls: int = 0  # tool calls in the turn: an empty answer is no defect then


@dataclass(slots=True)
class OutputRow:
    """What inspect needs of one output row; `where` is its line (JSONL) or row (Parquet)."""

    id: str | int
    turns: list[Turn]
    completion_tokens: int
    reasoning_tokens: int | None
    prompt_tokens: int | None
    finish_reason: str | None
    server: str
    truncated: bool
    nbytes: int


@dataclass
class FileStats:
    """What reading one file found: rows, bytes, and notes (a skipped incomplete line)."""

    path: Path
    kind: str
    rows: int = 0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)


class _Bad(Exception):
    def __init__(self, problem: str, field: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.field = problem, field


def _text(v: Any, where: str) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):  # a list of parts: its text, as generate stores it in Parquet
        return orjson.dumps(v).decode()
    raise _Bad(f"expected text, got {type(v).__name__}", where)


def _count(meta: dict[str, Any], key: str, required: bool) -> int | None:
    v = meta.get(key)
    if v is None:
        if required:
            raise _Bad("missing: generate writes it for every row", f"meta.{key}")
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_COUNT:
        raise _Bad(f"expected a count (an integer >= 0), got {v!r}", f"meta.{key}")
    return v


def parse_row(obj: Any, nbytes: int) -> OutputRow:
    """Validate one decoded row of generate's format; raises _Bad naming the field."""
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object per line, got {type(obj).__name__}")
    rid = obj.get("id")
    if rid is None or isinstance(rid, bool) or not isinstance(rid, str | int) or rid == "":
        raise _Bad("missing or not text/an integer", "id")
    conv = obj.get("conversations")
    if not isinstance(conv, list):
        raise _Bad("missing or not a list of turns", "conversations")
    turns: list[Turn] = []
    for i, t in enumerate(conv):
        if not isinstance(t, dict):
            raise _Bad(f"expected an object, got {type(t).__name__}", f"conversations[{i}]")
        if t.get("role") == "assistant":
            answer = _text(t.get("content"), f"conversations[{i}].content")
            thinking = _text(t.get("reasoning_content"), f"conversations[{i}].reasoning_content")
            calls = t.get("tool_calls")
            turns.append(Turn(thinking, answer, len(calls) if isinstance(calls, list) else 0))
    if not turns:
        raise _Bad("no assistant turn: not a generated row", "conversations")
    meta = obj.get("meta")
    if not isinstance(meta, dict):
        raise _Bad("missing or not an object (generate's per-row metadata)", "meta")
    if "finish_reason" not in meta:
        raise _Bad("missing: generate writes it for every row", "meta.finish_reason")
    finish = meta["finish_reason"]
    if finish is not None and not isinstance(finish, str):
        raise _Bad(f"expected text, got {finish!r}", "meta.finish_reason")
    truncated = meta.get("truncated")
    server = meta.get("server")
    return OutputRow(
        id=rid,
        turns=turns,
        completion_tokens=_count(meta, "completion_tokens", True) or 0,
        reasoning_tokens=_count(meta, "reasoning_tokens", False),
        prompt_tokens=_count(meta, "prompt_tokens", False),
        finish_reason=finish,
        server=server if isinstance(server, str) and server else "unknown",
        truncated=bool(truncated) if truncated is not None else finish == "length",
        nbytes=nbytes,
    )


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


def _jsonl_rows(path: Path, stats: FileStats) -> Iterator[tuple[int, OutputRow, Any]]:
    loads = orjson.loads
    for n, line in raw_lines(path, stats):
        try:
            obj = loads(line)
        except orjson.JSONDecodeError:
            raise InputFileError(path, n, _json_problem(line)) from None
        try:
            row = parse_row(obj, len(line) + (0 if line.endswith(b"\n") else 1))
        except _Bad as b:
            raise InputFileError(path, n, b.problem, b.field) from None
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
                row = parse_row(obj, len(dumps(obj)) + 1)  # the line generate wrote for it
            except _Bad as b:
                raise InputFileError(f"{path}, row {n}", None, b.problem, b.field) from None
            stats.rows = n
            yield n, row, obj
    stats.bytes = path.stat().st_size


def read_rows(path: Path, stats: FileStats) -> Iterator[tuple[int, OutputRow, Any]]:
    """(line or row number, row, the decoded object) for every row of one file, in order."""
    if stats.kind == "parquet":
        return _parquet_rows(path, stats)
    return _jsonl_rows(path, stats)
