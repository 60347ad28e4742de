"""`plan --prompts F -c auto`: the pilot climbs to the server's knee before it measures.

A plan's forecast holds for the concurrency its pilot ran at, and C=32 (the fixed pilot's)
can never see a knee above it: the job then runs at a guess. With `-c auto` the pilot
first climbs, on the user's own prompts and generate's own path (`run_pilot`), doubling
from `run`'s start, and stops where `run`'s climb stops (run/knee.py's `verdict`, the one
judge of a knee: preemptions, a queue, 429/503, a full KV cache, a doubling within its
noise); the pilot proper then runs at the knee, so the forecast, the plan's configuration
and `generate --plan` are all at the C the climb chose.

Each level sends LEVEL_LIVES requests per request in flight and measures its rate on the
answers that end while the load is whole (after the first wave, before the last): about
LEVEL_LIVES request lives a level, whatever the level. The climb has CLIMB_SHARE of
`--pilot-max-time`; when a level would not fit in what is left it stops there, below the
knee, and says so (the plan then runs its highest level measured, and says a higher C may
be faster).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from genbench.check.server_metrics import MetricsScraper, server_metrics_summary
from genbench.generate.flags import server_spec
from genbench.generate.input.reader import Row
from genbench.generate.recipe import Recipe
from genbench.plan.pilot import run_pilot
from genbench.records import RequestRecord
from genbench.run.knee import CLIMB_MAX, CLIMB_START, OVERLOAD_STATUSES, Level, Stop, verdict
from genbench.transport.endpoint import Endpoint

LEVEL_LIVES = 4  # requests per request in flight at each level: the rate on the middle two
CLIMB_SHARE = 0.5  # of --pilot-max-time: the climb's; the pilot at the knee has the rest

# one level: C, the rows to send; its records
LevelRun = Callable[[int, Sequence[Row]], Awaitable[list[RequestRecord]]]


def plan_concurrency(given: str | int | None) -> tuple[int | None, bool]:
    """plan's -c: a number (the pilot's and the job's), or auto (the pilot climbs)."""
    if given is None or isinstance(given, int):
        return given, False
    spec = server_spec(str(given))  # generate's own reading of -c, its error alike
    return (None, True) if spec.auto else (spec.concurrency, False)


def level_rate(records: Sequence[RequestRecord], c: int) -> tuple[float | None, float]:
    """A level's output tok/s while all C were in flight (the answers ending after the
    first C and up to the last C: neither the ramp nor the drain), and its noise: half the
    relative gap between that stretch's two halves, as `run` reads a steady window."""
    done = sorted((r for r in records if r.ok and r.t_end), key=lambda r: r.t_end or 0.0)
    if len(done) < 2:
        return None, 0.0
    lo, hi = c - 1, len(done) - c - 1  # the C-th answer's end to the last C's first
    if hi - lo < 1:
        lo, hi = 0, len(done) - 1
    ends = [r.t_end or 0.0 for r in done]
    mid = (lo + hi) // 2

    def rate(a: int, b: int) -> float | None:
        span = ends[b] - ends[a]
        toks = sum(r.completion_tokens or 0 for r in done[a + 1 : b + 1])
        return toks / span if span > 0 and toks else None

    whole = rate(lo, hi)
    if whole is None:
        return None, 0.0
    halves = (rate(lo, mid), rate(mid, hi)) if hi - lo >= 2 else (None, None)
    a, b = halves
    return whole, abs(a - b) / (a + b) if a and b else 0.0


@dataclass
class Climbed:
    """Where the pilot's climb stopped, the C the pilot then runs at, and its cost."""

    stop: Stop
    chosen: int
    wall_s: float
    requests: int

    def to_dict(self) -> dict[str, Any]:
        return {**self.stop.to_dict(), "chosen": self.chosen, "wall_s": self.wall_s,
                "requests": self.requests}  # fmt: skip


async def climb(ep: Endpoint, rows: Iterator[Row], level: LevelRun, budget_s: float,
                say: Callable[[str], None], ceiling: int = CLIMB_MAX) -> Climbed:  # fmt: skip
    """Double from run's start until run's verdict stops the climb, or the budget would
    not hold one more level (`budget`: no knee found)."""
    scraper = MetricsScraper(ep)
    levels: list[Level] = []
    t0, c, spent, n = time.perf_counter(), CLIMB_START, 0.0, 0
    try:
        while True:
            sent = [next(rows) for _ in range(max(8, LEVEL_LIVES * c))]
            before = await scraper.scrape()
            scraper.start_sampling()
            t_level = time.perf_counter()
            records = await level(c, sent)
            took = time.perf_counter() - t_level
            peaks = await scraper.stop_sampling()
            after = await scraper.scrape()
            m = server_metrics_summary(before, after, peaks) if before and after else {}
            rate, noise = level_rate(records, c)
            refused = sum(r.http_status in OVERLOAD_STATUSES for r in records)
            levels.append(Level(c, rate, noise, m.get("preemptions"), m.get("waiting_peak"),
                                m.get("kv_cache_usage_peak"), refused))  # fmt: skip
            n += len(records)
            spent = time.perf_counter() - t0
            signs = ", ".join(levels[-1].overload())
            say(f"  climb C={c}: " + (f"{rate:,.0f} tok/s" if rate else "no rate")
                + (f" ({signs})" if signs else ""))  # fmt: skip
            if (stop := verdict(levels, ceiling)) is not None:
                break
            if spent + 2 * took > budget_s:  # the next level sends twice as many
                stop = Stop(None, c, "budget", f"the climb's time ({budget_s:g} s, "
                            f"{CLIMB_SHARE:.0%} of --pilot-max-time) would not hold C={2 * c}",
                            list(levels))  # fmt: skip
                break
            c *= 2
    finally:
        await scraper.close()
    return Climbed(stop, chosen(stop), round(spent, 1), n)


def chosen(stop: Stop) -> int:
    """The C the pilot runs at: the knee; else (stopped below it) the highest level that
    measured a rate without the server's signs of overload; at worst run's start."""
    if stop.knee is not None:
        return stop.knee
    fine = [lv.concurrency for lv in stop.levels if lv.rate and not lv.overload()]
    return max(fine, default=CLIMB_START)


def climb_note(climbed: dict[str, Any]) -> str:
    """What the plan says of the concurrency its pilot chose, with the climb's evidence."""
    c, knee = climbed["chosen"], climbed["knee"]
    where = f"{climbed['requests']:,} requests in {climbed['wall_s']:g} s"
    if knee is None:
        return (f"C={c} chosen: the pilot's climb stopped below the knee at "
                f"C={climbed['stopped_at']} ({climbed['why']}; {where}): a higher C may "
                "be faster still")  # fmt: skip
    return f"C={c} chosen: the pilot's climb found its knee ({climbed['why']}; {where})"


def pilot_level(
    ep: Endpoint, model: str, recipe: Recipe, timeout: float, **client: Any
) -> LevelRun:
    """One level of the climb: the rows sent as the pilot sends them (`run_pilot`: generate's
    path, the server's dialects as `check` found them in `client`), no records kept."""

    async def level(c: int, rows: Sequence[Row]) -> list[RequestRecord]:
        run = await run_pilot(ep, model, rows, c, None, timeout=timeout, recipe=recipe, **client)
        return run.records

    return level
