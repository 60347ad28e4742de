"""A job's engines kept alive: watched, named when they die, restarted, their events logged.

Each engine is watched on its own: its process polled (an exit is seen within POLL_S), its
/health asked every PROBE_S. An engine that exits (killed by the kernel's OOM killer, by a
signal, or by itself) is named in one line (death.py); one that is alive but has not
answered /health for `hang_timeout` seconds is stopped (SIGTERM to its group, SIGKILL
after `grace`). Either way the job is told (it takes the server out; the rows in flight
go back to the queue, as for any server gone), and the engine is started again on the
same port after a backoff that doubles up to MAX_BACKOFF_S, at most `restarts` times;
once healthy the job's own /health poll puts it back in.

Every start, stop and death, with its cause, is one line of `.genbench/engines.jsonl`
beside the request log (`genbench report` draws it); `states` is what the live panel and
`/metrics` show, and `availability` is what the ETA scales by: a flapping engine lengthens
the forecast instead of surprising the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench import fmt
from genbench.engines.command import EngineCommand
from genbench.engines.death import Death, why_died
from genbench.engines.process import EngineProcess
from genbench.engines.start import (
    START_TIMEOUT,
    Waiting,
    engine_names,
    log_path,
    spawn,
    stop_all,
    wait_healthy,
)
from genbench.errors import EngineFailed
from genbench.redact import redact, redact_doc
from genbench.transport.client import ConnectionPool
from genbench.transport.health import answers

POLL_S = 0.25
PROBE_S = 2.0
MAX_BACKOFF_S = 300.0
CAUSES = {  # a death's cause as a person reads it
    "oom": "OOM-killed by the kernel",
    "signal": "killed by a signal",
    "exit": "exited",
    "hang": "stopped: not answering /health",
    "start_failed": "failed to start again",
}


@dataclass(frozen=True)
class EngineOptions:
    """How engines are started and kept: the `--engine-*` flags."""

    start_timeout: float = START_TIMEOUT
    restarts: int = 10
    backoff: float = 5.0
    hang_timeout: float = 120.0
    grace: float = 10.0


@dataclass
class Engine:
    """One engine across its restarts."""

    name: str
    cmd: EngineCommand
    proc: EngineProcess
    up: bool = False
    restarts: int = 0
    causes: Counter[str] = field(default_factory=Counter)  # restarts by cause
    downs: list[list[Any]] = field(default_factory=list)  # [down at, up at | None, cause]
    first_up: float | None = None
    last_death: str = ""
    gave_up: bool = False  # out of restarts (--engine-restarts): it will not come back

    def down_s(self, since: float, now: float) -> float:
        """Seconds down within [since, now] (monotonic)."""
        return sum(max(0.0, min(z or now, now) - max(a, since)) for a, z, _ in self.downs)


class Supervisor:
    """The engines of one job. `start` them, `watch` them while the job runs, `close`."""

    def __init__(
        self,
        cmds: Sequence[EngineCommand],
        opts: EngineOptions,
        events: Path,
        log_dir: Path,
        *,
        note: Callable[[str, str], None] = lambda text, style: None,
        on_down: Callable[[str, str], None] = lambda url, line: None,
        on_wait: Waiting | None = None,
        on_gave_up: Callable[[], None] = lambda: None,
    ) -> None:
        self.cmds, self.opts, self.note, self.on_down = list(cmds), opts, note, on_down
        self.on_gave_up = on_gave_up
        self.on_wait = on_wait
        self.log_dir, self.events = log_dir, events  # the output directory's layout names them
        self.engines: list[Engine] = []
        self._tasks: list[asyncio.Task[None]] = []

    def event(self, e: Engine, what: str, **more: Any) -> None:
        """One line of the events file, written at once (a crash keeps what happened)."""
        started = e.proc.proc is not None
        doc = {"at": round(time.time(), 3), "engine": e.name, "url": e.cmd.url, "event": what,
               "pid": e.proc.pid if started else None,
               "pgid": e.proc.pgid if started else None, **more}  # fmt: skip
        with contextlib.suppress(OSError), open(self.events, "ab") as f:
            f.write(orjson.dumps(redact_doc(doc)) + b"\n")

    async def start(self, model: str | None = None) -> None:
        """Every engine started and healthy, or EngineFailed with all of them stopped. Each
        start is a line of the events file, and so is a first start that fails."""
        for name, cmd in zip(engine_names(len(self.cmds)), self.cmds, strict=True):
            self.note(f"{name}: starting {cmd.text} on {cmd.url} (log: "
                      f"{self.log_dir}/{name.replace(' ', '-')}.log)", "")  # fmt: skip
        try:
            for name, cmd in zip(engine_names(len(self.cmds)), self.cmds, strict=True):
                e = Engine(name, cmd, EngineProcess(cmd, name, log_path(self.log_dir, name)))
                self.engines.append(e)
                self._spawn(e, command=cmd.text)
            await self._all_up(model)
        except EngineFailed:
            self.close("start_failed")
            raise
        except BaseException:  # a signal (the command cancelled), or a bug
            self.close("interrupted")
            raise

    async def _all_up(self, model: str | None) -> None:
        """Every engine healthy; the first that fails cancels the other waits, and is raised."""
        try:
            async with asyncio.TaskGroup() as tg:
                for e in self.engines:
                    tg.create_task(self._first_up(e, model))
        except* EngineFailed as group:
            raise group.exceptions[0] from None

    def _spawn(self, e: Engine, **more: Any) -> None:
        """The engine's process started and logged; a start that cannot run is logged too."""
        try:
            e.proc = spawn(e.cmd, e.name, self.log_dir)
        except EngineFailed as f:
            self.event(e, "start_failed", line=str(f), **more)
            raise
        self.event(e, "start", **more)

    async def _healthy(self, e: Engine, model: str | None = None, **more: Any) -> float:
        """Seconds the started engine took to be healthy; a failure is logged and raised."""
        try:
            return await wait_healthy(e.proc, self.opts.start_timeout, self.on_wait, model)
        except EngineFailed as f:
            self.event(e, "start_failed", line=str(f), code=e.proc.returncode, **more)
            raise

    async def _first_up(self, e: Engine, model: str | None) -> None:
        loading = await self._healthy(e, model)
        now = time.monotonic()
        e.up, e.first_up = True, now
        self.event(e, "up", loading_s=round(loading, 1), command=e.cmd.text)
        self.note(f"{e.name} is healthy after {fmt.duration(loading)} (pid {e.proc.pid})",
                  "green")  # fmt: skip

    def watch(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._watch(e)) for e in self.engines]

    async def _watch(self, e: Engine) -> None:
        pool = ConnectionPool(e.cmd.root)
        try:
            while await self._until_down(e, pool) and await self._bring_back(e):
                pass
        finally:
            await pool.close()

    async def _until_down(self, e: Engine, pool: ConnectionPool) -> bool:
        """Wait until the engine dies or hangs; record it, tell the job; True to restart."""
        ep, last_ok, next_probe = e.cmd.endpoint, time.monotonic(), 0.0
        while True:
            await asyncio.sleep(POLL_S)
            proc = e.proc
            if not proc.alive:
                code = proc.proc.wait() if proc.proc is not None else -1
                death = why_died(e.name, proc.pid, code, proc.pids, proc.started, proc.tail())
                await asyncio.to_thread(proc.stop, self.opts.grace)  # what it left behind
                break
            now = time.monotonic()
            if now < next_probe:
                continue
            next_probe = now + PROBE_S
            proc.track_group()
            if await answers(pool, ep, min(5.0, self.opts.hang_timeout)):
                last_ok = time.monotonic()
            elif now - last_ok >= self.opts.hang_timeout:
                death = Death("hang", f"{e.name} (pid {proc.pid}) has not answered /health for "
                              f"{fmt.duration(now - last_ok)} (--engine-hang-timeout): stopping it "
                              f"(SIGTERM, SIGKILL after {self.opts.grace:g} s)")  # fmt: skip
                await asyncio.to_thread(proc.stop, self.opts.grace)
                self._down(e, death, since=last_ok)  # down since it last answered
                return True
        self._down(e, death)
        return True

    def _down(self, e: Engine, death: Death, since: float | None = None) -> None:
        """Recorded as down from `since` (monotonic; a hung engine: since it last answered,
        not since it was stopped), else now."""
        now = time.monotonic()
        start = now if since is None else min(since, now)
        e.up, e.last_death = False, redact(death.line)  # the panel and /metrics show it
        e.downs.append([start, None, death.cause])
        more = {} if since is None else {"since": round(time.time() - (now - start), 3)}
        self.event(e, "down", cause=death.cause, line=death.line, code=death.code, **more)
        self.note(death.line, "red")
        self.on_down(e.cmd.url, death.line)

    async def _bring_back(self, e: Engine) -> bool:
        """Restart with backoff until healthy (True) or out of restarts (False)."""
        cause = e.downs[-1][2]
        while e.restarts < self.opts.restarts:
            e.restarts += 1
            e.causes[cause] += 1
            delay = min(self.opts.backoff * 2 ** (e.restarts - 1), MAX_BACKOFF_S)
            self.note(f"{e.name}: restarting in {fmt.duration(delay)} (restart {e.restarts} "
                      f"of at most {self.opts.restarts})", "yellow")  # fmt: skip
            await asyncio.sleep(delay)
            try:
                self._spawn(e, restart=e.restarts, cause=cause)  # logs a start that cannot run
                loading = await self._healthy(e, restart=e.restarts)
            except EngineFailed as f:
                cause = "start_failed"
                self.note(str(f), "red")
                continue
            e.up, e.downs[-1][1] = True, time.monotonic()
            self.event(e, "up", loading_s=round(loading, 1), restart=e.restarts)
            self.note(f"{e.name} is healthy again after {fmt.duration(loading)} (restart "
                      f"{e.restarts}, pid {e.proc.pid})", "green")  # fmt: skip
            return True
        e.gave_up = True
        self.event(e, "gave_up", restarts=e.restarts, line=e.last_death)
        self.note(f"{e.name}: not restarted again ({fmt.counted(e.restarts, 'restart')}, "
                  "--engine-restarts)", "red")  # fmt: skip
        self.on_gave_up()
        return False

    def all_gave_up(self) -> str | None:
        """Every engine out of restarts: one line naming each one's last death; else None."""
        if not self.engines or not all(e.gave_up for e in self.engines):
            return None
        deaths = "; ".join(e.last_death or f"{e.name}: no death recorded" for e in self.engines)
        return f"every engine is out of restarts (--engine-restarts): {deaths}"

    def close(self, why: str = "end") -> None:
        """Stop every engine and wait for it (SIGTERM, SIGKILL after the grace); logged."""
        for t in self._tasks:
            t.cancel()
        live = [e for e in self.engines if e.proc.alive]
        stop_all([e.proc for e in live], self.opts.grace)
        for e in live:
            self.event(e, "stop", cause=why, code=e.proc.returncode)

    # -- what the panel, /metrics and the ETA read ------------------------------------------

    def states(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [
            {"engine": e.name, "url": e.cmd.url, "up": e.up, "pid": e.proc.pid,
             "restarts": e.restarts, "restarts_by_cause": dict(e.causes),
             "down_s": round(e.down_s(e.first_up or now, now), 1), "last_death": e.last_death}
            for e in self.engines
        ]  # fmt: skip

    def availability(self, window: float) -> tuple[float, float] | None:
        """The engines' share of time up over the last `window` seconds and since they
        first came up; None before any was up."""
        now = time.monotonic()
        starts = [e.first_up for e in self.engines if e.first_up is not None]
        if not starts:
            return None
        first = min(starts)
        recent = max(first, now - window)
        n = len(self.engines)
        if now - recent <= 0:
            return None
        lost_recent = sum(e.down_s(recent, now) for e in self.engines)
        lost_all = sum(e.down_s(first, now) for e in self.engines)
        return 1 - lost_recent / (n * (now - recent)), 1 - lost_all / (n * (now - first))

    def summary(self) -> str | None:
        """How long the engines were down and why, in one line; None when never down."""
        now = time.monotonic()
        parts = []
        for e in self.engines:
            if not e.downs:
                continue
            why = ", ".join(f"{CAUSES.get(c, c)} {fmt.counted(n, 'time')}"
                            for c, n in Counter(d[2] for d in e.downs).items())  # fmt: skip
            parts.append(f"{e.name} down {fmt.duration(e.down_s(e.first_up or now, now))} "
                         f"({why}; {fmt.counted(e.restarts, 'restart')})")  # fmt: skip
        return "engines: " + "; ".join(parts) if parts else None
