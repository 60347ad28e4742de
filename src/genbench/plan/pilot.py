"""The pilot: the user's rows read and sent as `genbench generate` reads and sends them, at
the job's concurrency, until the mean output length is known well enough."""

from __future__ import annotations

import itertools
import math
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.client import ChatRequest, Client, Timeouts
from genbench.endpoint import Endpoint
from genbench.errors import InputFileError
from genbench.generate.engine import WorkItem
from genbench.generate.input import Row, iter_rows, scan
from genbench.generate.params import merge, split_max_tokens
from genbench.load import run_phase
from genbench.plan.bar import TARGET_REL_ERROR, length_halfwidth
from genbench.records import RecordWriter, RequestRecord
from genbench.result import REQUESTS_FILE

PARQUET_ROWS = 2000  # pilot outputs kept in memory to measure Parquet's bytes per row


@dataclass
class PilotRun:
    records: list[RequestRecord]
    wall_s: float
    jsonl_bytes: list[int] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = "size"  # why it ended: size, target, time, prompts
    stopped_at: dict[str, Any] = field(default_factory=dict)  # answered, length bar then
    samples: int = 0  # rows sent (a multi-turn row is one sample of several requests)


PILOT_ROWS = 100_000  # rows of the file held for the pilot (a random sample of a bigger file)


@dataclass
class PilotInput:
    """The job's input as `genbench generate` reads it: `rows` is a random sample of the
    file's valid rows (all of them when there are at most PILOT_ROWS), in random order."""

    path: Path
    total: int
    rows: list[Row]


def read_pilot_input(path: Path, seed: int, limit: int = PILOT_ROWS) -> PilotInput:
    """Check the whole file with generate's own reader (a bad row raises the error
    generate would give, naming file, line and field), then load a random sample of its
    rows. Two passes over the file, neither holding more than `limit` rows."""
    res = scan(path)
    total = len(res.todo)
    if total == 0:
        raise InputFileError(path, None, "empty: no rows with a prompt")
    rnd = random.Random(seed)
    chosen = rnd.sample(sorted(res.todo), min(total, limit))  # ids, in a random order
    by_id = {
        r.id: r for r in iter_rows(path, set(chosen), res.bad_lines) if isinstance(r, Row)
    }  # the second pass skips unchosen rows that carry an id without parsing them
    return PilotInput(path, total, [by_id[i] for i in chosen if i in by_id])


def turn_count(row: Row, all_turns: bool) -> int:
    """Requests one row makes: every user turn's answer with --turns all, else one."""
    item, n = WorkItem(row), 0
    while item.advance(all_turns):
        n += 1
        item.waiting = False
    return n


def pilot_stream(rows: Sequence[Row], seed: int) -> Iterator[Row]:
    """The rows in the order given (already random), then drawn at random with
    replacement: a pilot longer than the file sends some rows twice."""
    yield from rows
    rnd = random.Random(seed)
    while rows:
        yield rows[rnd.randrange(len(rows))]


def first_turn_requests(
    rows: Sequence[Row], params: dict[str, Any], all_turns: bool, prefix: str
) -> list[ChatRequest]:
    """Each row's first request, as generate sends it (for the warm-up)."""
    out = []
    for i, row in enumerate(rows):
        item = WorkItem(row)
        if item.advance(all_turns):
            out.append(turn_request(item, params, f"{prefix}-{i}"))
    return out


def turn_request(item: WorkItem, params: dict[str, Any], rid: str) -> ChatRequest:
    """The request generate sends for the item's next turn: the job's sampling fields,
    the row's own `params` over them."""
    merged = merge(params, item.row.params) if item.row.params else params
    max_tokens, rest = split_max_tokens(merged)
    return ChatRequest(rid, item.prompt(), max_tokens, dict(rest))


@dataclass
class PilotStop:
    """When an open-ended pilot has seen enough: at least `min_requests` answered, at
    least `min_s` seconds, and the mean output length known to ±`target` ×
    `length_share` (95%), the rest of the bar being left to the server's speed; or
    `max_s` seconds."""

    target: float = TARGET_REL_ERROR
    min_requests: int = 200
    min_s: float = 0.0
    max_s: float = 600.0
    length_share: float = 0.8
    count: int = 0
    total: float = 0.0
    squares: float = 0.0
    started: float | None = None
    reason: str = ""
    at_count: int = 0  # answered requests when it stopped, and the length bar then
    at_halfwidth: float = math.inf

    def add_sample(self, tokens: int) -> None:
        """A finished sample's output tokens (all its turns)."""
        if tokens:
            self.count += 1
            self.total += tokens
            self.squares += float(tokens) ** 2

    @property
    def halfwidth(self) -> float:
        return length_halfwidth(self.count, self.total, self.squares)

    def done(self) -> bool:
        now = time.perf_counter()
        if self.started is None:
            self.started = now
        enough = self.count >= self.min_requests and now - self.started >= self.min_s
        if enough and self.halfwidth <= self.target * self.length_share:
            self.reason = "target"
        elif now - self.started >= self.max_s:
            self.reason = "time"
        if self.reason:
            self.at_count, self.at_halfwidth = self.count, self.halfwidth
        return bool(self.reason)


