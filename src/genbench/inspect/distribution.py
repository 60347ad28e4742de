"""Numbers over all rows: distributions, the per-server two-sample test, duplicates.

Everything here works on compact per-row columns (a few bytes per row, never the text),
so 1M rows cost a few tens of MB whatever their length.

The server test is Mann-Whitney U (a rank test: no assumption about the shape of the
distribution, robust to the long tails output lengths have), with its normal
approximation and the tie correction, written here on numpy: scipy is not a dependency
and the approximation is exact enough from a few dozen rows per group on. With 1M rows
every difference is "significant", so a server is named only when the effect is large
too: the rank-biserial correlation r = 2U/(n1 n2) - 1 (the probability that a row of the
server is longer than a row of the others, minus the reverse) must reach a threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

PERCENTILES = (1, 5, 25, 50, 75, 95, 99)
CDF_POINTS = 51  # quantiles stored for the report's CDF plots (every 2%)
MIN_GROUP = 20  # rows a server needs before it is compared


def describe(values: np.ndarray, cdf: bool = False) -> dict[str, Any]:
    """count, mean, percentiles and max (and a CDF as quantiles) of one column."""
    v = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    if v.size == 0:
        return {"count": 0}
    qs = np.percentile(v, PERCENTILES)
    out: dict[str, Any] = {
        "count": int(v.size),
        "mean": float(v.mean()),
        **{f"p{p}": float(q) for p, q in zip(PERCENTILES, qs, strict=True)},
        "min": float(v.min()),
        "max": float(v.max()),
    }
    if cdf:
        out["cdf"] = [float(x) for x in np.percentile(v, np.linspace(0, 100, CDF_POINTS))]
    return out


@dataclass(frozen=True)
class Ranks:
    """Average ranks (ties share their mean rank) of one pooled sample, and the tie term
    the variance of U needs."""

    ranks: np.ndarray
    tie_term: float

    @classmethod
    def of(cls, x: np.ndarray) -> Ranks:
        order = np.argsort(x, kind="stable")
        s = x[order]
        starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
        counts = np.diff(np.r_[starts, s.size])
        avg = starts + (counts + 1) / 2.0  # 1-based
        ranks = np.empty(s.size, dtype=np.float64)
        ranks[order] = np.repeat(avg, counts)
        c = counts.astype(np.float64)
        return cls(ranks, float((c**3 - c).sum()))


def mann_whitney(ranks: Ranks, mask: np.ndarray) -> dict[str, float] | None:
    """Group `mask` against the rest of the same pooled sample: U, z, two-sided p
    (normal approximation with tie and continuity corrections) and the rank-biserial
    effect (+: the group's values tend to be larger)."""
    n = ranks.ranks.size
    n1 = int(mask.sum())
    n2 = n - n1
    if n1 == 0 or n2 == 0:
        return None
    u = float(ranks.ranks[mask].sum()) - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - ranks.tie_term / (n * (n - 1)))
    if var <= 0:  # every value the same
        return {"u": u, "z": 0.0, "p": 1.0, "effect": 0.0}
    d = u - mu
    z = (d - math.copysign(0.5, d)) / math.sqrt(var) if abs(d) >= 0.5 else 0.0
    return {
        "u": u,
        "z": z,
        "p": math.erfc(abs(z) / math.sqrt(2.0)),
        "effect": 2 * u / (n1 * n2) - 1,
    }


def odd_servers(
    values: np.ndarray, server: np.ndarray, names: list[str], alpha: float, min_effect: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """Which servers' distributions differ from the others'.

    Each server is compared with the pooled rows of all the others. An odd server also
    makes the normal ones look different from "the rest" (the rest contains it), so the
    naming goes in rounds: the server with the largest effect that passes both
    thresholds is named and left out, and the remaining ones are compared again, until
    none passes. With two servers left, a difference cannot be pinned on one: both are
    named, and the note says so.

    Returns (one test per server from the first round, names of the odd servers in
    order, each with its round's test).
    """
    ok = ~np.isnan(values) if values.dtype.kind == "f" else np.ones(values.size, bool)
    ids = [i for i in range(len(names)) if int(((server == i) & ok).sum()) >= MIN_GROUP]
    first: list[dict[str, Any]] = []
    named: list[dict[str, Any]] = []
    pool = list(ids)
    while len(pool) >= 2:
        sel = ok & np.isin(server, pool)
        ranks = Ranks.of(values[sel])
        srv = server[sel]
        tests = []
        for i in pool:
            t = mann_whitney(ranks, srv == i)
            if t is None:
                continue
            t = {"server": names[i], "rows": int((srv == i).sum()), **t}
            t["differs"] = t["p"] < alpha and abs(t["effect"]) >= min_effect
            tests.append((i, t))
        if not first:
            first = [t for _, t in tests]
        odd = [(i, t) for i, t in tests if t["differs"]]
        if not odd:
            break
        if len(pool) == 2:
            named += [{**t, "pair": True} for _, t in odd]
            break
        i, t = max(odd, key=lambda it: abs(it[1]["effect"]))
        named.append({**t, "round": len(ids) - len(pool) + 1})
        pool.remove(i)
    return first, named


def duplicates(keys: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row, whether an earlier row has the same key, and that first row's index.

    `keys` are 64-bit hashes (one per row), `present` marks rows that have one. A sort,
    not a hash table: 1M keys take a fraction of a second and 8 bytes each.
    """
    n = keys.size
    dup = np.zeros(n, dtype=bool)
    first = np.full(n, -1, dtype=np.int64)
    idx = np.flatnonzero(present)
    if idx.size < 2:
        return dup, first
    k = keys[idx]
    order = np.lexsort((idx, k))  # by key, then by position: each group's first row first
    ks, rows = k[order], idx[order]
    new_group = np.r_[True, ks[1:] != ks[:-1]]
    group_first = rows[np.maximum.accumulate(np.where(new_group, np.arange(ks.size), 0))]
    later = ~new_group
    dup[rows[later]] = True
    first[rows[later]] = group_first[later]
    return dup, first
