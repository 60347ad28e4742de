"""A whole file, written so that a crash leaves the old one or the new one, never half.

Temporary file beside it, fsync, rename over it, then fsync the directory: without that
last step the rename itself can be lost to a power cut, and the old file comes back.
Every document genbench rewrites (result.json, plan.json, inspect.json, the job's
manifest and indexes, a data set's Parquet, the report) goes through here.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the directory's entries (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Temporary file, fsync, rename, fsync the directory: never half a file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a full disk leaves no .tmp behind, and the old file as it was
        raise
    fsync_dir(path.parent)


def replace_durably(tmp: str | Path, path: str | Path) -> None:
    """`tmp`, written and fsynced by its writer, takes the place of `path`, durably."""
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)
