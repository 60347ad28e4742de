"""Compare runs: the same metrics side by side, ratios to the first run, and the noise.

A ratio alone invites reading 3% as "faster" when two runs of the same server
differ by 3%. So every value comes with the run's own estimate of how much it
would move on a rerun (a relative standard error), and a difference is called
out only when it is larger than that noise. The rule (docs/compare-and-report.md):

* per-request metrics (decode tok/s, TTFT, ITL, TPOT, per-request tokens per
  chunk): a bootstrap over the phase's requests from requests.jsonl
  (`BOOTSTRAP` resamples, fixed seed, so the same files give the same verdict);
  ITL resamples whole requests, since a request's gaps are not independent;
* burst tok/s: the same bootstrap over requests of tokens / (last end - first send);
* sustained tok/s: the two halves of the steady window, `steady_halves_tps`:
  the standard error of their mean relative to it, |h1 - h2| / (h1 + h2);
* server counters (acceptance length): the bootstrap of per-request tokens per
  chunk, which is what the acceptance length looks like from the client.

Two runs' values differ beyond noise when |ln(ratio)| > Z * sqrt(n1^2 + n2^2)
with n1, n2 the relative standard errors, Z = 2 (about 95%), and never when the
difference is under `FLOOR` (1%: timer and scheduler jitter). Where either run
has no estimate (no requests.jsonl, one request) the verdict is "unknown".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genbench.errors import UsageError
from genbench.records import RequestRecord
from genbench.report.runs import Run, concurrencies, lengths, workload_differences

BOOTSTRAP = 1000
Z = 2.0
FLOOR = 0.01
SEED = 20240611

NOISE_RULE = (
    f"a difference is within noise when |ln(ratio)| <= max({Z:g}*sqrt(n_base^2 + n_run^2), "
    f"{FLOOR:g}), n = relative standard error: bootstrap over requests (per-request metrics, "
    "burst tok/s, tokens per chunk for acceptance length), steady-window halves (sustained tok/s)"
)


@dataclass
class Estimate:
    """A value and its relative standard error (None: no way to tell from this run)."""

    value: float
    rel_noise: float | None = None


@dataclass
class Row:
    key: str  # stable id for scripts, e.g. "sustained.c4.steady_tps"
    section: str  # single | throughput | latency | speculative
    label: str
    unit: str
    better: str  # "higher" | "lower"
    estimates: list[Estimate | None]
    group: str = ""  # rows of one group are shown together (one concurrency level)
    ratios: list[float | None] = field(default_factory=list)
    within_noise: list[bool | None] = field(default_factory=list)
    verdicts: list[str | None] = field(default_factory=list)

    def judge(self) -> None:
        """Ratios to the first run and a verdict for each other run."""
        base = self.estimates[0]
        self.ratios, self.within_noise, self.verdicts = [None], [None], [None]
        for est in self.estimates[1:]:
            if base is None or est is None or base.value <= 0 or est.value < 0:
                self.ratios.append(None)
                self.within_noise.append(None)
                self.verdicts.append(None)
                continue
            ratio = est.value / base.value
            self.ratios.append(ratio)
            within = noise_verdict(ratio, base.rel_noise, est.rel_noise)
            self.within_noise.append(within)
            if within is None:
                self.verdicts.append("unknown")
            elif within:
                self.verdicts.append("same")
            else:
                up = ratio > 1
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
            "ratios": self.ratios,
            "within_noise": self.within_noise,
            "verdicts": self.verdicts,
        }


def noise_verdict(ratio: float, n_base: float | None, n_run: float | None) -> bool | None:
    """True: inside the noise; False: a real difference; None: no estimate to tell."""
    if ratio <= 0:
        return None
    d = abs(math.log(ratio))
    if d <= FLOOR:
        return True
    if n_base is None or n_run is None:
        return None
    return d <= max(Z * math.hypot(n_base, n_run), FLOOR)


# --- noise estimates ---------------------------------------------------------------------


def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def bootstrap_rel(
    values: Sequence[float], stat: Callable[[np.ndarray], np.ndarray], point: float | None
) -> float | None:
    """Relative standard error of `stat` (applied along axis 1) by resampling `values`."""
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(xs) < 2 or not point:
        return None
    n = len(xs)
    boot = int(min(BOOTSTRAP, max(200, 4e6 // n)))  # fewer resamples of very many requests
    idx = _rng().integers(0, n, size=(boot, n))
    stats = stat(xs[idx])
    return float(np.std(stats) / abs(point))


def _mean(a: np.ndarray) -> np.ndarray:
    return a.mean(axis=1)


def _pct(p: float) -> Callable[[np.ndarray], np.ndarray]:
    return lambda a: np.percentile(a, p, axis=1)


ITL_PCTS = (50.0, 90.0, 99.0)
ITL_POOL = 200_000  # gaps resampled at most
_itl_cache: dict[tuple[str, str], dict[float, float] | None] = {}


def itl_rel(run: Run, phase: str, p: float, point: float | None) -> float | None:
    """Cluster bootstrap of an ITL percentile: resample requests, pool their gaps.

    All three percentiles come from one set of resamples (the pooling is the cost), cached
    per phase: a long run has millions of gaps."""
    if not point:
        return None
    key = (str(run.path), phase)
    if key not in _itl_cache:
        _itl_cache[key] = _itl_boot([r for r in run.records(phase) if r.ok])
    sds = _itl_cache[key]
    return None if sds is None or p not in sds else sds[p] / abs(point)


def _itl_boot(records: Sequence[RequestRecord]) -> dict[float, float] | None:
    rng = _rng()
    gaps = [np.diff(r.chunk_offsets) for r in records if r.ok and len(r.chunk_offsets) > 1]
    if len(gaps) < 2:
        return None
    total = sum(len(g) for g in gaps)
    if total > ITL_POOL:
        # thin each request's gaps evenly: the spread between requests is what matters,
        # and the extra sampling noise only makes the estimate a little more cautious
        keep = ITL_POOL / total
        gaps = [g[rng.random(len(g)) < keep] if len(g) * keep >= 1 else g[:1] for g in gaps]
    flat = np.concatenate(gaps)
    lens = np.array([len(g) for g in gaps])
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    boot = 200
    stats = np.empty((boot, len(ITL_PCTS)))
    for b in range(boot):
        pick = rng.integers(0, len(gaps), size=len(gaps))
        n = lens[pick]
        # the gaps of the picked requests, concatenated, as indices into `flat`
        first = np.repeat(starts[pick] - (np.cumsum(n) - n), n)
        stats[b] = np.percentile(flat[first + np.arange(n.sum())], ITL_PCTS)
    return {p: float(sd) for p, sd in zip(ITL_PCTS, np.std(stats, axis=0), strict=True)}


def burst_rel(records: Sequence[RequestRecord], point: float | None) -> float | None:
    """Bootstrap of tokens / (last end - first send) over a burst's requests."""
    ok = [r for r in records if r.ok and r.t_end is not None and r.completion_tokens]
    if len(ok) < 2 or not point:
        return None
    tok = np.array([r.completion_tokens for r in ok], dtype=float)
    t0 = np.array([r.t_send for r in ok])
    t1 = np.array([r.t_end for r in ok], dtype=float)
    idx = _rng().integers(0, len(ok), size=(BOOTSTRAP, len(ok)))
    wall = t1[idx].max(axis=1) - t0[idx].min(axis=1)
    stats = tok[idx].sum(axis=1) / np.where(wall > 0, wall, np.nan)
    stats = stats[np.isfinite(stats)]
    return float(np.std(stats) / abs(point)) if len(stats) > 1 else None


