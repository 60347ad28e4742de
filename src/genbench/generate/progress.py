"""Progress of a generate job: durable counts, recent rates, and the ETA with its error bar.

Rows are counted done only when durable (see store.py): the display never shows a row
as done that a power loss could take back. Rates come from the job's request records,
through `stats.RecentRates`, the same records the request log holds: rows/s counts the
records that ended a row (written, or sent to the errors file); tokens/s the servers'
usage counts of the requests that ended in the window, thinking apart from answer.

The ETA and its range come from when the job's rows ended (`generate.eta`): a rate
between clusters of completions, so that the waves a server finishes requests in do not
swing it, over the last half of the job's history; its range the plan's model of the
server's speed (`generate.wander.SpeedWander`) fitted to stretches of that window and
carried over the time left. A job whose rate wanders (a shared host, longer prompts
later in the file, a server lost) shows a wider range than one whose rate only scatters,
which is the honest answer; and the range narrows as less is left to be wrong about.
While every server is down nothing can finish, and a rate over a window that is filling
with nothing would push the ETA up without bound: the ETA is held at its last value
instead, and the snapshot says how long every server has been down (`all_down_s`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from genbench.generate.eta import Completions, Eta, TailBudget, estimate
from genbench.records import RequestRecord
from genbench.rows import RowMeta
from genbench.stats import RecentRates

ROW_ENDS = ("done", "failed")  # a record's `outcome` when it ended its row
RATE_WINDOW, ETA_WINDOW = 30.0, 300.0  # seconds of records the rates, and the ETA, look at
__all__ = ["EngineState", "Eta", "Progress", "ServerState", "Snapshot"]


@dataclass(frozen=True, slots=True)
class ServerState:
    """A server as the job sees it (job.server_states), and its recent rates (progress)."""

    url: str
    state: str = "up"
    down_s: float | None = None  # None while up
    in_flight: int = 0
    concurrency: int = 0  # the streams it is given now
    downs: int = 0
    rows_per_s: float | None = None
    tokens_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class EngineState:
    """--serve: an engine the job started (Supervisor.states)."""

    engine: str
    url: str
    up: bool
    pid: int | None
    restarts: int
    restarts_by_cause: dict[str, int]
    down_s: float
    last_death: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The job at one tick: what the panel, the JSON progress line and the metrics server show.
    Rates and the ETA are None while there is too little to go on."""

    elapsed_s: float
    total: int
    done: int  # earlier runs included, as `failed`
    failed: int
    done_this_run: int
    failed_this_run: int
    truncated_this_run: int
    remaining: int
    rows_per_s: float | None
    tokens_per_s: float | None
    thinking_tokens_per_s: float | None
    answer_tokens_per_s: float | None
    tokens: int  # of this run's durable rows
    thinking_tokens: int
    eta_s: float | None
    eta_err_s: float | None
    eta_lo_s: float | None
    eta_hi_s: float | None
    all_down_s: float | None  # how long every server has been down (no ETA meanwhile)
    servers: tuple[ServerState, ...] = ()
    engines: tuple[EngineState, ...] | None = None  # --serve only
    engines_availability: float | None = None
    plan: dict[str, Any] | None = None  # --plan: the course against it (JobForecast.course)
    # why there is no ETA where it is not too little to go on: "no server" while every
    # server is down (nothing can run: a number would be a guess at when one comes back)
    eta_note: str | None = None
    # the seconds left at the slowest and the fastest speed the job has run at over a third
    # of its history (`generate.eta.seen`): the plan's verdict holds a miss to them
    eta_slow_s: float | None = None
    eta_fast_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """As the JSON progress line writes it: no engines without --serve, no plan without
        --plan, no eta_note while a server is up; the ETA at the speeds seen (the plan's
        verdict's, `plan`'s reach_lo_s and reach_hi_s) not apart."""
        d = asdict(self)
        del d["eta_slow_s"], d["eta_fast_s"]  # the verdict's: in `plan` as its reach_lo/hi_s
        if self.engines is None:
            del d["engines"], d["engines_availability"]
        if self.plan is None:
            del d["plan"]
        if self.eta_note is None:
            del d["eta_note"]
        return d


NO_SERVER = "no server"


