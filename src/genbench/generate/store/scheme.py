"""An output directory's shard scheme: none, or N; recorded at its first run, then kept.

Each `--shard i/N` takes the ids whose stable hash is i-1 modulo N, and resumes from its
own files only. That is exactly once only while every run of the directory uses the same
N: an unsharded run after two shards, or `--shard 1/3` beside `--shard 1/2`, would see
none of the other scheme's rows and write their ids again. So the first run records the
scheme in `.genbench/shards.json` (written atomically, under a lock on the whole
directory taken for milliseconds, so two first runs started at once agree), and a run
asking for another is refused in one line (exit 2) before any request, naming both.
A directory made before the scheme was recorded has it read from its files' names.

To change N, `genbench merge DIR --out NEW --shards M` writes every id once into a new
directory of M shards (docs/cluster.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson

from genbench.atomic import write_atomic
from genbench.errors import OutputError, UsageError
from genbench.generate.store.layout import SCHEME_FILE, SCHEME_LOCK, STATE_DIR

LOCK_WAIT_S = 60.0  # the lock is held for milliseconds; a minute means a hung file system
_TAGGED = re.compile(r"^data-(\d+)of(\d+)-\d+\.(?:jsonl|parquet)$")
_PLAIN = re.compile(r"^data-\d+\.(?:jsonl|parquet)$")
_JOB = re.compile(r"^job(?:-(\d+)of(\d+))?\.json$")


def describe(count: int) -> str:
    """A scheme as a person names it."""
    return "no shards (one client)" if count == 1 else f"{count} shards (--shard i/{count})"


def recorded(out: Path) -> int | None:
    """The scheme in the directory's file, or None where none is recorded."""
    path = out / STATE_DIR / SCHEME_FILE
    try:
        count = int(orjson.loads(path.read_bytes())["shards"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise OutputError(f"{path}: unreadable ({e}); {_REREAD}") from None
    if count < 1:
        raise OutputError(f"{path}: unreadable (shards {count}: 1 or more); {_REREAD}")
    return count


_REREAD = "remove it and the next run reads the scheme from the data files' names"


def from_files(out: Path) -> set[int]:
    """The schemes the directory's files were written under (a directory made before the
    scheme was recorded): data files and job files, by their names."""
    found: set[int] = set()
    for p in out.iterdir() if out.is_dir() else ():
        m = _TAGGED.match(p.name)
        if m:
            found.add(int(m[2]))
        elif _PLAIN.match(p.name):
            found.add(1)
    state = out / STATE_DIR
    for p in state.iterdir() if state.is_dir() else ():
        m = _JOB.match(p.name)
        if m:
            found.add(int(m[2]) if m[2] else 1)
    return found


def settle(out: Path, count: int, asked: str) -> None:
    """Record `count` as the directory's scheme at its first run, or refuse a run whose
    scheme differs (UsageError, exit 2). `asked` is how this run's flag reads."""
    state = out / STATE_DIR
    with _directory_lock(state):
        found = recorded(out)
        if found is None:
            schemes = from_files(out)
            if len(schemes) > 1:
                listed = " and ".join(describe(n) for n in sorted(schemes))
                raise UsageError(
                    f"--out {out}: holds rows written under two shard schemes ({listed}); "
                    f"some ids may be there twice: genbench merge {out} --out NEW writes "
                    "every id once into a new directory"
                )
            found = schemes.pop() if schemes else None
            doc = {"shards": found or count, "recorded": datetime.now(UTC).isoformat()}
            write_atomic(state / SCHEME_FILE, orjson.dumps(doc) + b"\n")
        if found is not None and found != count:
            raise refused(out, found, count, asked)


def refused(out: Path, found: int, count: int, asked: str) -> UsageError:
    """The one line a run of another scheme gets: the scheme found, the one asked, the way."""
    way = (
        "run it without --shard"
        if found == 1
        else f"run each of its shards with --shard i/{found} (or --shard auto over {found} tasks)"
    )
    wants = "no shards" if count == 1 else f"{count} shards"
    return UsageError(
        f"--out {out}: its rows are written under {describe(found)}; this run ({asked}) "
        f"asks for {wants}: ids would be generated twice; {way}, or re-shard it: "
        f"genbench merge {out} --out NEW --shards {count}"
    )


@contextlib.contextmanager
def _directory_lock(state: Path):  # type: ignore[no-untyped-def]
    """The lock on the whole directory, held while its scheme is read or recorded."""
    try:
        fd = os.open(state / SCHEME_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise OutputError(f"--out {state.parent}: cannot write to it: {e.strerror or e}") from None
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise OutputError(
                        f"{state / SCHEME_LOCK}: held for over {LOCK_WAIT_S:.0f} s (it is "
                        "held for milliseconds): is the file system hung?"
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)
