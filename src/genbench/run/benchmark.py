"""`genbench run`: preflight, warm-up, single-stream by output length, concurrency sweep.

Each phase's records go to requests.jsonl as they complete; result.json is
rewritten after every phase, so a crash, a dead server or Ctrl-C keeps all
that was measured. The order of phases and what each measures is documented
in docs/results.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genbench.check.preflight import CheckReport, CheckRetries, preflight
from genbench.check.server_metrics import (
    MetricsScraper,
    compare_tokens,
    scraper_for,
    server_metrics_summary,
)
from genbench.errors import GenbenchError, UsageError
from genbench.fmt import counted
from genbench.load import PhaseRun, ServerDown, run_phase
from genbench.records import RecordWriter, RequestRecord
from genbench.run.knee import CLIMB_START, OVERLOAD_STATUSES, level_of, verdict
from genbench.run.prompt_file import PromptFile, cycle_for, read_prompt_file
from genbench.run.readings import unstable_note
from genbench.run.result import (
    REQUESTS_FILE,
    RESULT_FILE,
    SCHEMA,
    SCHEMA_VERSION,
    document_head,
    prepare_out_dir,
    write_json_atomic,
)
from genbench.run.runconfig import SHAPES, RunConfig
from genbench.run.thinking_count import note_thinking
from genbench.run.workload import (
    BUILTIN_PROMPTS,
    WARMUP_PROMPT,
    forced_length_params,
    messages,
)
from genbench.selfcheck import LoopMonitor
from genbench.stats import PhaseSummary, summarize, sweep_of
from genbench.transport import acceptance
from genbench.transport.client import ChatRequest, Client, Timeouts
from genbench.transport.endpoint import Endpoint
from genbench.transport.thinking import SEPARATE, ThinkMode, ThinkState
from genbench.transport.thinking_count import ThinkingCounter


@dataclass
class Phase:
    name: str
    kind: str  # warmup | single | burst | sustained
    concurrency: int
    max_tokens: int
    summary: PhaseSummary
    length_forced: bool | None = None
    started_at: float = 0.0
    notes: list[str] = field(default_factory=list)
    server_metrics: dict[str, Any] | None = None
    client: dict[str, Any] | None = None  # the client's self-check (selfcheck.SelfCheck)
    refused: int = 0  # answers 429/503: the server said it was full (run.knee)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["summary"] = self.summary.to_dict()
        return d


# the test request's retries: generate's defaults (a run's own requests are not retried)
RUN_RETRIES = CheckRetries(3, why=": a server error once is not a verdict on the server")


class RunListener:
    """What the console (or a test) hears about progress. Default: nothing."""

    def phase_started(self, name: str, total: int | None, duration: float | None) -> None: ...
    def record(self, rec: RequestRecord) -> None: ...
    def phase_done(self, phase: Phase) -> None: ...
    def note(self, text: str) -> None: ...
    def say(self, line: str) -> None: ...  # a line of news (console markup)
    def stopped(self) -> None: ...  # the run ended or was interrupted: stop any live display


class RunState:
    """The result document being built, written to disk after every phase."""

    def __init__(self, out: Path, cfg: RunConfig, target: dict[str, Any]) -> None:
        self.out = out
        self.doc: dict[str, Any] = {
            **document_head(SCHEMA, SCHEMA_VERSION),
            "status": "running",
            "status_message": None,
            "target": target,
            "config": asdict(cfg),
            "workload": {
                "prompts": "builtin",
                "prompt_names": [n for n, _ in BUILTIN_PROMPTS],
                "natural_length": cfg.natural,
            },
            "phases": [],
            "single_stream": {},
            "sweep": {},
        }
        self.phases: list[Phase] = []
        self.prompts: PromptFile | None = None  # --input: its requests, not the built-in ones

    def add(self, phase: Phase) -> None:
        self.phases.append(phase)
        self.doc["phases"].append(phase.to_dict())
        self._derive()
        self.save()

    def finish(self, status: str, message: str | None = None) -> None:
        self.doc["status"], self.doc["status_message"] = status, message
        self.doc["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        self.save()

    def save(self) -> None:
        write_json_atomic(self.out / RESULT_FILE, self.doc)

    def _derive(self) -> None:
        """The headline numbers: single-stream rate by length, sweep tables, knees."""
        single: dict[str, Any] = {}
        for p in self.phases:
            if p.kind == "single":
                single[str(p.max_tokens)] = {
                    "decode_tps": p.summary.decode_tps.get("mean"),
                    "e2e_tps": p.summary.output_tps,
                    "mean_output_tokens": p.summary.output_len.get("mean"),
                    "ttft_s": p.summary.ttft_s.get("mean"),
                }
        rates = [v["decode_tps"] for v in single.values() if v["decode_tps"]]
        self.doc["single_stream"] = {
            "by_length": single,
            "mean_decode_tps": sum(rates) / len(rates) if rates else None,
        }
        sweep: dict[str, Any] = {}
        for shape in SHAPES:
            rows = [p for p in self.phases if p.kind == shape]
            if not rows:
                continue
            sweep[shape] = sweep_of(shape, rows)
        self.doc["sweep"] = sweep
        self.add_climb()

    def add_climb(self) -> None:
        """With a climb, its knee is the sweep's one knee (not a second reading of it)."""
        climb, sweep = self.doc.get("climb"), self.doc["sweep"]
        if climb is None or not sweep:
            return
        shape = "sustained" if "sustained" in sweep else "burst"
        sweep[shape]["knee"] = climb["knee"]
        sweep[shape].pop("knee_unstable", None)


