"""Running genbench's coroutines: one place chooses the event loop, takes the operator's
signals and says how genbench waits.

The operator's word ends the job (docs/engines.md, "Stopping"). `run_async` owns SIGINT and
SIGTERM for as long as its coroutine runs, in every state (engines loading, a preflight, the
rows, every server down), so no stretch of a command is left without a handler:

* the first signal calls the stop a stretch of code registered (`graceful`: the job stops
  sending and drains its rows in flight); where none is registered, it cancels the command;
* a second signal cancels the command at once, whatever was registered;
* a command cancelled so ends with `Interrupted` (a KeyboardInterrupt: SIGINT exits 130,
  SIGTERM 143), after every `finally` on the way has run: engines stopped, rows whole, the
  output directory's lock released.

A cancel must reach the code it was meant for. Python 3.11's `asyncio.wait_for` returns the
awaited result when that finished in the same step as the cancel, and drops the cancel: a
task looping on such a wait (the load's watch of servers all down) then never ends, and a
SIGTERM was ignored until SIGKILL. Waits with a timeout use `wait_event` (on
`asyncio.timeout`, which keeps a cancel it did not make); `asyncio.wait_for` is not used
(tests/core/test_stopping.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# told of a signal: (its number, how many the command had, this one included)
Graceful = Callable[[int, int], None]


class Interrupted(KeyboardInterrupt):
    """The command was ended by a signal (a KeyboardInterrupt, as Python's own Ctrl-C is);
    its exit code is the shell's: 128 + the signal (130 SIGINT, 143 SIGTERM)."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def said(self) -> str:
        return "stopped by SIGTERM" if self.signum == signal.SIGTERM else "interrupted"


class _Stop:
    """The signals of the command that runs now, and the stop registered for them."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.graceful: list[Graceful] = []
        self.task: asyncio.Task[Any] | None = None

    def take(self, signum: int) -> None:
        self.signals.append(signum)
        if len(self.signals) == 1 and self.graceful:
            self.graceful[-1](signum, 1)
            return
        if self.graceful:  # a second: the stop is told (it stops now), and the command ends
            self.graceful[-1](signum, len(self.signals))
        if self.task is not None:
            self.task.cancel()


_STOP = _Stop()


def signals() -> list[int]:
    """The signals the command that runs now was sent (empty: none yet)."""
    return list(_STOP.signals)


def exit_code(default: int) -> int:
    """128 + the first signal the command was sent, else `default`."""
    return 128 + _STOP.signals[0] if _STOP.signals else default


@contextlib.contextmanager
def graceful(stop: Graceful) -> Iterator[None]:
    """While inside, the first signal calls `stop(signum, 1)` instead of cancelling the
    command; a second calls `stop(signum, 2)`, then cancels it. A signal that came before
    is handed on at once (a stop asked for while nothing could take it)."""
    _STOP.graceful.append(stop)
    if _STOP.signals:
        stop(_STOP.signals[0], len(_STOP.signals))
    try:
        yield
    finally:
        _STOP.graceful.remove(stop)


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set (True) or `timeout` seconds pass (its state then); a
    cancel always propagates (see the module's note on `asyncio.wait_for`)."""
    if timeout is None:
        await event.wait()
        return True
    if timeout > 0:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
    return event.is_set()


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run on uvloop where installed (its loop costs less per chunk than asyncio's), with
    the operator's signals taken as the module's note says."""
    try:
        import uvloop

        return uvloop.run(_owned(coro))
    except ImportError:
        return asyncio.run(_owned(coro))


async def _owned(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    outer, task = (_STOP.task, list(_STOP.signals)), asyncio.current_task()
    _STOP.task, _STOP.signals[:] = task, []
    main = threading.current_thread() is threading.main_thread()  # signals reach it alone
    before = {sig: signal.getsignal(sig) for sig in SIGNALS} if main else {}
    for sig in before:  # the command line's own handlers are put back after
        loop.add_signal_handler(sig, _STOP.take, sig)
    try:
        return await coro
    except asyncio.CancelledError:
        if not _STOP.signals:
            raise
        raise Interrupted(_STOP.signals[0]) from None
    finally:
        for sig, was in before.items():
            loop.remove_signal_handler(sig)  # which sets the default: the one before, back
            signal.signal(sig, signal.SIG_DFL if was is None else was)
        _STOP.task, _STOP.signals[:] = outer[0], outer[1]