def halves_rel(summary: dict[str, Any]) -> float | None:
    h = summary.get("steady_halves_tps")
    if not h or len(h) != 2 or not (h[0] and h[1]) or h[0] + h[1] <= 0:
        return None
    return abs(h[0] - h[1]) / (h[0] + h[1])


def tokens_per_chunk(r: RequestRecord) -> float | None:
    if not r.ok or not r.completion_tokens or not r.chunk_offsets:
        return None
    return r.completion_tokens / len(r.chunk_offsets)


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
    p = run.phase(name)
    m = (p or {}).get("server_metrics") or {}
    v = m.get("spec_mean_acceptance_length")
    if p is None or v is None:
        return None
    tpc = [tokens_per_chunk(r) for r in _ok(run, p)]
    xs = [x for x in tpc if x is not None]
    point = sum(xs) / len(xs) if xs else None
    return Estimate(float(v), bootstrap_rel(xs, _mean, point))


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


def build_rows(runs: list[Run]) -> list[Row]:
    rows: list[Row] = []

    def add(
        key: str, section: str, label: str, unit: str, better: str, ests: list, group: str = ""
    ) -> None:
        if any(e is not None for e in ests):
            rows.append(Row(key, section, label, unit, better, ests, group=group))

    for n in lengths(runs):
        ph = [r.single_phase(n) for r in runs]
        add(
            f"single.{n}.decode_tps",
            "single",
            f"decode tok/s, {n} tokens",
            "tok/s",
            "higher",
            [per_request(r, p, "decode_tps", "mean") for r, p in zip(runs, ph, strict=True)],
        )
        add(
            f"single.{n}.ttft_p50",
            "single",
            f"TTFT p50, {n} tokens",
            "ms",
            "lower",
            [per_request(r, p, "ttft_s", "p50", 1000) for r, p in zip(runs, ph, strict=True)],
        )
    levels = sorted(set(concurrencies(runs, "sustained")) | set(concurrencies(runs, "burst")))
    for c in levels:
        g = f"C={c}"
        add(
            f"sustained.c{c}.steady_tps",
            "throughput",
            f"sustained tok/s, C={c}",
            "tok/s",
            "higher",
            [sustained_tps(r, c) for r in runs],
            g,
        )
        add(
            f"burst.c{c}.output_tps",
            "throughput",
            f"burst tok/s, C={c}",
            "tok/s",
            "higher",
            [burst_tps(r, c) for r in runs],
            g,
        )
        kind = "sustained" if c in concurrencies(runs, "sustained") else "burst"
        ph = [r.sweep_phase(kind, c) for r in runs]
        add(
            f"sweep.c{c}.decode_tps_p50",
            "throughput",
            f"per-request decode tok/s p50, C={c}",
            "tok/s",
            "higher",
            [per_request(r, p, "decode_tps", "p50") for r, p in zip(runs, ph, strict=True)],
            g,
        )
        for dist_name, name, stat in LATENCY:
            add(
                f"latency.c{c}.{name.lower()}_{stat}",
                "latency",
                f"{name} {stat}, C={c} ({kind})",
                "ms",
                "lower",
                [per_request(r, p, dist_name, stat, 1000) for r, p in zip(runs, ph, strict=True)],
                g,
            )
    names: list[str] = []
    for r in runs:
        for p in r.phases:
            m = p.get("server_metrics") or {}
            if m.get("spec_mean_acceptance_length") is not None and p["name"] not in names:
                names.append(p["name"])
    for name in names:
        add(
            f"spec.{name}.acceptance_length",
            "speculative",
            f"acceptance length, {name}",
            "tokens",
            "higher",
            [acceptance(r, name) for r in runs],
        )
    for row in rows:
        row.judge()
    return rows


