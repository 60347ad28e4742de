"""The report of a generate job: its history drawn from the request log (joblog.py).

Rows/s and tokens/s over time per server, each server's up/down timeline (its down
intervals, with the rows requeued off it), failures by kind over time, where the job was
headed (elapsed + rows left at the rate of the last 5 minutes) against the plan's bar, and the
distributions of latency and length. Same figures, same page, as the run report.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from genbench import fmt
from genbench.compare.runs import PALETTE
from genbench.generate.store import layout
from genbench.generate.store.runlog import read_runs
from genbench.report.concurrency import concurrency_figure
from genbench.report.figures import FAIL_COLOR, Band, Figure, HBar, Series
from genbench.report.joblog import EDGES, JobHistory, read_job_log

ETA_WINDOW_S = 300.0  # from the log's bins (the live panel's ETA is generate/eta.py's)


def is_job(path: Path) -> bool:
    """A generate output with something to draw: a request log, or its engines' events
    (a first start that failed sent nothing, and is drawn all the same)."""
    return bool(layout.shard_tags(path) or layout.engine_tags(path))


def load_job(path: Path, tag: str | None = None) -> tuple[JobHistory, list[dict[str, Any]]]:
    """The job's (or one shard's) history and its runs' notes (none for older jobs)."""
    return read_job_log(layout.Layout(path, tag).requests), read_runs(path, tag)


class _Axis:
    """Time since the job's first request, in a unit that suits its length."""

    def __init__(self, h: JobHistory) -> None:
        self.t0 = h.start
        span = h.end - h.start
        self.unit, self.name = (3600.0, "hours") if span > 3 * 3600 else (
            (60.0, "minutes") if span > 300 else (1.0, "seconds"))  # fmt: skip

    def __call__(self, t: float) -> float:
        return (t - self.t0) / self.unit

    @property
    def label(self) -> str:
        return f"{self.name} since the job's first request"


# the run report's colours without its reds: red is a server down, here
COLORS = tuple(c for c in PALETTE if c not in ("#e15759", "#ff9da7"))


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _down_bands(h: JobHistory, ax: _Axis) -> list[Band]:
    bands = []
    for i, s in enumerate(h.servers.values()):
        for a, z, n in s.downs:
            bands.append(Band(ax(a), ax(z), f"{_short(s.name)} down ({n} requeued)", _color(i),
                              0.14))  # fmt: skip
    return bands


def rate_figure(h: JobHistory, ax: _Axis, metric: str) -> Figure:
    """Rows/s (metric 'done') or tokens/s ('tokens') per server over time."""
    rows = metric == "done"
    b = h.bins
    w = smoothing_bins(h)
    fig = Figure(f"job_{'rows' if rows else 'tokens'}", "Rows/s over time" if rows else
                 "Tokens/s over time", f"per server, the mean over the last "
                 f"{fmt.duration(w * b.width)} (bins of {fmt.duration(b.width)}); shaded: a "
                 "server down", ax.label, "rows/s" if rows else "tokens/s",
                 wide=True)  # fmt: skip
    xs = [ax(t + b.width / 2) for t in b.starts()]
    total = np.zeros(b.n)
    for i, name in enumerate(h.servers):
        ys = _trailing_mean(np.asarray(b.series(metric, name), dtype=float), w) / b.width
        total += ys
        fig.series.append(Series(_short(name), _color(i), xs, ys.tolist(), marker="none"))
    if len(h.servers) > 1:
        fig.series.append(Series("all servers", "#333", xs, total.tolist(), dash="dash",
                                 marker="none"))  # fmt: skip
    if not rows:
        think = _trailing_mean(_total(b, "thinking", h), w) / b.width
        fig.series.append(Series("thinking, all servers", "#777", xs, list(think), dash="dot",
                                 marker="none"))  # fmt: skip
    fig.bands = _down_bands(h, ax)
    if not b.n:
        fig.empty = "no requests in the log"
    return fig


SMOOTH_SHARE, SMOOTH_MIN_S, SMOOTH_MAX_S = 1 / 40, 10.0, 1800.0


def smoothing_bins(h: JobHistory) -> int:
    """Bins a rate over time is averaged over: 1/40 of the job's span, at least 10 s and at
    most 30 min, so that a 3-minute job's 1-second bins read as rates, not spikes."""
    b = h.bins
    if not b.n:
        return 1
    want = min(max(SMOOTH_SHARE * b.n * b.width, SMOOTH_MIN_S), SMOOTH_MAX_S)
    return max(1, round(want / b.width))


def _trailing_mean(v: np.ndarray, w: int) -> np.ndarray:
    """Each bin's mean over itself and the w - 1 before it (fewer at the start)."""
    if w <= 1 or not len(v):
        return v
    c = np.cumsum(np.concatenate([[0.0], v]))
    n = np.arange(1, len(v) + 1)
    lo = np.maximum(n - w, 0)
    return (c[n] - c[lo]) / (n - lo)


