"""Why an engine died, in one line a person can act on.

In order of what says most: the kernel's own word, when its log is readable (`/dev/kmsg`,
root or CAP_SYSLOG) and has "Out of memory: Killed process PID" or "Memory cgroup out of
memory: Killed process PID" for the engine or a process of its group (vLLM's engine core
is the one that grows); else the exit status or signal, with the engine's own last error
lines (CUDA out of memory, address already in use, a model path that is not there).
"""

from __future__ import annotations

import errno
import os
import re
import signal
from dataclasses import dataclass

KMSG = "/dev/kmsg"
_OOM = re.compile(r"(?:Memory cgroup out of memory|Out of memory): Killed process (\d+)")
# an engine's own words for what stopped it, most telling first (vLLM, SGLang, llama.cpp)
KNOWN_ERRORS = (
    re.compile(
        r"CUDA out of memory|OutOfMemoryError|out of memory|failed to allocate", re.IGNORECASE
    ),  # fmt: skip
    re.compile(r"address already in use|EADDRINUSE|couldn't bind|failed to bind", re.IGNORECASE),
    re.compile(
        r"no such file or directory|does not exist|not a local folder|repository not "
        r"found|not a valid model|failed to load model|unrecognized argument|no such "
        r"option|invalid choice|invalid value",
        re.IGNORECASE,
    ),  # fmt: skip
)
_ERRORISH = re.compile(r"\b\w*(Error|Exception)\b|\berror\b|\bfatal\b", re.IGNORECASE)


@dataclass(frozen=True)
class Death:
    """How an engine ended: `cause` (stable: oom, signal, exit, hang, start_timeout, stopped)
    and the one line that says so."""

    cause: str
    line: str
    code: int | None = None


def kernel_oom_line(pids: set[int], since: float) -> str | None:
    """The kernel log's OOM-kill line for one of `pids`, logged after `since` (monotonic
    seconds, as the kernel stamps its lines), or None (none, or the log is unreadable)."""
    for text, at in reversed(read_kernel_log()):
        m = _OOM.search(text)
        if m and int(m[1]) in pids and at >= since - 1.0:
            return text[m.start() :].strip()
    return None


def read_kernel_log(limit: int = 4096) -> list[tuple[str, float]]:
    """The kernel's log records still in its ring buffer: (text, monotonic seconds); [] when
    this process may not read it. Reads /dev/kmsg without blocking, record by record."""
    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    out: list[tuple[str, float]] = []
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while read: go on from the next
                    continue
                break  # EAGAIN: the end of the buffer
            head, _, text = rec.decode("utf-8", "replace").partition(";")
            parts = head.split(",")
            at = int(parts[2]) / 1e6 if len(parts) > 2 and parts[2].isdigit() else 0.0
            out.append((text.split("\n", 1)[0], at))
            if len(out) > limit:
                del out[: len(out) - limit]
    finally:
        os.close(fd)
    return out


def error_lines(lines: list[str], keep: int = 2, last: bool = True) -> str:
    """The engine's own last words about what went wrong: its last line of a known kind,
    else its last error-like lines, else (with `last`) its last line."""
    for pattern in KNOWN_ERRORS:
        for line in reversed(lines):
            if pattern.search(line):
                return _short(line)
    errs = [ln for ln in lines if _ERRORISH.search(ln)]
    if errs:
        return " / ".join(_short(e) for e in errs[-keep:])
    return _short(lines[-1]) if lines and last else ""


def _short(line: str, limit: int = 300) -> str:
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def status_text(code: int) -> str:
    """'exited with status 2', 'was killed by SIGKILL'."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    if code > 128 and code - 128 in (signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV):
        return f"exited with status {code} (128 + {signal.Signals(code - 128).name})"
    return f"exited with status {code}"


def why_died(name: str, pid: int, code: int, pids: set[int], since: float,
             lines: list[str]) -> Death:  # fmt: skip
    """The one line for an engine that ended by itself (not stopped by genbench)."""
    who = f"{name} (pid {pid})"
    oom = kernel_oom_line(pids | {pid}, since)
    if oom is not None:
        how = status_text(code).removeprefix("was killed by ").removeprefix("exited with ")
        return Death("oom", f"{who} was killed by the kernel's OOM killer ({how}): {oom}", code)
    own = error_lines(lines, last=False)  # its own words about an error, if it said any
    if own:
        said = f": {own}"
    elif not lines:
        said = " (it wrote nothing)"
    elif 0 <= code <= 128:  # an exit of its own: its last line, as that and not as a cause
        said = f"; its last line: {_short(lines[-1])}"
    else:  # a signal (or 128 + a signal): its last line says nothing of it
        said = ""
    return Death("signal" if code < 0 else "exit", f"{who} {status_text(code)}{said}", code)
