"""plan.json: the document `genbench plan` writes, and read back, the forecast it makes for
the job `genbench generate` is about to run.

`genbench generate --plan PLAN` shows the plan's forecast beside its own live ETA and,
at the end, how the job's wall time and output tokens compared with it: the check that
tells a user whether the next plan on this server can be trusted.

The plan holds forecasts for a few sample counts, on one server and on M. The job's
forecast is the plan's for the same number of servers (one server's, divided by the
number of servers, when the plan has none), at the sample count nearest the job's, scaled
in proportion to the rows the job has to do (a resumed job is held at its end to the
plan for all its rows: the rows a stop leaves are the long ones, generate/resumed.py).
Scaling ignores the difference in start-up
and tail between the two sizes: a few seconds against a job of hours.

This module imports nothing heavy: `generate` reads plans without loading the forecast's
numerical code.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from genbench.errors import UsageError
from genbench.generate.planned import Planned
from genbench.plan.jobfiles import tasks_for
from genbench.run.result import document_head, read_document, write_json_atomic

PLAN_SCHEMA = "genbench.plan"
PLAN_SCHEMA_VERSION = 1
PLAN_FILE = "plan.json"
HOLD_SHARE, HOLD_MIN_S, HOLD_MAX_S = 0.01, 10.0, 300.0  # JobForecast.hold_s

# per mode, the row entry with the forecast for one server
ONE_SERVER = {
    "pilot": ("ours",),
    "result": ("ours_chosen", "ours_best"),
    "arithmetic": ("one_server",),
}


def new_plan_doc(mode: str, source: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        **document_head(PLAN_SCHEMA, PLAN_SCHEMA_VERSION),
        "mode": mode,
        "source": source,
        "inputs": inputs,
        "model": {},
        "rows": [],
        "notes": [],
    }


def save_plan(plan: dict[str, Any], directory: Path) -> Path:
    path = directory / PLAN_FILE
    write_json_atomic(path, plan)
    return path


@dataclass
class JobForecast:
    """The plan's wall time for this job: first request sent to last row written."""

    path: str
    mode: str  # pilot | result | arithmetic
    rows: int  # the rows this run of the job has to do
    servers: int
    seconds: float
    lo_s: float | None  # the plan's 95% bar, scaled alike (None: the plan has no bar)
    hi_s: float | None
    basis: str  # which of the plan's forecasts, scaled how
    concurrency: int | None  # the concurrency the plan forecast (None: not known)
    # the bar's part for speed slower than the pilot could see (relative, 95%: the
    # default unseen drift or --speed-drift; 0 where the plan has none)
    drift: float = 0.0
    # the plan's output tokens for these rows and their 95% range, scaled alike (None: the
    # plan forecast none; a run's and the field's arithmetic have no range)
    output_tokens: float | None = None
    output_lo: float | None = None
    output_hi: float | None = None
    # rows done or failed before this run (a resumed job, generate/resumed.py): the rows
    # left are the longer ones, so course() says no `outside` on the plan scaled to them
    earlier_rows: int = 0
    missed_since: float | None = field(default=None, compare=False)  # course(): since when

    def outcome(
        self, actual_s: float, tokens: int | None = None, rows: int | None = None
    ) -> dict[str, Any]:
        """The forecast against what the job took (its first send to its last row), and
        against the output `tokens` of the `rows` it answered (`tokens_against`)."""
        d = asdict(self)
        del d["missed_since"]  # course()'s memory, not the forecast
        d["actual_s"] = actual_s
        d["error"] = self.seconds / actual_s - 1 if actual_s > 0 else None
        d["inside_bar"] = (
            self.lo_s <= actual_s <= self.hi_s
            if self.lo_s is not None and self.hi_s is not None
            else None
        )
        return {**d, **self.tokens_against(tokens, rows)}

    def tokens_against(self, tokens: int | None, rows: int | None) -> dict[str, Any]:
        """The plan's output tokens against the job's: its figures scaled to the `rows` the
        job answered (a failed row has no tokens to count). `tokens_inside_bar` is None
        where there is nothing to judge: no count, no row answered, no range in the plan."""
        d: dict[str, Any] = {"actual_tokens": tokens, "tokens_rows": rows, "tokens_forecast": None,
                             "tokens_lo": None, "tokens_hi": None, "tokens_error": None,
                             "tokens_inside_bar": None}  # fmt: skip
        if not tokens or not rows or self.output_tokens is None or self.rows <= 0:
            return d
        k = rows / self.rows
        d["tokens_forecast"] = x = self.output_tokens * k
        d["tokens_error"] = x / tokens - 1
        if self.output_lo is not None and self.output_hi is not None:
            d["tokens_lo"], d["tokens_hi"] = lo, hi = self.output_lo * k, self.output_hi * k
            d["tokens_inside_bar"] = lo <= tokens <= hi
        return d

    def prior(self) -> tuple[float, float | None, float | None]:
        """The forecast and its bar as the live ETA's prior (generate.prior.PlanPrior):
        without the drift part, taken out in quadrature on each side. The job's own ETA
        carries speed not seen yet itself (generate.wander.unseen_drift of its time left
        after its own history): counted in both, it would be counted twice."""
        s, lo, hi = self.seconds, self.lo_s, self.hi_s
        if lo is None or hi is None or self.drift <= 0 or s <= 0:
            return s, lo, hi
        up = s / max(1 - self.drift, 0.05) - s  # as bar._intervals puts it on the time
        down = s - s / (1 + self.drift)
        return (s, s - math.sqrt(max((s - lo) ** 2 - down * down, 0.0)),
                s + math.sqrt(max((hi - s) ** 2 - up * up, 0.0)))  # fmt: skip

    def course(
        self, elapsed_s: float, eta_s: float | None, eta_lo: float | None, eta_hi: float | None,
        slow_s: float | None = None, fast_s: float | None = None,
    ) -> dict[str, Any]:
        """While the job runs: where it is headed (elapsed + the live ETA, with the ETA's own
        range) against the plan's range. `verdict` is `inside` while the projection is in
        the plan's range; `outside` once, for `hold_s`, the job could not end in the plan's
        range even as slowly (fast) as its own history says its speed could run the rest
        (`slow_s`, `fast_s`, the ETA's seconds left so: `generate.eta.seen`; the ETA's own
        range where wider or where they are not given): the job's speed has left the plan's
        range (`direction`: it runs `slower`, or `faster`, than the plan allowed); `unsure`
        in between (`missed_for_s`: how long it has missed so far, None while the job could
        still end in the plan's range or while the ETA has no range yet:
        `on_course_lo_s`/`hi_s` None); None before there is an ETA or when the plan has no
        range. `reach_lo_s`/`reach_hi_s`: the ends the job could reach, that the miss is
        judged on. A resumed run (`earlier_rows`) is never said `outside`: the rows left after
        a stop are the long ones that were in flight, and the plan scaled to them undercounts
        them. Called in time order: it remembers when the miss began."""
        d: dict[str, Any] = {"seconds": self.seconds, "lo_s": self.lo_s, "hi_s": self.hi_s}
        d.update(on_course_s=None, on_course_lo_s=None, on_course_hi_s=None,
                 reach_lo_s=None, reach_hi_s=None, direction=None, verdict=None)  # fmt: skip
        if eta_s is None:
            return d
        d["on_course_s"] = on = elapsed_s + eta_s
        d["off"] = on / self.seconds - 1 if self.seconds > 0 else None
        ranged = eta_lo is not None and eta_hi is not None
        if ranged:
            d["on_course_lo_s"] = elapsed_s + eta_lo  # type: ignore[operator]
            d["on_course_hi_s"] = elapsed_s + eta_hi  # type: ignore[operator]
            fast = min(eta_lo, eta_lo if fast_s is None else fast_s)  # type: ignore[type-var]
            slow = max(eta_hi, eta_hi if slow_s is None else slow_s)  # type: ignore[type-var]
            d["reach_lo_s"], d["reach_hi_s"] = elapsed_s + fast, elapsed_s + slow
        if self.lo_s is None or self.hi_s is None:
            return d
        if on > self.hi_s or on < self.lo_s:
            d["direction"] = "slower" if on > self.hi_s else "faster"
        # an ETA without a range (the first clusters of rows) is no evidence of a miss
        missed = ranged and (d["reach_lo_s"] > self.hi_s or d["reach_hi_s"] < self.lo_s)
        if not missed:
            self.missed_since = None
        elif self.missed_since is None:
            self.missed_since = elapsed_s
        if self.lo_s <= on <= self.hi_s:
            d["verdict"] = "inside"
        elif missed and not self.earlier_rows and (
            eta_hi == 0 or elapsed_s - self.missed_since >= self.hold_s  # type: ignore[operator]
        ):
            # nothing left to run (the last row written): the end is known, no hold; the
            # last line said 'unsure' beside the ending's 'outside its bar'
            d["verdict"] = "outside"
        else:
            d["verdict"] = "unsure"
            d["missed_for_s"] = elapsed_s - self.missed_since if missed else None  # type: ignore[operator]
            d["hold_s"] = None if self.earlier_rows else self.hold_s  # None: never outside
        return d

    @property
    def hold_s(self) -> float:
        """How long the ETA's range must miss the plan's before the job is said to be
        outside it: one reading is not evidence (a wave, a pause); 1% of the plan's time,
        at least 10 s and at most 5 min. (At 5 s, 2 of 32 short jobs on a wandering server
        were said outside and ended inside; at 10 s none, `benchmarks/eta_range.py --short`.)"""
        return min(max(HOLD_MIN_S, HOLD_SHARE * self.seconds), HOLD_MAX_S)


