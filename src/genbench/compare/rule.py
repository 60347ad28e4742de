"""Compare runs: the same metrics side by side, ratios to the first side, and the noise.

A side is one run, or several repeats of one measurement (`run --repeat`). A ratio
alone invites reading 3% as "faster" when two runs of the same server differ by 3%. So
every value comes with an estimate of how much it would move on a rerun, and a
difference is called out only when it is larger than that noise (`genbench.compare.noise`, and
docs/compare-and-report.md). Within one run, the relative standard error of a value is:

* per-request metrics (decode tok/s, TTFT, ITL, TPOT, per-request tokens per
  chunk): a bootstrap over the phase's requests from requests.jsonl
  (`BOOTSTRAP` resamples, fixed seed, so the same files give the same verdict);
  ITL resamples whole requests, since a request's gaps are not independent;
* burst tok/s: the same bootstrap over requests of tokens / (last end - first send);
* sustained tok/s: the two halves of the steady window, `steady_halves_tps`:
  the standard error of their mean relative to it, |h1 - h2| / (h1 + h2);
* acceptance length: the requests' pooled length where every request said its own (the
  bootstrap of the per-request lengths), else the server's counter with the bootstrap of
  per-request tokens per chunk, which is what the acceptance length looks like from the
  client.

Between runs, the spread of a side's repeats; with one run per side, an allowance.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from genbench.compare import noise
from genbench.compare.in_run import (
    _mean,
    _pct,
    bootstrap_rel,
    burst_rel,
    halves_rel,
    itl_rel,
    tokens_per_chunk,
)
from genbench.compare.noise import ALLOWANCE, FLOOR, Z, noise_rule
from genbench.compare.runs import Run, concurrencies, lengths, workload_differences
from genbench.errors import UsageError
from genbench.records import RequestRecord
from genbench.transport.acceptance import verified

__all__ = [
    "ALLOWANCE",
    "FLOOR",
    "Z",
    "Comparison",
    "Estimate",
    "MetricRow",
    "compare",
    "failures",
    "noise_rule",
]


@dataclass
class Estimate:
    """A value and its relative standard error (None: no way to tell from this run)."""

    value: float
    rel_noise: float | None = None


@dataclass
class MetricRow:
    key: str  # stable id for scripts, e.g. "sustained.c4.steady_tps"
    section: str  # single | throughput | latency | speculative
    label: str
    unit: str
    better: str  # "higher" | "lower"
    repeats: list[list[Estimate | None]]  # per side, one per repeat
    group: str = ""  # rows of one group are shown together (one concurrency level)
    sides: list[noise.Side | None] = field(default_factory=list)
    diffs: list[noise.Difference | None] = field(default_factory=list)
    verdicts: list[str | None] = field(default_factory=list)

    @property
    def estimates(self) -> list[Estimate | None]:
        """Each side's value (the mean of its repeats) and the standard error judged by."""
        return [None if s is None else Estimate(s.mean, _side_se(s)) for s in self.sides]

    @property
    def ratios(self) -> list[float | None]:
        return [d.ratio if d else None for d in self.diffs]

    @property
    def within_noise(self) -> list[bool | None]:
        return [d.within_noise if d else None for d in self.diffs]

    def judge(self, allowance: float = ALLOWANCE) -> None:
        """Ratios to the first side and a verdict for each other side."""
        self.sides = [
            noise.side([e and e.value for e in reps], [e and e.rel_noise for e in reps])
            for reps in self.repeats
        ]
        base = self.sides[0]
        self.diffs, self.verdicts = [None], [None]
        for s in self.sides[1:]:
            if base is None or s is None or base.mean <= 0 or s.mean < 0:
                self.diffs.append(None)
                self.verdicts.append(None)
                continue
            d = noise.difference(base, s, allowance) if s.mean > 0 else None
            self.diffs.append(d)
            if d is None or d.within_noise is None:
                self.verdicts.append("unknown")
            elif d.within_noise:
                self.verdicts.append("same")
            else:
                up = d.ratio > 1
                self.verdicts.append("better" if up == (self.better == "higher") else "worse")

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "section": self.section,
            "label": self.label,
            "unit": self.unit,
            "group": self.group,
            "better": self.better,
            "values": [e.value if e else None for e in self.estimates],
            "rel_noise": [e.rel_noise if e else None for e in self.estimates],
            "within_rel_noise": [s.within if s else None for s in self.sides],
            "spread": [s.spread if s else None for s in self.sides],
            "repeats": [[e.value if e else None for e in reps] for reps in self.repeats],
            "ratios": self.ratios,
            "intervals": [list(d.interval) if d and d.interval else None for d in self.diffs],
            "within_noise": self.within_noise,
            "drift_measured": [d.drift_measured if d else None for d in self.diffs],
            "repeats_needed": [d.repeats_needed if d else None for d in self.diffs],
            "verdicts": self.verdicts,
        }