def failures(run: Run) -> dict[str, Any]:
    """Requests and failures over all measured phases (warm-up excluded), by error kind."""
    total = failed = 0
    errors: dict[str, int] = {}
    phases: dict[str, int] = {}
    for p in run.phases:
        if p.get("kind") == "warmup":
            continue
        s = p.get("summary") or {}
        total += int(s.get("requests") or 0)
        failed += int(s.get("failed") or 0)
        if s.get("failed"):
            phases[p["name"]] = int(s["failed"])
        for k, v in (s.get("errors") or {}).items():
            errors[k] = errors.get(k, 0) + int(v)
    return {"requests": total, "failed": failed, "errors": errors, "by_phase": phases}


@dataclass
class Comparison:
    runs: list[Run]
    rows: list[Row]
    differences: list[str]
    forced: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "genbench.compare",
            "schema_version": 1,
            "baseline": self.runs[0].label,
            "runs": [
                {
                    "label": r.label,
                    "path": str(r.path),
                    "model": r.model,
                    "server": r.server,
                    "url": (r.doc.get("target") or {}).get("url"),
                    "created": r.doc.get("created"),
                    "status": r.doc.get("status"),
                    "has_requests": r.has_records,
                    "failures": failures(r),
                }
                for r in self.runs
            ],
            "workload_differences": self.differences,
            "forced": self.forced,
            "noise_rule": NOISE_RULE,
            "rows": [row.to_dict() for row in self.rows],
        }


def compare(runs: list[Run], force: bool = False) -> Comparison:
    """Refuse runs of different workloads unless forced; then build the rows."""
    if len(runs) < 2:
        raise UsageError("compare needs at least two runs (run directories or result.json files)")
    diffs = workload_differences(runs)
    if diffs and not force:
        raise UsageError(
            "runs measure different workloads: " + "; ".join(diffs) + " (--force compares anyway)"
        )
    return Comparison(runs, build_rows(runs), diffs, force)