def read_plan(path: Path) -> dict[str, Any]:
    """plan.json (or a directory holding one), checked to be a plan this genbench reads."""
    file = path / PLAN_FILE if path.is_dir() else path
    return read_document(file, PLAN_SCHEMA, PLAN_SCHEMA_VERSION, "plan", flag="--plan")


def add_asked(doc: dict[str, Any]) -> None:
    """Each row's time on the servers asked for (`asked`: {servers, seconds, hours, days,
    lo_s, hi_s}): the figure a person planning N samples on M servers wants, in hours and
    days, beside the per-server figures the tables hold. Rows without a forecast are left."""
    servers = int((doc.get("inputs") or {}).get("servers") or 1)
    for row in doc.get("rows") or []:
        one = next((row[k] for k in ONE_SERVER.get(doc.get("mode") or "", ())
                    if isinstance(row.get(k), dict)), None)  # fmt: skip
        at = row.get("at_servers") if servers > 1 else one
        if not isinstance(at, dict) or _num(at.get("seconds")) is None:
            continue
        sec = float(at["seconds"])
        row["asked"] = {"servers": servers, "seconds": sec, "hours": sec / 3600,
                        "days": sec / 86400, "lo_s": _num(at.get("lo_s")),
                        "hi_s": _num(at.get("hi_s"))}  # fmt: skip


