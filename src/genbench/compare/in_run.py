"""How much a value measured in one run would move on a rerun: its relative standard error
from inside the run (compare.py's docstring says which estimate each metric gets)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from genbench.compare.runs import Run
from genbench.records import RequestRecord
from genbench.stats import cluster_index, resample_index

BOOTSTRAP = 1000
SEED = 20240611


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
    idx = resample_index(_rng(), n, boot)
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
        pick = resample_index(rng, len(gaps))
        # the gaps of the picked requests, concatenated, as indices into `flat`
        stats[b] = np.percentile(flat[cluster_index(starts, lens, pick)], ITL_PCTS)
    return {p: float(sd) for p, sd in zip(ITL_PCTS, np.std(stats, axis=0), strict=True)}


def burst_rel(records: Sequence[RequestRecord], point: float | None) -> float | None:
    """Bootstrap of tokens / (last end - first send) over a burst's requests."""
    ok = [r for r in records if r.ok and r.t_end is not None and r.completion_tokens]
    if len(ok) < 2 or not point:
        return None
    tok = np.array([r.completion_tokens for r in ok], dtype=float)
    t0 = np.array([r.t_send for r in ok])
    t1 = np.array([r.t_end for r in ok], dtype=float)
    idx = resample_index(_rng(), len(ok), BOOTSTRAP)
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
