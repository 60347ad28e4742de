"""A run's summary cards and the flattening of its JSON for the numbers table."""

from __future__ import annotations

from typing import Any

from genbench.compare.runs import Run
from genbench.report.figures import sweep_values


def summary_cards(run: Run) -> list[tuple[str, str, str]]:
    """(label, value, detail) headline numbers of one run."""
    d = run.doc
    cards: list[tuple[str, str, str]] = []
    singles = [
        v
        for r in run.repeat_runs
        if (v := (r.doc.get("single_stream") or {}).get("mean_decode_tps"))
    ]
    if singles:
        of = f", of {len(singles)} repeats" if len(singles) > 1 else ""
        mean = sum(singles) / len(singles)
        cards.append(("single-stream decode", f"{mean:,.0f} tok/s", "mean over lengths" + of))
    best: tuple[float, int, str, list[float]] | None = None
    for kind, key in (("sustained", "steady_tps"), ("burst", "output_tps")):
        for c, values in sweep_values(run, kind, key).items():
            v = sum(values) / len(values)
            if v and (best is None or v > best[0]):
                best = (v, c, kind, values)
        if best:
            break
    n = len(run.repeat_runs)
    if best:
        what = f"{best[2]} at C={best[1]}" + (f", mean of {len(best[3])}" if n > 1 else "")
        cards.append(("peak throughput", f"{best[0]:,.0f} tok/s", what))
        if n > 1:
            lo, hi = min(best[3]), max(best[3])
            cards.append(("repeats", f"{n}", f"peak {lo:,.0f}–{hi:,.0f} tok/s"))
    knee = ((d.get("sweep") or {}).get("sustained") or {}).get("knee")
    if knee:
        cards.append(("knee", f"C={knee}", "no higher level adds 10%"))
    lows = [p for p in run.kind("single")] or run.kind("sustained")[:1]
    if lows:
        t = ((lows[0].get("summary") or {}).get("ttft_s") or {}).get("p50")
        if t is not None:
            cards.append(("TTFT p50", f"{t * 1000:,.0f} ms", lows[0]["name"]))
    accept = [
        m["spec_mean_acceptance_length"]
        for p in run.phases
        if (m := p.get("server_metrics") or {}).get("spec_mean_acceptance_length")
    ]
    if accept:
        cards.append(("acceptance length", f"{sum(accept) / len(accept):.2f}", "mean over phases"))
    req = fail = 0
    for p in (p for r in run.repeat_runs for p in r.phases):
        s = p.get("summary") or {}
        req += int(s.get("requests") or 0)
        fail += int(s.get("failed") or 0)
    cards.append(("failed requests", f"{fail:,}", f"of {req:,}"))
    return cards


def flatten(obj: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts as dotted keys, for a generic key/value table."""
    if isinstance(obj, dict):
        out: list[tuple[str, Any]] = []
        for k, v in obj.items():
            out.extend(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [(prefix, obj)]
