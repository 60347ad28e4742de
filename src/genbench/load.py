"""Load: keep requests in flight on one or many servers until the work runs out or stops.

The one scheduler. A `Slot` is a client and the requests it keeps in flight (the server
of a `run` phase, each server of a `generate` job). Each of its workers takes a *unit*
from one `WorkQueue` and sends the unit's requests in order, each after the answer
before it: a `run` request is a unit of one, a `generate` row one request per turn.
Work flows to whichever slot has a free worker, so a slow server takes fewer units.

Every request sent becomes a record handed to `on_record`, failed and cancelled ones
included, once the `Policy` has seen it. The policy decides what a unit does next: go
on, come back after a delay (a retry; due units are handed out first) or end. The
default sends each request once and takes a slot out when a failure says its server is
gone (`ErrorKind.server_gone`); `generate`'s retries and fails over.

Workers of a slot that is down, or beyond its `streams` (fewer than its concurrency
once this machine ran out of file descriptors), wait. When every slot has been down
for `down_timeout` seconds (0 for `run`) the load stops and raises `ServerDown`, after
recording everything. A stop hands out no more units and gives those in flight `drain`
seconds before they are cancelled.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from genbench.errors import ServerDown
from genbench.records import RequestRecord
from genbench.transport.client import ChatRequest, Client
from genbench.transport.eventloop import wait_event

__all__ = ["Load", "PhaseRun", "Policy", "ServerDown", "Slot", "Unit", "WorkQueue", "run_phase"]


class Unit(Protocol):
    def next_request(self) -> ChatRequest | None:
        """The unit's next request; None when it has no more."""
        ...


class Single:
    """A unit of one request (what `run` sends)."""

    def __init__(self, req: ChatRequest) -> None:
        self.req: ChatRequest | None = req

    def next_request(self) -> ChatRequest | None:
        req, self.req = self.req, None
        return req


class Slot:
    """A client and how many requests it keeps in flight; up or down."""

    def __init__(self, client: Client, concurrency: int, name: str | None = None) -> None:
        self.client, self.concurrency, self.streams = client, concurrency, concurrency
        self.name = name or client.endpoint.base_url
        self.in_flight = self.downs = 0
        self.up = True
        self.down_since: float | None = None
        self.down_record: RequestRecord | None = None
        self.watchers: list[Callable[[Slot, str], None]] = []

    @property
    def state(self) -> str:
        return "up" if self.up else "down"

    def changed(self, what: str) -> None:
        for w in self.watchers:
            w(self, what)

    def mark_down(self, reason: str, rec: RequestRecord | None = None) -> None:
        """Take the slot out (its workers wait); a no-op if it is out already."""
        if self.up:
            self.up, self.down_since, self.down_record = False, time.monotonic(), rec
            self.downs += 1
            self.changed(reason)

    def mark_up(self) -> None:
        gone = time.monotonic() - (self.down_since or time.monotonic())
        self.up, self.down_since = True, None
        self.changed(f"back after {gone:.0f} s")

    def shed_stream(self) -> None:
        """One worker fewer, never below one."""
        self.streams = max(1, self.streams - 1)
        self.changed("")  # not a change of state: the queue rechecks who may send

    async def probe(self) -> bool:
        """Is the server alive? Without a health check: assume so."""
        return True


class WorkQueue:
    """Hands out units: those whose retry delay is over first, then new ones from the
    iterator, read lazily while `admit(units taken so far)` allows. Complete when there
    are no new units, no retries waiting and none in flight."""

    def __init__(self, units: Iterator[Unit], admit: Callable[[int], bool] | None = None):
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
        await wait_event(self._changed, timeout)

    @property
    def complete(self) -> bool:
        return self.exhausted and not self.retries and self.in_flight == 0

    def _new(self) -> Unit | None:
        admitted = self.admit is None or self.admit(self.taken)
        if admitted and (unit := next(self.units, None)) is not None:
            self.taken += 1
            return unit
        self.exhausted, self.stop_sending_at = True, time.perf_counter()
        self.notify()
        return None

    async def take(self, slot: Slot, worker: int) -> Unit | None:
        """The next unit for worker number `worker` of `slot`; None when there is no more."""
        while not (self.stopping or self.complete):
            ev, due = self._changed, None  # before looking: a change after it wakes us
            if slot.up and worker < slot.streams:
                if self.retries and self.retries[0][0] <= time.monotonic():
                    self.in_flight += 1
                    return heapq.heappop(self.retries)[2]
                if not self.exhausted and (unit := self._new()) is not None:
                    self.in_flight += 1
                    return unit
                due = self.retries[0][0] - time.monotonic() if self.retries else None
            await wait_event(ev, due)
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