def _side_se(s: noise.Side) -> float | None:
    """The side's relative standard error: between repeats floored by within, or within."""
    spread = s.spread
    between = None if spread is None else spread / math.sqrt(s.n)
    parts = [x for x in (between, s.within) if x is not None]
    return max(parts) if parts else None


# --- rows --------------------------------------------------------------------------------


def _dist(summary: dict[str, Any], name: str, stat: str) -> float | None:
    v = (summary.get(name) or {}).get(stat)
    return float(v) if isinstance(v, int | float) else None


def _ok(run: Run, phase: dict[str, Any]) -> list[RequestRecord]:
    return [r for r in run.records(phase["name"]) if r.ok]


def per_request(
    run: Run, phase: dict[str, Any] | None, dist_name: str, stat: str, scale: float = 1.0
) -> Estimate | None:
    """A per-request statistic from the summary, its noise by bootstrap over the records."""
    if phase is None:
        return None
    point = _dist(phase.get("summary") or {}, dist_name, stat)
    if point is None:
        return None
    if dist_name == "itl_chunk_s":
        rel = itl_rel(run, phase["name"], float(stat[1:]), point)
    else:
        recs = _ok(run, phase)
        attr = {"decode_tps": "decode_rate", "ttft_s": "ttft", "tpot_s": "tpot", "e2e_s": "e2e"}
        values = [getattr(r, attr[dist_name]) for r in recs]
        fn = _mean if stat == "mean" else _pct(float(stat[1:]))
        rel = bootstrap_rel(values, fn, point)
    return Estimate(point * scale, rel)


def sustained_tps(run: Run, c: int) -> Estimate | None:
    p = run.sweep_phase("sustained", c)
    s = (p or {}).get("summary") or {}
    if s.get("steady_tps") is None:
        return None
    return Estimate(float(s["steady_tps"]), halves_rel(s))


def burst_tps(run: Run, c: int) -> Estimate | None:
    p = run.sweep_phase("burst", c)
    s = (p or {}).get("summary") or {}
    if p is None or s.get("output_tps") is None:
        return None
    point = float(s["output_tps"])
    return Estimate(point, burst_rel(_ok(run, p), point))


def acceptance(run: Run, name: str) -> Estimate | None:
    """A phase's acceptance length: its requests' pooled length where every one said it
    (every step of the phase; vLLM's counters give the same number), else the server's
    (SGLang's is a gauge over its last decode steps only, not the phase)."""
    p = run.phase(name)
    if p is None:
        return None
    acc = (p.get("summary") or {}).get("acceptance")
    if acc and acc.get("requests") == acc.get("of"):
        xs = [r.spec["length"] for r in _ok(run, p) if verified(r.spec)]
        return Estimate(float(acc["length"]), bootstrap_rel(xs, _mean, sum(xs) / len(xs)))
    v = (p.get("server_metrics") or {}).get("spec_mean_acceptance_length")
    if v is None:
        return None
    tpc = [tokens_per_chunk(r) for r in _ok(run, p)]
    xs = [x for x in tpc if x is not None]
    point = sum(xs) / len(xs) if xs else None
    return Estimate(float(v), bootstrap_rel(xs, _mean, point))