def _total(b: Any, metric: str, h: JobHistory) -> np.ndarray:
    """A metric's bins summed over the servers."""
    return sum((np.asarray(b.series(metric, n)) for n in h.servers), np.zeros(b.n))


def servers_figure(h: JobHistory, ax: _Axis) -> Figure:
    """Each server's timeline: up while its runs ran, red while down."""
    names = list(h.servers)
    fig = Figure("job_servers", "Servers up and down", "coloured: up while the job ran; red: "
                 "down (from the failure that took it out to the next request sent to it)",
                 ax.label, wide=True, y_categories=[_short(n) for n in names],
                 height=max(160, 60 + 44 * len(names)))  # fmt: skip
    for i, name in enumerate(names):
        s = h.servers[name]
        cuts = sorted((a, z) for a, z, _ in s.downs)
        for a, z in h.runs:
            for lo, hi in _minus(a, z, cuts):
                fig.bars.append(HBar(i, ax(lo), ax(hi), _color(i), 0.85, f"{_short(name)} up, "
                                     f"{fmt.duration(hi - lo)}"))  # fmt: skip
        for a, z, n in s.downs:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a))
            tip = (f"{_short(name)} down {fmt.duration(z - a)} from {when}; "
                   f"{fmt.counted(n, 'row')} requeued")  # fmt: skip
            fig.bars.append(HBar(i, ax(a), ax(z), FAIL_COLOR, 1.0, tip,
                                 f"down {fmt.duration(z - a)}, {n} requeued"))  # fmt: skip
    fig.legend = [("up", _color(0), ""), ("down", FAIL_COLOR, "")]
    if not fig.bars:
        fig.empty = "no requests in the log"
    return fig


