"""File descriptors: fit the process's limit to the streams a command will open, or refuse.

Every stream in flight holds one socket, and a stock Linux shell lets a process open only
1,024 descriptors (the *soft* `RLIMIT_NOFILE`), although the *hard* limit an unprivileged
process may raise it to is usually far higher (524,288 under systemd). So a job of 1,400
streams used to fail at its first progress line with "Too many open files". Before
anything is sent, a command that opens connections calls `fit_descriptors`: it raises
the soft limit to what the job needs, and when even the hard limit is too low it refuses
with one line that says how many it needs, how many it may have and how to raise it.
(A descriptor that still runs out mid-job, taken by something else, is the transport's
and the job's to handle; this only makes sure the plan fits.)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from genbench.errors import UsageError

try:
    import resource
except ImportError:  # pragma: no cover - Windows: no RLIMIT_NOFILE to fit
    resource = None  # type: ignore[assignment]

# per server: the preflight's connections, /health polls of a server that went down,
# /metrics scrapes, a connection being replaced while the old one closes
PER_SERVER = 4
# output data files, the errors file, index and job files, the input being read, a Parquet
# converter's pipes, the event loop's own descriptors, imports that open files
FILES = 32
# what else a long job may hold at once (retries opening fresh connections, DNS)
MARGIN_FIXED = 32
MARGIN_SHARE = 0.10


@dataclass(frozen=True)
class Descriptors:
    """What a command needs and what the process may have, after `fit_descriptors`."""

    need: int
    soft: int  # the soft limit now (raised when it was below `need`)
    hard: int | None  # None: unlimited
    raised_from: int | None = None  # the soft limit before, when it was raised


def descriptors_needed(streams: int, servers: int = 1, open_now: int | None = None) -> int:
    """Descriptors a command needs to hold `streams` connections over `servers` servers:
    what is open now, one per stream, a few per server, the output files, and a margin."""
    base = open_descriptors() if open_now is None else open_now
    margin = MARGIN_FIXED + math.ceil(MARGIN_SHARE * streams)
    return base + streams + PER_SERVER * servers + FILES + margin


def open_descriptors() -> int:
    """How many descriptors this process has open (16 where the system does not say)."""
    for d in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(d))
        except OSError:
            continue
    return 16


def fit_descriptors(streams: int, servers: int = 1, lower: str = "--concurrency") -> Descriptors:
    """Raise the soft RLIMIT_NOFILE to what `streams` over `servers` need, up to the hard
    limit; refuse (UsageError, exit 2) when the hard limit is below the need. `lower` is
    the flag that reduces the streams, for the message."""
    need = descriptors_needed(streams, servers)
    if resource is None:
        return Descriptors(need, need, None)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hard_n = None if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= need:
        return Descriptors(need, soft, hard_n)
    if hard_n is not None and hard_n < need:
        raise UsageError(refusal(need, streams, servers, hard_n, lower))
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    except (OSError, ValueError) as e:  # e.g. macOS caps the soft limit below an unlimited hard
        raise UsageError(refusal(need, streams, servers, soft, lower, str(e))) from None
    return Descriptors(need, need, hard_n, raised_from=soft)


def raise_soft_limit() -> int | None:
    """A server's call: soft limit up to the hard limit (it cannot know how many clients
    will connect). The new soft limit, or None where it cannot be read."""
    if resource is None:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError):
            pass
    return soft


def suggested_limit(need: int) -> int:
    """A round hard limit that covers `need`: the next multiple of 1,024."""
    return 1024 * math.ceil(need / 1024)


def refusal(
    need: int,
    streams: int,
    servers: int,
    allowed: int,
    lower: str,
    why: str | None = None,
) -> str:
    """The one line a refused command prints (after 'genbench: error: ')."""
    where = f"{servers:,} servers" if servers != 1 else "1 server"
    limit = f"could not raise the soft limit: {why}" if why else "hard limit"
    return (
        f"genbench needs ~{need:,} file descriptors for {streams:,} streams to {where}, but "
        f"this shell allows at most {allowed:,} ({limit}): raise it with "
        f"`ulimit -Hn {suggested_limit(need)}` as root (or nofile in "
        f"/etc/security/limits.conf, LimitNOFILE= for a systemd service), or lower {lower}"
    )
