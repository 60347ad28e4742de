"""One writer per output directory: an OS lock that dies with its holder.

`generate` (and `inspect --drop`, writing a clean copy) takes an exclusive `flock` on
`OUT/.genbench/lock` (`lock-2of4` under `--shard 2/4`, so the shards of one job can share a
directory) before it reads or writes anything there, and holds it until it exits. The
kernel drops the lock when the holder's last descriptor closes, however the process ends:
a SIGKILL, an OOM kill or a power loss never leaves a stale lock to clean up by hand.

The file also holds a note of who holds it (host, pid, start time, command), written
after the lock is taken, so a second process refused the lock can say whom to look for.
The note is advice for people; only the lock decides.

On a network file system the lock is only as good as the file system's locking: Linux
NFS clients turn flock into NFS byte-range locks (held across hosts when the server's
lock manager works), while some FUSE and object-store mounts lock per host only. Hosts
sharing one directory should run `--shard i/N`: each shard writes its own files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import socket
import sys
import time
from pathlib import Path

import orjson

from genbench.errors import OutputError, UsageError
from genbench.generate.store.layout import LOCK, LOCK_GLOB

NOTE_WAIT_S = 1.0  # how long a refused process waits for a new holder's note
OPEN_TRIES = 5  # a directory removed under us this often is being removed on purpose


class OutputLock:
    """The exclusive lock on an output directory (or one shard of it)."""

    def __init__(
        self, out: Path, state: Path, name: str = LOCK, companions: tuple[str, ...] = ()
    ) -> None:
        self.out, self.state, self.path = out, state, state / name
        self.companions = companions  # files that go with the lock when nothing else is there
        self.fd: int | None = None
        self.created: list[Path] = []  # directories this lock made (removed if left empty)

    def acquire(self) -> None:
        """Take the lock or raise UsageError naming the holder. Creates the directories."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise lock_write_failed(self.out, e) from None
            raise held(self.out, self.holder()) from None
        self.fd = fd
        note = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": " ".join(["genbench", *sys.argv[1:]])[:500],
        }
        with contextlib.suppress(OSError):  # the note is advice; the lock is held already
            os.ftruncate(fd, 0)
            os.pwrite(fd, orjson.dumps(note) + b"\n", 0)

    def _open(self) -> int:
        """The lock file's descriptor, making the directories on the way (the output
        directory's missing parents too). Two first runs
        started at once (shards of one job) race here: a directory the other made a moment
        ago is theirs to share, not an error, and one the other removed again as it ended
        (an empty run cleans up what it made) is made anew."""
        for attempt in itertools.count(1):
            try:
                # -o out/job with no out/ yet (plan's next: line): its parents too, as
                # `mkdir -p`, and removed with it if the run leaves them empty
                above = [d for d in reversed(self.out.parents) if not d.exists()]
                for d in (*above, self.out, self.state):
                    with contextlib.suppress(FileExistsError):
                        d.mkdir()
                        self.created += [] if d in self.created else [d]
                    if not d.is_dir():
                        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError as e:
                if attempt == OPEN_TRIES:
                    raise lock_write_failed(self.out, e) from None
                # removed between our mkdir and open by a run that ended: make it again
                # (its parents too: they are made on the way)
            except OSError as e:
                raise lock_write_failed(self.out, e) from None
        raise AssertionError("itertools.count never ends")

    def holder(self) -> str:
        """Who holds the lock, from its note: 'pid 123 on host, since ...'."""
        deadline = time.monotonic() + NOTE_WAIT_S
        while True:
            try:
                note = orjson.loads(self.path.read_bytes())
                return f"pid {note['pid']} on {note['host']}, since {note['started']}"
            except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
                if time.monotonic() > deadline:
                    return "a process that has not written its note yet"
            time.sleep(0.05)  # the holder writes its note right after taking the lock

    def release(self, remove_empty: bool = True) -> None:
        """Drop the lock; remove the directories it created if nothing else was written."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)
        os.close(self.fd)
        self.fd = None
        if remove_empty and self.created:
            with contextlib.suppress(OSError):
                names = {p.name for p in self.state.iterdir()}
                if names <= {self.path.name, *self.companions}:
                    for name in sorted(names - {self.path.name}):
                        (self.state / name).unlink()
                    self.path.unlink()
                    for d in reversed(self.created):
                        d.rmdir()

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def held(out: Path, holder: str) -> UsageError:
    return UsageError(
        f"--out {out}: another genbench is writing to it ({holder}); wait for it to "
        "finish or stop it, or use another --out"
    )


def lock_write_failed(out: Path, e: OSError) -> OutputError:
    """The directory or its lock file cannot be made: one line, exit 12."""
    if e.errno == errno.ENOTDIR or e.errno == errno.EEXIST:
        return OutputError(f"--out {out}: cannot create it: a path on the way is a file")
    return OutputError(f"--out {out}: cannot write to it: {e.strerror or e}")


def refuse_if_held(out: Path, state: Path) -> None:
    """A directory another process is writing to (any of its locks held) is refused with
    the holder named; nothing is created."""
    if not state.is_dir():
        return
    for p in sorted(state.glob(LOCK_GLOB)):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise held(out, OutputLock(out, state, p.name).holder()) from None
        finally:
            os.close(fd)