def check_context(cfg: RunConfig, check: CheckReport) -> None:
    mml = check.server.max_model_len
    longest = max(
        [*cfg.lengths, cfg.sweep_tokens] if "single" not in cfg.skip else [cfg.sweep_tokens]
    )
    if mml and longest + 512 > mml:
        raise UsageError(
            f"the server's context window is {mml} tokens, too small for output length "
            f"{longest} plus the prompt: lower --lengths / --sweep-tokens"
        )


class Runner:
    def __init__(
        self,
        ep: Endpoint,
        model: str,
        cfg: RunConfig,
        state: RunState,
        server_kind: str | None,
        listener: RunListener,
        metrics: MetricsScraper | None = None,
        think: ThinkMode | None = None,
    ) -> None:
        self.ep, self.model, self.cfg, self.state = ep, model, cfg, state
        self.kind = server_kind
        self.listener = listener
        self.writer = RecordWriter(state.out / REQUESTS_FILE)
        self.metrics = metrics
        # check's dialect, or, where it saw none, the one the replies show
        # (genbench.transport.thinking)
        self.think = ThinkState(think) if think and think.dialect != SEPARATE else None
        self.mode = think
        self.counter: ThinkingCounter | None = None  # set in execute: thinking it may count

    def _params(self, max_tokens: int, force: bool) -> dict[str, Any]:
        params: dict[str, Any] = dict(self.cfg.extra_body)
        if self.cfg.temperature is not None:  # None: the server's, as plan and generate
            params = {"temperature": self.cfg.temperature, **params}
        if self.cfg.thinking is not None:
            kwargs = params.get("chat_template_kwargs")
            kwargs = dict(kwargs) if isinstance(kwargs, dict) else {}
            params["chat_template_kwargs"] = {**kwargs, "enable_thinking": self.cfg.thinking}
        if force:
            params.update(forced_length_params(self.kind, max_tokens))
        return params

    async def _phase(
        self,
        client: Client,
        name: str,
        kind: str,
        requests: Iterator[ChatRequest],
        concurrency: int,
        max_tokens: int,
        *,
        max_requests: int | None,
        duration: float | None = None,
        force: bool = False,
    ) -> Phase:
        self.listener.phase_started(name, max_requests if not duration else None, duration)

        seen: list[RequestRecord] = []
        held: list[RequestRecord] = []  # split thinking to count: written once counted

        def on_record(rec: RequestRecord) -> None:
            seen.append(rec)
            if self.counter is not None and self.counter.wants(rec):
                held.append(rec)
            else:
                rec.text = rec.reasoning = None  # kept only to split and count thinking
                self.writer.write(rec)
                if self.counter is not None:
                    self.counter.sources.add(rec.reasoning_source)
            self.listener.record(rec)

        before = await self.metrics.scrape() if self.metrics else None
        if self.metrics:
            self.metrics.start_sampling()
        monitor = LoopMonitor()
        monitor.start()
        started = time.time()
        try:
            run = await run_phase(
                client,
                requests,
                concurrency=concurrency,
                phase=name,
                max_requests=max_requests,
                duration=duration,
                on_record=on_record,
            )
        except (ServerDown, asyncio.CancelledError) as e:
            # keep what the interrupted phase measured
            self._write_counted(held)
            await monitor.stop(0)
            if self.metrics:
                await self.metrics.stop_sampling()
            phase = Phase(name, kind, concurrency, max_tokens, summarize(seen), started_at=started)
            phase.notes.append("phase interrupted")
            self.state.add(phase)
            raise e
        if self.counter is not None:
            await self.counter.count(held)
            self._write_counted(held)
        phase = self._summarize(run, name, kind, concurrency, max_tokens, force, started)
        phase.refused = sum(r.http_status in OVERLOAD_STATUSES for r in run.records)
        chunks = sum(len(r.chunk_offsets) for r in run.records)
        phase.client = (await monitor.stop(chunks)).to_dict()
        if phase.client["client_bound"]:
            phase.notes.append(
                "figures may be client-bound: "
                + ", ".join(phase.client["reasons"])
                + " (see docs/results.md, client self-check)"
            )
        if self.metrics:
            peaks = await self.metrics.stop_sampling()
            after = await self.metrics.scrape()
            if before is not None and after is not None:
                phase.server_metrics = server_metrics_summary(
                    before, after, peaks, self.metrics.gauge_sums
                )
                phase.notes.extend(compare_tokens(phase.summary, phase.server_metrics))
        self.state.add(phase)
        self.listener.phase_done(phase)
        return phase

    def _write_counted(self, records: list[RequestRecord]) -> None:
        """Records held for their thinking to be counted: written now, without the text
        that was kept only to count it."""
        if self.counter is None:
            return
        for rec in records:
            rec.text = rec.reasoning = None
            self.writer.write(rec)
            self.counter.sources.add(rec.reasoning_source)
        note_thinking(self.state.doc["thinking"], self.think, self.counter)

    def _summarize(
        self,
        run: PhaseRun,
        name: str,
        kind: str,
        concurrency: int,
        max_tokens: int,
        force: bool,
        started: float,
    ) -> Phase:
        summary = summarize(
            run.records,
            concurrency=concurrency,
            sustained=kind == "sustained",
            stop_sending_at=run.stop_sending_at,
        )
        phase = Phase(name, kind, concurrency, max_tokens, summary, started_at=started)
        ok = [r for r in run.records if r.ok]
        if force and ok:
            lens = {r.completion_tokens for r in ok}
            phase.length_forced = lens == {max_tokens}
            if not phase.length_forced:
                lo, hi = min(x or 0 for x in lens), max(x or 0 for x in lens)
                phase.notes.append(
                    f"output length not forced: asked {max_tokens}, got {lo}–{hi} "
                    "tokens (the server ignores ignore_eos?)"
                )
        if kind == "sustained" and summary.steady_stable is False:
            phase.notes.append(unstable_note(summary.steady_halves_tps))
        if kind == "sustained" and summary.steady_tps is None and ok:
            phase.notes.append("no steady window: too few requests per slot to measure one")
        if summary.failed:
            phase.notes.append(
                f"{summary.failed} of {counted(summary.requests, 'request')} failed: "
                + ", ".join(f"{k} ×{v}" for k, v in summary.errors.items())
            )
        return phase

    async def execute(self) -> None:
        cfg = self.cfg
        timeouts = Timeouts(connect=10.0, read=cfg.timeout, total=None)
        # one pool for the load and the /metrics scraper
        pool = self.metrics.pool if self.metrics is not None else None
        think, keep = self.think, self.mode is not None  # text kept to split and count
        client = Client(
            self.ep, self.model, timeouts=timeouts, session=pool, think=think, keep_text=keep,
            accept=acceptance.ask_for(self.kind),
        )  # fmt: skip
        if keep:  # thinking the server did not count, counted by its /tokenize
            self.counter = ThinkingCounter(client.pool, self.ep, self.model)
        try:
            if cfg.warmup and "warmup" not in cfg.skip:
                n = cfg.warmup_tokens
                reqs = iter([ChatRequest(f"warmup-{i}", messages(WARMUP_PROMPT), n,
                                         self._params(n, force=False)) for i in range(cfg.warmup)])
                await self._phase(client, "warmup", "warmup", reqs, 1, n, max_requests=cfg.warmup)
            force = not cfg.natural
            if "single" not in cfg.skip:
                for n in cfg.lengths:
                    reqs = cycle_for(self.state.prompts, f"single{n}", n, self._params(n, force))
                    await self._phase(client, f"single-{n}", "single", reqs, 1, n,
                                      max_requests=cfg.prompts_per_length, force=force)  # fmt: skip
            if "sweep" not in cfg.skip:
                await self._sweep(client, force)
        finally:
            await client.close()
            self.writer.close()

    async def _sweep(self, client: Client, force: bool) -> None:
        """The fixed list's levels, or (no -c) the climb: doubling until the knee (knee.py)."""
        cfg = self.cfg
        if not cfg.climb:
            for c in cfg.concurrency:
                await self._level(client, c, force)
            return
        levels, c = [], CLIMB_START
        while True:
            phase = await self._level(client, c, force)
            levels.append(level_of(phase, phase.refused))
            if (stop := verdict(levels, cfg.climb_max)) is not None:
                self.state.doc["climb"] = stop.to_dict()
                self.state.add_climb()
                self.state.save()  # the summary says where it stopped and why
                return
            c *= 2

    async def _level(self, client: Client, c: int, force: bool) -> Phase:
        """One level of the sweep, each shape asked; the phase its rate is read from
        (sustained where run, else burst)."""
        cfg, n = self.cfg, self.cfg.sweep_tokens
        phase = None
        if "burst" in cfg.shapes:
            reqs = cycle_for(self.state.prompts, f"burst{c}", n, self._params(n, force))
            phase = await self._phase(
                client, f"burst-c{c}", "burst", reqs, c, n, max_requests=c, force=force
            )
        if "sustained" in cfg.shapes:
            reqs = cycle_for(self.state.prompts, f"sustained{c}", n, self._params(n, force))
            total = None if cfg.duration else c * cfg.requests_per_slot
            phase = await self._phase(client, f"sustained-c{c}", "sustained", reqs, c, n,
                                      force=force, max_requests=total,
                                      duration=cfg.duration)  # fmt: skip
        assert phase is not None  # validate() keeps at least one shape
        return phase


