"""The report's plots as data: what to draw, independent of how it is drawn.

Each builder turns runs into a `Figure` (series, bands, bars, axis labels with
units); `svg.py` draws it into the HTML page and `png.py` draws the same figure
with matplotlib for `--png`. Keeping the plot a value means the two outputs
can never disagree about what the data was, and tests can inspect it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from genbench.compare.runs import Run, concurrencies
from genbench.records import RequestRecord
from genbench.stats import quantile

MAX_BARS = 400  # Gantt rows drawn at most; more requests are sampled evenly
MAX_POINTS = 300  # points per CDF series
FAIL_COLOR = "#d62728"
SWEEP = ("burst", "sustained")


@dataclass
class Series:
    """A line (or step line, for CDFs) through points, drawn in one run's colour."""

    label: str
    color: str
    xs: list[float]
    ys: list[float]
    dash: str = ""  # "" solid, "dash", "dot"
    marker: str = "circle"  # circle | square | dot (a small one, for repeats) | none
    step: bool = False
    line: bool = True  # False: points only (one per repeat, around the line of their mean)
    # vertical whiskers per point (lo, hi), e.g. p10..p90 of per-request rates
    whiskers: list[tuple[float, float]] | None = None
    tips: list[str] | None = None  # hover text per point


@dataclass
class Band:
    """A shaded x range: the steady window, the ramp, the tail."""

    x0: float
    x1: float
    label: str
    color: str
    opacity: float = 0.12


@dataclass
class HBar:
    """A horizontal bar at row `y` from x0 to x1 (Gantt rows, stacked token bars)."""

    y: float
    x0: float
    x1: float
    color: str
    opacity: float = 1.0
    tip: str = ""
    text: str = ""  # written inside the bar when it fits


@dataclass
class Figure:
    id: str
    title: str
    subtitle: str = ""
    x_label: str = ""
    y_label: str = ""
    x_log: bool = False
    x_ticks: list[float] | None = None  # explicit ticks (concurrency levels)
    x_min: float | None = None  # lower end of a log x axis
    x_max: float | None = None  # clip the x axis (CDF tails)
    y_max: float | None = None
    series: list[Series] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    bars: list[HBar] = field(default_factory=list)
    bar_height: float = 0.8
    y_categories: list[str] | None = None  # labels of bar rows, top to bottom
    legend: list[tuple[str, str, str]] = field(default_factory=list)  # (label, colour, style)
    empty: str = ""  # why there is nothing to draw
    height: int = 340
    wide: bool = False  # spans the page

    @property
    def has_data(self) -> bool:
        return bool(self.series or self.bars) and not self.empty


def ok(records: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if r.ok]


def dodge(i: int, n: int, log: bool) -> float:
    """A factor (log axis) or offset that sets run i's marks beside, not on, the others'."""
    shift = (i - (n - 1) / 2) * 0.035
    return 2**shift if log else shift


# --- throughput and per-request rate vs concurrency ---------------------------------------


def sweep_values(run: Run, kind: str, key: str) -> dict[int, list[float]]:
    """Per concurrency, the summary value `key` of every repeat of the side `run` stands for."""
    out: dict[int, list[float]] = {}
    for r in run.repeat_runs:
        for p in r.kind(kind):
            v = (p.get("summary") or {}).get(key)
            if v is not None and p.get("concurrency"):
                out.setdefault(int(p["concurrency"]), []).append(float(v))
    return dict(sorted(out.items()))


def repeat_points(
    run: Run, label: str, points: list[tuple[float, list[float]]], unit: str, log: bool
) -> Series | None:
    """The repeats of a side as small points beside their mean, so a reader sees the spread."""
    xs, ys, tips = [], [], []
    for x, values in points:
        if len(values) < 2:
            continue
        for k, v in enumerate(values):
            # spread the repeats a little sideways, so they do not hide one another
            off = (k - (len(values) - 1) / 2) * 0.012
            xs.append(x * 2**off if log else x * (1 + off))
            ys.append(v)
            tips.append(f"{label} C={x:g}, repeat {k + 1}: {v:,.0f} {unit}")
    if not xs:
        return None
    return Series(f"{label} repeats", run.color, xs, ys, marker="dot", line=False, tips=tips)


