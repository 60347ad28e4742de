"""Start an engine and wait until it is healthy, or say in one line why it never was.

Healthy means what `genbench check` means, up to its test request: /health answers (or,
where there is none, /v1/models), and the model list is read (`check.preflight` without
the tiny request, which the command's own preflight then sends). A large model loads for
minutes (the field's 1T-parameter example took 330 s), so the default wait is long
(START_TIMEOUT, `--engine-start-timeout`); while it waits the caller is told, every few
seconds, how long the engine has been loading and the last line it logged. An engine that
exits while loading is named at once, with why (death.py), not when the wait runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from genbench import fmt
from genbench.check.preflight import preflight
from genbench.engines.command import EngineCommand, parse_command
from genbench.engines.death import Death, why_died
from genbench.engines.process import EngineNotStarted, EngineProcess
from genbench.errors import EngineFailed, ExitCode
from genbench.redact import secrets_in
from genbench.transport.endpoint import DEFAULT_KEY_ENV, key_source, load_api_key
from genbench.transport.eventloop import run_async

START_TIMEOUT = 900.0  # seconds: a 1T-parameter model loads in minutes (330 s in the field)
POLL_S = 0.5
SAY_EVERY_S = 10.0

# told while waiting: (engine name, seconds loading, its last log line)
Waiting = Callable[[str, float, str], None]


def engine_names(n: int) -> list[str]:
    return [f"engine {i}" for i in range(1, n + 1)]


def log_path(log_dir: Path, name: str) -> Path:
    return log_dir / f"{name.replace(' ', '-')}.log"


async def wait_healthy(
    eng: EngineProcess,
    timeout: float = START_TIMEOUT,
    on_wait: Waiting | None = None,
    model: str | None = None,
) -> float:
    """Seconds the engine took to become healthy; EngineFailed (exit 13) when it exits
    first (named at once) or is not healthy within `timeout` (stopped, then named)."""
    ep = eng.cmd.endpoint  # the job's key: an engine started with one asks for it
    said = 0.0
    while True:
        waited = time.monotonic() - eng.started
        eng.track_group()  # the engine's own pid, and its children's
        if not eng.alive:
            raise EngineFailed(start_failure(eng, waited).line)
        rep = await preflight(ep, model, tiny=False, connect_timeout=1.0, timeout=10.0)
        _cancelled_stays_cancelled()
        if rep.ok:
            return time.monotonic() - eng.started
        if not eng.alive:
            continue  # named above, with its exit status
        if rep.exit_code == ExitCode.AUTH:  # up, and refusing the key: no wait will help
            await asyncio.to_thread(eng.stop, 10.0)
            raise EngineFailed(refused(eng, rep.diagnosis), ExitCode.AUTH)
        if waited >= timeout:
            await asyncio.to_thread(eng.stop, 10.0)
            last = eng.last_line()
            raise EngineFailed(
                f"{eng.name} (pid {eng.pid}) was not healthy within {fmt.duration(timeout)} "
                f"(--engine-start-timeout): {rep.diagnosis}; stopped it"
                + (f"; its last line: {last}" if last else "; it wrote nothing")
            )
        if on_wait is not None and waited - said >= SAY_EVERY_S:
            said = waited
            on_wait(eng.name, waited, eng.last_line())
        await asyncio.sleep(POLL_S)


def _cancelled_stays_cancelled() -> None:
    """A Ctrl-C cancels the wait; a probe that ended at the same moment can swallow that
    cancel (asyncio's wait_for races so under load): the wait ends all the same."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def refused(eng: EngineProcess, diagnosis: str) -> str:
    """The line for an engine that answers 401: the job's key setting and the engine's."""
    cmd = eng.cmd
    sent = (
        f"genbench sent the key from {cmd.key_from}"
        if cmd.api_key
        else (f"genbench sent no key ({cmd.key_from or '--api-key-env'} is unset or empty)")
    )
    own = secrets_in(cmd.argv, cmd.env)[1]
    theirs = (
        f"the engine's own is set by {', '.join(own)} in --serve"
        if own
        else "the engine's command sets no key genbench can see"
    )
    return (f"{eng.name} (pid {eng.pid}) refused genbench's API key: {diagnosis}; {sent}, "
            f"and {theirs}: give both the same key; stopped it")  # fmt: skip


def start_failure(eng: EngineProcess, waited: float) -> Death:
    """The line for an engine that ended while starting."""
    code = eng.proc.wait() if eng.proc is not None else -1
    d = why_died(eng.name, eng.pid, code, eng.track_group(), eng.started, eng.tail())
    return Death(d.cause, f"{d.line} (while starting, after {fmt.duration(waited)}; "
                 f"log: {eng.log_path})", code)  # fmt: skip


def spawn(cmd: EngineCommand, name: str, log_dir: Path) -> EngineProcess:
    """The engine's process, started; EngineFailed when its program cannot be run."""
    try:
        return EngineProcess(cmd, name, log_path(log_dir, name)).spawn()
    except EngineNotStarted as e:
        raise EngineFailed(str(e)) from None


async def start_engines(
    cmds: Sequence[EngineCommand],
    log_dir: Path,
    timeout: float = START_TIMEOUT,
    on_wait: Waiting | None = None,
    model: str | None = None,
) -> list[EngineProcess]:
    """Start every engine at once and wait until each is healthy; on any failure every one
    is stopped (and waited for) before EngineFailed is raised."""
    engines: list[EngineProcess] = []
    try:
        for cmd, name in zip(cmds, engine_names(len(cmds)), strict=True):
            engines.append(spawn(cmd, name, log_dir))
        await _wait_all(engines, timeout, on_wait, model)
    except BaseException:
        stop_all(engines)
        raise
    return engines


async def _wait_all(engines: Sequence[EngineProcess], timeout: float, on_wait: Waiting | None,
                    model: str | None) -> None:  # fmt: skip
    """Every engine healthy; the first failure cancels the other waits and is raised."""
    try:
        async with asyncio.TaskGroup() as tg:
            for e in engines:
                tg.create_task(wait_healthy(e, timeout, on_wait, model))
    except* EngineFailed as group:
        raise group.exceptions[0] from None


def stop_all(engines: Sequence[EngineProcess], grace: float = 10.0) -> None:
    """SIGTERM every engine's group first (their shutdowns overlap), then wait for each."""
    for e in engines:
        if e.alive:
            e.signal_group(signal.SIGTERM)
    for e in engines:
        e.stop(grace)


@contextlib.contextmanager
def serving(
    texts: Sequence[str],
    log_dir: Path | None = None,
    timeout: float = START_TIMEOUT,
    on_wait: Waiting | None = None,
    keys: tuple[str | None, Path | None] = (DEFAULT_KEY_ENV, None),
) -> Iterator[list[EngineCommand]]:
    """`--serve` for a command that uses its engines for one stretch (check, run): started
    and healthy on entry, stopped and waited for on exit, however it is left. Their logs go
    to `log_dir` (default: a new temporary directory, named in any failure). `keys`: the
    command's --api-key-env and --api-key-file, whose key the start check sends."""
    key, source = load_api_key(*keys), key_source(*keys)
    cmds = [parse_command(t).keyed(key, source) for t in texts]
    where = log_dir or Path(tempfile.mkdtemp(prefix="genbench-engines-"))
    engines = run_async(start_engines(cmds, where, timeout, on_wait))
    try:
        yield cmds
    finally:
        stop_all(engines)
