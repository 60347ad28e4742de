"""Progress of a generate job: durable counts, recent rates, and the ETA with its error bar.

Only durable rows are counted (see store.py): the display never shows a row as done
that a power loss could take back. Tokens come from the servers' usage counts of
finished rows, split into thinking and answer.

ETA = rows remaining / rows per second over the last `eta_window` seconds. Its error
bar comes from the spread of that rate over sub-windows: the standard error of the
mean of k sub-window rates, carried through rem / rate (d ETA = rem * d rate / rate²).
A job whose rate drifts (longer prompts later in the file, a server lost) shows a
wider bar, which is the honest answer.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class RowInfo:
    """What progress needs of a finished row."""

    server: str
    tokens: int
    thinking: int
    truncated: bool = False


@dataclass
class _Counts:
    rows: int = 0
    tokens: int = 0
    thinking: int = 0


@dataclass
class Sample:
    t: float
    rows: int  # done + failed, all servers
    tokens: int
    thinking: int
    per_server: dict[str, tuple[int, int]] = field(default_factory=dict)  # rows, tokens


class Progress:
    def __init__(
        self,
        total: int,
        done_before: int,
        failed_before: int,
        servers: list[str],
        *,
        rate_window: float = 30.0,
        eta_window: float = 300.0,
        sample_every: float = 1.0,
        clock: Any = time.monotonic,
    ) -> None:
        self.total = total
        self.done_before, self.failed_before = done_before, failed_before
        self.done = self.failed = self.truncated = 0
        self.all = _Counts()
        self.servers = {s: _Counts() for s in servers}
        self.rate_window, self.eta_window, self.sample_every = rate_window, eta_window, sample_every
        self.clock = clock
        self.t0 = clock()
        self.samples: deque[Sample] = deque(maxlen=int(eta_window / sample_every) + 2)
        self.sample(force=True)

    # -- counting (called when rows become durable) ---------------------------------------

    def on_durable(self, kind: str, items: list[tuple[str, Any]]) -> None:
        for _, info in items:
            if kind == "row":
                self.done += 1
            else:
                self.failed += 1
            self.all.rows += 1
            if isinstance(info, RowInfo):
                self.truncated += info.truncated
                self.all.tokens += info.tokens
                self.all.thinking += info.thinking
                c = self.servers.get(info.server)
                if c is not None:
                    c.rows += 1
                    c.tokens += info.tokens
                    c.thinking += info.thinking

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.done_before - self.failed_before - self.done - self.failed)

    # -- windows ------------------------------------------------------------------------

    def sample(self, force: bool = False) -> None:
        now = self.clock()
        if not force and self.samples and now - self.samples[-1].t < self.sample_every:
            return
        self.samples.append(
            Sample(
                now,
                self.all.rows,
                self.all.tokens,
                self.all.thinking,
                {s: (c.rows, c.tokens) for s, c in self.servers.items()},
            )
        )

    def _since(self, window: float) -> Sample | None:
        """The oldest sample within `window` seconds of now."""
        now = self.clock()
        for s in self.samples:
            if now - s.t <= window:
                return s
        return None

    def rates(self) -> dict[str, Any]:
        """Rows/s and tokens/s over the last `rate_window` seconds, overall and per server."""
        now = self.clock()
        base = self._since(self.rate_window)
        out: dict[str, Any] = {
            "rows_per_s": None,
            "tokens_per_s": None,
            "thinking_tokens_per_s": None,
            "answer_tokens_per_s": None,
            "servers": {},
        }
        if base is None or now - base.t < 1.0:
            return out
        dt = now - base.t
        tok = (self.all.tokens - base.tokens) / dt
        think = (self.all.thinking - base.thinking) / dt
        out.update(
            rows_per_s=(self.all.rows - base.rows) / dt,
            tokens_per_s=tok,
            thinking_tokens_per_s=think,
            answer_tokens_per_s=tok - think,
        )
        for s, c in self.servers.items():
            r0, t0 = base.per_server.get(s, (0, 0))
            out["servers"][s] = {
                "rows_per_s": (c.rows - r0) / dt,
                "tokens_per_s": (c.tokens - t0) / dt,
            }
        return out

    def eta(self) -> tuple[float, float | None] | None:
        """(seconds left, error bar in seconds) or None while there is too little to go on."""
        rem = self.remaining
        if rem == 0:
            return (0.0, 0.0)
        now = self.clock()
        base = self._since(self.eta_window)
        if base is None or now - base.t < 5.0 or self.all.rows == base.rows:
            return None
        span = now - base.t
        rate = (self.all.rows - base.rows) / span
        eta = rem / rate
        pts = [s for s in self.samples if s.t >= base.t]
        k = min(6, len(pts) - 1)
        if k < 3:
            return eta, None
        sub: list[float] = []
        step = (len(pts) - 1) / k
        for i in range(k):
            a, b = pts[round(i * step)], pts[round((i + 1) * step)]
            if b.t > a.t:
                sub.append((b.rows - a.rows) / (b.t - a.t))
        if len(sub) < 3:
            return eta, None
        mean = sum(sub) / len(sub)
        sd = math.sqrt(sum((x - mean) ** 2 for x in sub) / (len(sub) - 1))
        se = sd / math.sqrt(len(sub))
        return eta, rem * se / (rate * rate)

    def snapshot(self, servers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Everything the display and the log line show, as plain data."""
        r = self.rates()
        e = self.eta()
        snap: dict[str, Any] = {
            "elapsed_s": round(self.clock() - self.t0, 1),
            "total": self.total,
            "done": self.done_before + self.done,
            "failed": self.failed_before + self.failed,
            "done_this_run": self.done,
            "failed_this_run": self.failed,
            "truncated_this_run": self.truncated,
            "remaining": self.remaining,
            "rows_per_s": _round(r["rows_per_s"], 3),
            "tokens_per_s": _round(r["tokens_per_s"], 1),
            "thinking_tokens_per_s": _round(r["thinking_tokens_per_s"], 1),
            "answer_tokens_per_s": _round(r["answer_tokens_per_s"], 1),
            "tokens": self.all.tokens,
            "thinking_tokens": self.all.thinking,
            "eta_s": _round(e[0], 0) if e else None,
            "eta_err_s": _round(e[1], 0) if e and e[1] is not None else None,
            "servers": [],
        }
        for s in servers or []:
            rr = r["servers"].get(s["url"], {})
            snap["servers"].append(
                {
                    **s,
                    "rows_per_s": _round(rr.get("rows_per_s"), 3),
                    "tokens_per_s": _round(rr.get("tokens_per_s"), 1),
                }
            )
        return snap


def _round(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def duration(seconds: float | None) -> str:
    """'2h 05m', '4m 10s', '12s'."""
    if seconds is None:
        return "—"
    s = int(round(seconds))
    if s >= 86400:
        return f"{s // 86400}d {s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"
