"""The operator's word ends a command (transport/eventloop.py): a cancel always reaches the
code it was meant for, the first signal asks the registered stop, a second cancels, and the
command ends with 128 + the signal."""

from __future__ import annotations

import ast
import asyncio
import os
import signal
from pathlib import Path

import pytest

from genbench.load import WorkQueue
from genbench.transport.eventloop import Interrupted, graceful, run_async, wait_event

pytestmark = pytest.mark.core

SRC = Path(__file__).resolve().parents[2] / "src" / "genbench"


def test_no_module_waits_with_asyncio_wait_for_which_drops_a_cancel_on_311():
    used = []
    for p in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            name = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if name and node.attr == "wait_for" and node.value.id == "asyncio":
                used.append(f"{p.relative_to(SRC)}:{node.lineno}")
    assert not used, f"use transport.eventloop.wait_event: {used}"


def test_a_loop_waiting_on_the_queue_ends_when_cancelled_as_the_queue_changes():
    """The load's watch of servers all down: notified and cancelled in one step (a stop
    does both), it must end; 3.11's wait_for returned and the loop waited again, forever."""

    async def main() -> bool:
        q = WorkQueue(iter([]))

        async def watch() -> None:
            while True:
                await q.changed(1000.0)

        t = asyncio.get_running_loop().create_task(watch())
        await asyncio.sleep(0)  # it waits now
        q.notify()
        t.cancel()
        done, _ = await asyncio.wait([t], timeout=5.0)
        t.cancel()
        return t in done

    assert asyncio.run(main())


def test_wait_event_says_whether_the_event_came():
    async def main() -> tuple[bool, bool, bool]:
        ev = asyncio.Event()
        first = await wait_event(ev, 0.01)
        asyncio.get_running_loop().call_soon(ev.set)
        return first, await wait_event(ev, 5.0), await wait_event(ev, 0)

    assert asyncio.run(main()) == (False, True, True)


def test_the_first_signal_asks_the_stop_and_a_second_ends_the_command_with_143():
    told: list[tuple[int, int]] = []

    async def command() -> None:
        with graceful(lambda sig, n: told.append((sig, n))):
            os.kill(os.getpid(), signal.SIGTERM)
            while not told:
                await asyncio.sleep(0.01)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(60)

    with pytest.raises(Interrupted) as e:
        run_async(command())
    assert told == [(signal.SIGTERM, 1), (signal.SIGTERM, 2)]
    assert e.value.exit_code == 143 and e.value.said == "stopped by SIGTERM"


def test_a_signal_with_no_stop_registered_cancels_at_once_and_finally_blocks_run():
    ran: list[str] = []
    before = signal.getsignal(signal.SIGINT)  # default_int_handler; SIG_IGN under `cmd &`

    async def command() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(60)
        finally:
            ran.append("finally")

    with pytest.raises(Interrupted) as e:
        run_async(command())
    assert ran == ["finally"] and e.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is before  # put back


def test_no_eta_while_no_server_is_up_and_metrics_say_no_server():
    """Rows ended at a steady rate give an ETA; with every server down nothing can run, and
    the snapshot says "no server" instead of holding a number (it said eta_s 2.0 with 352
    rows left)."""
    from prometheus_client import generate_latest

    from genbench.generate.metrics_server import MetricsServer
    from genbench.generate.progress import Progress, ServerState
    from genbench.records import RequestRecord

    now = [0.0]
    p = Progress(100, 0, 0, ["s"], clock=lambda: now[0])
    for i in range(40):
        now[0] = 1.0 + i
        p.on_record(RequestRecord(f"r{i}", server="s", t_send=now[0] - 0.5, t_end=now[0],
                                  completion_tokens=10, extra={"outcome": "done"}))  # fmt: skip
        p.on_durable("row", [(f"r{i}", None)])
    up = p.snapshot([ServerState("s")])
    down = p.snapshot([ServerState("s", "down", 5.0)])
    assert up.eta_s is not None and up.eta_note is None
    assert down.eta_s is None and down.eta_lo_s is None and down.eta_note == "no server"
    e = MetricsServer()
    e.tick(down)
    text = generate_latest(e.registry).decode()
    assert "genbench_no_server 1.0" in text and "genbench_eta_seconds" not in text
