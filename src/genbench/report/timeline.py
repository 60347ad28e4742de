"""The report's timeline plots (each request as a bar over time with the steady window, and
tokens arriving over time) and `all_figures`, every plot of a report in its order."""

from __future__ import annotations

import numpy as np

from genbench.compare.runs import Run
from genbench.report.figures import (
    FAIL_COLOR,
    MAX_BARS,
    Band,
    Figure,
    HBar,
    Series,
    focus_phase,
    gaps_ms,
    latency_cdf,
    ok,
    per_request_rate,
    server_figures,
    slug,
    throughput,
    token_split,
)
from genbench.stats import token_events


def window_bands(run: Run, name: str, end: float) -> list[Band]:
    """Ramp, steady window and tail of a sustained phase, in seconds from its first send."""
    p = run.phase(name) or {}
    w = (p.get("summary") or {}).get("steady_window_s")
    if not w:
        return []
    return [
        Band(0.0, w[0], "ramp", "#888888", 0.10),
        Band(w[0], w[1], "steady window", run.color, 0.16),
        Band(w[1], end, "tail", "#888888", 0.10),
    ]


def gantt(run: Run, name: str | None, max_bars: int = MAX_BARS, wide: bool = False) -> Figure:
    fig = Figure(
        f"gantt_{slug(run.label)}",
        f"Requests over time — {run.label}",
        "",
        "seconds since the phase's first request",
        "request (in send order)",
        wide=wide,
    )
    recs = sorted(run.records(name), key=lambda r: r.t_send) if name else []
    if not recs:
        fig.empty = f"no requests for phase {name}" if name else "no sweep phase"
        return fig
    t0 = recs[0].t_send
    shown = recs
    if len(recs) > max_bars:
        step = len(recs) / max_bars
        shown = [recs[int(i * step)] for i in range(max_bars)]
    end = max((r.t_end or r.t_send) for r in recs) - t0
    fig.subtitle = (
        f"{name}: light = waiting for the first token, solid = decoding, red = failed; "
        "shaded: ramp, steady window, tail"
        + (f"; {len(shown)} of {len(recs)} requests drawn" if len(shown) < len(recs) else "")
    )
    for i, r in enumerate(shown):
        s = r.t_send - t0
        e = (r.t_end if r.t_end is not None else r.t_send) - t0
        tip = f"{r.id}: sent {s:.2f} s, " + (
            f"first token +{r.ttft * 1000:.0f} ms, " if r.ttft is not None else ""
        )
        tip += f"done {e:.2f} s" + (
            f", {r.completion_tokens} tokens" if r.ok else f", {r.error_kind}"
        )
        if not r.ok:
            fig.bars.append(HBar(i, s, max(e, s), FAIL_COLOR, 1.0, tip))
            continue
        first = s + (r.ttft or 0.0)
        fig.bars.append(HBar(i, s, first, run.color, 0.35, tip))
        fig.bars.append(HBar(i, first, max(e, first), run.color, 1.0, tip))
    fig.bands = window_bands(run, name or "", end)
    fig.height = int(min(700, max(260, 60 + 3 * len(shown))))
    fig.bar_height = 0.9
    fig.legend = [
        ("waiting for first token", run.color, "light"),
        ("decoding", run.color, "block"),
        ("failed", FAIL_COLOR, "block"),
    ]
    return fig


def tokens_over_time(runs: list[Run], name: str | None, max_bins: int = 80) -> Figure:
    fig = Figure(
        "tokens_over_time",
        "Tokens/s over time",
        f"{name or '—'}: output tokens arriving per time bin; shaded: steady window; "
        "dashed: the rate measured in it",
        "seconds since the phase's first request",
        "output tokens/s",
        wide=True,
    )
    for run in runs:
        recs = ok(run.records(name)) if name else []
        if not recs:
            continue
        t0 = min(r.t_send for r in run.records(name or ""))
        # (time, tokens, is_thinking) per chunk, as arrays: a long run has millions
        events = [np.array(ev, dtype=float) for r in recs if (ev := token_events(r))]
        if not events:
            continue
        ev = np.concatenate(events)
        times, tokens = ev[:, 0] - t0, ev[:, 1]
        end = float(times.max())
        # a bin must hold many decode steps, or it shows the step pattern, not the rate
        gaps = gaps_ms(recs) / 1000
        step = float(np.median(gaps[gaps > 0])) if (gaps > 0).any() else 0.0
        bins = int(max(8, min(max_bins, end / (10 * step) if step > 0 else max_bins)))
        width = end / bins if end > 0 else 1.0
        counts, _ = np.histogram(times, bins=bins, range=(0.0, bins * width), weights=tokens)
        xs = [(i + 0.5) * width for i in range(bins)]
        fig.series.append(
            Series(run.label, run.color, xs, (counts / width).tolist(), marker="none")
        )
        s = (run.phase(name or "") or {}).get("summary") or {}
        w, rate = s.get("steady_window_s"), s.get("steady_tps")
        if w and rate:
            label = "steady window" if len(runs) == 1 else f"{run.label} steady window"
            fig.bands.append(Band(w[0], w[1], label, run.color, 0.10))
            steady = f"{run.label} steady {rate:,.0f} tok/s"
            fig.series.append(
                Series(steady, run.color, [w[0], w[1]], [rate, rate], dash="dash", marker="none")
            )
    if not fig.series:
        fig.empty = "no requests.jsonl, or no phase to plot"
    return fig


# --- tokens split, server metrics -------------------------------------------------------


def all_figures(
    runs: list[Run], phase: str | None = None, max_bars: int = MAX_BARS
) -> list[Figure]:
    focus = focus_phase(runs, phase)
    figs = [
        throughput(runs),
        per_request_rate(runs),
        latency_cdf(runs, "ttft", focus),
        latency_cdf(runs, "itl", focus),
        tokens_over_time(runs, focus),
        *[gantt(r, focus, max_bars, wide=len(runs) == 1) for r in runs],
        token_split(runs),
        *server_figures(runs),
    ]
    return figs