async def execute_run(
    ep: Endpoint,
    model: str | None,
    cfg: RunConfig,
    out: Path,
    listener: RunListener,
    target_extra: dict[str, Any] | None = None,
    check_timeout: float = 300.0,
    doc_extra: dict[str, Any] | None = None,
) -> RunState:
    """Preflight, then every phase. Raises GenbenchError with the diagnosis when unfit.

    `doc_extra` adds top-level fields to result.json (a repeat's index, see execute_repeats)."""
    cfg.validate()
    prompts = read_prompt_file(Path(cfg.prompts)) if cfg.prompts else None  # before preflight
    think = {"think_tags": tuple(cfg.think_tags[:2]), "think_dialect": cfg.think_dialect}
    # a 5xx, 429 or timeout on the test request tried again, as generate's preflight does
    # (its defaults): one 500 does not end a run whose phases would carry on past it
    check = await preflight(ep, model, timeout=check_timeout, retries=RUN_RETRIES, **think)
    for n in (n for n in check.notes if n.startswith("test ")):
        listener.say(f"  [yellow]{n}[/]")
    if not check.ok:
        raise GenbenchError(f"preflight failed: {check.diagnosis}", check.exit_code)
    check_context(cfg, check)
    prepare_out_dir(out)
    target = {
        "url": ep.base_url,
        "model": check.model,
        "server": asdict(check.server),
        "check": check.to_dict(),
        **(target_extra or {}),
    }
    state = RunState(out, cfg, target)
    if prompts is not None:
        state.prompts, state.doc["workload"] = prompts, prompts.describe(cfg.natural)
    mode = check.think_mode()
    from_usage = "server usage" if mode.dialect == SEPARATE else None
    state.doc["thinking"] = {"dialect": mode.dialect, "tags": list(mode.tags),
                             "tokens_from": from_usage}  # fmt: skip
    state.doc.update(doc_extra or {})
    state.save()
    scraper = scraper_for(ep, cfg.metrics_urls, check.server.kind, check.server.details, target)
    runner = Runner(
        ep, check.model or "", cfg, state, check.server.kind, listener, scraper, think=mode
    )
    try:
        await runner.execute()
    except ServerDown as e:
        when = datetime.fromtimestamp(e.at_wall, UTC).isoformat(timespec="seconds")
        state.finish("server_down", f"{e} at {when}")
        raise GenbenchError(f"{e} at {when}; partial results in {out}", e.exit_code) from None
    except asyncio.CancelledError:
        state.finish("interrupted", "interrupted by the user")
        raise
    finally:
        await scraper.close()
    state.finish("complete")
    return state
