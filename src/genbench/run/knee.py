"""The climb: `run` doubles the concurrency until the server has no more to give.

A fixed list (the old 1,4,8,16,32,64) can never see a knee above its last level, and the
field's knees sit at 256 to 1,024 in flight. So `run` without `-c` starts at one request
and doubles, and stops at the first level that says the server is done:

* **overloaded**: the server preempted (vLLM) or retracted (SGLang) requests, kept a queue
  (waiting requests peaking at an eighth of the level or more), or refused with 503/429:
  the knee is the level below;
* **flat**: the doubling's gain is within its noise (the larger of MIN_GAIN and the
  steady window's own spread between its halves): the knee is the level below, the
  smallest that reaches the plateau;
* **full**: the KV cache was FULL or more in use and nothing was lost: this level is
  the knee (one more doubling would preempt);
* the climb's ceiling (`CLIMB_MAX`) with the rate still rising: no knee; the result says
  the sweep stopped below it.

Each level's evidence (rate, noise, the server's gauges and counters) is kept, so the
result shows why it stopped, not only where.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

CLIMB_START = 1
CLIMB_MAX = 4096
MIN_GAIN = 0.05  # a doubling that gains less than this is flat, whatever its noise
FULL = 0.95  # KV cache usage at which a level is full
QUEUE_SHARE = 1 / 8  # waiting requests, as a share of the level, that make a queue
OVERLOAD_STATUSES = (429, 503)


@dataclass
class Level:
    """One level of the climb: its rate, that rate's noise, and what the server said."""

    concurrency: int
    rate: float | None  # tok/s: the sustained steady rate, else the burst's
    noise: float = 0.0  # half the relative gap between the steady window's halves
    preemptions: float | None = None
    waiting_peak: float | None = None
    kv_usage_peak: float | None = None
    refused: int = 0  # answers 429/503

    def overload(self) -> list[str]:
        """The server's own signs that this level is past what it can hold."""
        out = []
        if self.preemptions:
            out.append(f"{self.preemptions:.0f} requests preempted")
        if self.waiting_peak and self.waiting_peak >= max(1.0, self.concurrency * QUEUE_SHARE):
            out.append(f"up to {self.waiting_peak:.0f} requests waiting")
        if self.refused:
            out.append(f"{self.refused} requests refused with 429/503")
        return out

    @property
    def full(self) -> bool:
        return self.kv_usage_peak is not None and self.kv_usage_peak >= FULL


@dataclass
class Stop:
    """Where the climb stopped and why: `knee` None when it stopped below one."""

    knee: int | None
    stopped_at: int
    reason: str  # overloaded | flat | full | ceiling | failed
    why: str
    levels: list[Level] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["levels"] = [asdict(lv) for lv in self.levels]
        return d


def level_of(phase: Any, refused: int = 0) -> Level:
    """A level from a sweep phase (run.benchmark.Phase): its rate, noise and server gauges."""
    s = phase.summary
    sustained = phase.kind == "sustained"
    rate = s.steady_tps if sustained else s.output_tps
    noise = 0.0
    halves = s.steady_halves_tps if sustained else None
    if halves and all(halves):
        a, b = halves
        noise = abs(a - b) / (a + b)
    m = phase.server_metrics or {}
    return Level(phase.concurrency, rate, noise, m.get("preemptions"), m.get("waiting_peak"),
                 m.get("kv_cache_usage_peak"), refused)  # fmt: skip


def verdict(levels: list[Level], ceiling: int = CLIMB_MAX) -> Stop | None:
    """Stop after the last level, or None to double again."""
    cur = levels[-1]
    prev = levels[-2] if len(levels) > 1 else None
    c = cur.concurrency

    def stop(knee: int | None, reason: str, why: str) -> Stop:
        return Stop(knee, c, reason, why, list(levels))

    if not cur.rate:
        return stop(prev.concurrency if prev else None, "failed", f"C={c} measured no rate")
    if signs := cur.overload():
        below = prev.concurrency if prev else None
        return stop(below, "overloaded", f"C={c}: " + ", ".join(signs))
    if prev is not None and prev.rate:
        gain = cur.rate / prev.rate - 1
        noise = max(MIN_GAIN, prev.noise, cur.noise)
        if gain < noise:
            return stop(
                prev.concurrency, "flat",
                f"C={c} gained {gain:+.0%} over C={prev.concurrency}, within its noise "
                f"({noise:.0%})",
            )  # fmt: skip
    if cur.full:
        return stop(c, "full", f"C={c}: KV cache {cur.kv_usage_peak:.0%} in use, none preempted")
    if c * 2 > ceiling:
        return stop(None, "ceiling", f"C={c} is the climb's ceiling and the rate still rose")
    return None


def climb_line(climb: dict[str, Any]) -> str:
    """The climb's verdict in one line (the console, the plan's note)."""
    if climb["knee"] is None:
        return f"no knee found: stopped at C={climb['stopped_at']} ({climb['why']})"
    return f"knee at C={climb['knee']} ({climb['why']})"


def plan_note(climb: dict[str, Any], chosen: int) -> str:
    """What a plan from a climbing run says of the concurrency it chose."""
    if climb["knee"] is None:
        return (f"C={chosen} chosen, but the run's climb stopped below the knee: "
                f"{climb_line(climb)}: a higher C may be faster still")  # fmt: skip
    return f"C={chosen} chosen: the run's climb found its {climb_line(climb)}"
