"""The client watches itself: a benchmark client that saturates reports its own limit as the
server's. During each phase we record the client's CPU use and event-loop lag; when either
nears saturation the phase is flagged as possibly client-bound.

Event-loop lag is how late a timer fires: a loop busy parsing chunks delays every
timestamp it takes by about that much, so lag is also the client's timing error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

from genbench.stats import percentile

# Above these the figures may describe the client rather than the server.
CPU_LIMIT = 0.85  # fraction of one core used by the client process
LAG_LIMIT_S = 0.010  # p99 event-loop lag

_BLOCK_ENV = "GENBENCH_DEBUG_BLOCK_LOOP_MS"  # test hook: block the loop this long every 50 ms


@dataclass
class SelfCheck:
    cpu_fraction: float | None = None
    loop_lag_p50_s: float | None = None
    loop_lag_p99_s: float | None = None
    loop_lag_max_s: float | None = None
    chunks_per_s: float | None = None
    client_bound: bool = False
    reasons: list[str] = field(default_factory=list)
    # the host's 1-minute load average at the phase's end, and its cores: a busy host
    # (load above the cores) explains a server on it whose speed moved (the local demo)
    host_load: float | None = None
    host_cpus: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


class LoopMonitor:
    """Samples event-loop lag every `interval` and process CPU time over its lifetime."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._blocker: asyncio.Task[None] | None = None
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.create_task(self._run())
        block_ms = float(os.environ.get(_BLOCK_ENV, "0") or 0)
        if block_ms > 0:
            self._blocker = asyncio.create_task(_block_loop(block_ms / 1000))

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, time.perf_counter() - t - self.interval))

    async def stop(self, chunks: int) -> SelfCheck:
        for task in (self._task, self._blocker):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        wall = time.perf_counter() - self._wall0
        sc = SelfCheck()
        if wall <= 0:
            return sc
        sc.cpu_fraction = (time.process_time() - self._cpu0) / wall
        with contextlib.suppress(OSError, AttributeError):  # no load average on Windows
            sc.host_load = round(os.getloadavg()[0], 2)
        sc.host_cpus = os.cpu_count()
        sc.chunks_per_s = chunks / wall
        if self.lags:
            sc.loop_lag_p50_s = percentile(self.lags, 50)
            sc.loop_lag_p99_s = percentile(self.lags, 99)
            sc.loop_lag_max_s = max(self.lags)
        if sc.cpu_fraction >= CPU_LIMIT:
            sc.reasons.append(f"client used {sc.cpu_fraction:.0%} of a CPU core")
        if sc.loop_lag_p99_s is not None and sc.loop_lag_p99_s >= LAG_LIMIT_S:
            sc.reasons.append(f"event-loop lag p99 {sc.loop_lag_p99_s * 1000:.0f} ms")
        sc.client_bound = bool(sc.reasons)
        return sc


async def _block_loop(seconds: float) -> None:
    while True:
        await asyncio.sleep(0.05)
        time.sleep(seconds)  # deliberately blocks the loop: simulates a saturated client
