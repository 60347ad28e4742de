"""`generate -c auto`: each server's concurrency found, and held, while the job runs.

How long a job takes depends first on how many requests each server holds in flight: too
few leave it idle, too many make an engine preempt (and compute again) what it had
started, and a number that fit at the start preempts an hour later when reasoning outputs
grow. A `Tuner` is one server's concurrency as a small state machine, fed the job's
records, the server's `/metrics` and the clock; `AutoConcurrency` drives one per server.

* **Start** at the plan's concurrency, or SAFE_START. Once the first window's answers say
  how long the prompts are, and the server says its KV cache's size (vLLM's
  `cache_config_info`, SGLang's `max_total_num_tokens`), jump to the most requests whose
  prompt plus `max_tokens` fit it: they can never be preempted. When the first window's
  outputs vary in length (requests then end apart, not in waves), jump further at once:
  to the most requests whose holding (prompt + E[L^2] / 2E[L] on average) fits the cache
  with Z standard deviations of its sum to spare, rather than climbing there a window (a
  request's life) at a time; that level also bounds the climb.
* **Climb** while the server has room: double, or halve the gap to the lowest level known
  to be too many. Room: the KV cache's usage peaked under ROOM over the window; without
  `/metrics`, the last climb raised throughput by MIN_GAIN or more.
* **Step back** on the server's signs of overload: preemptions (vLLM) or retractions
  (SGLang) growing, a queue that stays, 429/503 answers; without `/metrics`, a climb
  whose throughput did not rise (its latency per token rose instead): halfway back to
  the last good level (the knee lies between), or, when the good level itself went bad
  (the server lost memory, the outputs grew), to what the lengths say fits, else half.
* **Hold** where neither applies; a window whose KV usage stays far under ROOM reopens
  the climb (outputs that grew shorter).

A window is the answers to requests sent since the last change: at least one per request
in flight, so that a wave of requests that started together has ended. Every change is a
`Change` with its reason: the job notes it, shows it on the live line and `/metrics`,
keeps it in its report, and the ETA measures its rate from the change on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from genbench.check.metric_names import COUNTERS, GAUGES
from genbench.check.server_metrics import MetricsScraper, Snapshot
from genbench.records import RequestRecord
from genbench.transport.eventloop import wait_event

SAFE_START = 16
CEILING = 4096
ROOM = 0.90  # KV usage peak under which a level has room to climb
REOPEN = 0.60  # held: a window whose KV usage peaked under this reopens the climb
HOLDING_MIN = 8  # answers that tell how long the answers are, and how they vary
Z = 1.64  # the KV cache's holding kept this many standard deviations of its sum under full
MIN_GAIN = 0.05  # without /metrics: a climb must raise throughput by this much
SETTLE_S = 1.0  # after a change, overload signs count from then (the old level's drain)
SPREAD = 0.15  # outputs' lengths vary (sd over mean) enough that requests end apart
QUEUE_SHARE = 1 / 8  # waiting requests, as a share of the level, that are a queue
QUEUE_SAMPLES = 3  # ... in this many samples in a row: a queue that stays
TICK_S = 1.0
EARLY_TICK_S = 0.02  # until the first jump: what the first requests hold, read early
OVERLOAD_STATUSES = (429, 503)


@dataclass(frozen=True)
class Change:
    """One change of a server's concurrency, as the job logs and reports it."""

    at_s: float  # seconds since the job started sending
    server: str
    old: int
    new: int
    why: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return f"{self.server}: concurrency {self.old} → {self.new} ({self.why})"


@dataclass
class Signals:
    """What one scrape of a server's /metrics says of its room."""

    kv_capacity: int | None = None  # tokens
    kv_usage: float | None = None  # 0..1
    waiting: float | None = None
    preemptions: float | None = None  # a counter
    running: float | None = None
    block: int = 1  # tokens the engine allocates at a time (vLLM's block_size)


def read_signals(snap: Snapshot) -> Signals:
    """The room signals of a scrape, in whichever engine's names it has them."""
    _, usage = snap.first(GAUGES["kv_cache_usage"])
    _, waiting = snap.first(GAUGES["waiting"])
    _, preempted = snap.first(COUNTERS["preemptions"])
    _, running = snap.first(GAUGES["running"])
    capacity, block = None, 1
    for labels, _ in snap.samples.get("vllm:cache_config_info", []):
        blocks, size = labels.get("num_gpu_blocks"), labels.get("block_size")
        if blocks and size and blocks.isdigit() and size.isdigit():
            capacity, block = int(blocks) * int(size), int(size)
    if capacity is None and (total := snap.total("sglang:max_total_num_tokens")):
        capacity = int(total)
    return Signals(capacity, usage, waiting, preempted, running, block)