def sweep_levels(runs: list[Run]) -> list[int]:
    """The concurrency levels of the runs' sweeps, burst and sustained together."""
    return sorted(set(concurrencies(runs, "burst")) | set(concurrencies(runs, "sustained")))


def sweep_figure(runs: list[Run], name: str, title: str, subtitle: str, y_label: str) -> Figure:
    """An empty figure over the runs' concurrency levels: a log x axis once they span 8x."""
    levels = sweep_levels(runs)
    return Figure(
        name,
        title,
        subtitle,
        "concurrent requests (C)",
        y_label,
        x_log=len(levels) > 1 and levels[-1] / levels[0] >= 8,
        x_ticks=[float(c) for c in levels],
    )


def sweep_series(
    run: Run, kind: str, pts: list[tuple[float, float]], tips: list[str] | None = None
) -> Series:
    """One run's line of one sweep kind: sustained solid with circles, burst dashed with
    squares."""
    dash, marker = ("", "circle") if kind == "sustained" else ("dash", "square")
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    return Series(f"{run.label} {kind}", run.color, xs, ys, dash=dash, marker=marker, tips=tips)


def throughput(runs: list[Run]) -> Figure:
    fig = sweep_figure(
        runs,
        "throughput",
        "Throughput vs concurrency",
        "sustained: tokens arriving in the steady window (solid); burst: tokens / wall (dashed)",
        "output tokens/s",
    )
    repeats = False
    for run in runs:
        for kind, key in (("sustained", "steady_tps"), ("burst", "output_tps")):
            by_c = sweep_values(run, kind, key)
            pts = [(float(c), sum(v) / len(v)) for c, v in by_c.items()]
            if not pts:
                continue
            n = len(run.repeat_runs)
            what = f" (mean of {n} repeats)" if n > 1 else ""
            tips = [f"{run.label} {kind} C={x:g}: {y:,.0f} tok/s{what}" for x, y in pts]
            fig.series.append(sweep_series(run, kind, pts, tips))
            dots = repeat_points(
                run, f"{run.label} {kind}", [(float(c), v) for c, v in by_c.items()], "tok/s",
                fig.x_log,
            )  # fmt: skip
            if dots is not None:
                fig.series.append(dots)
                repeats = True
    if repeats:
        fig.subtitle += "; small points: each repeat, around the line of their mean"
    if not fig.series:
        fig.empty = "no concurrency sweep in these runs"
    return fig


def per_request_rate(runs: list[Run]) -> Figure:
    fig = sweep_figure(
        runs,
        "per_request",
        "Per-request decode speed vs concurrency",
        "median of each request's decode tok/s; whiskers p10–p90 (what one user sees)",
        "decode tokens/s per request",
    )
    for i, run in enumerate(runs):
        k = dodge(i, len(runs), fig.x_log)
        xs, ys, whisk, tips = [], [], [], []
        medians: list[tuple[float, list[float]]] = []
        for c in sweep_levels(runs):
            pooled: list[float] = []
            meds: list[float] = []
            for rep in run.repeat_runs:
                p = rep.sweep_phase("sustained", c) or rep.sweep_phase("burst", c)
                if p is None:
                    continue
                rates = [r.decode_rate for r in ok(rep.records(p["name"])) if r.decode_rate]
                d = (p.get("summary") or {}).get("decode_tps") or {}
                if rates:
                    pooled += rates
                    meds.append(quantile(rates, 0.5))
                elif d.get("p50") is not None:
                    meds.append(d["p50"])
                    pooled += [d.get("min") or d["p50"], d["p50"], d.get("p90") or d["p50"]]
            if not meds:
                continue
            lo, hi = quantile(pooled, 0.1), quantile(pooled, 0.9)
            med = sum(meds) / len(meds) if len(meds) > 1 else quantile(pooled, 0.5)
            x = c * (k if fig.x_log else 1 + k)
            xs.append(x)
            ys.append(med)
            whisk.append((lo, hi))
            what = f"mean of {len(meds)} repeats' medians" if len(meds) > 1 else "median"
            tips.append(
                f"{run.label} C={c}: {what} {med:,.0f} tok/s (p10 {lo:,.0f}, p90 {hi:,.0f})"
            )
            medians.append((x, meds))
        if xs:
            fig.series.append(Series(run.label, run.color, xs, ys, whiskers=whisk, tips=tips))
            dots = repeat_points(run, f"{run.label} median", medians, "tok/s", fig.x_log)
            if dots is not None:
                fig.series.append(dots)
    if any(not s.line for s in fig.series):
        fig.subtitle += "; small points: each repeat's median, around the line of their mean"
    if not fig.series:
        fig.empty = "no concurrency sweep in these runs"
    return fig


