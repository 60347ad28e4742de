"""The generate scheduler: rows from the input, to servers with room, to the store.

Each server has `concurrency` workers. A worker takes the next row from one shared
dispatcher (rows waiting for a retry first, then new rows from the input, read lazily),
so work flows to whichever server has a free slot, and a slow server simply takes
fewer rows. A worker whose server is down waits for it to come back.

A row is one or more requests: with `turns="all"` every user turn of a multi-turn
conversation gets a freshly generated answer, in order, each request carrying the
regenerated history (as SpecForge's regenerate script does). Progress within a row
survives a failed request, so a retry resumes at the turn that failed.

Failures, by what they say about the server:
  * refused / connect timeout: the server is gone. It is taken out, the row goes back
    to the queue at once, and no attempt is charged to the row;
  * a stream that broke off or went silent, or an HTTP 5xx: /health decides. Dead ->
    as above; alive -> the row is charged an attempt and retried with backoff;
  * HTTP 4xx other than 408/409/429 (context too long, bad request): retrying cannot
    help; the row goes straight to the errors file;
  * anything else (429, 5xx, timeouts, in-band errors, malformed streams): retried with
    exponential backoff and jitter, at most `retries` times, then the errors file.
A row in flight on servers that died `max_server_losses` times goes to the errors file
too: it may be the row that kills the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genbench import __version__
from genbench.check import CheckReport, preflight
from genbench.client import ChatRequest, Client, Timeouts
from genbench.endpoint import Endpoint
from genbench.errors import ErrorKind, ExitCode, GenbenchError, Retry, UsageError, retry_for
from genbench.generate.input import BadRow, InputScan, Row, ShardSpec, iter_rows, scan
from genbench.generate.params import merge, split_max_tokens
from genbench.generate.progress import Progress, RowInfo
from genbench.generate.servers import Server, ServerSpec
from genbench.generate.store import Existing, Store, row_line
from genbench.records import RequestRecord

# preflight failures that mean "not up yet" rather than "misconfigured"
DOWN_EXITS = {ExitCode.REFUSED, ExitCode.TIMEOUT, ExitCode.SERVER_ERROR}


@dataclass
class JobConfig:
    input: Path
    output: Path
    servers: list[ServerSpec]
    api_key: str | None = None
    model: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    turns: str = "all"  # all | last
    fmt: str = "jsonl"  # jsonl | parquet
    shard: ShardSpec | None = None
    shard_bytes: int = 256 << 20
    skip_invalid: bool = False
    retries: int = 3
    retry_backoff: float = 1.0
    max_backoff: float = 60.0
    max_server_losses: int = 8
    timeout: float = 600.0
    connect_timeout: float = 10.0
    down_timeout: float = 1800.0
    drain: float = 10.0
    on_truncated: str = "keep"  # keep | error
    retry_errors: bool = False
    force: bool = False
    limit: int | None = None
    sync_interval: float = 1.0
    tick: float = 0.5

    def fingerprint(self, model: str) -> dict[str, Any]:
        return {"model": model, "params": self.params, "turns": self.turns, "format": self.fmt}


class Listener:
    """What the console (or a test) hears. Default: nothing."""

    def planned(self, info: dict[str, Any]) -> None: ...
    def note(self, text: str, style: str = "") -> None: ...
    def tick(self, snap: dict[str, Any]) -> None: ...
    def finished(self, result: JobResult) -> None: ...


@dataclass
class JobResult:
    status: str  # complete | nothing_to_do | interrupted | servers_down
    message: str = ""
    model: str | None = None
    total: int = 0
    done: int = 0
    failed: int = 0
    done_this_run: int = 0
    failed_this_run: int = 0
    truncated_this_run: int = 0
    tokens: int = 0
    thinking_tokens: int = 0
    elapsed_s: float = 0.0
    sending_s: float = 0.0
    files: list[str] = field(default_factory=list)
    errors_file: str | None = None
    snapshot: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        codes = {"interrupted": ExitCode.INTERRUPTED, "servers_down": ExitCode.REFUSED}
        return codes.get(self.status, ExitCode.OK)


class WorkItem:
    """A row on its way: the conversation so far and what its attempts cost."""

    __slots__ = (
        "row", "out", "pos", "waiting", "last_user", "attempts", "losses", "turns",
        "prompt_tokens", "tokens", "thinking", "estimated", "truncated", "ttft", "latency",
        "sent_at", "finish", "last", "server",
    )  # fmt: skip

    def __init__(self, row: Row) -> None:
        self.row = row
        self.out: list[dict[str, Any]] = []
        self.pos = 0
        self.waiting = False
        self.last_user = max(i for i, m in enumerate(row.messages) if m["role"] == "user")
        self.attempts = self.losses = self.turns = 0
        self.prompt_tokens = self.tokens = self.thinking = 0
        self.estimated = self.truncated = False
        self.ttft: float | None = None
        self.latency = 0.0
        self.sent_at: float | None = None
        self.finish: str | None = None
        self.last: RequestRecord | None = None
        self.server = ""

    def advance(self, all_turns: bool) -> bool:
        """Move through the row to the next turn to generate; False when the row is done."""
        if self.waiting:
            return True
        msgs = self.row.messages
        while self.pos < len(msgs):
            i = self.pos
            m = msgs[i]
            self.pos += 1
            if all_turns:
                if m["role"] == "assistant":
                    continue  # the answer is regenerated
                self.out.append(m)
                if m["role"] == "user" and (i + 1 == len(msgs) or msgs[i + 1]["role"] != "user"):
                    self.waiting = True
                    return True
            elif i <= self.last_user:
                self.out.append(m)
                if i == self.last_user:
                    self.waiting = True
                    return True
        return False

    def prompt(self) -> list[dict[str, Any]]:
        return [{"role": m["role"], "content": m["content"]} for m in self.out]

    def add_turn(self, rec: RequestRecord) -> None:
        self.out.append(
            {
                "role": "assistant",
                "content": rec.text or "",
                "reasoning_content": rec.reasoning or "",
            }
        )
        self.waiting = False
        self.turns += 1
        self.prompt_tokens += rec.prompt_tokens or 0
        self.tokens += rec.completion_tokens or 0
        self.thinking += rec.reasoning_tokens or 0
        self.estimated = self.estimated or rec.tokens_estimated
        if rec.finish_reason == "length":
            self.truncated = True
        self.finish = rec.finish_reason
        if self.ttft is None and rec.ttft is not None:
            self.ttft = rec.ttft
        self.latency += rec.e2e or 0.0

    def meta(self, model: str) -> dict[str, Any]:
        return {
            "server": self.server,
            "model": model,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.tokens,
            "reasoning_tokens": self.thinking,
            "answer_tokens": self.tokens - self.thinking,
            "tokens_estimated": self.estimated,
            "finish_reason": self.finish,
            "truncated": self.truncated,
            "turns": self.turns,
            "attempts": self.attempts + 1,
            "ttft_s": None if self.ttft is None else round(self.ttft, 4),
            "latency_s": round(self.latency, 4),
            "sent_at": self.sent_at,
            "finished_at": round(time.time(), 3),
        }


class Dispatcher:
    """Hands out rows: retries that are due first, then the input. Knows when all is done."""

    def __init__(self, rows: Iterator[Row | BadRow], on_bad: Callable[[BadRow], None]) -> None:
        self.rows = rows
        self.on_bad = on_bad
        self.retries: list[tuple[float, int, WorkItem]] = []
        self.seq = itertools.count()
        self.exhausted = False
        self.in_flight = 0
        self.stopping = False
        self._changed = asyncio.Event()

    def notify(self) -> None:
        ev, self._changed = self._changed, asyncio.Event()
        ev.set()

    @property
    def complete(self) -> bool:
        return self.exhausted and not self.retries and self.in_flight == 0

    async def get(self, server: Server) -> WorkItem | None:
        while True:
            if self.stopping or self.complete:
                return None
            ev = self._changed
            if not server.up:
                await ev.wait()
                continue
            now = time.monotonic()
            if self.retries and self.retries[0][0] <= now:
                item = heapq.heappop(self.retries)[2]
                self.in_flight += 1
                return item
            if not self.exhausted:
                nxt = next(self.rows, None)
                if nxt is None:
                    self.exhausted = True
                    self.notify()
                    continue
                if isinstance(nxt, BadRow):
                    self.on_bad(nxt)
                    continue
                self.in_flight += 1
                return WorkItem(nxt)
            timeout = self.retries[0][0] - now if self.retries else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), timeout)

    def done(self, item: WorkItem) -> None:
        self.in_flight -= 1
        self.notify()

    def retry(self, item: WorkItem, delay: float) -> None:
        self.in_flight -= 1
        heapq.heappush(self.retries, (time.monotonic() + delay, next(self.seq), item))
        self.notify()


class Job:
    """One run of `genbench generate`."""

    def __init__(self, cfg: JobConfig, listener: Listener | None = None) -> None:
        self.cfg = cfg
        self.listener = listener or Listener()
        tag = cfg.shard.tag if cfg.shard and cfg.shard.count > 1 else None
        self.store = Store(
            cfg.output,
            shard_tag=tag,
            fmt=cfg.fmt,
            shard_bytes=cfg.shard_bytes,
            sync_interval=cfg.sync_interval,
            on_durable=self._on_durable,
        )
        self.servers: list[Server] = []
        self.progress: Progress | None = None
        self.model = cfg.model or ""
        self.dispatcher: Dispatcher | None = None
        self._stop_reason: str | None = None
        self._stop = asyncio.Event()
        self._stops = 0
        self._drain_now = asyncio.Event()
        self._t_first_send: float | None = None
        self._t_last_done: float | None = None

    # -- preparation ----------------------------------------------------------------------

    def prepare(self) -> tuple[Existing, InputScan]:
        """Local work only: the output directory, then the input. Fails before any request."""
        cfg = self.cfg
        self.store.check_directory()
        if cfg.retry_errors:
            moved = self.store.set_aside_errors()
            if moved:
                self.listener.note(f"--retry-errors: earlier failures moved to {moved}")
        existing = self.store.load_existing()
        for n in existing.notes:
            self.listener.note(f"repaired {n}", "yellow")
        if existing.duplicates:
            self.listener.note(
                f"{existing.duplicates} ids appear in more than one data file "
                "(files merged by hand?); each counts once",
                "yellow",
            )
        res = scan(
            cfg.input,
            existing.done,
            existing.failed,
            shard=cfg.shard,
            skip_invalid=cfg.skip_invalid,
            limit=cfg.limit,
            known_bad=existing.failed,
        )
        # 1M done ids are not needed past this point: the run writes only res.todo
        existing.done, existing.failed = set(), set()
        return existing, res

    async def _preflight(self) -> list[CheckReport]:
        cfg = self.cfg
        eps = [Endpoint.parse(s.url, cfg.api_key) for s in cfg.servers]
        reports = await asyncio.gather(
            *(
                preflight(ep, cfg.model, timeout=min(cfg.timeout, 120.0), connect_timeout=3.0)
                for ep in eps
            )
        )
        ok = [r for r in reports if r.ok]
        for r in reports:
            if not r.ok and r.exit_code not in DOWN_EXITS:
                raise GenbenchError(f"{r.url}: {r.diagnosis}", r.exit_code)
        if not ok:
            first = reports[0]
            raise GenbenchError(f"{first.url}: {first.diagnosis}", first.exit_code)
        models = {r.model for r in ok}
        if len(models) > 1:
            listing = ", ".join(f"{r.url} serves {r.model}" for r in ok)
            raise UsageError(f"the servers serve different models ({listing}): choose --model")
        self.model = ok[0].model or ""
        return list(reports)

    def _make_servers(self, reports: list[CheckReport]) -> None:
        cfg = self.cfg
        timeouts = Timeouts(connect=cfg.connect_timeout, read=cfg.timeout)
        for spec, rep in zip(cfg.servers, reports, strict=True):
            ep = Endpoint.parse(spec.url, cfg.api_key)
            client = Client(ep, self.model, timeouts=timeouts, keep_text=True)
            srv = Server(ep, client, spec.concurrency, on_change=self._server_changed)
            self.servers.append(srv)
            if not rep.ok:
                self.listener.note(f"{ep.base_url} is not answering yet: {rep.diagnosis}", "yellow")

    def _server_changed(self, server: Server, what: str) -> None:
        if server.up:
            self.listener.note(f"{server.name} is {what}", "green")
        else:
            self.listener.note(
                f"{server.name} is down ({what}): its rows go to the other servers; "
                "polling its /health",
                "yellow",
            )
        if self.dispatcher is not None:
            self.dispatcher.notify()

    # -- the job --------------------------------------------------------------------------

    async def run(self, handle_signals: bool = True) -> JobResult:
        t0 = time.monotonic()
        cfg = self.cfg
        existing, res = self.prepare()
        total = res.rows + len(res.bad)  # invalid rows found now count as failed ones
        info = {
            "input": str(cfg.input),
            "output": str(cfg.output),
            "rows": res.rows,
            "done_before": res.done,
            "failed_before": res.failed,
            "todo": len(res.todo),
            "invalid": len(res.bad),
            "derived_ids": res.derived,
            "shards_found": len(existing.shards),
            "shard": cfg.shard.tag if cfg.shard and cfg.shard.count > 1 else None,
        }
        self.listener.planned(info)
        before = (existing.job or {}).get("input")
        if before and before != str(cfg.input):
            self.listener.note(
                f"this output was started from {before}; rows are matched by id, so only "
                "ids also in this input count as done",
                "yellow",
            )
        if not res.todo and not res.bad:
            self.progress = Progress(total, res.done, res.failed, [])
            if cfg.fmt == "parquet" and existing.jsonl_shards:
                if not self.store.state.exists():
                    self.store.state.mkdir(parents=True)
                await self.store.close(convert_all=True)
            why = "every row is already done" if res.rows else "the input has no rows"
            return self._result("nothing_to_do", why, t0)

        reports = await self._preflight()
        job = {
            **cfg.fingerprint(self.model),
            "input": str(cfg.input),
            "shard": cfg.shard.tag if cfg.shard else None,
            "genbench_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        self.store.check_job(existing, job, cfg.force)
        self.store.begin(existing, job)
        self._make_servers(reports)
        self.progress = Progress(total, res.done, res.failed, [s.name for s in self.servers])
        rows = iter_rows(
            cfg.input, res.todo, res.bad_lines, shard=cfg.shard, last_line=res.last_line
        )
        self.dispatcher = Dispatcher(rows, self._write_bad)
        self.store.expect(res.todo)  # shared with the input pass: it shrinks as rows finish
        for b in res.bad:
            self._write_bad(b)
        for s, rep in zip(self.servers, reports, strict=True):
            if not rep.ok:
                s.mark_down(rep.diagnosis or "not answering")

        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.request_stop)
        syncer = loop.create_task(self.store.run_syncer())
        ticker = loop.create_task(self._ticker())
        watchdog = loop.create_task(self._watchdog())
        workers = [
            loop.create_task(self._worker(s)) for s in self.servers for _ in range(s.concurrency)
        ]
        status = "complete"
        stop_wait = loop.create_task(self._stop.wait())
        try:
            pending: set[asyncio.Task[Any]] = set(workers)
            while pending:
                done, pending = await asyncio.wait(
                    pending | {stop_wait}, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(stop_wait)
                for t in done:
                    if t is not stop_wait and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]  # a bug, not a row failure
                if stop_wait in done:
                    status = (
                        "servers_down" if self._stop_reason == "servers_down" else "interrupted"
                    )
                    await self._drain(pending)
                    break
            if status == "complete" and not self.dispatcher.complete:
                status = "interrupted"
        finally:
            for t in (ticker, watchdog, stop_wait, *workers):
                t.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            try:
                await self.store.close(convert_all=status == "complete")
            finally:
                syncer.cancel()
                await asyncio.gather(syncer, ticker, watchdog, stop_wait, return_exceptions=True)
                for s in self.servers:
                    await s.close()
                if handle_signals:  # only now: a Ctrl-C during the final fsync is ignored
                    for sig in (signal.SIGINT, signal.SIGTERM):
                        loop.remove_signal_handler(sig)
        message = {
            "complete": "all rows done",
            "interrupted": "interrupted: rerun the same command to resume",
            "servers_down": f"every server was down for {cfg.down_timeout:g} s: rerun the same "
            "command to resume when they are back",
        }[status]
        return self._result(status, message, t0)

    def request_stop(self, reason: str = "interrupted") -> None:
        """Ctrl-C: stop sending, let in-flight rows finish for `drain` s. Twice: stop now."""
        self._stops += 1
        if self._stop_reason is None:
            self._stop_reason = reason
        if self.dispatcher is not None:
            self.dispatcher.stopping = True
            self.dispatcher.notify()
        if self._stops == 1:
            n = sum(s.in_flight for s in self.servers)
            if reason == "interrupted" and n:
                self.listener.note(
                    f"stopping: waiting up to {self.cfg.drain:g} s for {n} rows in flight "
                    "(Ctrl-C again to stop now)",
                    "yellow",
                )
        self._stop.set()
        if self._stops > 1:
            self._drain_now.set()

    async def _drain(self, pending: set[asyncio.Task[Any]]) -> None:
        """Give rows in flight `drain` seconds to finish, then cancel them (not done: a
        resumed job generates them again)."""
        now_wait = asyncio.get_running_loop().create_task(self._drain_now.wait())
        deadline = time.monotonic() + self.cfg.drain
        while pending and not self._drain_now.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done, _ = await asyncio.wait(
                pending | {now_wait}, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            pending = pending - done
        now_wait.cancel()
        for w in pending:
            w.cancel()

    async def _worker(self, server: Server) -> None:
        assert self.dispatcher is not None
        d = self.dispatcher
        while (item := await d.get(server)) is not None:
            server.in_flight += 1
            try:
                await self._process(server, item)
            finally:
                server.in_flight -= 1

    async def _process(self, server: Server, item: WorkItem) -> None:
        cfg = self.cfg
        d = self.dispatcher
        assert d is not None
        all_turns = cfg.turns == "all"
        params = merge(cfg.params, item.row.params) if item.row.params else cfg.params
        max_tokens, rest = split_max_tokens(params)
        while item.advance(all_turns):
            req = ChatRequest(
                id=item.row.id, messages=item.prompt(), max_tokens=max_tokens, params=rest
            )
            rec = server.client.new_record(req, "generate")
            if item.sent_at is None:
                item.sent_at = round(time.time(), 3)
            if self._t_first_send is None:
                self._t_first_send = time.monotonic()
            try:
                await server.client.chat(req, record=rec)
            except asyncio.CancelledError:
                d.in_flight -= 1  # abandoned: not done, so resume generates it again
                raise
            item.last, item.server = rec, server.name
            if not rec.ok:
                await self._failed(server, item, rec)
                return
            item.add_turn(rec)
        self._finish(item)
        d.done(item)

    def _finish(self, item: WorkItem) -> None:
        info = RowInfo(item.server, item.tokens, item.thinking, item.truncated)
        meta = item.meta(self.model)
        if item.truncated and self.cfg.on_truncated == "error":
            entry = self._error_entry(
                item, ErrorKind.TRUNCATED, "cut by max_tokens (finish_reason length)"
            )
            entry["conversations"] = item.out
            entry["meta"] = meta
            self.store.write_error(item.row.id, entry, info)
        else:
            line = row_line(item.row.output_id, item.out, meta)
            self.store.write_row(item.row.id, line, info)
        self._t_last_done = time.monotonic()

    async def _failed(self, server: Server, item: WorkItem, rec: RequestRecord) -> None:
        d = self.dispatcher
        assert d is not None
        kind = rec.error_kind or ErrorKind.OTHER
        advice = retry_for(kind, rec.http_status)
        if kind.server_gone or (advice is Retry.PROBE and not await server.probe()):
            server.mark_down(f"{kind}: {rec.error_message}")
            item.losses += 1
            if item.losses > self.cfg.max_server_losses:
                self._give_up(item, f"a server went away {item.losses} times while generating it")
                return
            d.retry(item, 0.0)
            return
        if advice is Retry.NO:  # the request itself is the problem (a 4xx): retrying cannot help
            self._give_up(item, rec.error_message or f"HTTP {rec.http_status}")
            return
        item.attempts += 1
        if item.attempts > self.cfg.retries:
            self._give_up(item, rec.error_message or kind or "failed")
            return
        base = min(self.cfg.max_backoff, self.cfg.retry_backoff * 2 ** (item.attempts - 1))
        d.retry(item, base * random.uniform(0.5, 1.5))

    def _give_up(self, item: WorkItem, why: str) -> None:
        assert self.dispatcher is not None
        rec = item.last
        kind = (rec.error_kind if rec else None) or ErrorKind.OTHER
        entry = self._error_entry(item, kind, why)
        info = RowInfo(item.server, 0, 0)
        self.store.write_error(item.row.id, entry, info)
        self.dispatcher.done(item)

    def _error_entry(self, item: WorkItem, kind: ErrorKind, why: str) -> dict[str, Any]:
        rec = item.last
        return {
            "id": item.row.output_id,
            "line": item.row.line,
            "error_kind": kind,
            "error": why,
            "http_status": rec.http_status if rec else None,
            "attempts": item.attempts + 1,
            "server": item.server or None,
            "turns_done": item.turns,
            "failed_at": round(time.time(), 3),
        }

    def _write_bad(self, b: BadRow) -> None:
        entry = {
            "id": b.id,
            "line": b.line,
            "error_kind": ErrorKind.INVALID_INPUT,
            "error": b.describe(),
            "field": b.field,
            "raw": b.raw,
            "failed_at": round(time.time(), 3),
        }
        self.store.write_error(b.id if b.id is not None else f"line:{b.line}", entry)

    def _on_durable(self, kind: str, items: list[tuple[str, Any]]) -> None:
        if self.progress is not None:
            self.progress.on_durable(kind, items)

    # -- background -----------------------------------------------------------------------

    def server_states(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [
            {
                "url": s.name,
                "state": s.state,
                "down_s": None if s.down_since is None else round(now - s.down_since, 1),
                "in_flight": s.in_flight,
                "concurrency": s.concurrency,
                "downs": s.downs,
            }
            for s in self.servers
        ]

    async def _ticker(self) -> None:
        assert self.progress is not None
        while True:
            self.progress.sample()
            self.listener.tick(self.progress.snapshot(self.server_states()))
            await asyncio.sleep(self.cfg.tick)

    async def _watchdog(self) -> None:
        """Stop the job when every server has been down for `down_timeout` seconds."""
        since: float | None = None
        while True:
            await asyncio.sleep(min(1.0, self.cfg.down_timeout / 4))
            if self.servers and all(not s.up for s in self.servers):
                since = since or time.monotonic()
                if time.monotonic() - since >= self.cfg.down_timeout:
                    self.listener.note(
                        f"every server has been down for {self.cfg.down_timeout:g} s: stopping",
                        "red",
                    )
                    self.request_stop("servers_down")
                    return
            else:
                since = None

    def _result(self, status: str, message: str, t0: float) -> JobResult:
        p = self.progress
        snap = p.snapshot(self.server_states()) if p else {}
        sending = (
            (self._t_last_done or 0) - self._t_first_send
            if self._t_first_send and self._t_last_done
            else 0.0
        )
        files = [str(f) for f in self.store.data_files()] if self.store.out.is_dir() else []
        return JobResult(
            status=status,
            message=message,
            model=self.model or None,
            total=p.total if p else 0,
            done=snap.get("done", 0),
            failed=snap.get("failed", 0),
            done_this_run=p.done if p else 0,
            failed_this_run=p.failed if p else 0,
            truncated_this_run=p.truncated if p else 0,
            tokens=p.all.tokens if p else 0,
            thinking_tokens=p.all.thinking if p else 0,
            elapsed_s=time.monotonic() - t0,
            sending_s=sending,
            files=files,
            errors_file=str(self.store.errors_path) if self.store.errors_path.exists() else None,
            snapshot=snap,
        )


async def run_job(cfg: JobConfig, listener: Listener | None = None) -> JobResult:
    job = Job(cfg, listener)
    result = await job.run()
    if listener is not None:
        listener.finished(result)
    return result
