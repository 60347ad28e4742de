"""Progress of a generate job: durable counts, recent rates, and the ETA with its error bar.

Rows are counted done only when durable (see store.py): the display never shows a row
as done that a power loss could take back. Rates come from the job's request records,
through `stats.RecentRates`, the same records the request log holds: rows/s counts the
records that ended a row (written, or sent to the errors file); tokens/s the servers'
usage counts of the requests that ended in the window, thinking apart from answer.

ETA = rows remaining / rows per second over the last `eta_window` seconds. Its range is
the plan's model of the server's speed (`generate.wander.SpeedWander`), with the last
`eta_window` seconds as the pilot and the rest of the job as the job: the rate in
ETA_PARTS sub-windows, how it scattered and wandered across them, carried over the time
left. A job whose rate wanders (a shared host, longer prompts later in the file, a server
lost) shows a wider range than one whose rate only scatters, which is the honest answer.
While every server is down nothing can finish, and a rate over a window that is filling
with nothing would push the ETA up without bound: the ETA is held at its last value
instead, and the snapshot says how long every server has been down (`all_down_s`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from genbench.generate.wander import SpeedWander
from genbench.records import RequestRecord
from genbench.stats import RecentRates

ROW_ENDS = ("done", "failed")  # a record's `outcome` when it ended its row
ETA_PARTS = 10  # sub-windows of the ETA's window: the stretches its range is fitted to
SLOWEST = 0.05  # a rate range past −95% is held there (the ETA's upper end stays finite)


@dataclass(frozen=True, slots=True)
class Eta:
    """Seconds left, and their 95% range (None while too little is known)."""

    seconds: float
    lo_s: float | None = None
    hi_s: float | None = None

    @property
    def err_s(self) -> float | None:
        """Half the range: the '±' of the panel."""
        return None if self.lo_s is None or self.hi_s is None else (self.hi_s - self.lo_s) / 2


@dataclass(slots=True)
class RowInfo:
    """What progress needs of a finished row."""

    server: str
    tokens: int
    thinking: int
    truncated: bool = False


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
        clock: Any = time.perf_counter,
    ) -> None:
        self.total = total
        self.done_before, self.failed_before = done_before, failed_before
        self.done = self.failed = self.truncated = self.tokens = self.thinking = 0
        self.rate_window, self.eta_window, self.clock = rate_window, eta_window, clock
        self.t0 = clock()
        self.recent = RecentRates(eta_window, clock=clock)
        self.servers = {s: RecentRates(rate_window, clock=clock) for s in servers}
        self._held: Eta | None = None  # the ETA before every server went down
        self.engines: Any = None  # --serve: the Supervisor (its availability scales the ETA)

    def on_durable(self, kind: str, items: list[tuple[str, Any]]) -> None:
        """Rows (or errors) now on disk."""
        for _, info in items:
            if kind == "row":
                self.done += 1
            else:
                self.failed += 1
            if isinstance(info, RowInfo):
                self.truncated += info.truncated
                self.tokens += info.tokens
                self.thinking += info.thinking

    def on_record(self, rec: RequestRecord) -> None:
        """A request of the job ended."""
        units = int(rec.extra.get("outcome") in ROW_ENDS)
        self.recent.add(rec, units)
        if (per := self.servers.get(rec.server)) is not None:
            per.add(rec, units)

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.done_before - self.failed_before - self.done - self.failed)

    def eta(self) -> tuple[float, float | None] | None:
        """(seconds left, half their 95% range) or None while there is too little to go on."""
        e = self.eta_range()
        return None if e is None else (e.seconds, e.err_s)

    def eta_range(self) -> Eta | None:
        """Seconds left at the rate of the last `eta_window` seconds, and their 95% range:
        the rate's over the time left, from how it moved across ETA_PARTS sub-windows
        (SpeedWander, the plan's model). None while there is too little to go on."""
        rem = self.remaining
        if rem == 0:
            return Eta(0.0, 0.0, 0.0)
        got = self.recent.part_rates("units", self.eta_window, ETA_PARTS)
        if got is None or got[0] <= 0:
            return None
        rate, parts, part_s = got
        rate *= self._availability()
        left = rem / rate
        if len(parts) < 3:
            return Eta(left)
        h = SpeedWander.fit(parts, part_s).job(left).halfwidth
        return Eta(left, rem / (rate * (1 + h)), rem / (rate * max(1 - h, SLOWEST)))

    def _availability(self) -> float:
        """The engines' share of time up so far over their share in the ETA's window: the
        window's rate, carried over the time left, at the availability measured so far."""
        got = self.engines.availability(self.eta_window) if self.engines is not None else None
        if not got or got[0] <= 0:
            return 1.0
        return got[1] / got[0]

    def snapshot(self, servers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Everything the display and the log line show, as plain data."""
        r = self.recent.rates(self.rate_window) or {}
        tok, think = r.get("tokens"), r.get("thinking_tokens")
        down = [s.get("down_s") for s in servers or []]
        all_down = min(down) if down and None not in down else None  # type: ignore[type-var]
        if all_down is None:
            e = self._held = self.eta_range()
        else:
            e = self._held
        snap: dict[str, Any] = {
            "elapsed_s": round(self.clock() - self.t0, 1),
            "total": self.total,
            "done": self.done_before + self.done,
            "failed": self.failed_before + self.failed,
            "done_this_run": self.done,
            "failed_this_run": self.failed,
            "truncated_this_run": self.truncated,
            "remaining": self.remaining,
            "rows_per_s": _round(r.get("units"), 3),
            "tokens_per_s": _round(tok, 1),
            "thinking_tokens_per_s": _round(think, 1),
            "answer_tokens_per_s": _round(None if tok is None else tok - (think or 0), 1),
            "tokens": self.tokens,
            "thinking_tokens": self.thinking,
            "eta_s": _round(e.seconds, 0) if e else None,
            "eta_err_s": _round(e.err_s, 0) if e else None,
            "eta_lo_s": _round(e.lo_s, 0) if e else None,
            "eta_hi_s": _round(e.hi_s, 0) if e else None,
            "all_down_s": all_down,
            "servers": [],
        }
        if self.engines is not None:
            snap["engines"] = self.engines.states()
            got = self.engines.availability(self.eta_window)
            snap["engines_availability"] = None if got is None else round(got[1], 4)
        for s in servers or []:
            per = self.servers.get(s["url"])
            rr = (per.rates(self.rate_window) if per else None) or {}
            snap["servers"].append(
                {
                    **s,
                    "rows_per_s": _round(rr.get("units"), 3),
                    "tokens_per_s": _round(rr.get("tokens"), 1),
                }
            )
        return snap


def _round(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)