# --- latency CDFs ------------------------------------------------------------------------


def focus_phase(runs: list[Run], name: str | None = None) -> str | None:
    """The phase the timeline plots show: given, else the highest concurrency all runs share
    (sustained with a steady window, then any sustained, then burst), else the first run's
    highest-concurrency sweep phase."""
    if name:
        return name

    def windowed(c: int) -> bool:
        return all(
            ((r.sweep_phase("sustained", c) or {}).get("summary") or {}).get("steady_window_s")
            for r in runs
        )

    for kind in ("sustained", "burst"):
        shared = set.intersection(*(set(concurrencies([r], kind)) for r in runs))
        if kind == "sustained" and any(windowed(c) for c in shared):
            # the timeline is there to show the steady window: pick a phase that has one
            shared = {c for c in shared if windowed(c)}
        if shared:
            return f"{kind}-c{max(shared)}"
    for kind in ("sustained", "burst"):
        levels = concurrencies(runs[:1], kind)
        if levels:
            return f"{kind}-c{levels[-1]}"
    return None


def low_phase(runs: list[Run], focus: str | None) -> str | None:
    """The lowest-concurrency phase of the same kind, to show what load does to latency."""
    if not focus or "-c" not in focus:
        return None
    kind = focus.split("-c")[0]
    shared = [set(concurrencies([r], kind)) for r in runs]
    common = sorted(set.intersection(*shared)) if shared else []
    name = f"{kind}-c{common[0]}" if common else None
    return name if name != focus else None


def _cdf(values: np.ndarray) -> tuple[list[float], list[float]]:
    """Sorted values and their cumulative fractions, at most MAX_POINTS of them."""
    xs = np.sort(values)
    n = len(xs)
    idx = np.unique(np.linspace(0, n - 1, min(n, MAX_POINTS)).round().astype(int))
    return xs[idx].tolist(), ((idx + 1) / n).tolist()


def gaps_ms(records: list[RequestRecord]) -> np.ndarray:
    """Every gap between chunks of these requests, in ms (numpy: a long run has millions)."""
    parts = [np.diff(r.chunk_offsets) for r in records if len(r.chunk_offsets) > 1]
    return np.concatenate(parts) * 1000 if parts else np.empty(0)


def latency_cdf(runs: list[Run], metric: str, focus: str | None) -> Figure:
    """TTFT (per request) or ITL (per chunk gap) CDF at the focus phase and at low load."""
    low = low_phase(runs, focus)
    what = "TTFT" if metric == "ttft" else "inter-chunk latency (ITL)"
    fig = Figure(
        f"{metric}_cdf",
        f"{what} distribution",
        f"solid: {focus or '—'}" + (f"; dotted: {low}" if low else "") + "; x axis cut at p99.5",
        "TTFT (ms)" if metric == "ttft" else "gap between chunks (ms)",
        "fraction of " + ("requests" if metric == "ttft" else "gaps") + " ≤ x",
        y_max=1.0,
    )
    tails, heads = [], []
    for run in runs:
        for name, dash in ((focus, ""), (low, "dot")):
            if not name:
                continue
            recs = ok(run.records(name))
            if metric == "ttft":
                vals = np.array([r.ttft * 1000 for r in recs if r.ttft is not None])
            else:
                vals = gaps_ms(recs)
            if not len(vals):
                continue
            xs, ys = _cdf(vals)
            tails.append(float(np.quantile(vals, 0.995)))
            pos = vals[vals > 0]
            if len(pos):
                heads.append(float(np.quantile(pos, 0.005)))
            fig.series.append(
                Series(
                    f"{run.label} {name}", run.color, xs, ys, dash=dash, marker="none", step=True
                )
            )
    if tails:
        fig.x_max = max(tails) * 1.05 or None
    if heads and fig.x_max and fig.x_max / min(heads) > 20:
        # a tail far from the body: a log axis shows both
        fig.x_log, fig.x_min = True, min(heads) / 1.3
        fig.x_max = max(tails) * 1.3
        fig.subtitle = fig.subtitle.replace("x axis cut at p99.5", "log x axis")
    if not fig.series:
        fig.empty = (
            "no requests.jsonl next to result.json"
            if not any(r.has_records for r in runs)
            else "no sweep phase with successful requests"
        )
    return fig


