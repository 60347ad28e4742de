"""A whole file, written so that a crash leaves the old one or the new one, never half.

Temporary file beside it, fsync, rename over it, then fsync the directory: without that
last step the rename itself can be lost to a power cut, and the old file comes back.
Every file genbench rewrites (result.json, plan.json, inspect.json, the job's manifest
and indexes, a data file with rows taken out, a data set's Parquet, an export, a Batch
output, the report) goes through `writing` here, the only place that renames one; a
core test fails on an `os.replace` or a temporary name anywhere else.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TMP_SUFFIX = ".tmp"


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by its name (a directory: its entries, a rename)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path: Path) -> Path:
    """Where `writing(path)` writes before the rename: NAME.tmp beside it."""
    return path.with_name(path.name + TMP_SUFFIX)


def is_temp(path: Path) -> bool:
    """A file `writing` left behind (a crash before its rename): never a finished file."""
    return path.name.endswith(TMP_SUFFIX)


@contextlib.contextmanager
def writing(path: Path | str, *, buffering: int = -1, shared: bool = False) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` when the block ends without an error: written
    to a temporary file in the same directory, flushed and fsynced, renamed over `path`,
    then the directory fsynced (a failure there raises: the rename may not be durable).
    On any error the temporary file is removed and `path` is as it was. `shared`: other
    processes may write the same path at once (a cache), so each takes its own name."""
    path = Path(path)
    tmp = temp_path(path)
    if shared:
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}")
    try:
        with open(tmp, "wb", buffering=buffering) as f:
            yield f
            closed = f.closed  # a writer that closes its sink (pyarrow's) has flushed it
            if not closed:
                f.flush()
                os.fsync(f.fileno())
        if closed:
            fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a full disk leaves no .tmp behind, and the old file as it was
        raise
    fsync_path(path.parent)


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (a rename, a new file) durable."""
    fsync_path(path)


def write_atomic(path: Path, data: bytes) -> None:
    """`data` as the whole of `path`, through `writing`."""
    with writing(path) as f:
        f.write(data)


def move(src: Path, dst: Path) -> None:
    """Rename a finished file (an errors file set aside), durably in both directories."""
    os.replace(src, dst)
    fsync_path(dst.parent)
    if src.parent != dst.parent:
        fsync_path(src.parent)


def move_across(src: Path, dst: Path) -> None:
    """`move`, also between filesystems (another process's staging directory): where a
    rename cannot cross, the bytes are copied through `writing` (the copy is whole or
    absent at `dst`) and `src` removed after."""
    try:
        move(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        with open(src, "rb") as f, writing(dst) as out:
            shutil.copyfileobj(f, out, 1 << 20)
        src.unlink()


def publish_dir(src: Path, dst: Path) -> None:
    """A directory made whole beside `dst` renamed into place, durably: readers see
    nothing or all of it. `dst` must be absent or empty (a rename never merges)."""
    os.rename(src, dst)
    fsync_path(dst.parent)


def rotate(path: Path, suffix: str = ".1") -> None:
    """A log at its size limit set aside as PATH.1 (the one old copy kept, the older one
    gone). Not fsynced: a log's tail is worth no stall of the process that writes it."""
    os.replace(path, path.with_name(path.name + suffix))