async def run_pilot(
    ep: Endpoint,
    model: str,
    rows: Iterable[Row],
    concurrency: int,
    out: Path | None,
    on_record: Callable[[RequestRecord], None] | None = None,
    timeout: float = 600.0,
    warmup: Sequence[ChatRequest] = (),
    warmup_s: float = 0.0,
    stop: PilotStop | None = None,
    params: dict[str, Any] | None = None,
    turns: str = "all",
) -> PilotRun:
    """Run the pilot as the job will run: C workers, sustained, natural lengths, each row
    sent as `genbench generate` sends it (the job's `params` with the row's own over them;
    with `turns` "all" every user turn of a conversation answered in order, each request
    carrying the new answers before it, on the same worker). Records go to
    out/requests.jsonl without their text, tagged in `extra` with the row (`row`), the
    turn (`turn`) and the row's number of requests (`turns`); each finished row is
    measured as generate would write it, then dropped. `rows` is sent to its end, or,
    with `stop`, until `stop.done` says enough; conversations in flight then finish.

    With `warmup_s`, the `warmup` requests (cycled) first load the server at C for that
    long and are discarded: a server that sat idle runs slower for its first seconds
    of load (12-20% for ~20 s on the vLLM CPU test server), and a pilot is short enough
    for that to bias the forecast of a job that runs warm for hours."""
    timeouts = Timeouts(connect=10.0, read=timeout, total=None)
    # the protocol-level transport `run` uses: the client's own CPU stays out of the pilot
    client = Client(ep, model, timeouts=timeouts, keep_text=True)
    writer = RecordWriter(out / REQUESTS_FILE) if out else None
    pilot = _PilotRows(model, params or {}, turns == "all", stop, writer, on_record)
    try:
        if warmup_s > 0 and warmup:
            await run_phase(
                client,
                itertools.cycle(warmup),
                concurrency=concurrency,
                phase="warmup",
                duration=warmup_s,
            )
        phase = await run_phase(
            client,
            pilot.requests(rows),
            concurrency=concurrency,
            phase="pilot",
            on_record=pilot.record,
            then=pilot.then,
        )
    finally:
        await client.close()
        if writer:
            writer.close()
    return pilot.finish(phase.records)


class _PilotRows:
    """The pilot's rows while they run: each row's first request, its next turn once an
    answer arrives, every record tagged and written, each finished row measured."""

    def __init__(
        self,
        model: str,
        params: dict[str, Any],
        all_turns: bool,
        stop: PilotStop | None,
        writer: RecordWriter | None,
        on_record: Callable[[RequestRecord], None] | None,
    ) -> None:
        self.model, self.params, self.all_turns = model, params, all_turns
        self.stop, self.writer, self.on_record = stop, writer, on_record
        self.run = PilotRun(records=[], wall_s=0.0)
        # request id -> (row in progress, its number in the pilot, turn, requests in the row)
        self.live: dict[str, tuple[WorkItem, int, int, int]] = {}
        self.follow: dict[str, ChatRequest] = {}

    def requests(self, rows: Iterable[Row]) -> Iterator[ChatRequest]:
        """Each row's first request, until the rows end or the stop rule says enough."""
        run, stop = self.run, self.stop
        for sent, row in enumerate(rows):
            if stop is not None and stop.done():
                return
            item = WorkItem(row)
            if not item.advance(self.all_turns):
                continue
            req = turn_request(item, self.params, f"pilot-{sent}-line{row.line}")
            self.live[req.id] = (item, sent, 0, turn_count(row, self.all_turns))
            run.samples += 1
            yield req
        run.stopped = "prompts" if stop is not None else "size"

    def record(self, rec: RequestRecord) -> None:
        """Tag the record with its row and turn, go on with the row, and write the record
        without its text."""
        entry = self.live.pop(rec.id, None)
        if entry is not None:
            item, i, turn, n = entry
            rec.extra.update(row=i, turn=turn, turns=n)
            if rec.ok:
                item.add_turn(rec)
                if item.advance(self.all_turns):
                    rid = f"pilot-{i}-line{item.row.line}-t{turn + 1}"
                    nxt = turn_request(item, self.params, rid)
                    self.live[nxt.id] = (item, i, turn + 1, n)
                    self.follow[rec.id] = nxt
                else:
                    self._row_done(item, rec)
        rec.text = rec.reasoning = None
        if self.writer:
            self.writer.write(rec)
        if self.on_record:
            self.on_record(rec)

    def _row_done(self, item: WorkItem, rec: RequestRecord) -> None:
        """Measure the finished row as generate writes it; keep a few for Parquet."""
        line = {"id": item.row.output_id, "conversations": item.out, "meta": item.meta(self.model)}
        size = len(orjson.dumps(line)) + 1
        rec.extra["jsonl_bytes"] = size
        self.run.jsonl_bytes.append(size)
        if len(self.run.rows) < PARQUET_ROWS:
            self.run.rows.append(line)
        if self.stop is not None:
            self.stop.add_sample(item.tokens)

    def then(self, req: ChatRequest, rec: RequestRecord) -> ChatRequest | None:
        return self.follow.pop(rec.id, None)

    def finish(self, records: list[RequestRecord]) -> PilotRun:
        run, stop = self.run, self.stop
        if stop is not None and stop.reason:
            run.stopped = stop.reason
            run.stopped_at = {"answered": stop.at_count, "length_halfwidth": stop.at_halfwidth}
        run.records = records
        sent = [r for r in records if r.t_send]
        if sent:
            run.wall_s = max(r.t_end or r.t_send for r in sent) - min(r.t_send for r in sent)
        return run
