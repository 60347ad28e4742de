"""Load shapes: keep C requests in flight, over a request source, until told to stop.

A phase is C workers pulling from one iterator of requests. Burst = C requests
for C workers; sustained = C workers that refill as soon as a request ends,
until a request count or a duration is reached. Every request sent becomes a
record handed to `on_record`, even when it fails or is cancelled, so the
records file always has one line per request sent.

A failure whose kind says the server is gone (`ErrorKind.server_gone`: refused, unknown
host, connect timeout; killed, out of memory) stops the phase at once: in-flight
requests are cancelled and recorded, and `ServerDown` says when the server stopped
answering.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from genbench.client import ChatRequest, Client
from genbench.errors import ServerDown
from genbench.records import RequestRecord

__all__ = ["PhaseRun", "ServerDown", "run_phase"]


@dataclass
class PhaseRun:
    records: list[RequestRecord] = field(default_factory=list)
    started: float = 0.0
    stop_sending_at: float | None = None
    ended: float = 0.0


async def run_phase(
    client: Client,
    requests: Iterator[ChatRequest],
    *,
    concurrency: int,
    phase: str,
    max_requests: int | None = None,
    duration: float | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    then: Callable[[ChatRequest, RequestRecord], ChatRequest | None] | None = None,
) -> PhaseRun:
    """Run one phase; raises ServerDown (after recording everything) if the server dies.

    With `then`, a worker whose request ended asks it for a follow-up (the next turn of a
    conversation) and sends that before taking a new request; follow-ups are sent even
    after the phase stops taking new ones, so a conversation in flight completes."""
    run = PhaseRun(started=time.perf_counter())
    deadline = run.started + duration if duration else None
    sent = 0
    stop = asyncio.Event()
    down: list[RequestRecord] = []

    def take() -> ChatRequest | None:
        nonlocal sent
        if stop.is_set():
            return None
        now = time.perf_counter()
        if (max_requests is not None and sent >= max_requests) or (deadline and now >= deadline):
            if run.stop_sending_at is None:
                run.stop_sending_at = now
            return None
        try:
            req = next(requests)
        except StopIteration:
            if run.stop_sending_at is None:
                run.stop_sending_at = now
            return None
        sent += 1
        return req

    def finish(rec: RequestRecord) -> None:
        run.records.append(rec)
        if on_record is not None:
            on_record(rec)
        if rec.error_kind is not None and rec.error_kind.server_gone and not stop.is_set():
            down.append(rec)
            stop.set()

    async def worker() -> None:
        while (req := take()) is not None:
            while req is not None:
                rec = client.new_record(req, phase)
                try:
                    await client.chat(req, record=rec)
                finally:
                    finish(rec)
                req = then(req, rec) if then is not None and not stop.is_set() else None

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    stopper = asyncio.create_task(stop.wait())
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(
                pending | {stopper}, return_when=asyncio.FIRST_COMPLETED
            )
            pending.discard(stopper)
            for t in done:
                if t is not stopper and t.exception() is not None:
                    raise t.exception()  # a bug, not a request failure
            if stop.is_set():
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                break
    finally:
        stopper.cancel()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        run.ended = time.perf_counter()
    if down:
        rec = down[0]
        raise ServerDown(
            rec.sent_at,
            f"the server at {client.endpoint.root} stopped answering during phase "
            f"'{phase}' ({rec.error_message})",
            rec.error_kind.exit_code if rec.error_kind else None,
        )
    return run
