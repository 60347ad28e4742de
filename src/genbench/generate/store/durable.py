"""Append-only files that survive a crash: buffered by the event loop, written and fsynced
by a worker thread, and read back (cutting a torn tail) on resume.

Every descriptor a file needs (its data and its index) is opened when the file is
created, on the event loop, never half way through a flush. A job at its descriptor
limit (thousands of streams under `ulimit -n`) can still open its next part: a
`Reserve` of descriptors is held back for it and taken back once old files close.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.errors import OutOfDescriptors, OutputError

Pending = tuple[str, Any]  # (id, what the caller wants back once it is durable)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def output_errors(out: Path) -> Iterator[None]:
    """Any failure to write in this block is an OutputError (exit 12, one line)."""
    try:
        yield
    except OSError as e:
        raise write_failed(out, e) from None


def write_failed(out: Path, e: OSError) -> OutputError:
    if e.errno in (errno.EMFILE, errno.ENFILE):
        return OutOfDescriptors(f"cannot open a file in {out}")
    hint = "raise the file-size limit, ulimit -f" if e.errno == errno.EFBIG else "free disk space"
    return OutputError(
        f"cannot write to {out}: {e.strerror or e}. Rows written before are kept; "
        f"fix the cause (e.g. {hint}) and rerun the same command to resume"
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
        self.keys: list[tuple[int, int]] = []  # each line's (request hash, line key)
        self.closed = False
        self.full = False  # rotated: never written again, ready for conversion

    def write(self, line: bytes, item: Pending, keys: tuple[int, int] = (0, 0)) -> None:
        self.buf.append(line)
        self.size += len(line)
        self.pending.append(item)
        self.keys.append(keys)

    def take(self) -> SyncGroup:
        group = SyncGroup(self, self.buf, self.pending, self.size, self.keys)
        self.buf, self.pending, self.keys = [], [], []
        return group

    def record_index(self, b: SyncGroup) -> None:
        """Append one sync group to the index: ids now durable in the data file up to byte
        `end`, their request hashes and line keys, and what proves the bytes are
        still those (the group's hash, the file's mtime once they were on disk)."""
        if self.index_fd is not None and b.items:
            entry = index_entry(b.end, [i for i, _ in b.items], b.keys, b.digest, b.mtime)
            write_all(self.index_fd, entry)

    def close(self) -> None:
        if not self.closed:
            for fd in (self.fd, self.index_fd):
                if fd is not None:
                    os.close(fd)
            self.closed = True


@dataclass
class SyncGroup:
    """A sync group: lines taken from a file's buffer, written and fsynced together."""

    file: AppendFile
    chunks: list[bytes]
    items: list[Pending]
    end: int  # the file's size once these lines are written
    keys: list[tuple[int, int]] = field(default_factory=list)
    digest: int = 0  # of the bytes written, for the index
    mtime: int = 0  # the file's st_mtime_ns after they were


def digest64(data: bytes | memoryview) -> int:
    """The content check of one sync group in the index: 64 bits of blake2b (1 GB/s)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def index_entry(
    end: int, ids: list[str], keys: list[tuple[int, int]], digest: int, mtime: int
) -> bytes:
    """One line of a part's index (`readback.py` reads it back)."""
    entry: dict[str, Any] = {"end": end, "ids": ids}
    if keys and any(k != (0, 0) for k in keys):
        entry["req"] = [k[0] for k in keys]
        entry["src"] = [k[1] for k in keys]
    if digest:
        entry["hash"], entry["mtime"] = digest, mtime
    return orjson.dumps(entry) + b"\n"


def flush(groups: list[SyncGroup], dir_fd: int | None) -> None:
    """In a worker thread: write each sync group, one write() per file, fsync, then index.
    The index is appended only after the data it names is on disk."""
    for b in groups:
        if b.chunks:
            data = b"".join(b.chunks)
            write_all(b.file.fd, data)
            if b.file.index_fd is not None:
                b.digest = digest64(data) or 1
    for b in groups:
        os.fsync(b.file.fd)
        if b.digest:
            b.mtime = os.fstat(b.file.fd).st_mtime_ns
    if dir_fd is not None:
        os.fsync(dir_fd)
    for b in groups:
        b.file.record_index(b)


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
                rid = None if _second_copy(obj) else obj.get("id")
                keys.add(str(rid) if rid is not None else f"line:{obj.get('line')}")
    if pos < size:
        notes.append(f"{path.name}: cut {size - pos} bytes of an incomplete last line")
        if repair:
            os.truncate(path, pos)
    return keys, notes


def _second_copy(entry: dict[str, Any]) -> bool:
    """An entry for a second copy of an id that an earlier genbench wrote under that id
    (it now writes none): it stands for its line, not the id, whose first copy is to be
    done, not failed (--skip-invalid; docs/generate.md)."""
    return (
        entry.get("error_kind") == "invalid_input"
        and entry.get("field") == "id"
        and str(entry.get("error", "")).startswith("field 'id': duplicate ")
    )
