"""Append-only files that survive a crash: buffered by the event loop, written and fsynced
by a worker thread, and read back (cutting a torn tail) on resume.

Every descriptor a file needs (its data and its index) is opened when the file is
created, on the event loop, never half way through a flush. A job at its descriptor
limit (thousands of streams under `ulimit -n`) can still open its next shard: a
`Reserve` of descriptors is held back for it and taken back once old files close.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.atomic import fsync_dir, write_atomic
from genbench.errors import OutOfDescriptors, OutputError

__all__ = ["fsync_dir", "write_atomic"]  # the store finds them here too

Pending = tuple[str, Any]  # (id, what the caller wants back once it is durable)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_failed(out: Path, e: OSError) -> OutputError:
    if e.errno in (errno.EMFILE, errno.ENFILE):
        return OutOfDescriptors(f"cannot open a file in {out}")
    return OutputError(
        f"cannot write to {out}: {e.strerror or e}. Rows written before are kept; "
        "fix the cause (e.g. free disk space) and rerun the same command to resume"
    )


class Reserve:
    """Descriptors held back (on /dev/null) for files that must still be opened: when the
    process has none left (EMFILE), one is given up for the file. `used` counts those
    times; `refill` takes them back once other files closed."""

    def __init__(self, size: int = 0) -> None:
        self.size, self.fds, self.used = size, list[int](), 0
        self.refill()

    def refill(self) -> None:
        with contextlib.suppress(OSError):
            while len(self.fds) < self.size:
                self.fds.append(os.open(os.devnull, os.O_RDONLY))

    def open(self, path: Path) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        try:
            return os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE) or not self.fds:
                raise
        os.close(self.fds.pop())
        self.used += 1
        return os.open(path, flags, 0o644)

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.pop())


class AppendFile:
    """One append-only JSONL file. Lines are buffered in memory by the event loop and
    written, fsynced and indexed by a worker thread (`flush`), so the loop never waits on
    the disk; then the lines' `pending` items are done."""

    def __init__(self, path: Path, index: Path | None = None, reserve: Reserve | None = None):
        opener = (reserve or Reserve()).open
        self.path = path
        self.new = not path.exists()
        self.fd = opener(path)
        try:
            self.index_fd = opener(index) if index is not None else None
        except OSError:
            os.close(self.fd)
            raise
        self.size = os.fstat(self.fd).st_size  # including lines still buffered
        self.buf: list[bytes] = []
        self.pending: list[Pending] = []
        self.closed = False
        self.full = False  # rotated: never written again, ready for conversion

    def write(self, line: bytes, item: Pending) -> None:
        self.buf.append(line)
        self.size += len(line)
        self.pending.append(item)

    def take(self) -> Batch:
        batch = Batch(self, self.buf, self.pending, self.size)
        self.buf, self.pending = [], []
        return batch

    def record_index(self, items: list[Pending], end: int) -> None:
        """Append one batch to the index: ids now durable in the data file up to byte `end`."""
        if self.index_fd is not None and items:
            line = orjson.dumps({"end": end, "ids": [i for i, _ in items]}) + b"\n"
            write_all(self.index_fd, line)

    def close(self) -> None:
        if not self.closed:
            for fd in (self.fd, self.index_fd):
                if fd is not None:
                    os.close(fd)
            self.closed = True


@dataclass
class Batch:
    """Lines taken from a file's buffer, to be written and fsynced together."""

    file: AppendFile
    chunks: list[bytes]
    items: list[Pending]
    end: int  # the file's size once these lines are written


def flush(batches: list[Batch], dir_fd: int | None) -> None:
    """In a worker thread: write each batch with one write() per file, fsync, then index.
    The index is appended only after the data it names is on disk."""
    for b in batches:
        if b.chunks:
            write_all(b.file.fd, b"".join(b.chunks))
    for b in batches:
        os.fsync(b.file.fd)
    if dir_fd is not None:
        os.fsync(dir_fd)
    for b in batches:
        b.file.record_index(b.items, b.end)


