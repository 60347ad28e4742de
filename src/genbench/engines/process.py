"""One engine process: started as genbench's child, its output kept in a bounded log, stopped
with everything it started.

Three things make sure nothing outlives genbench:

* the engine runs in a process group of its own (a Ctrl-C at the terminal is genbench's to
  handle, and a stop reaches the engine's own children: vLLM's engine core, its workers);
* genbench's child is a keeper (keeper.py) that starts the engine and, when genbench dies
  (even by SIGKILL), kills the whole group: on Linux the kernel tells it through a
  parent-death signal (`prctl(PR_SET_PDEATHSIG)`, set in the child before it runs), and
  anywhere its stdin, a pipe only genbench holds, closes. The kernel sends that signal
  when the *thread* that forked the child ends: engines are started from the thread that
  runs genbench's event loop (the main thread), never from a worker thread;
* the engine's stdin is that pipe too: an engine that watches it (the local demo target
  does) also sees genbench go.

The engine's stdout and stderr go, through a thread of genbench's, to a log file that is
rotated at `log_limit` bytes (one old file kept), so a chatty engine over six days cannot
fill the disk; its last lines are kept in memory to say what it was doing or why it died.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from genbench.atomic import rotate
from genbench.engines.command import EngineCommand
from genbench.engines.keeper import PDEATHSIG
from genbench.redact import redact_bytes

LOG_LIMIT = 16 << 20  # bytes of one log file; one rotated file is kept beside it
TAIL_LINES = 200
PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" \
    else None  # fmt: skip


def _die_with(parent: int) -> None:
    """In the child, before exec: the keeper's signal when the parent dies; gone at once if
    it already has (the parent may have died between fork and here)."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, PDEATHSIG, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class EngineProcess:
    """The engine's command running as a child; `wait`/`stop` are safe to call twice."""

    def __init__(self, cmd: EngineCommand, name: str, log_path: Path,
                 log_limit: int = LOG_LIMIT) -> None:  # fmt: skip
        self.cmd, self.name, self.log_path, self.log_limit = cmd, name, log_path, log_limit
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.lines: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.pids: set[int] = set()  # the engine and every process seen in its group
        self.engine_pid: int | None = None  # the engine's own pid (the keeper's child)
        self._pump: threading.Thread | None = None

    @property
    def pgid(self) -> int:
        """The group's id: the keeper's pid."""
        assert self.proc is not None
        return self.proc.pid

    @property
    def pid(self) -> int:
        """The engine's own pid (the one the kernel's OOM line names)."""
        return self.engine_pid or self.pgid

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> EngineProcess:
        """Start the command (from the main thread: see the module's note)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.cmd.env}
        env.setdefault("PYTHONUNBUFFERED", "1")  # a Python engine's last words reach the log
        parent = os.getpid()
        env["GENBENCH_KEEPER_PARENT"] = str(parent)
        argv = [sys.executable, "-m", "genbench.engines.keeper", *self.cmd.argv]
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, env=env, process_group=0,
                preexec_fn=lambda: _die_with(parent),
            )  # fmt: skip
        except OSError as e:
            raise EngineNotStarted(f"{self.name}: cannot run {self.cmd.argv[0]!r} "
                                   f"({e.strerror or e})") from None  # fmt: skip
        self.started = time.monotonic()
        self.pids, self.engine_pid = {self.proc.pid}, None
        self.lines.clear()
        self._pump = threading.Thread(target=self._copy_output, args=(self.proc.stdout,),
                                      name=f"{self.name}-log", daemon=True)  # fmt: skip
        self._pump.start()
        return self

    def _copy_output(self, stream: IO[bytes] | None) -> None:
        """The engine's output to the log (rotated at log_limit) and to `lines`."""
        assert stream is not None
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed below
        try:
            for raw in stream:
                if log.tell() + len(raw) > self.log_limit:
                    log.close()
                    rotate(self.log_path)
                    log = open(self.log_path, "ab")  # noqa: SIM115
                raw = redact_bytes(raw)  # an engine that prints its arguments (vLLM does)
                log.write(raw)
                log.flush()
                text = raw.decode("utf-8", "replace").rstrip()
                text = text.rsplit("\r", 1)[-1].strip()  # a progress bar's last state
                if text:
                    self.lines.append(text)
        except (OSError, ValueError):
            pass
        finally:
            log.close()

    def last_line(self) -> str:
        return self.lines[-1] if self.lines else ""

    def tail(self) -> list[str]:
        """The last lines the engine wrote, the pump's copy caught up first."""
        if self._pump is not None and not self.alive:
            self._pump.join(2.0)  # the pipe closes with the last writer
        return list(self.lines)

    def track_group(self) -> set[int]:
        """Every pid seen so far in the engine's process group (vLLM's engine core, its
        workers): the kernel may OOM-kill one of them rather than the engine itself. The
        engine's own pid is the keeper's child."""
        if self.alive:
            self.pids |= group_members(self.pgid)
            if self.engine_pid is None:
                self.engine_pid = first_child(self.pgid)
        return self.pids

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM to the engine's group (the engine, or what it left behind when it died
        first); SIGKILL to the group after `grace` s; wait for the engine and for its group
        to empty (bounded). The engine's exit status (negative: the signal)."""
        if self.proc is None:
            return None
        deadline = time.monotonic() + grace
        self.signal_group(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(grace)
        while group_members(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.signal_group(signal.SIGKILL)
        code = self.proc.wait()
        deadline = time.monotonic() + 5.0
        while group_members(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if self._pump is not None:
            self._pump.join(2.0)
        return code


class EngineNotStarted(Exception):
    """The command could not be run at all (no such program, not executable)."""


def group_members(pgid: int) -> set[int]:
    """Live (not zombie) processes whose process group is `pgid`, read from /proc."""
    found: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            found.add(int(entry))
    return found


def first_child(pid: int) -> int | None:
    """The first child of `pid` (Linux: /proc/PID/task/PID/children), or None."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:
        return None
    return int(kids[0]) if kids else None


def alive(pid: int) -> bool:
    """Is `pid` a live process (a zombie is not)?"""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode("ascii", "replace").rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
