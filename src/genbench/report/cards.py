"""A run's summary cards: its headline numbers."""

from __future__ import annotations

from genbench.compare.rule import failures
from genbench.compare.runs import Run
from genbench.fmt import counted
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
    if (card := _acceptance_card(run)) is not None:
        cards.append(card)
    # compare's count (measured phases, the warm-up left out), so the two never disagree
    f = failures(run)
    cards.append(("failed requests", f"{f['failed']:,}", f"of {f['requests']:,} measured"))
    return cards


def _acceptance_card(run: Run) -> tuple[str, str, str] | None:
    """The run's acceptance length: pooled over its measured requests where each said its
    own (every step weighs alike: a 2-request burst does not weigh a third), else the mean
    of the phases' server figures."""
    measured = [p for p in run.phases if p.get("kind") != "warmup"]
    accs = [(p.get("summary") or {}).get("acceptance") for p in measured]
    if accs and all(a and a.get("requests") == a.get("of") for a in accs):
        steps = sum(a["steps"] for a in accs)
        n = sum(a["requests"] for a in accs)
        return ("acceptance length", f"{1 + sum(a['accepted'] for a in accs) / steps:.2f}",
                f"pooled over {counted(n, 'request')}")  # fmt: skip
    accept = [
        m["spec_mean_acceptance_length"]
        for p in run.phases
        if (m := p.get("server_metrics") or {}).get("spec_mean_acceptance_length")
    ]
    if accept:
        return ("acceptance length", f"{sum(accept) / len(accept):.2f}", "mean over phases")
    return None