def group_acceptance(run: Run, name: str, group: str) -> Estimate | None:
    """A prompt group's mean acceptance length per request in a phase (the records' `spec`),
    its noise by bootstrap over those requests."""
    p = run.phase(name)
    if p is None:
        return None
    xs = [
        r.spec["length"] for r in _ok(run, p) if verified(r.spec) and r.extra.get("group") == group
    ]
    if not xs:
        return None
    point = sum(xs) / len(xs)
    return Estimate(point, bootstrap_rel(xs, _mean, point))


LATENCY: tuple[tuple[str, str, str], ...] = (
    ("ttft_s", "TTFT", "p50"),
    ("ttft_s", "TTFT", "p90"),
    ("ttft_s", "TTFT", "p99"),
    ("itl_chunk_s", "ITL", "p50"),
    ("itl_chunk_s", "ITL", "p90"),
    ("itl_chunk_s", "ITL", "p99"),
    ("tpot_s", "TPOT", "p50"),
    ("tpot_s", "TPOT", "p90"),
)


def build_rows(sides: list[Run], allowance: float = ALLOWANCE) -> list[MetricRow]:
    """Every metric some side has, one estimate per repeat of each side, judged."""
    rows: list[MetricRow] = []
    every = [r for s in sides for r in s.repeat_runs]

    def add(
        key: str,
        section: str,
        label: str,
        unit: str,
        better: str,
        fn: Callable[[Run], Estimate | None],
        group: str = "",
    ) -> None:
        reps = [[fn(r) for r in s.repeat_runs] for s in sides]
        if any(e is not None for side in reps for e in side):
            rows.append(MetricRow(key, section, label, unit, better, reps, group=group))

    _single_rows(add, every)
    _sweep_rows(add, every)
    _spec_rows(add, every)
    for row in rows:
        row.judge(allowance)
    return rows


Add = Callable[..., None]  # build_rows's add(key, section, label, unit, better, fn, group)


def _single_rows(add: Add, every: list[Run]) -> None:
    for n in lengths(every):
        add(f"single.{n}.decode_tps", "single", f"decode tok/s, {n} tokens", "tok/s", "higher",
            lambda r, n=n: per_request(r, r.single_phase(n), "decode_tps", "mean"))  # fmt: skip
        add(f"single.{n}.ttft_p50", "single", f"TTFT p50, {n} tokens", "ms", "lower",
            lambda r, n=n: per_request(r, r.single_phase(n), "ttft_s", "p50", 1000))  # fmt: skip


def _sweep_rows(add: Add, every: list[Run]) -> None:
    sustained = set(concurrencies(every, "sustained"))
    for c in sorted(sustained | set(concurrencies(every, "burst"))):
        g = f"C={c}"
        kind = "sustained" if c in sustained else "burst"
        add(f"sustained.c{c}.steady_tps", "throughput", f"sustained tok/s, C={c}", "tok/s",
            "higher", lambda r, c=c: sustained_tps(r, c), g)  # fmt: skip
        add(f"burst.c{c}.output_tps", "throughput", f"burst tok/s, C={c}", "tok/s", "higher",
            lambda r, c=c: burst_tps(r, c), g)  # fmt: skip
        add(f"sweep.c{c}.decode_tps_p50", "throughput", f"per-request decode tok/s p50, C={c}",
            "tok/s", "higher",
            lambda r, c=c, k=kind: per_request(r, r.sweep_phase(k, c), "decode_tps", "p50"),
            g)  # fmt: skip
        for dist_name, name, stat in LATENCY:
            add(f"latency.c{c}.{name.lower()}_{stat}", "latency", f"{name} {stat}, C={c} ({kind})",
                "ms", "lower",
                lambda r, c=c, k=kind, d=dist_name, st=stat: per_request(
                    r, r.sweep_phase(k, c), d, st, 1000),
                g)  # fmt: skip


