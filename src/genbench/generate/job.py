"""One run of `genbench generate`: rows from the input, through `load`, to the store.

The job reads the output directory and the input (local work, before any request),
checks the servers, then runs the rows through the same load as every other command
(pipeline.py says what happens to a failed request). Every request it sends is logged,
failed attempts and retries included, to `.genbench/requests.jsonl`, and the live rates
and the ETA are computed from those records (progress.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from genbench import __version__, fmt
from genbench.check.preflight import CheckReport
from genbench.check.router import ROUTER_KINDS
from genbench.engines.supervisor import Supervisor
from genbench.errors import ErrorKind, ServerDown
from genbench.generate.asked import ask_servers
from genbench.generate.conversation import Conversation
from genbench.generate.decided import Decided
from genbench.generate.ending import Failures, Unanswered, ending
from genbench.generate.ending import rows as row_count
from genbench.generate.hidden import Capture, clear_incoming
from genbench.generate.input.modes import Answers, DataFormat, OnTruncated
from genbench.generate.input.reader import BadRow, InputScan, iter_rows
from genbench.generate.input.tool_probe import probe_tools
from genbench.generate.jobconfig import JobConfig
from genbench.generate.listeners import Listeners, RunNotes
from genbench.generate.outcome import JobResult, Listener
from genbench.generate.pipeline import Retries, error_entry, invalid_entry, row_load
from genbench.generate.progress import Progress, ServerState
from genbench.generate.request_hash import RequestCheck, request_hash, to_hex
from genbench.generate.resumed import earlier_time
from genbench.generate.serve import start_engines
from genbench.generate.servers import Server
from genbench.generate.store import scheme
from genbench.generate.store.batch import write_answers
from genbench.generate.store.durable import output_errors
from genbench.generate.store.resume import prepare
from genbench.generate.store.runlog import read_runs
from genbench.generate.store.writer import Existing, Store
from genbench.generate.tuner import AutoConcurrency, Change
from genbench.load import Load
from genbench.records import RequestRecord
from genbench.selfcheck import LoopMonitor
from genbench.transport import acceptance
from genbench.transport.client import Client, Timeouts
from genbench.transport.eventloop import graceful
from genbench.transport.thinking import ThinkMode, ThinkState


class Job:
    """One run of `genbench generate`; also the sink its finished rows go to."""

    def __init__(self, cfg: JobConfig, listener: Listener | None = None) -> None:
        self.cfg = cfg
        self.recipe = cfg.recipe  # read-only: built once, not per row
        self.decided = Decided.of(cfg)  # what the config implies, worked out once
        # who hears the job, and the run notes every job leaves for its report (runs.jsonl)
        tag = self.decided.files_tag
        self.listener = Listeners(listener or Listener(), RunNotes(cfg.output, tag))
        self.store = Store(
            cfg.output,
            shard_tag=tag,
            fmt=cfg.fmt,
            part_bytes=cfg.part_bytes,
            sync_interval=cfg.sync_interval,
            on_durable=self._on_durable,
        )
        self.servers: list[Server] = []
        self.think: dict[ThinkMode, ThinkState] = {}  # shared by the servers with that dialect
        self.progress: Progress | None = None
        self.model = cfg.model or ""
        self.load: Load | None = None
        self._stops = 0
        self.stop_signal: int | None = None  # the operator's, when one stopped the job
        self.no_server: str | None = None  # why nothing can run any more (engines given up)
        self._t_first_send: float | None = None
        self._t_last_done: float | None = None
        self.check: RequestCheck | None = None
        self.failures = Failures()  # this run's failed rows, by kind (ending.py)
        self._chunks = 0  # the stream's chunks received: the client's load, as run counts it
        # genbench's own process while it sent (selfcheck.SelfCheck.to_dict); {} before
        self.client: dict[str, Any] = {}
        self.unanswered = Unanswered()  # rows written without an answer, or without ids
        self.engines: Supervisor | None = None  # --serve: the engines this job started
        spec = cfg.capture  # --hidden-states: each turn's states, taken as it is answered
        self.capture = None if spec is None else Capture.of(self.store.layout, spec)
        self.auto: AutoConcurrency | None = None  # -c auto: the servers' tuners

    # -- preparation ----------------------------------------------------------------------

    def _make_servers(self, reports: list[CheckReport]) -> None:
        cfg = self.cfg
        timeouts = Timeouts(connect=cfg.connect_timeout, read=cfg.timeout)
        # one model: a server not up yet speaks the dialect the others showed
        seen = next((r.think_mode() for r in reports if r.ok), None)
        ids_seen = next((r.token_ids for r in reports if r.ok and r.token_ids), None)
        if self.decided.ids_said:  # flags.py asked for none: say so, not "rows keep the ids"
            self.listener.note(self.decided.ids_said)
        for spec, ep, rep in zip(cfg.servers, self.decided.endpoints, reports, strict=True):
            mode = rep.think_mode() if rep.ok else seen
            think = self.think.setdefault(mode, ThinkState(mode)) if mode is not None else None
            # the protocol-level transport `run` uses: fewer CPU-seconds per chunk
            client = Client(
                ep, self.model, timeouts=timeouts, keep_text=True, think=think,
                keep_raw=cfg.keep_raw, token_ids=rep.token_ids if rep.ok else ids_seen,
                accept=acceptance.ask_for(rep.server.kind),
                hidden_states=self.capture.kv_params() if self.capture else False,
            )  # fmt: skip
            router = rep.server.kind in ROUTER_KINDS
            srv = Server(
                ep, client, spec.concurrency, on_change=self._server_changed, router=router
            )
            self.servers.append(srv)
            if not rep.ok:
                self.listener.note(f"{ep.base_url} is not answering yet: {rep.diagnosis}", "yellow")

    def engine_down(self, url: str, line: str) -> None:
        """An engine this job started died or hangs: its server is out (its rows in flight
        go back to the queue as they fail) until the restarted engine answers /health."""
        for s in self.servers:
            if s.name == url:
                s.mark_down(line)

    def engines_gave_up(self) -> None:
        """An engine is out of restarts. When every one is, and the job has no other server
        (a --url server may come back; an engine given up will not), nothing can run: the
        job ends now, not after --down-timeout."""
        line = self.engines.all_gave_up() if self.engines is not None else None
        engine_urls = {c.url for c in self.cfg.engines}
        if line is None or any(s.name not in engine_urls for s in self.servers):
            return
        self.no_server = line
        self.listener.note(f"{line}: stopping, nothing can run", "red")
        if self.load is not None:
            self.load.stop(now=True)

    def _server_changed(self, server: Server, what: str) -> None:
        poll = "polling its /health" + (" and a tiny request" if server.router else "")
        if server.up:
            self.listener.note(f"{server.name} is {what}", "green")
        elif self._stops:  # stopping (Ctrl-C, SIGTERM, a requeue): no wait to announce
            self.listener.note(f"{server.name} is down ({what})", "yellow")
        elif any(s.up for s in self.servers):
            self.listener.note(
                f"{server.name} is down ({what}): its rows go to the other servers; {poll}",
                "yellow",
            )
        else:
            others = "no other server is up" if len(self.servers) > 1 else "it is the only one"
            self.listener.note(
                f"{server.name} is down ({what}) and {others}: waiting, {poll}; "
                f"gives up after {fmt.duration(self.cfg.down_timeout)} with every server down",
                "red",
            )

    # -- the job --------------------------------------------------------------------------

    async def run(self, handle_signals: bool = True) -> JobResult:
        """The whole run, holding the output directory's lock (lock.py) from before the
        first look at it to the end: a second process is refused before any request."""
        self.store.check_directory()
        self.store.lock.acquire()
        try:
            with output_errors(self.store.out):  # the directory's one shard scheme
                scheme.settle(self.store.out, self.decided.shard_count, self.decided.shard_asked)
            result = await self._run(handle_signals)
        finally:
            if self.engines is not None:  # nothing genbench started outlives it
                self.engines.close()
            self.store.lock.release()
        self.listener.finished(result)  # the caller's listener, and the job's run notes
        # --answers both|batch: the Batch output of every run, interrupted ones included
        if left := write_answers(self.store.layout, self.cfg.answers):
            what = "output" if self.cfg.answers == Answers.BOTH else "errors"
            self.listener.note(f"batch {what}: {left[0]} ({fmt.counted(left[1], 'line')})")
        return result

    async def _run(self, handle_signals: bool) -> JobResult:
        t0 = time.monotonic()
        cfg = self.cfg
        found = prepare(cfg, self.store, self.listener)  # local work: fails before any request
        existing, res, self.check = found.existing, found.scan, found.check
        self._announce(existing, res)
        if not res.todo and not res.bad:
            self.progress = Progress(res.total, res.done, res.failed, [])
            if cfg.fmt == DataFormat.PARQUET and existing.jsonl_parts:
                await self.store.close(convert_all=True)
            why = "every row is already done" if res.rows else "the input has no rows"
            return self._result("nothing_to_do", why, t0)
        await start_engines(self)
        reports, self.model = await ask_servers(cfg, self.decided.endpoints,
                                                self.listener.note, self.capture)  # fmt: skip
        if res.tools is not None:  # agentic rows: a server that refuses tools stops us now
            ep = next(e for e, r in zip(self.decided.endpoints, reports, strict=True) if r.ok)
            await probe_tools(ep, self.model, *res.tools, timeout=min(cfg.timeout, 120.0))
        self._begin(existing, res, reports)
        status = await self._send(handle_signals)
        if self.capture is not None and cfg.engines:  # what is left there, no row will take
            clear_incoming(self.store.layout.hs_incoming)
        done = self.progress.done if self.progress else 0
        status, message = ending(
            status, self.failures, done, res.failed, res.left, res.rows, cfg.down_timeout,
            self.unanswered,
        )  # fmt: skip
        if status == "engines_gone" and self.no_server:
            message = self.no_server  # each engine's last death, in the one line
        result = self._result(status, message, t0)
        if self.engines is not None:  # in the end block, beside the tokens it explains
            result.engines_line = self.engines.summary() or ""
        return result

    def _announce(self, existing: Existing, res: InputScan) -> None:
        cfg = self.cfg
        self.listener.planned(
            {
                "input": str(cfg.input),
                "output": str(cfg.output),
                "rows": res.rows,
                "done_before": res.done,
                "failed_before": res.failed,
                "todo": len(res.todo),
                "invalid": len(res.bad),
                "derived_ids": res.derived,
                "shards_found": len(existing.parts),
                "shard": self.decided.files_tag,
                "left": res.left,  # --limit: the input's rows after the ones it took
                # the earlier runs' time, where their notes account for the rows done before
                "earlier_s": earlier_time(read_runs(cfg.output, self.decided.files_tag), res.done),
            }
        )
        before = (existing.job or {}).get("input")
        if before and before not in (str(cfg.input), self.decided.input):
            self.listener.note(
                f"the last run into this output read {before}; rows are matched by id, so only "
                "ids also in this input count as done",
                "yellow",
            )

    def _begin(self, existing: Existing, res: InputScan, reports: list[CheckReport]) -> None:
        """Open the store, start the servers and build the load (nothing sent yet)."""
        cfg = self.cfg
        job = {
            **cfg.fingerprint(self.model),
            "input": self.decided.input,
            "shard": self.decided.share,
            "genbench_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        self.store.check_job(existing, job, cfg.force)
        with output_errors(self.store.out):
            self.store.begin(existing, job)
            if self.capture is not None:
                self.capture.write_layers(self.model)
        self._make_servers(reports)
        with output_errors(self.store.out):
            self.store.open_log(
                {  # what most records share: written once, left out of each line
                    "phase": "generate",
                    "server": self.servers[0].name,
                    "model": self.model,
                    "http_status": 200,
                    "finish_reason": "stop",
                    "extra": {"outcome": "done", "turn": 0},
                    "clock": time.time() - time.perf_counter(),
                }
            )
        self.progress = Progress(res.total, res.done, res.failed, [s.name for s in self.servers])
        rows = iter_rows(
            cfg.input, res.todo, res.bad_lines, shard=cfg.shard, last_line=res.last_line,
            salt=self.check.salt if self.check else None,
        )  # fmt: skip
        self.store.expect(res.todo)  # shared with the input pass: it shrinks as rows finish
        for b in res.bad:
            self._write_bad(b)
        retries = Retries(cfg.retries, cfg.retry_backoff, cfg.max_backoff, cfg.max_server_losses)
        self.load = row_load(
            list(self.servers),
            rows,
            self,
            recipe=self.recipe,
            retries=retries,
            on_bad=self._write_bad,
            on_record=self._on_record,
            keep_records=False,
            down_timeout=cfg.down_timeout,
            drain=cfg.drain,
            capture=self.capture,
        )
        self.progress.sending = self.load.send_times  # the requests in flight: the ETA's tail
        for s, rep in zip(self.servers, reports, strict=True):
            if not rep.ok:
                s.mark_down(rep.diagnosis or "not answering")
        specs = zip(self.servers, cfg.servers, strict=True)
        if auto := {s.name: spec.concurrency for s, spec in specs if spec.auto}:  # -c auto
            tokens = cfg.params.get("max_tokens")
            self.auto = AutoConcurrency(self.servers, auto, tokens, self._retuned)
        if self.engines is not None:
            self.progress.engines = self.engines
            self.engines.watch()

    async def _send(self, handle_signals: bool) -> str:
        """Run the load beside the store's syncer and the progress ticker; the status. A
        signal stops sending and drains the rows in flight (a second: at once)."""
        with graceful(self.request_stop) if handle_signals else contextlib.nullcontext():
            return await self._sending()

    async def _sending(self) -> str:
        assert self.load is not None
        loop = asyncio.get_running_loop()
        syncer = loop.create_task(self.store.run_syncer())
        syncer.add_done_callback(self._syncer_ended)  # a full disk stops the job at once
        ticker = loop.create_task(self._ticker())
        tuning = loop.create_task(self.auto.run(self.load)) if self.auto else ticker
        status = "complete"
        monitor = LoopMonitor()  # genbench's own process: its CPU and its event loop's lag
        monitor.start()
        try:
            await self.load.run()
            if syncer.done() and not syncer.cancelled() and syncer.exception() is not None:
                raise syncer.exception()  # type: ignore[misc]
            if self.no_server is not None and not self.load.queue.complete:
                status = "engines_gone"
            elif self.load.stopped.is_set() or not self.load.queue.complete:
                status = "interrupted"
        except ServerDown:
            self.listener.note(
                f"every server has been down for {self.cfg.down_timeout:g} s: stopping", "red"
            )
            status = "servers_down"
        finally:
            self.client = (await monitor.stop(self._chunks)).to_dict()
            if self.client["client_bound"]:
                self.listener.note(
                    "genbench's own process was busy while it sent ("
                    + ", ".join(self.client["reasons"])
                    + "): the job may have run at its pace, not the servers'; a host with "
                    "more cores, or fewer streams a process (--shard), lifts it",
                    "yellow",
                )
            ticker.cancel()
            tuning.cancel()
            try:
                await self.store.close(convert_all=status == "complete")
            finally:
                syncer.cancel()
                await asyncio.gather(syncer, ticker, tuning, return_exceptions=True)
                for s in self.servers:
                    await s.close()
        return status

    def _syncer_ended(self, task: asyncio.Task[None]) -> None:
        """The syncer ends only by failing (a write refused): no more rows are sent, as
        none could be kept; the job ends with its error (exit 12)."""
        if not task.cancelled() and task.exception() is not None and self.load is not None:
            self.load.stop(now=True)

    def request_stop(self, sig: int = signal.SIGINT, count: int = 1) -> None:
        """Ctrl-C (or SIGTERM): stop sending, let in-flight rows finish for `drain` s.
        Twice: stop now."""
        self._stops += 1
        self.stop_signal = self.stop_signal or sig
        if self.load is None:
            return
        if self._stops == 1 and count == 1:
            n = sum(s.in_flight for s in self.servers)
            again = "Ctrl-C again" if sig == signal.SIGINT else "a second SIGTERM"
            if n:
                self.listener.note(
                    f"stopping: waiting up to {self.cfg.drain:g} s for {row_count(n)} in flight "
                    f"({again} to stop now)",
                    "yellow",
                )
            self.load.stop()
        else:
            self.load.stop(now=True)

    # -- where rows go (the pipeline's sink) ----------------------------------------------

    def finish(self, conv: Conversation) -> str | None:
        meta = conv.meta(self.model)
        first = self.unanswered.stopped_by is None
        if self.unanswered.without_ids(conv.ids, conv.server, self.cfg.token_ids):  # `on`: not kept
            if first and self.load is not None:  # and the job stops (ending.py)
                self.listener.note(f"{conv.server} answered without token ids (--token-ids "
                                   "on): stopping; rows without ids are not kept", "red")
                self.load.stop()
            return self.store.take_shortage()
        if conv.truncated and self.cfg.on_truncated == OnTruncated.ERROR:
            why = "cut by max_tokens (finish_reason length)"
            entry = error_entry(conv, ErrorKind.TRUNCATED, why)
            self.failures.add(ErrorKind.TRUNCATED, why)
            entry["conversations"] = conv.out
            entry["meta"] = meta.to_json()
            self.store.write_error(conv.row.id, entry, meta)
        else:
            req_hash = request_hash(conv.row, self.recipe)
            row = conv.done(replace(meta, request=to_hex(req_hash)))
            self.store.put(conv.row.id, row, (req_hash, conv.row.src))
            self.unanswered.ran_out += bool(getattr(conv, "ran_out", False))
            self.unanswered.call_cut += bool(getattr(conv, "cut", False))
        self._t_last_done = time.perf_counter()
        return self.store.take_shortage()

    def give_up(self, conv: Conversation, kind: ErrorKind, why: str) -> str | None:
        if self.capture is not None:  # the states of its turns answered: no row holds them
            self.capture.drop(conv.out)
        entry = error_entry(conv, kind, why)
        self.failures.add(kind, why)
        self.store.write_error(conv.row.id, entry)
        return self.store.take_shortage()

    def note(self, text: str, style: str = "") -> None:
        self.listener.note(text, style)

    def _write_bad(self, b: BadRow) -> None:
        entry = invalid_entry(b)
        self.failures.add(ErrorKind.INVALID_INPUT, entry["error"])
        self.store.write_error(b.id if b.id is not None else f"line:{b.line}", entry)

    def _on_record(self, rec: RequestRecord) -> None:
        self._chunks += rec.chunk_count
        if self._t_first_send is None or rec.t_send < self._t_first_send:
            self._t_first_send = rec.t_send
        self.store.log_request(rec)
        if self.auto is not None:
            self.auto.record(rec)
        if self.progress is not None:
            self.progress.on_record(rec)
        self.listener.record(rec)

    def _retuned(self, change: Change) -> None:
        """-c auto changed a server's concurrency: said, and the ETA's rate from now on."""
        self.listener.note(change.line(), "cyan")
        if self.progress is not None:
            self.progress.rate_changed()

    def _on_durable(self, kind: str, items: list[tuple[str, Any]]) -> None:
        if self.progress is not None:
            self.progress.on_durable(kind, items)

    # -- progress -------------------------------------------------------------------------

    def server_states(self) -> list[ServerState]:
        now = time.monotonic()
        return [
            ServerState(s.name, s.state, None if s.down_since is None else
                        round(now - s.down_since, 1), s.in_flight, s.streams, s.downs)
            for s in self.servers
        ]  # fmt: skip

    async def _ticker(self) -> None:
        assert self.progress is not None
        while True:
            self.listener.tick(self.progress.snapshot(self.server_states()))
            await asyncio.sleep(self.cfg.tick)

    def _result(self, status: str, message: str, t0: float) -> JobResult:
        p = self.progress
        snap = p.snapshot(self.server_states()) if p else None
        first, last = self._t_first_send, self._t_last_done
        files = [str(f) for f in self.store.data_files()] if self.store.out.is_dir() else []
        parquet = self.cfg.fmt == DataFormat.PARQUET  # a part JSONL still: converted at the end
        open_parts = [f for f in files if f.endswith(".jsonl")] if parquet else []
        return JobResult(
            status=status, message=message, model=self.model or None, total=p.total if p else 0,
            done=snap.done if snap else 0, failed=snap.failed if snap else 0,
            done_this_run=p.done if p else 0, failed_this_run=p.failed if p else 0,
            truncated_this_run=p.truncated if p else 0, tokens=p.tokens if p else 0,
            thinking_tokens=p.thinking if p else 0, estimated_rows=p.estimated if p else 0,
            tokenized_rows=p.tokenized if p else 0,
            thinking=next((t.describe() for t in self.think.values() if t.learned_from), ""),
            elapsed_s=time.monotonic() - t0,
            sending_s=last - first if first is not None and last is not None else 0.0,
            files=files,
            unconverted=open_parts,
            errors_file=str(self.store.errors_path) if self.store.errors_path.exists() else None,
            snapshot=snap, failure=self.failures.most_common(),
            unanswered=self.unanswered.to_dict(), signal=self.stop_signal,
            ids_line=self.unanswered.ids_line(p.done if p else 0),
            concurrency=[c.to_dict() for c in self.auto.changes] if self.auto else [],
            client=self.client,
        )  # fmt: skip


async def run_job(cfg: JobConfig, listener: Listener | None = None) -> JobResult:
    return await Job(cfg, listener).run()
