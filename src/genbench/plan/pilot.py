"""The pilot: generate's own path (`row_load`) on a sample of the user's rows, at the
job's concurrency, until the mean output length is known well enough; its records are
read back from disk for the model."""

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

from genbench.errors import ErrorKind, InputFileError
from genbench.fmt import counted
from genbench.generate.agent import start
from genbench.generate.conversation import Conversation
from genbench.generate.input.reader import Row, iter_rows, scan
from genbench.generate.pipeline import Retries, row_load
from genbench.generate.recipe import Recipe, turn_count
from genbench.generate.servers import Server
from genbench.load import run_phase
from genbench.plan.bar import TARGET_REL_ERROR, length_halfwidth
from genbench.records import RecordWriter, RequestRecord, read_records
from genbench.run.result import REQUESTS_FILE
from genbench.selfcheck import LoopMonitor
from genbench.transport.client import ChatRequest, Client, Timeouts
from genbench.transport.endpoint import Endpoint
from genbench.transport.thinking import ThinkMode

__all__ = ["turn_count"]  # generate's, for the plan

PARQUET_ROWS = 2000  # pilot outputs kept in memory to measure Parquet's bytes per row


@dataclass
class PilotRun:
    records: list[RequestRecord]
    wall_s: float
    jsonl_bytes: list[int] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = "size"  # why it ended: size, target, min_time, time, job, prompts
    stopped_at: dict[str, Any] = field(default_factory=dict)  # answered, length bar then
    samples: int = 0  # rows sent (a multi-turn row is one sample of several requests)
    # genbench's own process during the pilot (run's self-check: CPU, event-loop lag): a
    # client too busy to read and send in time makes the pilot's speed partly the host's
    client: dict[str, Any] = field(default_factory=dict)


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


def pilot_stream(rows: Sequence[Row], seed: int) -> Iterator[Row]:
    """The rows in the order given (already random), then drawn at random with
    replacement: a pilot longer than the file sends some rows twice."""
    yield from rows
    rnd = random.Random(seed)
    while rows:
        yield rows[rnd.randrange(len(rows))]


def draws_of(draws: int, total: int) -> str:
    """The pilot's size beside its file's: "200 of 3,000 rows", or, when it draws more than
    the file holds, "30 draws from the 7 rows" (each row sent once, then again at random)."""
    if draws <= total:
        return f"{draws:,} of {total:,} rows"
    return f"{draws:,} draws from the {counted(total, 'row')} (some twice)"


def first_turn_requests(rows: Sequence[Row], recipe: Recipe, prefix: str) -> list[ChatRequest]:
    """Each row's first request, as generate sends it (for the warm-up)."""
    out = []
    for i, row in enumerate(rows):
        req = start(row, recipe, f"{prefix}-{i}").next_request()
        if req is not None:
            out.append(req)
    return out


@dataclass
class PilotStop:
    """When an open-ended pilot has seen enough: at least `min_requests` answered, at
    least `min_s` seconds, and the mean output length known to ±`target` ×
    `length_share` (95%, on its upper side, the skew of the lengths counted as the final
    bar's bootstrap-t counts it), the rest of the bar being left to the server's speed; or
    `max_requests` answered (the job's own size), or `max_s` seconds."""

    target: float = TARGET_REL_ERROR
    min_requests: int = 200
    min_s: float = 0.0
    max_s: float = 600.0
    max_requests: int | None = None  # the job's samples: a pilot longer is no pilot
    length_share: float = 0.8
    count: int = 0
    total: float = 0.0
    squares: float = 0.0
    cubes: float = 0.0
    started: float | None = None
    reason: str = ""
    at_count: int = 0  # answered requests when it stopped, and the length bar then
    at_halfwidth: float = math.inf
    reached_s: float | None = None  # when the target was first met (before min_s: held)
    climb_s: float = 0.0  # -c auto: the climb's part of --pilot-max-time, before max_s

    def add_sample(self, tokens: int) -> None:
        """A finished sample's output tokens (all its turns)."""
        if tokens:
            self.count += 1
            self.total += tokens
            self.squares += float(tokens) ** 2
            self.cubes += float(tokens) ** 3

    @property
    def halfwidth(self) -> float:
        return length_halfwidth(self.count, self.total, self.squares, self.cubes)

    def done(self) -> bool:
        now = time.perf_counter()
        if self.started is None:
            self.started = now
        ran = now - self.started
        met = self.count >= self.min_requests and self.halfwidth <= self.target * self.length_share
        if met and self.reached_s is None:
            self.reached_s = ran
        if met and ran >= self.min_s:
            # met before --pilot-min-time was up: the minimum time held it, not the target
            held = self.min_s > 0 and self.reached_s is not None and self.reached_s < self.min_s
            self.reason = "min_time" if held else "target"
        elif self.max_requests is not None and self.count >= self.max_requests:
            self.reason = "job"
        elif now - self.started >= self.max_s:
            self.reason = "time"
        if self.reason:
            self.at_count, self.at_halfwidth = self.count, self.halfwidth
        return bool(self.reason)