@dataclass
class _Window:
    """The answers to requests sent since the last change."""

    n: int = 0  # answers (any)
    ok: int = 0  # answered
    prompt: int = 0  # their prompt tokens
    held: int = 0  # their prompt and output tokens: what each held at its end
    out: int = 0  # their output tokens
    out2: int = 0  # ... squared (the second moment: how long a request holds the cache)
    out3: int = 0  # ... cubed (the third: how much what it holds varies)
    tokens: int = 0  # output tokens of the requests sent since the change
    busy_s: float = 0.0  # summed request durations (latency per token = busy_s / tokens)
    last_end: float = 0.0
    refused: int = 0
    # the wave: requests sent before the window's first answer ended (all at its start)
    first_end: float | None = None
    wave_t0: float | None = None  # the wave's first send
    wave: list[int] | None = None  # its answers' output tokens
    wave_prompt: int = 0
    wave_busy_s: float = 0.0  # their summed durations (a stream's tokens per second)


class Tuner:
    """One server's concurrency under `-c auto` (see the module's docstring)."""

    def __init__(self, start: int, max_tokens: int | None, now: float,
                 ceiling: int = CEILING) -> None:  # fmt: skip
        self.c, self.max_tokens, self.ceiling = max(1, start), max_tokens, ceiling
        self.good: int | None = None  # highest level known to hold
        self.bad: int | None = None  # lowest level known to be too many
        self.started = False  # the first window (prompt lengths, the cache's size) is done
        self.early = False  # jumped on what the first requests hold (before any answer)
        self.prev: tuple[int, float] | None = None  # (level, rate) before the last climb
        self.sig = Signals()
        self.fit_prompt = self.fit_sd = 0.0
        self.t_level, self.level_n = now, 0  # the level's start, its answers since
        self.settled = False  # the old level's requests have drained (overload counts)
        self.stepped_back = False  # the last change lowered the level
        self.lengths: _Window | None = None
        self._reset(now)

    def _reset(self, now: float) -> None:
        if getattr(self, "w", None) is not None and self.w.ok >= HOLDING_MIN:
            self.lengths = self.w  # the last window that said how long the answers are
        self.t_change, self.w = now, _Window()
        self.kv_peak: float | None = None
        self.queued = 0  # samples in a row with a queue
        self.preempt_base = self.sig.preemptions

    # -- what it is fed ---------------------------------------------------------------

    def record(self, rec: RequestRecord) -> None:
        """A request of this server ended. Every answer since the last change counts to
        fill the window and tells the prompts' length; its rate and latency are those of
        the requests sent since (the others ran at the old level)."""
        if rec.t_end is None:
            return
        w = self.w
        w.n += 1
        self.level_n += 1
        w.refused += rec.http_status in OVERLOAD_STATUSES
        if w.first_end is None:
            w.first_end = rec.t_end
        if not rec.ok:
            return
        if rec.t_send < w.first_end:  # one of the wave
            if w.wave is None:
                w.wave = []
            w.wave.append(rec.completion_tokens or 0)  # not a copy a record: waves of 4,096
            w.wave_prompt += rec.prompt_tokens or 0
            w.wave_busy_s += rec.t_end - rec.t_send
            w.wave_t0 = min(w.wave_t0 or rec.t_send, rec.t_send)
        w.ok += 1
        w.prompt += rec.prompt_tokens or 0
        w.held += (rec.prompt_tokens or 0) + (rec.completion_tokens or 0)
        w.out += rec.completion_tokens or 0
        w.out2 += (rec.completion_tokens or 0) ** 2
        w.out3 += (rec.completion_tokens or 0) ** 3
        if rec.t_send >= self.t_change:
            w.tokens += rec.completion_tokens or 0
            w.busy_s += rec.t_end - rec.t_send
            w.last_end = max(w.last_end, rec.t_end)

    def signals(self, sig: Signals) -> None:
        """One scrape of the server's /metrics."""
        if self.preempt_base is None:
            self.preempt_base = sig.preemptions
        self.sig = Signals(sig.kv_capacity or self.sig.kv_capacity, sig.kv_usage, sig.waiting,
                           sig.preemptions, sig.running, sig.block)  # fmt: skip
        if sig.kv_usage is not None:
            self.kv_peak = max(self.kv_peak or 0.0, sig.kv_usage)
        big = sig.waiting is not None and sig.waiting >= max(1.0, self.c * QUEUE_SHARE)
        self.queued = self.queued + 1 if big else 0

    # -- the decision -----------------------------------------------------------------

    @property
    def metrics(self) -> bool:
        return self.sig.kv_usage is not None

    def overload(self) -> list[str]:
        out = []
        base, now = self.preempt_base, self.sig.preemptions
        # a few preempted youngest requests cost little (their few tokens again): an
        # eighth of the level preempted is a sign, as a queue of that size is
        if base is not None and now is not None and now - base >= max(1.0, self.c * QUEUE_SHARE):
            out.append(f"{now - base:.0f} requests preempted")
        if self.queued >= QUEUE_SAMPLES:
            out.append(f"{self.sig.waiting:.0f} requests kept waiting")
        if self.w.refused:
            out.append(f"{self.w.refused} answers 429/503")
        return out

    def rate(self) -> float | None:
        span = self.w.last_end - self.t_change
        return self.w.tokens / span if span > 0 and self.w.tokens else None

    def decide(self, now: float, in_flight: int = 0) -> tuple[int, str] | None:
        """A new level and why, or None to stay. `in_flight`: the server's requests now."""
        w, c = self.w, self.c
        # after a step back the old level's requests still load the server (and are still
        # preempted) until they end: its signs count from when they have
        drained = in_flight <= c or self.level_n >= 2 * c
        if not self.settled and drained and now - self.t_level >= SETTLE_S:
            self.settled = True
            if self.stepped_back:  # a new window of this level's own answers from now
                self._reset(now)
                w = self.w
        if self.settled and (signs := self.overload()):
            return self._back(", ".join(signs), now)
        if not self.early and (fit := self._early_fit()) is not None:
            self.early = True
            if fit > c:
                self.good = fit
                return self._move(fit, self._fit_why(fit, "at most "), now, None)
        # once started, the KV cache's projection judges room, not the wave's end: with
        # /metrics, half a window (half a request's life) is enough to decide on
        if w.n < (c // 2 if self.started and self.metrics else c) or (
            self.started and not self.settled
        ):
            return None
        rate = self.rate()
        if not self.started:
            self.started = True
            self.early = True
            self._censor(now)
            if (fit := self._fit(w.prompt / w.ok if w.ok else None)) is not None:
                self.good, why = max(fit, c), self._fit_why(fit, "")  # a window held at c
                if (steady := self._steady_fit()) is not None and steady > max(fit, c):
                    return self._move(steady, self._steady_why(steady), now, rate)
                if fit > c:
                    return self._move(fit, why, now, rate)
        if not self.metrics and self.prev is not None and rate is not None:
            p_c, p_rate = self.prev
            gain = rate / p_rate - 1
            if p_c < c and gain < MIN_GAIN:
                self.bad = c
                per_tok = w.busy_s / w.tokens if w.tokens else 0.0
                why = (f"C={c} gave {gain:+.0%} throughput over C={p_c} "
                       f"({per_tok * 1000:.0f} ms per token)")  # fmt: skip
                return self._move(p_c, why, now, None)
        self.good = max(self.good or 0, c)
        self._project()
        if self.metrics and self.kv_peak is not None and self.kv_peak >= ROOM:
            self._hold(now, rate)
            return None
        if self.metrics and self.bad is not None and (self.kv_peak or 0.0) < REOPEN:
            self.bad = None  # far from full at a level that held: there is room again
        target = self._next()
        if target is not None and self.metrics and (steady := self._steady_fit()) is not None:
            # varied lengths: the level whose holding fits the cache with its spread bounds
            # the climb (a window's low peak is a lull of short answers, not room)
            target = min(target, steady) if steady > c else None
        if target is None:
            self._hold(now, rate)
            return None
        room = f"KV cache peaked at {self.kv_peak:.0%}" if self.kv_peak is not None else (
            "throughput still rising")  # fmt: skip
        return self._move(target, f"room to climb: {room}", now, rate)

    def _censor(self, now: float) -> None:
        """The first window's lengths from its wave alone, the wave's requests still running
        counted as censored (at least as long as a stream has made since the wave began):
        the first answers to end are the short ones, and the replacements sent as they end
        are shorter still, so the window's own answers say the outputs are shorter than
        they are, and the first level overshoots."""
        w = self.w
        if not w.wave or not w.wave_busy_s or w.wave_t0 is None:
            return
        k = len(w.wave)
        running = max(0, self.c - k)
        made = sum(w.wave) / w.wave_busy_s * (now - w.wave_t0)  # tokens a stream made since
        if self.max_tokens:
            made = min(made, float(self.max_tokens))
        lengths = [float(n) for n in w.wave] + [made] * running
        n = len(lengths)
        w.ok, w.prompt = n, round(w.wave_prompt / k * n)
        w.out = round(sum(lengths))
        w.out2 = round(sum(x * x for x in lengths))
        w.out3 = round(sum(x**3 for x in lengths))

    def _project(self) -> None:
        """A scrape a second misses the peak of a wave of requests that end together: the
        peak is at least what the window's requests held at their ends, all at once."""
        cap, w = self.sig.kv_capacity, self.w
        if cap and w.ok and self.metrics:
            resid = self._residency()
            held = self.c * (resid if resid is not None else w.held / w.ok)
            self.kv_peak = max(self.kv_peak or 0.0, min(1.0, held / cap))

    def _fit(self, prompt: float | None) -> int | None:
        """The most requests whose prompt plus max_tokens the KV cache holds."""
        cap = self.sig.kv_capacity
        if not cap or not self.max_tokens or prompt is None:
            return None
        self.fit_prompt = prompt
        return max(1, min(self.ceiling, int(cap // (prompt + self.max_tokens))))

    def _residency(self) -> float | None:
        """What one request in flight holds of the KV cache on average over time, when the
        outputs' lengths vary enough that requests end apart (not in waves): its prompt plus
        E[L^2] / 2E[L] (a request is met in flight in proportion to its length, at a
        uniform point of it). None while lengths are alike (requests that started together
        stay in step and all hold prompt + L at once: the wave's end is the peak)."""
        got = self._holding()
        return got[0] if got is not None else None

    def _holding(self) -> tuple[float, float] | None:
        """The residency (above) and its standard deviation across requests in flight: a
        request met at a uniform point u of its life holds P + uL, L drawn in proportion to
        itself, so E[h^2] = P^2 + P E[L^2]/E[L] + E[L^3] / 3E[L]. Half an allocation block
        is added to the mean (an engine holds whole blocks). From this window's answers, or
        while it has too few (an overload read early in a level), the last window's."""
        w = self.w if self.w.ok >= HOLDING_MIN or self.lengths is None else self.lengths
        if w.ok < HOLDING_MIN or not w.out:
            return None
        mean = w.out / w.ok
        var = max(0.0, w.out2 / w.ok - mean * mean)
        if var**0.5 < SPREAD * mean:
            return None
        p, l2, l3 = w.prompt / w.ok, w.out2 / w.ok, w.out3 / w.ok
        resid = p + l2 / (2 * mean)
        h2 = p * p + p * l2 / mean + l3 / (3 * mean)
        return resid + (self.sig.block - 1) / 2, max(0.0, h2 - resid * resid) ** 0.5

    def _steady_fit(self) -> int | None:
        """The most requests whose holding fits the KV cache with Z standard deviations of
        its sum to spare (n m + Z sqrt(n) s <= K): the level a job of varied lengths runs
        best at, reached in one step from the first window. A small cache (a few long
        requests) keeps more to spare than a large one, where the sum varies less."""
        cap, got = self.sig.kv_capacity, self._holding()
        if not cap or got is None:
            return None
        m, sd = got
        self.fit_prompt, self.fit_sd = m, sd
        x = (-Z * sd + ((Z * sd) ** 2 + 4 * m * cap) ** 0.5) / (2 * m)  # sqrt(n)
        return max(1, min(self.ceiling, int(x * x)))

    def _steady_why(self, fit: int) -> str:
        cap = self.sig.kv_capacity or 0
        return (
            f"the KV cache holds {cap:,} tokens: {fit} requests holding {self.fit_prompt:.0f} "
            f"± {self.fit_sd:.0f} tokens (prompt + the answers' lengths so far) fit it with "
            f"{Z:g} standard deviations of their sum to spare"
        )

    def _early_fit(self) -> int | None:
        """Before any answer: what a running request holds now (the engine's usage over its
        running requests) is its prompt and the few tokens it made, at least its prompt."""
        s = self.sig
        if not (s.kv_capacity and s.kv_usage and s.running):
            return None
        return self._fit(s.kv_usage * s.kv_capacity / s.running)

    def _fit_why(self, fit: int, what: str) -> str:
        cap, prompt = self.sig.kv_capacity or 0, self.fit_prompt
        return (
            f"the KV cache holds {cap:,} tokens: {fit} requests of {what}{prompt:.0f} prompt "
            f"+ {self.max_tokens} output tokens fit"
        )

    def _next(self) -> int | None:
        c, bad = self.c, self.bad
        if bad is None:
            return min(2 * c, self.ceiling) if c < self.ceiling else None
        if bad - c <= max(1, c // 8):
            return None
        return (c + bad) // 2

    def _back(self, why: str, now: float) -> tuple[int, str]:
        c = self.c
        self.bad = c
        if self.good is not None and self.good < c:
            # halfway back to the level that held: a climb past the knee overshot it by up
            # to a doubling, and the knee lies between (the next overload halves the gap);
            # a quarter back at most, when a jump (not a doubling) overshot
            new = self.good if c - self.good <= max(1, c // 8) else (self.good + c) // 2
            new = max(new, 3 * c // 4)
        elif (fit := self._steady_fit()) is not None:
            # the level that held went bad, and the lengths say what fits: back to it (a
            # half at most); where they say this level fits, the spread's excursions
            # preempted: a quarter back. Not to half on a few preemptions
            new, self.good = max(c // 2, fit if fit < c else 3 * c // 4), None
        else:  # the level that held went bad: the server shrank, or the outputs grew
            new, self.good = max(1, c // 2), None
        self.prev = None
        return self._move(new, f"overloaded at C={c}: {why}", now, None)

    def _move(self, new: int, why: str, now: float, rate: float | None) -> tuple[int, str]:
        self.prev = (self.c, rate) if rate is not None and new > self.c else None
        self.stepped_back = new < self.c
        self.c = new
        self.t_level, self.level_n, self.settled = now, 0, False
        self._reset(now)
        return new, why

    def _hold(self, now: float, rate: float | None) -> None:
        """Stay; a new window (its peak, its queue) from now."""
        self._reset(now)


class AutoConcurrency:
    """The tuners of a job's `-c auto` servers, their /metrics scraped every TICK_S; each
    change applied to the load (`Load.resize`) and handed to `on_change`."""

    def __init__(self, servers: list[Any], start: dict[str, int], max_tokens: int | None,
                 on_change: Callable[[Change], None]) -> None:  # fmt: skip
        now = time.perf_counter()
        self.t0 = now
        self.servers = {s.name: s for s in servers if s.name in start}
        self.tuners = {n: Tuner(start[n], max_tokens, now) for n in self.servers}
        self.scrapers = {n: MetricsScraper(s.endpoint, pool=s.client.pool)
                         for n, s in self.servers.items()}  # fmt: skip
        self.on_change = on_change
        self.changes: list[Change] = []
        self._full = asyncio.Event()  # a window is full: decide now, not at the next tick

    def record(self, rec: RequestRecord) -> None:
        if (t := self.tuners.get(rec.server)) is not None:
            t.record(rec)
            if t.w.n in (t.c, t.c // 2):  # a window (or half of one) is full
                self._full.set()

    async def run(self, load: Any) -> None:
        """Until cancelled (the job's end): a scrape and a decision every TICK_S, and as
        soon as a window is full (a wave's last answer: the next starts with the change)."""
        await self._scrape()
        while True:
            early = any(not t.early for t in self.tuners.values())  # scrape often until then
            await wait_event(self._full, EARLY_TICK_S if early else TICK_S)
            if load.stopped.is_set():  # Ctrl-C, SIGTERM: nothing more is sent, no change
                return
            if not self._full.is_set():
                await self._scrape()
            self._full.clear()
            for name, tuner in self.tuners.items():
                server = self.servers[name]
                if not server.up:
                    continue
                now = time.perf_counter()
                old = tuner.c
                if (got := tuner.decide(now, server.in_flight)) is None or got[0] == old:
                    continue
                load.resize(server, got[0])
                change = Change(round(now - self.t0, 1), name, old, got[0], got[1])
                self.changes.append(change)
                self.on_change(change)

    async def _scrape(self) -> None:
        for name, tuner in self.tuners.items():
            if self.servers[name].up and (snap := await self.scrapers[name].scrape()):
                tuner.signals(read_signals(snap))