class Progress:
    def __init__(
        self,
        total: int,
        done_before: int,
        failed_before: int,
        servers: list[str],
        *,
        clock: Any = time.perf_counter,
    ) -> None:
        self.total = total
        self.done_before, self.failed_before = done_before, failed_before
        self.done = self.failed = self.truncated = self.tokens = self.thinking = 0
        # rows whose thinking the server left out of usage: estimated, or counted by /tokenize
        self.estimated = self.tokenized = 0
        self.clock, self.t0 = clock, clock()
        self.recent = RecentRates(ETA_WINDOW, clock=clock)
        self.servers = {s: RecentRates(RATE_WINDOW, clock=clock) for s in servers}
        self.ended = Completions()  # when rows ended, for the ETA
        self.engines: Any = None  # --serve: the Supervisor (its availability scales the ETA)
        self.rate_since: float | None = None  # -c auto's last change: the ETA's rate from it
        # the send times of the requests in flight now (the job's Load.send_times): the tail
        self.sending: Callable[[], Iterable[float]] | None = None
        self.tail_budget = TailBudget()  # the tail's simulation, not at every tick
        self.streams = 0  # the up servers' concurrency at the last snapshot

    def on_durable(self, kind: str, items: list[tuple[str, Any]]) -> None:
        """Rows (or errors) now on disk, each with its meta (a failed one's: None)."""
        for _, m in items:
            if kind == "row":
                self.done += 1
            else:
                self.failed += 1
            if isinstance(m, RowMeta):
                self.truncated += bool(m.truncated)
                self.tokens += m.completion_tokens or 0
                self.thinking += m.reasoning_tokens or 0
                self.estimated += bool(m.tokens_estimated)
                # counted by the server's /tokenize: its thinking was left out of usage
                self.tokenized += m.reasoning_tokens_from == "tokenizer"

    def on_record(self, rec: RequestRecord) -> None:
        """A request of the job ended."""
        units = int(rec.extra.get("outcome") in ROW_ENDS)
        self.recent.add(rec, units)
        t_end = rec.t_end or self.clock()
        self.ended.add(t_end, units, t_end - rec.t_send if rec.t_send else None)
        if (per := self.servers.get(rec.server)) is not None:
            per.add(rec, units)

    def rate_changed(self) -> None:
        """The servers' concurrency changed: the ETA's rate is the new one's once it shows."""
        self.rate_since = self.clock()

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.done_before - self.failed_before - self.done - self.failed)

    def eta(self) -> tuple[float, float | None] | None:
        """(seconds left, half their 95% range) or None while there is too little to go on."""
        e = self.eta_range()
        return None if e is None else (e.seconds, e.err_s)

    def eta_range(self) -> Eta | None:
        """Seconds left and their 95% range, from when the job's rows ended
        (`generate.eta`: a rate between clusters of completions, so that waves of them
        do not swing it; its range the plan's model of the speed over the time left).
        None while there is too little to go on."""
        now = self.clock()
        ages = None if self.sending is None else [now - t for t in self.sending()]
        e = estimate(self.ended, self.remaining, now, self.t0, self.rate_since, ages,
                     self.streams, self.tail_budget)  # fmt: skip
        factor = self._availability()  # engines down for part of the job: the time left grows
        if e is None or factor == 1.0:
            return e
        stretch = lambda s: None if s is None else s / factor  # noqa: E731
        return Eta(e.seconds / factor, stretch(e.lo_s), stretch(e.hi_s), stretch(e.slow_s),
                   stretch(e.fast_s))

    def _availability(self) -> float:
        """The engines' share of time up so far over their share in the ETA's window: the
        window's rate, carried over the time left, at the availability measured so far."""
        got = self.engines.availability(ETA_WINDOW) if self.engines is not None else None
        if not got or got[0] <= 0:
            return 1.0
        return got[1] / got[0]

    def snapshot(self, servers: Sequence[ServerState] = ()) -> Snapshot:
        """Everything the display, the log line and the metrics server show."""
        r = self.recent.rates(RATE_WINDOW) or {}
        tok, think = r.get("tokens"), r.get("thinking_tokens")
        down = [s.down_s for s in servers]
        self.streams = sum(s.concurrency for s in servers if s.down_s is None)
        all_down = min(down) if down and None not in down else None  # type: ignore[type-var]
        # while every server is down nothing can run: no ETA, and the snapshot says why
        e, engines, avail = self.eta_range() if all_down is None else None, None, None
        eta = (e.seconds, e.err_s, e.lo_s, e.hi_s, e.slow_s, e.fast_s) if e else (None,) * 6
        elapsed = round(self.clock() - self.t0, 1)
        if self.engines is not None:
            engines = tuple(EngineState(**d) for d in self.engines.states())
            got = self.engines.availability(ETA_WINDOW)
            avail = None if got is None else round(got[1], 4)
        return Snapshot(
            elapsed_s=elapsed, total=self.total, done=self.done_before + self.done,
            failed=self.failed_before + self.failed, done_this_run=self.done,
            failed_this_run=self.failed, truncated_this_run=self.truncated,
            remaining=self.remaining, rows_per_s=_round(r.get("units"), 3),
            tokens_per_s=_round(tok, 1), thinking_tokens_per_s=_round(think, 1),
            answer_tokens_per_s=_round(None if tok is None else tok - (think or 0), 1),
            tokens=self.tokens, thinking_tokens=self.thinking,
            eta_s=_round(eta[0], 0), eta_err_s=_round(eta[1], 0), eta_lo_s=_round(eta[2], 0),
            eta_hi_s=_round(eta[3], 0), all_down_s=all_down,
            servers=tuple(map(self._rated, servers)), engines=engines, engines_availability=avail,
            eta_note=None if all_down is None else NO_SERVER, eta_slow_s=_round(eta[4], 0),
            eta_fast_s=_round(eta[5], 0),
        )  # fmt: skip

    def _rated(self, s: ServerState) -> ServerState:
        per = self.servers.get(s.url)
        r = (per.rates(RATE_WINDOW) if per else None) or {}
        return replace(s, rows_per_s=_round(r.get("units"), 3),
                       tokens_per_s=_round(r.get("tokens"), 1))  # fmt: skip


def _round(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)