def plan_settings(doc: dict[str, Any]) -> Planned:
    """The configuration the plan decided, which `generate --plan` runs unless a flag says
    otherwise: the concurrency its forecast was measured at (a pilot's, a run's chosen C),
    the servers it decided (a deadline's need, else its --servers), and, for a pilot, the
    sampling, max_tokens, --turns and --tool-policy the pilot sent (a run forces its own
    lengths: not the job's)."""
    inputs = doc.get("inputs") or {}
    c: Any = inputs.get("concurrency")
    rows = doc.get("rows") or []
    if doc.get("mode") == "result" and rows and isinstance(rows[0], dict):
        entry = next((rows[0][k] for k in ONE_SERVER["result"] if isinstance(rows[0].get(k),
                                                                            dict)), {})  # fmt: skip
        c = entry.get("concurrency", c)
    servers = inputs.get("servers")
    servers = tasks_for(doc, servers)[0] if isinstance(servers, int) and servers > 0 else None
    pilot = doc.get("mode") == "pilot"
    params = inputs.get("params") if pilot and isinstance(inputs.get("params"), dict) else None
    return Planned(
        path=str(doc.get("_path", PLAN_FILE)),
        concurrency=c if isinstance(c, int) and not isinstance(c, bool) and c > 0 else None,
        servers=servers,
        params=params,
        turns=inputs.get("turns") if pilot else None,
        tool_policy=inputs.get("tool_policy") if pilot else None,
    )


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and math.isfinite(x) else None