# --- the timeline of one phase ----------------------------------------------------------


def token_split(runs: list[Run]) -> Figure:
    fig = Figure(
        "token_split",
        "Thinking vs answer tokens",
        "output tokens of successful requests over all measured phases; light = thinking",
        "output tokens",
        "",
        y_categories=[r.label for r in runs],
        bar_height=0.55,
        height=max(160, 90 + 46 * len(runs)),
        wide=True,
    )
    any_tokens = False
    for i, run in enumerate(runs):
        think = answer = 0
        for p in run.phases:
            if p.get("kind") == "warmup":
                continue
            s = p.get("summary") or {}
            think += int(s.get("thinking_tokens") or 0)
            answer += int(s.get("answer_tokens") or 0)
        total = think + answer
        if not total:
            continue
        any_tokens = True
        share = think / total
        t_text = f"{think:,} thinking ({share:.0%})"
        a_text = f"{answer:,} answer ({1 - share:.0%})"
        if think:
            fig.bars.append(HBar(i, 0, think, run.color, 0.35, f"{run.label}: {t_text}", t_text))
        fig.bars.append(HBar(i, think, total, run.color, 1.0, f"{run.label}: {a_text}", a_text))
    fig.legend = [("thinking", "#777777", "light"), ("answer", "#777777", "block")]
    if not any_tokens:
        fig.empty = "no successful requests"
    return fig


def server_metric(
    runs: list[Run], key: str, title: str, y_label: str, scale: float = 1.0
) -> Figure:
    """A server-side figure (peak gauge or acceptance) vs concurrency, sustained and burst."""
    fig = sweep_figure(
        runs,
        f"server_{key}",
        title,
        "from the server's /metrics, sampled during each phase; solid sustained, dashed burst",
        y_label,
    )
    for i, run in enumerate(runs):
        k = dodge(i, len(runs), fig.x_log)
        for kind in ("sustained", "burst"):
            pts = [
                (p["concurrency"] * (k if fig.x_log else 1 + k), float(m[key]) * scale)
                for p in run.kind(kind)
                if (m := p.get("server_metrics") or {}).get(key) is not None
            ]
            if pts:
                fig.series.append(sweep_series(run, kind, pts))
    return fig


SERVER_FIGURES: tuple[tuple[str, str, str, float], ...] = (
    ("spec_mean_acceptance_length", "Speculative decoding: mean acceptance length", "tokens", 1.0),
    ("kv_cache_usage_peak", "KV cache usage (peak)", "KV cache used (%)", 100.0),
    ("running_peak", "Requests running (peak)", "requests", 1.0),
    ("waiting_peak", "Requests waiting (peak)", "requests", 1.0),
)


def server_figures(runs: list[Run]) -> list[Figure]:
    """Only the server metrics some run has, and only when one of them is not all zeros."""
    out = []
    for key, title, unit, scale in SERVER_FIGURES:
        fig = server_metric(runs, key, title, unit, scale)
        if fig.series and any(y for s in fig.series for y in s.ys):
            out.append(fig)
    return out


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text)
