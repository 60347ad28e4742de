"""Small helpers importable from test modules (conftest fixtures are not importable)."""

from __future__ import annotations

import socket
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


def idle_wake_late_s(idle: float = 0.3, tries: int = 5) -> float:
    """How late this host wakes a process from an idle wait of `idle` seconds (median of
    `tries`). On a busy VM host an idle vCPU is woken milliseconds late, every time a
    process that waited is woken: a timing check tighter than that measures the host."""
    late = []
    for _ in range(tries):
        t = time.perf_counter()
        time.sleep(idle)
        late.append(time.perf_counter() - t - idle)
    return sorted(late)[len(late) // 2]


def skip_if_host_wakes_late(budget_s: float) -> None:
    """Skip a timing test whose tolerance is `budget_s` when three idle wake-ups (request
    to server, server's own timer, first byte to client) use more than a quarter of it.
    A timer wake-up is the cheapest of them: waking on network traffic cost this host
    several times more (5-10 ms at 300 ms idle when timers woke 0.75-1.4 ms late)."""
    import pytest

    late = idle_wake_late_s()
    if 3 * late > budget_s / 4:
        pytest.skip(
            f"this host wakes an idle process {late * 1000:.1f} ms late: a check to within "
            f"{budget_s * 1000:.0f} ms measures the host, not genbench"
        )