def _spec_rows(add: Add, every: list[Run]) -> None:
    names: list[str] = []
    for r in every:
        for p in r.phases:
            m = p.get("server_metrics") or {}
            said = m.get("spec_mean_acceptance_length") is not None or (
                (p.get("summary") or {}).get("acceptance")
            )
            if said and p["name"] not in names:
                names.append(p["name"])
    for name in names:
        add(f"spec.{name}.acceptance_length", "speculative", f"acceptance length, {name}",
            "tokens", "higher", lambda r, name=name: acceptance(r, name))  # fmt: skip
    groups: dict[str, list[str]] = {}  # phase -> the groups any side measured, in order
    for r in every:
        for p in r.phases:
            for g in ((p.get("summary") or {}).get("acceptance") or {}).get("by_group") or ():
                if g["group"] not in groups.setdefault(p["name"], []):
                    groups[p["name"]].append(g["group"])
    for name, names in groups.items():
        for g in names:
            add(f"spec.{name}.group.{g}.acceptance_length", "speculative",
                f"acceptance length per request, {g}, {name}", "tokens", "higher",
                lambda r, name=name, g=g: group_acceptance(r, name, g), name)  # fmt: skip


def failures(side: Run) -> dict[str, Any]:
    """Requests and failures over all measured phases (warm-up excluded) of every repeat of
    a side, by error kind."""
    total = failed = 0
    errors: dict[str, int] = {}
    phases: dict[str, int] = {}
    for run in side.repeat_runs:
        for p in run.phases:
            if p.get("kind") == "warmup":
                continue
            s = p.get("summary") or {}
            total += int(s.get("requests") or 0)
            failed += int(s.get("failed") or 0)
            if s.get("failed"):
                name = p["name"] if run is side else f"{run.label} {p['name']}"
                phases[name] = int(s["failed"])
            for k, v in (s.get("errors") or {}).items():
                errors[k] = errors.get(k, 0) + int(v)
    return {"requests": total, "failed": failed, "errors": errors, "by_phase": phases}


@dataclass
class Comparison:
    runs: list[Run]  # one per side; a side's repeats are run.repeat_runs
    rows: list[MetricRow]
    differences: list[str]
    forced: bool
    allowance: float = ALLOWANCE

    @property
    def drift_measured(self) -> bool:
        """Some side has repeats: the interval comes from the spread between them."""
        return any(len(r.repeat_runs) > 1 for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "genbench.compare",
            "schema_version": 2,
            "baseline": self.runs[0].label,
            "runs": [
                {
                    "label": r.label,
                    "path": str(r.source or r.path),
                    "model": r.model,
                    "server": r.server,
                    "url": (r.doc.get("target") or {}).get("url"),
                    "created": r.doc.get("created"),
                    "status": r.doc.get("status"),
                    "has_requests": all(x.has_records for x in r.repeat_runs),
                    "failures": failures(r),
                    "repeats": [
                        {
                            "path": str(x.path),
                            "created": x.doc.get("created"),
                            "status": x.doc.get("status"),
                        }
                        for x in r.repeat_runs
                    ],  # fmt: skip
                }
                for r in self.runs
            ],
            "workload_differences": self.differences,
            "forced": self.forced,
            "drift_measured": self.drift_measured,
            "allowance": self.allowance,
            "noise_rule": noise_rule(self.allowance),
            "rows": [row.to_dict() for row in self.rows],
        }


def compare(runs: list[Run], force: bool = False, allowance: float = ALLOWANCE) -> Comparison:
    """Refuse sides of different workloads unless forced; then build the rows.

    `runs` holds one Run per side (see report.runs.load_sides); every repeat of every side
    must have measured the same workload as the first."""
    if len(runs) < 2:
        raise UsageError(
            "compare needs at least two runs to compare (run directories, result.json files or "
            "directories of repeats; several runs of one side joined by commas)"
        )
    if not 0 <= allowance < 1:
        raise UsageError(f"--allowance {allowance:g}: expected a fraction in [0, 1), e.g. 0.1")
    diffs = workload_differences([r for side in runs for r in side.repeat_runs])
    if diffs and not force:
        raise UsageError(
            "runs measure different workloads: " + "; ".join(diffs) + " (--force compares anyway)"
        )
    return Comparison(runs, build_rows(runs, allowance), diffs, force, allowance)
