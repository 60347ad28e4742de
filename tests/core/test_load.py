"""The one scheduler, on a client that answers at once: how many requests a phase sends,
the order of a unit's requests, retries, and a server that goes away."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from genbench.errors import ErrorKind, ExitCode, ServerDown
from genbench.load import Load, Policy, Single, Slot, WorkQueue, run_phase
from genbench.records import RequestRecord
from genbench.transport.client import ChatRequest
from genbench.transport.endpoint import Endpoint

pytestmark = pytest.mark.core


class Answers:
    """Answers every request on the next turn of the event loop; from the `gone_after`-th
    request on, nothing listens (connection refused). Keeps the order of events."""

    def __init__(self, gone_after: int | None = None) -> None:
        self.endpoint = Endpoint.parse("http://127.0.0.1:9/v1")
        self.gone_after, self.sent = gone_after, 0
        self.events: list[str] = []

    def new_record(self, req: ChatRequest, phase: str = "") -> RequestRecord:
        return RequestRecord(req.id, phase=phase)

    async def chat(self, req: ChatRequest, record: RequestRecord) -> RequestRecord:
        self.sent += 1
        self.events.append(f"send {req.id}")
        if self.gone_after is not None and self.sent > self.gone_after:
            record.error_kind = ErrorKind.CONNECT_REFUSED
            return record
        try:
            for _ in range(3):
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            record.error_kind = ErrorKind.CANCELLED
            raise
        self.events.append(f"end {req.id}")
        return record


def settle(coro: Any) -> Any:
    """Run to the end; a scheduler that waits forever fails in 5 s instead."""
    return asyncio.run(asyncio.wait_for(coro, 5))


def requests(prefix: str = "r") -> Iterator[ChatRequest]:
    n = 0
    while True:
        n += 1
        yield ChatRequest(f"{prefix}{n}", [{"role": "user", "content": "q"}], 8)


@pytest.mark.parametrize(("concurrency", "count"), [(1, 3), (1, 1), (3, 2), (4, 12)])
def test_a_phase_sends_exactly_its_count_whatever_the_concurrency(concurrency, count):
    client = Answers()
    run = settle(
        run_phase(client, requests(), concurrency=concurrency, phase="p", max_requests=count)
    )  # type: ignore[arg-type]
    assert [r.id for r in sorted(run.records, key=lambda r: int(r.id[1:]))] == [
        f"r{i}" for i in range(1, count + 1)
    ]
    assert client.sent == count and run.stop_sending_at is not None


def test_a_phase_ends_with_its_requests():
    one = iter([ChatRequest("a", [], 1)])
    run = settle(run_phase(Answers(), one, concurrency=4, phase="p"))  # type: ignore[arg-type]
    assert [r.id for r in run.records] == ["a"]


def test_a_server_gone_stops_the_phase_after_recording_everything():
    client = Answers(gone_after=5)
    with pytest.raises(ServerDown) as e:
        settle(run_phase(client, requests(), concurrency=3, phase="p"))  # type: ignore[arg-type]
    assert e.value.exit_code == ExitCode.REFUSED and "stopped answering during phase 'p'" in str(
        e.value
    )


class Unit:
    """A conversation of `turns` requests."""

    def __init__(self, name: str, turns: int) -> None:
        self.name, self.turns, self.sent = name, turns, 0

    def next_request(self) -> ChatRequest | None:
        if self.sent == self.turns:
            return None
        self.sent += 1
        return ChatRequest(f"{self.name}.{self.sent}", [], 8)


def test_a_units_requests_go_in_order_each_after_the_answer_before_it():
    client = Answers()
    units = [Unit(f"u{i}", 3) for i in range(4)]
    load = Load([Slot(client, 2)], WorkQueue(iter(units)), phase="p")  # type: ignore[arg-type]
    run = settle(load.run())
    assert len(run.records) == 12
    for u in units:
        mine = [e for e in client.events if e.split()[1].startswith(u.name + ".")]
        assert mine == [f"{what} {u.name}.{t}" for t in (1, 2, 3) for what in ("send", "end")]


class RetryOnce(Policy):
    """Every unit's first request is sent again once, after a delay."""

    def __init__(self) -> None:
        self.retried: set[Any] = set()

    async def after(self, unit: Any, rec: RequestRecord, slot: Slot, queue: WorkQueue) -> bool:
        if unit in self.retried:
            return True
        self.retried.add(unit)
        unit.sent -= 1  # the same request again
        queue.retry(unit, 0.001)
        return False


def test_a_unit_handed_back_comes_again_after_its_delay():
    client = Answers()
    units = [Unit(f"u{i}", 1) for i in range(5)]
    queue = WorkQueue(iter(units))
    run = settle(Load([Slot(client, 2)], queue, RetryOnce(), phase="p").run())  # type: ignore[arg-type]
    assert sorted(r.id for r in run.records) == sorted([f"u{i}.1" for i in range(5)] * 2)
    assert queue.complete


def test_a_slot_down_holds_its_workers_and_all_down_is_server_down():
    client = Answers(gone_after=0)
    slot = Slot(client, 2)  # type: ignore[arg-type]
    load = Load([slot], WorkQueue(iter([Unit("a", 1), Unit("b", 1)])), phase="p")
    with pytest.raises(ServerDown):
        settle(load.run())
    assert not slot.up and slot.down_record is not None and client.sent <= 2


def test_the_requests_on_the_wire_are_known_with_their_send_times():
    # the live ETA's tail reads each request's age (generate/progress.py): listed while
    # its answer is awaited, gone once it is back
    seen: list[list[float]] = []

    class Timed(Answers):
        async def chat(self, req: ChatRequest, record: RequestRecord) -> RequestRecord:
            record.t_send = 100.0 + int(req.id[1:])
            seen.append(sorted(load.send_times()))
            return await super().chat(req, record)

    queue = WorkQueue(Single(r) for r in itertools.islice(requests(), 3))
    load = Load([Slot(Timed(), 3)], queue, phase="p")  # type: ignore[arg-type]
    settle(load.run())
    assert seen[-1] == [101.0, 102.0, 103.0]  # the three in flight at the third's send
    assert load.send_times() == []