class Policy:
    """What happens to a unit after each request. This one (run's) sends every request
    once and takes the slot out when a failure says its server is gone."""

    async def after(self, unit: Unit, rec: RequestRecord, slot: Slot, queue: WorkQueue) -> bool:
        """True: go on with the unit's next request. False: the unit leaves the worker
        (the policy has told the queue it is `done`, or to `retry` it)."""
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
        down_timeout: float = 0.0,
        drain: float = 0.0,
    ) -> None:
        self.slots, self.queue, self.policy = slots, queue, policy or Policy()
        self.phase, self.on_record, self.keep = phase, on_record, keep_records
        self.down_timeout, self.drain = down_timeout, drain
        self.run_ = PhaseRun()
        self._tasks: list[asyncio.Task[None]] = []
        self._workers: dict[int, int] = {}  # id(slot) -> worker tasks started for it
        self._more = asyncio.Event()  # a worker was added while the load runs (resize)
        self.stopped, self._now = asyncio.Event(), asyncio.Event()
        self._down: Slot | None = None
        self._sending: dict[int, RequestRecord] = {}  # requests on the wire now, by id()
        for s in slots:
            s.watchers.append(queue.notify)

    def stop(self, now: bool = False) -> None:
        """Hand out no more units; those in flight get `drain` seconds (`now`: none)."""
        self.queue.stopping = True
        self.queue.notify()
        self.stopped.set()
        if now:
            self._now.set()

    async def run(self) -> PhaseRun:
        """Until the queue is complete or the load stopped. Raises ServerDown (after
        recording everything) when every slot was down for `down_timeout` seconds."""
        run, loop = self.run_, asyncio.get_running_loop()
        run.started = time.perf_counter()
        # workers started in turn across the servers (1st of each, 2nd of each, ...): they
        # take rows in that order, so a job of fewer rows than slots uses every server
        most = max((s.concurrency for s in self.slots), default=0)
        for i in range(most):
            for s in self.slots:
                if i < s.concurrency:
                    self._add_worker(s)
        workers = set(self._tasks)
        watch = loop.create_task(self._watch_down())
        try:
            await self._until_done(workers)
        finally:
            for t in [*self._tasks, watch]:
                t.cancel()
            await asyncio.gather(*self._tasks, watch, return_exceptions=True)
            run.ended, run.stop_sending_at = time.perf_counter(), self.queue.stop_sending_at
        if self._down is not None:
            raise self._server_down(self._down)
        return run

    def _add_worker(self, slot: Slot) -> None:
        n = self._workers.get(id(slot), 0)
        self._workers[id(slot)] = n + 1
        self._tasks.append(asyncio.get_running_loop().create_task(self._work(slot, n)))
        self._more.set()

    def resize(self, slot: Slot, n: int) -> None:
        """The slot keeps `n` requests in flight from now on (generate -c auto). Fewer: the
        workers past `n` finish the unit they hold and take no more; more: workers are
        started (or those waiting take units again). A unit is never dropped nor handed
        out twice: only `WorkQueue.take` hands them out, and it asks `worker < streams`."""
        n = max(1, n)
        short = slot.streams < slot.concurrency  # fewer descriptors than asked: keep short
        slot.concurrency = n
        slot.streams = min(slot.streams, n) if short else n
        if self._tasks:  # running: start the workers it never had
            while self._workers.get(id(slot), 0) < n:
                self._add_worker(slot)
        slot.changed("")  # the queue rechecks who may send

    async def _until_done(self, pending: set[asyncio.Task[None]]) -> None:
        """Wait for the workers; once stopped, give them `drain` seconds, then cancel."""
        stopper = asyncio.get_running_loop().create_task(self.stopped.wait())
        now = asyncio.get_running_loop().create_task(self._now.wait())
        deadline = None
        try:
            while not self._now.is_set():
                if self._more.is_set():  # workers added by resize: wait for them too
                    self._more.clear()
                    pending |= {t for t in self._tasks if not t.done()}
                if not pending:
                    break
                if deadline is None and self.stopped.is_set():
                    deadline = time.monotonic() + self.drain
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                more = asyncio.get_running_loop().create_task(self._more.wait())
                wake = {now if deadline is not None else stopper, more}
                try:
                    done, _ = await asyncio.wait(
                        pending | wake, timeout=left, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    more.cancel()
                for t in done & pending:
                    if not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]  # a bug, not a failed request
                pending -= done
        finally:
            stopper.cancel()
            now.cancel()

    async def _watch_down(self) -> None:
        """Stop when every slot has been down for `down_timeout` seconds."""
        while True:
            since = [s.down_since for s in self.slots]
            left = None
            if since and None not in since:
                left = max(t for t in since if t is not None) + self.down_timeout
                left -= time.monotonic()
                if left <= 0:
                    self._down = max(self.slots, key=lambda s: s.down_since or 0.0)
                    return self.stop(now=self.drain == 0)
            await self.queue.changed(left)

    async def _work(self, slot: Slot, number: int) -> None:
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
        """The unit's requests in order. A record is handed on once the policy has seen
        it (and, the unit's last, once the unit's fate is settled)."""
        rec: RequestRecord | None = None
        try:
            while (req := unit.next_request()) is not None:
                if rec is not None:
                    self._emit(rec)
                rec = slot.client.new_record(req, self.phase)
                self._sending[id(rec)] = rec
                try:
                    await slot.client.chat(req, record=rec)
                finally:
                    del self._sending[id(rec)]
                if not await self.policy.after(unit, rec, slot, self.queue):
                    return
            self.policy.done(unit, slot, self.queue)
        finally:
            if rec is not None:
                self._emit(rec)

    def send_times(self) -> list[float]:
        """When each request on the wire now was sent (perf_counter; the live ETA's tail,
        `generate.tail`, reads each one's age)."""
        return [r.t_send for r in self._sending.values() if r.t_send]

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
    return await Load([Slot(client, concurrency)], queue, phase=phase, on_record=on_record).run()