def cut_torn_tail(path: Path, block: int = 1 << 16) -> None:
    """Cut an incomplete last line (a crash mid-write), so appending starts a line."""
    with contextlib.suppress(FileNotFoundError), open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        keep = end
        while keep > 0:
            start = max(0, keep - block)
            f.seek(start)
            nl = f.read(keep - start).rfind(b"\n")
            keep = start + nl + 1 if nl >= 0 else start
            if nl >= 0:
                break
        if keep < end:
            f.truncate(keep)


# -- reading back ---------------------------------------------------------------------------


@dataclass
class ShardScan:
    ids: list[str]
    valid_bytes: int
    notes: list[str] = field(default_factory=list)


def _read_index(idx: Path) -> list[tuple[int, list[str]]]:
    batches: list[tuple[int, list[str]]] = []
    try:
        with open(idx, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break
                try:
                    obj = orjson.loads(line)
                    batches.append((int(obj["end"]), list(obj["ids"])))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    break
    except FileNotFoundError:
        pass
    return batches


def _row_id(line: bytes) -> str | None:
    try:
        row_id = orjson.loads(line)["id"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if isinstance(row_id, int) and not isinstance(row_id, bool):
        return str(row_id)  # the input's integer ids are kept as integers
    return row_id if isinstance(row_id, str) else None


def _indexed(path: Path, idx: Path | None, size: int) -> tuple[int, list[str], int, int]:
    """What the index vouches for: (bytes covered, their ids, batches used, batches)."""
    covered, ids, used = 0, [], 0
    batches = _read_index(idx) if idx is not None else []
    # trust batches while their ends go forward within the file: one that claims bytes the
    # file does not have, and all after it, are not (the index is then rewritten)
    while used < len(batches) and covered <= batches[used][0] <= size:
        covered, batch_ids = batches[used]
        ids.extend(batch_ids)
        used += 1
    if covered:
        with open(path, "rb") as f:
            f.seek(covered - 1)
            if f.read(1) != b"\n":  # not a line boundary: the index is not about this file
                covered, ids, used = 0, [], 0
    return covered, ids, used, len(batches)


def scan_jsonl_shard(path: Path, idx: Path | None, repair: bool = True) -> ShardScan:
    """The ids a JSONL shard holds; cut a torn or unreadable tail (when `repair`)."""
    size = path.stat().st_size
    pos, ids, used, total = _indexed(path, idx, size)
    tail = 0
    with open(path, "rb") as f:
        f.seek(pos)
        for line in f:
            if not line.endswith(b"\n") or (row_id := _row_id(line)) is None:
                break
            ids.append(row_id)
            pos += len(line)
            tail += 1
    notes: list[str] = []
    if pos < size:
        notes.append(f"{path.name}: cut {size - pos} bytes of an incomplete last line")
        if repair:
            os.truncate(path, pos)
    if idx is not None and repair and (tail or used < total or pos < size):
        write_atomic(idx, orjson.dumps({"end": pos, "ids": ids}) + b"\n" if ids else b"")
    return ShardScan(ids, pos, notes)


def scan_errors(path: Path, repair: bool = True) -> tuple[set[str], list[str]]:
    """Keys of rows in the errors file: the id, or 'line:N' for a row without one."""
    keys: set[str] = set()
    notes: list[str] = []
    if not path.exists():
        return keys, notes
    size = path.stat().st_size
    pos = 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                break
            pos += len(line)
            if isinstance(obj, dict):
                rid = obj.get("id")
                keys.add(str(rid) if rid is not None else f"line:{obj.get('line')}")
    if pos < size:
        notes.append(f"{path.name}: cut {size - pos} bytes of an incomplete last line")
        if repair:
            os.truncate(path, pos)
    return keys, notes