def job_forecast(doc: dict[str, Any], rows: int, servers: int) -> JobForecast | None:
    """The plan's forecast for `rows` rows on `servers` servers (None when rows is 0).
    Raises UsageError naming the file and field when the plan has no usable forecast."""
    path = doc.get("_path", PLAN_FILE)
    mode = doc.get("mode")
    if mode not in ONE_SERVER:
        raise UsageError(f"--plan {path}: field 'mode' is {mode!r}: expected one of "
                         f"{', '.join(ONE_SERVER)}")  # fmt: skip
    if rows <= 0:
        return None
    one: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    many: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    for i, row in enumerate(doc.get("rows") or []):
        samples = row.get("samples") if isinstance(row, dict) else None
        if not isinstance(samples, int) or samples <= 0:
            raise UsageError(f"--plan {path}: field 'rows[{i}].samples' is not a count")
        entry = next((row[k] for k in ONE_SERVER[mode] if isinstance(row.get(k), dict)), None)
        if entry is not None and _num(entry.get("seconds")):
            one.append((samples, entry, row))
        at = row.get("at_servers")
        if isinstance(at, dict) and at.get("servers") == servers and _num(at.get("seconds")):
            many.append((samples, at, row))
    if servers > 1 and many:
        pool, divide, how = many, 1, f"on {servers} servers"
    elif one:
        pool, divide = one, servers
        how = "on 1 server" if servers == 1 else f"on 1 server, ÷ {servers} servers alike"
    else:
        raise UsageError(f"--plan {path}: field 'rows' holds no forecast in seconds")
    samples, entry, row = min(pool, key=lambda p: abs(math.log(p[0] / rows)))
    scale = rows / samples / divide
    lo, hi = _num(entry.get("lo_s")), _num(entry.get("hi_s"))
    # the row's tokens: all the servers' together, so scaled to the rows alone
    tok = row.get("tokens") if isinstance(row.get("tokens"), dict) else {}
    out, out_lo, out_hi = (_num(tok.get(k)) for k in ("output", "output_lo", "output_hi"))
    c = entry.get("concurrency", (doc.get("inputs") or {}).get("concurrency"))
    basis = f"the {mode} forecast for {samples:,} samples {how}"
    if samples != rows:
        basis += f", scaled to {rows:,} rows"
    return JobForecast(
        path=str(path),
        mode=str(mode),
        rows=rows,
        servers=servers,
        seconds=float(entry["seconds"]) * scale,
        lo_s=lo * scale if lo is not None else None,
        hi_s=hi * scale if hi is not None else None,
        basis=basis,
        concurrency=c if isinstance(c, int) else None,
        drift=_num((entry.get("speed") or {}).get("drift")) or 0.0,
        output_tokens=out * rows / samples if out is not None else None,
        output_lo=out_lo * rows / samples if out_lo is not None and out is not None else None,
        output_hi=out_hi * rows / samples if out_hi is not None and out is not None else None,
    )