def _minus(a: float, z: float, cuts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """[a, z] without the intervals in `cuts` (sorted)."""
    out, at = [], a
    for lo, hi in cuts:
        if hi <= at or lo >= z:
            continue
        if lo > at:
            out.append((at, lo))
        at = max(at, hi)
    if at < z:
        out.append((at, z))
    return out


def failures_figure(h: JobHistory, ax: _Axis) -> Figure:
    b = h.bins
    per = 60.0 if b.width < 3600 else 3600.0
    unit = "minute" if per == 60 else "hour"
    fig = Figure("job_failures", "Failures over time", f"failed requests per {unit}, by kind; "
                 "dashed: rows requeued (their server went away), dotted: retries", ax.label,
                 f"per {unit}", wide=True)  # fmt: skip
    xs = [ax(t + b.width / 2) for t in b.starts()]
    scale = per / b.width
    for i, kind in enumerate(b.keys("failures")):
        ys = [v * scale for v in b.series("failures", kind)]
        fig.series.append(Series(kind, _color(i + 3), xs, ys, marker="none"))
    for metric, dash, color in (("requeued", "dash", "#333"), ("retry", "dot", "#777")):
        ys = _total(b, metric, h) * scale
        if np.any(ys):
            fig.series.append(Series("rows requeued" if metric == "requeued" else "retries",
                                     color, xs, list(ys), dash=dash, marker="none"))  # fmt: skip
    fig.bands = _down_bands(h, ax)
    if not fig.series:
        fig.series.append(Series("no failures", _color(2), xs, [0.0] * len(xs), marker="none"))
    if not b.n:
        fig.empty = "no requests in the log"
    return fig


def eta_figure(h: JobHistory, ax: _Axis, notes: list[dict[str, Any]]) -> Figure:
    """Where each run was headed (elapsed + rows left at the last 5 minutes' rate, from the
    bins; simpler than the live panel's ETA, generate/eta.py)
    against the plan's forecast and its bar, in hours of the run."""
    fig = Figure("job_eta", "ETA against the plan", "each run's projected duration (elapsed + "
                 "ETA at the rate of the last 5 minutes); grey: the plan's forecast and its "
                 "95% bar", ax.label, f"projected run duration ({ax.name})", wide=True)  # fmt: skip
    b = h.bins
    starts = np.asarray(b.starts())
    ended = _total(b, "done", h) + _total(b, "failed", h)
    window = max(1, round(ETA_WINDOW_S / b.width))
    for k, note in enumerate(n for n in notes if n.get("event") == "start"):
        run = next(((a, z) for a, z in h.runs if z >= note["at"] and a >= note["at"] - 60), None)
        if run is None or not b.n:
            continue
        inside = (starts + b.width > run[0]) & (starts <= run[1])
        idx = np.nonzero(inside)[0]
        if not len(idx):
            continue
        cum = np.cumsum(np.where(inside, ended, 0.0))
        left = note["total"] - note.get("done_before", 0) - note.get("failed_before", 0) - cum
        recent = cum - np.concatenate([np.zeros(window), cum[:-window]])[: len(cum)]
        span = np.minimum(window, np.arange(len(cum)) - idx[0] + 1) * b.width  # so far
        xs, ys = [], []
        for i in idx:
            if recent[i] > 0:
                t = min(starts[i] + b.width, run[1])
                xs.append(ax(t))
                ys.append((t - note["at"] + max(left[i], 0) * span[i] / recent[i]) / ax.unit)
        fig.series.append(Series(f"run {k + 1}", _color(k), xs, ys, marker="none"))
        plan = note.get("plan") or {}
        for key, dash in (("seconds", ""), ("lo_s", "dash"), ("hi_s", "dash")):
            if plan.get(key) is not None:
                label = "plan" if key == "seconds" else "plan's bar"
                y = plan[key] / ax.unit
                fig.series.append(Series(label, "#888", [ax(run[0]), ax(run[1])], [y, y],
                                         dash=dash, marker="none"))  # fmt: skip
    _clip_to_plan(fig, ax)
    if not fig.series:
        fig.empty = ("no run notes (.genbench/runs.jsonl): the job ran on an older genbench"
                     if not notes else "too few rows for an ETA")  # fmt: skip
    if not any(s.label == "plan" for s in fig.series):  # no --plan: the ETA alone
        fig.title = "Projected duration (ETA; no --plan to hold it against)"
        fig.subtitle = fig.subtitle.split("; grey:")[0]
    return fig


def _clip_to_plan(fig: Figure, ax: _Axis) -> None:
    """The y axis set by the plan's range (twice its slow end), else by the projections'
    median (three times it): one early projection from a few rows no longer flattens the
    plan and its bar; the projections past it are drawn at the edge, and said so."""
    plan = [y for s in fig.series if s.label.startswith("plan") for y in s.ys]
    runs = [y for s in fig.series if not s.label.startswith("plan") for y in s.ys]
    if not runs:
        return
    cap = 2 * max(plan) if plan else 3 * float(np.median(runs))
    if max(runs) <= cap or cap <= 0:
        return
    for s in fig.series:
        if not s.label.startswith("plan"):
            s.ys = [min(y, cap) for y in s.ys]
    fig.y_max = cap
    basis = "twice the plan's slow end" if plan else "three times the projections' median"
    fig.subtitle += f"; projections above {cap:,.3g} {ax.name} ({basis}) drawn at the top"


def cdf_figure(h: JobHistory, fid: str, title: str, keys: list[tuple[str, str]],
               x_label: str) -> Figure:  # fmt: skip
    fig = Figure(fid, title, "cumulative share of answered requests (log scale)", x_label,
                 "share of requests", x_log=True, y_max=1.0)  # fmt: skip
    for i, (key, label) in enumerate(keys):
        counts = h.hist[key]
        total = counts.sum()
        if not total:
            continue
        nz = np.nonzero(counts)[0]
        ys = np.cumsum(counts)[nz] / total
        fig.series.append(Series(label, _color(i), EDGES[key][nz + 1].tolist(), ys.tolist(),
                                 step=True, marker="none"))  # fmt: skip
    if not fig.series:
        fig.empty = "no answered requests"
    return fig


def figures(h: JobHistory, notes: list[dict[str, Any]], tag: str | None = None
            ) -> list[Figure]:  # fmt: skip
    """The job's figures; a shard's ids end in its tag, so that each is unique on the page."""
    ax = _Axis(h)
    figs = [
        rate_figure(h, ax, "done"),
        rate_figure(h, ax, "tokens"),
        servers_figure(h, ax),
        failures_figure(h, ax),
        eta_figure(h, ax, notes),
        cdf_figure(h, "job_latency", "Latency", [("ttft_s", "time to first token"),
                   ("latency_s", "whole request")], "seconds"),  # fmt: skip
        cdf_figure(h, "job_lengths", "Lengths", [("completion_tokens", "output tokens"),
                   ("reasoning_tokens", "thinking tokens")], "tokens"),  # fmt: skip
    ]
    if (auto := concurrency_figure(notes, ax, ax.label, COLORS)) is not None:
        figs.append(auto)  # -c auto: each server's level over time
    for f in figs if tag else []:
        f.id += f"_{tag}"
        f.title += f" (shard {tag.replace('of', '/')})"
    return figs


def _short(url: str) -> str:
    return url.removeprefix("http://").removeprefix("https://").removesuffix("/v1")


def label(path: Path, tag: str | None = None) -> str:
    return str(path) + (f", shard {tag.replace('of', '/')}" if tag else "")
