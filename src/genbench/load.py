"""Load: keep requests in flight on one or many servers until the work runs out or stops.

The one scheduler of genbench. A `Slot` is a client and the requests it keeps in flight
(one server of a `run` phase, each server of a `generate` job); each of its workers takes
a *unit* from one `WorkQueue` and sends the unit's requests in order, each after the
answer before it: a `run` request is a unit of one, a `generate` row a unit of one
request per conversation turn. Work flows to whichever slot has a free worker, so a slow
server takes fewer units.

Every request sent becomes a record handed to `on_record`, failed or cancelled ones
included, once the `Policy` has seen it (and tagged it with what happens next). The
policy decides what a unit does after each request: go on, come back later (a retry;
the queue hands out units whose delay is over first), or end. The default sends each
unit once and takes a slot out when a failure says its server is gone
(`ErrorKind.server_gone`); `generate`'s policy retries and fails over.

Workers of a slot that is down, or beyond its `streams` (fewer than its concurrency
once this machine ran out of file descriptors), wait. When every slot has been down for
`down_timeout` seconds the load stops and raises `ServerDown`, after recording
everything: at once for `run` (0 s), after half an hour for `generate`. A stop (`stop`,
Ctrl-C) stops handing out units and gives those in flight `drain` seconds to finish
before they are cancelled and recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from genbench.client import ChatRequest, Client
from genbench.errors import ServerDown
from genbench.records import RequestRecord

__all__ = ["Load", "PhaseRun", "Policy", "ServerDown", "Slot", "Unit", "WorkQueue", "run_phase"]


class Unit(Protocol):
    """Work for one worker: its requests, in order."""

    def next_request(self) -> ChatRequest | None:
        """The next request to send; None when the unit has no more."""
        ...


class Single:
    """A unit of one request (what `run` sends)."""

    __slots__ = ("req",)

    def __init__(self, req: ChatRequest) -> None:
        self.req: ChatRequest | None = req

    def next_request(self) -> ChatRequest | None:
        req, self.req = self.req, None
        return req


class Slot:
    """A client and how many requests it keeps in flight; up or down."""

    def __init__(self, client: Client, concurrency: int, name: str | None = None) -> None:
        self.client = client
        self.concurrency = concurrency
        self.streams = concurrency  # workers allowed to send (fewer after a descriptor shortage)
        self.name = name or client.endpoint.base_url
        self.in_flight = 0
        self.up = True
        self.down_since: float | None = None
        self.down_record: RequestRecord | None = None
        self.downs = 0
        self.watchers: list[Callable[[Slot, str], None]] = []

    @property
    def state(self) -> str:
        return "up" if self.up else "down"

    def changed(self, what: str) -> None:
        for w in self.watchers:
            w(self, what)

    def mark_down(self, reason: str, rec: RequestRecord | None = None) -> None:
        """Take the slot out: its workers wait. A no-op if it is out already."""
        if not self.up:
            return
        self.up, self.down_since, self.down_record = False, time.monotonic(), rec
        self.downs += 1
        self.changed(reason)

    def mark_up(self) -> None:
        gone = time.monotonic() - (self.down_since or time.monotonic())
        self.up, self.down_since = True, None
        self.changed(f"back after {gone:.0f} s")

    def shed_stream(self) -> bool:
        """One worker fewer (never below one); False when there was none to spare."""
        if self.streams <= 1:
            return False
        self.streams -= 1
        self.changed("")  # not a change of state: the queue rechecks who may send
        return True

    async def probe(self) -> bool:
        """Is the server alive? Without a health check: assume so."""
        return True


class WorkQueue:
    """Hands out units: those whose retry delay is over first, then new ones from the
    iterator, read lazily while `admit` (given how many were taken) allows. Knows when all
    is done: no new units, no retries waiting, none in flight."""

    def __init__(self, units: Iterator[Unit], admit: Callable[[int], bool] | None = None) -> None:
        self.units, self.admit = units, admit
        self.retries: list[tuple[float, int, Unit]] = []
        self._seq = itertools.count()
        self.taken = self.in_flight = 0
        self.exhausted = self.stopping = False
        self.stop_sending_at: float | None = None
        self._changed = asyncio.Event()

    def notify(self, *_: Any) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    async def changed(self, timeout: float | None = None) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    @property
    def complete(self) -> bool:
        return self.exhausted and not self.retries and self.in_flight == 0

    def _new(self) -> Unit | None:
        if self.admit is None or self.admit(self.taken):
            unit = next(self.units, None)
            if unit is not None:
                self.taken += 1
                return unit
        self.exhausted = True
        self.stop_sending_at = time.perf_counter()
        self.notify()
        return None

    async def take(self, slot: Slot, worker: int) -> Unit | None:
        """The next unit for worker number `worker` of `slot`; None when there is no more."""
        while not (self.stopping or self.complete):
            ev = self._changed
            if not slot.up or worker >= slot.streams:
                await ev.wait()
                continue
            if self.retries and self.retries[0][0] <= time.monotonic():
                self.in_flight += 1
                return heapq.heappop(self.retries)[2]
            if not self.exhausted and (unit := self._new()) is not None:
                self.in_flight += 1
                return unit
            due = self.retries[0][0] - time.monotonic() if self.retries else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), due)
        return None

    def done(self, unit: Unit) -> None:
        """The unit is over (finished, or given up)."""
        self.in_flight -= 1
        self.notify()

    def retry(self, unit: Unit, delay: float) -> None:
        """Hand the unit out again after `delay` seconds."""
        self.in_flight -= 1
        heapq.heappush(self.retries, (time.monotonic() + delay, next(self._seq), unit))
        self.notify()

    def stop(self) -> None:
        self.stopping = True
        self.notify()


class Policy:
    """What happens to a unit after each of its requests. This one (run's) sends every
    request once and takes the slot out when the failure says its server is gone."""

    async def after(self, unit: Unit, rec: RequestRecord, slot: Slot, queue: WorkQueue) -> bool:
        """True: go on with the unit's next request. False: the unit leaves the worker
        (the policy told the queue whether it is `done` or comes back by `retry`)."""
        if rec.error_kind is not None and rec.error_kind.server_gone:
            slot.mark_down(f"{rec.error_kind}: {rec.error_message}", rec)
        return True

    def done(self, unit: Unit, slot: Slot, queue: WorkQueue) -> None:
        """Every request of the unit was answered."""
        queue.done(unit)


@dataclass
class PhaseRun:
    records: list[RequestRecord] = field(default_factory=list)
    started: float = 0.0
    stop_sending_at: float | None = None
    ended: float = 0.0


class Load:
    """Slots' workers on one queue, under one policy, until the work is done or stopped."""

    def __init__(
        self,
        slots: list[Slot],
        queue: WorkQueue,
        policy: Policy | None = None,
        *,
        phase: str,
        on_record: Callable[[RequestRecord], None] | None = None,
        keep_records: bool = True,
        down_timeout: float | None = 0.0,
        drain: float = 0.0,
    ) -> None:
        self.slots, self.queue, self.policy = slots, queue, policy or Policy()
        self.phase, self.on_record, self.keep = phase, on_record, keep_records
        self.down_timeout, self.drain = down_timeout, drain
        self.run_ = PhaseRun()
        self.stopped = asyncio.Event()
        self._drain_now = asyncio.Event()
        self._down: Slot | None = None
        for s in slots:
            s.watchers.append(queue.notify)

    def stop(self) -> None:
        """Stop handing out units; those in flight get `drain` seconds."""
        self.queue.stop()
        self.stopped.set()

    def stop_now(self) -> None:
        """Cancel what is in flight (it is recorded)."""
        self.stop()
        self._drain_now.set()

    async def run(self) -> PhaseRun:
        """Until the queue is done or the load is stopped; raises ServerDown (after
        recording everything) when every slot was down for `down_timeout` seconds."""
        run = self.run_
        run.started = time.perf_counter()
        loop = asyncio.get_running_loop()
        tasks = [
            loop.create_task(self._worker(s, i)) for s in self.slots for i in range(s.concurrency)
        ]
        watch = loop.create_task(self._watch_down()) if self.down_timeout is not None else None
        try:
            await self._until_done(tasks)
        finally:
            for t in (*tasks, *([watch] if watch else [])):
                t.cancel()
            await asyncio.gather(*tasks, *([watch] if watch else []), return_exceptions=True)
            run.ended = time.perf_counter()
            run.stop_sending_at = self.queue.stop_sending_at
        if self._down is not None:
            raise self._server_down(self._down)
        return run

    async def _until_done(self, tasks: list[asyncio.Task[None]]) -> None:
        stopper = asyncio.get_running_loop().create_task(self.stopped.wait())
        pending: set[asyncio.Future[Any]] = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(
                    pending | {stopper}, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(stopper)
                for t in done:
                    if t is not stopper and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]  # a bug, not a failed request
                if self.stopped.is_set():
                    await self._drain_then_cancel(pending)
                    return
        finally:
            stopper.cancel()

    async def _drain_then_cancel(self, pending: set[asyncio.Future[Any]]) -> None:
        now = asyncio.get_running_loop().create_task(self._drain_now.wait())
        deadline = time.monotonic() + self.drain
        while pending and not self._drain_now.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done, _ = await asyncio.wait(
                pending | {now}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            pending -= done
        now.cancel()
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _watch_down(self) -> None:
        """Stop when every slot has been down for `down_timeout` seconds."""
        assert self.down_timeout is not None
        while True:
            since = [s.down_since for s in self.slots]
            left = None
            if self.slots and all(t is not None for t in since):
                left = max(t for t in since if t is not None) + self.down_timeout
                left -= time.monotonic()
                if left <= 0:
                    self._down = max(self.slots, key=lambda s: s.down_since or 0.0)
                    self.stop()
                    return
            await self.queue.changed(left)

    async def _worker(self, slot: Slot, number: int) -> None:
        while (unit := await self.queue.take(slot, number)) is not None:
            slot.in_flight += 1
            try:
                await self._serve(slot, unit)
            except asyncio.CancelledError:
                self.queue.in_flight -= 1  # abandoned: neither done nor to be retried
                raise
            finally:
                slot.in_flight -= 1

    async def _serve(self, slot: Slot, unit: Unit) -> None:
        """The unit's requests in order. Each record is handed on once the policy has
        seen it and, for the last, once the unit's fate is settled."""
        rec: RequestRecord | None = None
        try:
            while (req := unit.next_request()) is not None:
                if rec is not None:
                    self._emit(rec)
                rec = slot.client.new_record(req, self.phase)
                await slot.client.chat(req, record=rec)
                if not await self.policy.after(unit, rec, slot, self.queue):
                    return
            self.policy.done(unit, slot, self.queue)
        finally:
            if rec is not None:
                self._emit(rec)

    def _emit(self, rec: RequestRecord) -> None:
        if self.keep:
            self.run_.records.append(rec)
        if self.on_record is not None:
            self.on_record(rec)

    def _server_down(self, slot: Slot) -> ServerDown:
        rec = slot.down_record
        kind = rec.error_kind if rec is not None else None
        why = f" ({rec.error_message})" if rec is not None and rec.error_message else ""
        return ServerDown(
            rec.sent_at if rec is not None else time.time(),
            f"the server at {slot.client.endpoint.root} stopped answering during phase "
            f"'{self.phase}'{why}",
            kind.exit_code if kind is not None and kind.server_gone else None,  # else 3
        )


async def run_phase(
    client: Client,
    requests: Iterator[ChatRequest],
    *,
    concurrency: int,
    phase: str,
    max_requests: int | None = None,
    duration: float | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> PhaseRun:
    """One phase of `run`: `concurrency` workers, each request sent once, until
    `max_requests` were sent, `duration` seconds passed or the requests ran out. Raises
    ServerDown (after recording everything) at the first failure that says the server
    is gone: requests in flight are cancelled and recorded."""
    deadline = time.perf_counter() + duration if duration else None

    def admit(sent: int) -> bool:
        if max_requests is not None and sent >= max_requests:
            return False
        return deadline is None or time.perf_counter() < deadline

    queue = WorkQueue((Single(r) for r in requests), admit)
    load = Load([Slot(client, concurrency)], queue, phase=phase, on_record=on_record)
    return await load.run()