class PilotSink:
    """Where the pilot's finished rows go: measured as generate writes them, then dropped."""

    def __init__(self, model: str, run: PilotRun, stop: PilotStop | None) -> None:
        self.model, self.run, self.stop = model, run, stop

    def finish(self, conv: Conversation) -> None:
        line = conv.line(self.model)
        if conv.last is not None:
            conv.last.extra["jsonl_bytes"] = len(line)
            # the requests the row made: an agentic row's target decides how many
            conv.last.extra["turns"] = conv.turns
        self.run.jsonl_bytes.append(len(line))
        if len(self.run.rows) < PARQUET_ROWS:
            self.run.rows.append(orjson.loads(line))
        if self.stop is not None:
            self.stop.add_sample(conv.tokens)

    def give_up(self, conv: Conversation, kind: ErrorKind, why: str) -> None: ...

    def note(self, text: str, style: str = "") -> None: ...


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
    recipe: Recipe = Recipe(),  # frozen: one default for every call
    think: ThinkMode | None = None,
    token_ids: str | None = None,
    accept: str | None = None,
) -> PilotRun:
    """Run the pilot as the job will run, on generate's own path (`row_load`): C
    workers, sustained, natural lengths, each row a conversation sent as `genbench
    generate` sends it, failures retried as it retries them. Records go to
    out/requests.jsonl without their text, tagged in `extra` with the row (`row`), the
    turn (`turn`) and the row's number of requests (`turns`), and are read back from
    there; each finished row is measured as generate writes it (`jsonl_bytes`), then
    dropped. `rows` is sent to its end, or, with `stop`, until `stop.done` says enough;
    conversations in flight then finish. A server that stops answering raises
    ServerDown, the records so far on disk.

    With `warmup_s`, the `warmup` requests (cycled) first load the server at C for that
    long and are discarded: a server that sat idle runs slower for its first seconds
    of load (12-20% for ~20 s on the vLLM CPU test server), and a pilot is short enough
    for that to bias the forecast of a job that runs warm for hours.

    `token_ids`: the dialect the server gives ids in (check's), kept as the job keeps them
    (`--token-ids auto`), so the rows measured weigh what the job's will."""
    timeouts = Timeouts(connect=10.0, read=timeout, total=None)
    # the protocol-level transport `run` uses: the client's own CPU stays out of the pilot
    client = Client(ep, model, timeouts=timeouts, keep_text=True, think=think, token_ids=token_ids,
                    accept=accept)  # fmt: skip
    server = Server(ep, client, concurrency)
    writer = RecordWriter(out / REQUESTS_FILE) if out else None
    run = PilotRun(records=[], wall_s=0.0)

    def record(rec: RequestRecord) -> None:
        rec.text = rec.reasoning = rec.tool_calls = None
        if writer:
            writer.write(rec)
        if on_record:
            on_record(rec)

    def label(n: int, row: Row) -> tuple[str, dict[str, Any]]:
        want = turn_count(row, recipe)  # the last record says how many
        return f"pilot-{n}-line{row.line}", {"row": n, "turns": want}

    load = row_load(
        [server],
        rows,
        PilotSink(model, run, stop),
        recipe=recipe,
        retries=Retries(),
        phase="pilot",
        admit=(lambda n: not stop.done()) if stop is not None else None,
        label=label,
        on_record=record,
    )
    try:
        if warmup_s > 0 and warmup:
            await run_phase(
                client, itertools.cycle(warmup), concurrency=concurrency, phase="warmup",
                duration=warmup_s,
            )  # fmt: skip
        monitor = LoopMonitor()  # the pilot's own, not the warm-up's
        monitor.start()
        try:
            phase = await load.run()
        finally:
            client_check = await monitor.stop(0)
    finally:
        await server.close()
        if writer:
            writer.close()
    run.samples = load.queue.taken
    run = _ended(run, stop, read_records(out / REQUESTS_FILE) if out else phase.records)
    chunks = sum(r.chunk_count for r in run.records)
    client_check.chunks_per_s = chunks / run.wall_s if run.wall_s > 0 else None
    run.client = client_check.to_dict()
    return run


def _ended(run: PilotRun, stop: PilotStop | None, records: list[RequestRecord]) -> PilotRun:
    """The pilot is over: why it stopped, its records, and its wall time."""
    run.stopped = stop.reason or "prompts" if stop is not None else "size"
    if stop is not None and stop.reason:
        run.stopped_at = {"answered": stop.at_count, "length_halfwidth": stop.at_halfwidth}
        if stop.reason == "min_time" and stop.reached_s is not None:
            run.stopped_at["target_reached_s"] = round(stop.reached_s, 3)
    run.records = records
    run.wall_s = pilot_wall_s(records)
    return run


def pilot_wall_s(records: Sequence[RequestRecord]) -> float:
    """The pilot's wall time: its first send to its last request's end (0: none sent)."""
    sent = [r for r in records if r.t_send]
    if not sent:
        return 0.0
    return max(r.t_end or r.t_send for r in sent) - min(r.t_send for r in sent)
