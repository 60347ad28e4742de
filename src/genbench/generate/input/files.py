"""The prompt file as lines or rows: JSON Lines (optionally gzipped) or Parquet, and the
one-line errors for a file that is not what its name says (empty, a .jsonl that is
gzip, a gzip stream cut short: with how far it was read)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from genbench.errors import InputFileError, UsageError

PROMPT_KEYS = ("conversations", "messages")
BOM = b"\xef\xbb\xbf"


MAGIC = (  # what a file that is not JSON Lines or Parquet starts with
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"PAR1", "a Parquet file"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\x00", "xz-compressed data"),
    (b"PK\x03\x04", "a zip archive"),
)


def sniff(path: Path) -> str | None:
    """What a file really is, by its first bytes, when that is a known binary format."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    return next((what for magic, what in MAGIC if head.startswith(magic)), None)


def check_kind(path: Path, expected: str) -> None:
    """A .jsonl that is gzip, a .parquet that is text: say what the file really is."""
    what = sniff(path)
    gz = path.name.lower().endswith(".gz")
    if expected == "parquet" and what != "a Parquet file":
        really = what or "text (JSON Lines?)"
        raise InputFileError(path, None, f"named .parquet but is {really}")
    if expected == "jsonl" and not gz and what is not None:
        hint = ": name it .jsonl.gz" if what.startswith("gzip") else ""
        raise InputFileError(path, None, f"named as JSON Lines but is {what}{hint}")
    if expected == "jsonl" and gz and what != "gzip-compressed data":
        raise InputFileError(path, None, f"named .gz but is {what or 'not gzip-compressed'}")


def jsonl_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, stripped bytes) of non-blank lines. A gzip stream that is cut short or
    corrupt is an error naming how far it read, never a row's fault or an interrupt."""
    gz = path.name.lower().endswith(".gz")
    opener: Any = gzip.open if gz else open
    n = pos = 0
    try:
        with opener(path, "rb") as f:
            for n, line in enumerate(f, 1):
                pos += len(line)
                s = line.strip()
                if n == 1 and s.startswith(BOM):
                    s = s[3:].strip()
                if s:
                    yield n, s
    except (OSError, EOFError, zlib.error) as e:  # EOFError: a gzip stream cut short
        raise _stream_error(path, gz, n, pos, e) from None


def _stream_error(path: Path, gz: bool, n: int, pos: int, e: BaseException) -> InputFileError:
    where = f"after line {n:,} (byte {pos:,} of the text)" if n else "before its first line"
    if not gz:
        return InputFileError(path, None, f"cannot read it ({getattr(e, 'strerror', e)}), {where}")
    if isinstance(e, EOFError):
        what = "the gzip stream is cut short (it ends before its end marker)"
    else:
        what = f"the gzip stream is corrupt ({e})"
    return InputFileError(path, None, f"{what}, {where}")


def check_stream(path: Path) -> None:
    """Read a gzip file to its end: raises its stream error, if it has one. Run before a
    row of a .gz is blamed, since a corrupt stream can decode into garbage lines first."""
    if path.name.lower().endswith(".gz"):
        for _ in jsonl_lines(path):
            pass


def open_parquet(path: Path) -> Any:
    """A `pyarrow.parquet.ParquetFile`, with one-line errors for a missing pyarrow and for
    files pyarrow refuses (generate's input and inspect's reader both open through it)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(
            f"{path}: reading Parquet needs pyarrow: pip install 'genbench[parquet]'"
        ) from None
    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own error types for bad files
        raise InputFileError(path, None, f"not a readable Parquet file ({e})") from None


def parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    pf = open_parquet(path)
    names = set(pf.schema_arrow.names)
    wanted = ("id", *PROMPT_KEYS, "prompt", "system", "params", "tools", "tool_choice",
              "query", "answers")  # fmt: skip
    cols = [c for c in wanted if c in names]
    if not cols:
        raise InputFileError(path, None, f"no usable columns (has: {', '.join(sorted(names))})")
    n = 0
    for batch in pf.iter_batches(batch_size=2048, columns=cols):
        for obj in batch.to_pylist():
            n += 1
            yield n, obj


def rows_after(path: Path, kind: str, rest: Iterator[Any], seen: int) -> int:
    """The rows of the file after the first `seen` (--limit stopped there): a Parquet
    file's from its metadata, a JSONL file's non-blank lines counted, not decoded."""
    if kind == "parquet":
        return max(0, open_parquet(path).metadata.num_rows - seen)
    return sum(1 for _ in rest)


def check_exists(path: Path) -> None:
    if not path.exists():
        raise UsageError(f"--input {path}: no such file")
    if path.is_dir():
        raise UsageError(f"--input {path}: is a directory, expected a .jsonl or .parquet file")


