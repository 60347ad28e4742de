"""Rows through `load`: the path a generate job and the plan's pilot share.

Each row is a `Conversation` (a load unit: its turns in order on one worker). What
happens after a failed request is decided here, from what the failure says about the
server (`ErrorKind` and `retry_for`, the one vocabulary):

  * the server is gone (refused, connect timeout): it is taken out, the row goes back
    to the queue at once, and no attempt is charged to the row;
  * the server may have died (a stream that broke off or went silent, an HTTP 5xx:
    `Retry.PROBE`): /health decides. Dead -> as above; alive -> a charged retry;
  * a router answered for its worker (`ErrorKind.UPSTREAM`: 502, 504, "no available
    workers", "error sending request"): a server lost behind it, uncharged like the
    above, requeued after a backoff (the router sends it to another worker); when the
    router says no worker is left, it is taken out as a dead server is;
  * retrying cannot help (`Retry.NO`: a 4xx other than 408/409/429, such as context too
    long): the row goes straight to the errors file;
  * anything else (429, timeouts, in-band errors, malformed streams): retried with
    exponential backoff and jitter, at most `retries` times, then the errors file;
  * this machine is out of file descriptors (`LOCAL_LIMIT` at connect, or the store
    opening a file, where the row waits in memory for the next sync): the server keeps
    one stream fewer, a stream coming back after 30 s without a shortage, and the job
    goes on; a row that could not be sent goes back uncharged.
A row in flight on servers that died `max_server_losses` times goes to the errors file
too: it may be the row that kills the server.

Every record is tagged in `extra` with the row's `turn` (from 0), the charged `attempt`
(from the second) and the row's `outcome`: `next` (another turn follows), `done` (written), `retry`,
`requeued` (back to the queue, uncharged), `failed` (to the errors file).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from genbench.errors import ErrorKind, Retry, descriptor_advice, no_worker_left, retry_for
from genbench.generate.agent import start
from genbench.generate.conversation import Conversation
from genbench.generate.hidden import Capture, StatesProblem, fail
from genbench.generate.input.reader import BadRow, Row
from genbench.generate.recipe import Recipe
from genbench.generate.store.layout import HIDDEN_STATES
from genbench.load import Load, Policy, Slot, WorkQueue
from genbench.records import RequestRecord
from genbench.transport.thinking_count import ThinkingCounter

REGROW_S = 30.0

# what a failed request does (`RowPolicy._on_<step>`): kinds with a step of their own, then,
# for a server that is not gone, the retry advice of `genbench.errors`' table
ON_KIND = {ErrorKind.LOCAL_LIMIT: "short", ErrorKind.UPSTREAM: "upstream"}
ON_ADVICE = {Retry.PROBE: "probe", Retry.NO: "give_up", Retry.YES: "retry"}


class RowSink(Protocol):
    """Where finished rows go: the store (a job) or a measurement (the pilot)."""

    def finish(self, conv: Conversation) -> str | None:
        """Every turn answered; returns a shortage of descriptors to report, if any."""
        ...

    def give_up(self, conv: Conversation, kind: ErrorKind, why: str) -> str | None: ...

    def note(self, text: str, style: str = "") -> None: ...


@dataclass
class Retries:
    retries: int = 3
    backoff: float = 1.0
    max_backoff: float = 60.0
    max_server_losses: int = 8


class RowPolicy(Policy):
    """generate's retry and failover policy (see the module's docstring)."""

    def __init__(self, sink: RowSink, retries: Retries, capture: Capture | None = None) -> None:
        self.sink, self.r = sink, retries
        self.capture = capture  # --hidden-states: a turn counts once its states are taken
        self._noted: dict[str, float] = {}
        self._counters: dict[str, ThinkingCounter] = {}  # per server: its /tokenize

    async def after(self, unit: Any, rec: RequestRecord, slot: Slot, queue: WorkQueue) -> bool:
        conv: Conversation = unit
        conv.last, conv.server = rec, slot.name
        tag = rec.extra
        tag.update(conv.tag)
        tag["turn"] = conv.turns
        if conv.attempts:
            tag["attempt"] = conv.attempts + 1
        if rec.ok and self.capture is not None:
            await self._take_states(conv, rec, slot)
        if rec.ok:
            self._regrow(slot)
            await self._count_thinking(rec, slot)
            at = len(conv.out)  # the turn's index once answered
            conv.answered(rec)
            if "states" in tag:
                conv.out[at][HIDDEN_STATES] = tag.pop("states")
            tag["outcome"] = "next"  # `done` replaces it if this was the last turn
            return True
        await self._failed(conv, rec, slot, queue)
        return False

    async def _take_states(self, conv: Conversation, rec: RequestRecord, slot: Slot) -> None:
        """The turn's hidden states into the output directory (generate/hidden.py), or the
        request fails as any other does (retried)."""
        assert self.capture is not None
        try:
            name = await self.capture.take(
                rec, slot.client.endpoint, conv.row.output_id, len(conv.out)
            )
        except StatesProblem as e:
            fail(rec, str(e))
        else:
            rec.extra["states"] = name

    async def _count_thinking(self, rec: RequestRecord, slot: Slot) -> None:
        """Thinking the server did not count, estimated by chunks: its /tokenize counts
        it, after the request (the row's next turn waits on it, no chunk does); where the
        server has none (asked once), it stays estimated."""
        if rec.reasoning_source != "estimate" or rec.reasoning is None:
            return  # counted by the server, or no thinking: nothing to ask
        counter = self._counters.get(slot.name)
        if counter is None:
            c = slot.client
            counter = self._counters[slot.name] = ThinkingCounter(c.pool, c.endpoint, c.model)
        if counter.wants(rec):
            await counter.count([rec])

    def done(self, unit: Any, slot: Slot, queue: WorkQueue) -> None:
        conv: Conversation = unit
        if short := self.sink.finish(conv):  # the row waits in memory for a descriptor
            self._short_of_descriptors(slot, short, every=1.0)
        self._outcome(conv, "done")
        queue.done(conv)

    async def _failed(
        self, conv: Conversation, rec: RequestRecord, slot: Slot, queue: WorkQueue
    ) -> None:
        """What a failed request does to its row and its server: looked up by its kind
        (`ON_KIND`), else the server gone, else by the table's retry advice (`ON_ADVICE`)."""
        kind = rec.error_kind or ErrorKind.OTHER
        step = ON_KIND.get(kind) or ("down" if kind.server_gone else None)
        step = step or ON_ADVICE[retry_for(kind, rec.http_status)]
        await getattr(self, f"_on_{step}")(conv, rec, slot, queue)

    async def _on_short(
        self, conv: Conversation, rec: RequestRecord, slot: Slot, q: WorkQueue
    ) -> None:
        self._short_of_descriptors(slot, f"{slot.name}: {rec.error_message}")
        self._back(conv, q, "requeued", 0.5)

    async def _on_down(
        self, conv: Conversation, rec: RequestRecord, slot: Slot, q: WorkQueue
    ) -> None:
        slot.mark_down(f"{rec.error_kind or ErrorKind.OTHER}: {rec.error_message}", rec)
        self._lost(conv, q, 0.0)

    async def _on_probe(
        self, conv: Conversation, rec: RequestRecord, slot: Slot, q: WorkQueue
    ) -> None:
        """The server may have died: its /health decides between down and a retry."""
        step = self._on_retry if await slot.probe() else self._on_down
        await step(conv, rec, slot, q)

    async def _on_upstream(
        self, conv: Conversation, rec: RequestRecord, slot: Slot, q: WorkQueue
    ) -> None:
        if no_worker_left(rec.error_message or ""):
            # every worker behind the router is out: the router is down as a server is
            await self._on_down(conv, rec, slot, q)
        else:
            # a router's worker went away (or none is free): a server lost, not the row's
            # fault; the router sends it elsewhere, after a backoff in case none is left
            self._lost(conv, q, self._backoff(conv.losses + 1))

    async def _on_give_up(
        self, conv: Conversation, rec: RequestRecord, slot: Slot, q: WorkQueue
    ) -> None:
        # the request itself is the problem: retrying cannot help
        self._give_up(conv, q, rec.error_message or f"HTTP {rec.http_status}")

    async def _on_retry(
        self, conv: Conversation, rec: RequestRecord, slot: Slot, q: WorkQueue
    ) -> None:
        if conv.attempts >= self.r.retries:  # its 1 + `retries` charged requests are spent
            self._give_up(conv, q, rec.error_message or str(rec.error_kind or ErrorKind.OTHER))
        else:
            conv.attempts += 1
            self._back(conv, q, "retry", self._backoff(conv.attempts))

    def _backoff(self, attempt: int) -> float:
        base = min(self.r.max_backoff, self.r.backoff * 2 ** (attempt - 1))
        return base * random.uniform(0.5, 1.5)

    def _lost(self, conv: Conversation, queue: WorkQueue, delay: float) -> None:
        """The row's server went away under it: requeued, uncharged, up to a bound."""
        conv.losses += 1
        if conv.losses > self.r.max_server_losses:
            why = f"a server went away {conv.losses} times while generating it"
            self._give_up(conv, queue, why)
        else:
            self._back(conv, queue, "requeued", delay)

    def _give_up(self, conv: Conversation, queue: WorkQueue, why: str) -> None:
        rec = conv.last
        kind = (rec.error_kind if rec else None) or ErrorKind.OTHER
        if short := self.sink.give_up(conv, kind, why):
            self._note_once("", short)
        self._outcome(conv, "failed")
        queue.done(conv)

    def _back(self, conv: Conversation, queue: WorkQueue, outcome: str, delay: float) -> None:
        self._outcome(conv, outcome)
        queue.retry(conv, delay)

    @staticmethod
    def _outcome(conv: Conversation, outcome: str) -> None:
        if conv.last is not None:
            conv.last.extra["outcome"] = outcome

    def _short_of_descriptors(self, slot: Slot, what: str, every: float = 0.0) -> None:
        """A stream fewer on this server: a connect that found no descriptor is one short;
        the store's files, at most one a second (they get theirs back at the next sync)."""
        self._noted[f"short {slot.name}"] = time.monotonic()
        if self._once(f"shed {slot.name}", every):
            slot.shed_stream()
        advice = what.rstrip(".") if "ulimit" in what else f"{what}: {descriptor_advice()}"
        text = f"{advice}; going on with {slot.streams} of {slot.concurrency} streams"
        self._note_once(slot.name, text)

    def _regrow(self, slot: Slot) -> None:
        """A stream back every REGROW_S seconds without a shortage: one that passed (a
        shard being replaced, another program's files) does not cost the job for good."""
        quiet = time.monotonic() - self._noted.get(f"short {slot.name}", -REGROW_S)
        full = slot.streams >= slot.concurrency
        if not full and quiet >= REGROW_S and self._once(f"grow {slot.name}", REGROW_S):
            slot.streams += 1
            slot.changed("")

    def _note_once(self, key: str, text: str) -> None:
        if self._once(key, 5.0):
            self.sink.note(text, "yellow")

    def _once(self, key: str, every: float) -> bool:
        """True at most once every `every` seconds for `key`."""
        now = time.monotonic()
        if now - self._noted.get(key, -every) < every:
            return False
        self._noted[key] = now
        return True


Label = Callable[[int, Row], tuple[str, dict[str, Any]]]


def conversations(
    rows: Iterable[Row | BadRow],
    recipe: Recipe,
    on_bad: Callable[[BadRow], None] | None = None,
    label: Label | None = None,
) -> Iterator[Conversation]:
    """The rows as units for `load`, read lazily; a row that cannot be sent goes to
    `on_bad`. `label(n, row)` gives the n-th row's request id and what its records
    carry in `extra` (default: the row's id, nothing)."""
    for n, row in enumerate(rows):
        if isinstance(row, BadRow):
            if on_bad is not None:
                on_bad(row)
            continue
        rid, tag = label(n, row) if label else (row.id, {})
        conv = start(row, recipe, rid)
        conv.tag = tag
        yield conv


def row_load(
    slots: list[Slot],
    rows: Iterable[Row | BadRow],
    sink: RowSink,
    *,
    recipe: Recipe,
    retries: Retries,
    phase: str = "generate",
    admit: Callable[[int], bool] | None = None,
    label: Label | None = None,
    on_bad: Callable[[BadRow], None] | None = None,
    capture: Capture | None = None,
    **load: Any,
) -> Load:
    """The load that sends `rows` as generate does: each row a conversation made to
    `recipe`, failures handled by `RowPolicy`, finished rows to `sink`; `capture`: each
    turn's hidden states taken before it counts. `load` goes to `Load` (on_record,
    keep_records, down_timeout, drain)."""
    queue = WorkQueue(conversations(rows, recipe, on_bad, label), admit)
    return Load(slots, queue, RowPolicy(sink, retries, capture), phase=phase, **load)


def error_entry(conv: Conversation, kind: ErrorKind, why: str) -> dict[str, Any]:
    """A failed row's line in the errors file: why, where and after how many attempts."""
    rec = conv.last
    return {
        "id": conv.row.output_id, "line": conv.row.line, "error_kind": kind, "error": why,
        "http_status": rec.http_status if rec else None, "attempts": conv.attempts + 1,
        "server": conv.server or None, "turns_done": conv.turns,
        "failed_at": round(time.time(), 3),
    }  # fmt: skip


def invalid_entry(b: BadRow) -> dict[str, Any]:
    """An input line that cannot be asked: its line in the errors file, its field named."""
    return {
        "id": b.id, "line": b.line, "error_kind": ErrorKind.INVALID_INPUT,
        "error": b.describe(), "field": b.field, "raw": b.raw,
        "failed_at": round(time.time(), 3),
    }  # fmt: skip
