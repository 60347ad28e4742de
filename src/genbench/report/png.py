"""`--png DIR`: the report's figures as PNG files, drawn by matplotlib from the same data.

matplotlib is optional (`pip install 'genbench[report]'`): the HTML report needs
nothing, and a slide deck is the only reason to want the pictures as files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genbench.errors import UsageError
from genbench.report.figures import Figure

LINESTYLE = {"": "-", "dash": "--", "dot": ":"}
MARKER = {"circle": "o", "square": "s", "none": None}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(
            "--png needs matplotlib: pip install 'genbench[report]' (the HTML report does not)"
        ) from None
    return plt


def draw(fig: Figure, path: Path) -> None:
    plt = _pyplot()
    height = max(3.2, fig.height / 95)
    f, ax = plt.subplots(figsize=(9, height), dpi=120)
    try:
        ax.set_title(fig.title, loc="left", fontsize=13, fontweight="bold")
        if fig.subtitle:
            f.text(0.01, 0.005, fig.subtitle, fontsize=8, color="#666", ha="left", va="bottom")
        if not fig.has_data:
            ax.text(0.5, 0.5, fig.empty or "nothing to plot", ha="center", va="center")
            ax.set_axis_off()
        else:
            _draw_axes(fig, ax)
        f.tight_layout(rect=(0, 0.03, 1, 1))
        f.savefig(path)
    finally:
        plt.close(f)


def _draw_axes(fig: Figure, ax: Any) -> None:
    for b in fig.bands:
        ax.axvspan(b.x0, b.x1, color=b.color, alpha=b.opacity, lw=0)
    for bar in fig.bars:
        ax.barh(
            bar.y,
            bar.x1 - bar.x0,
            left=bar.x0,
            height=fig.bar_height,
            color=bar.color,
            alpha=bar.opacity,
            lw=0,
        )
    for s in fig.series:
        kw = {"color": s.color, "label": s.label, "linestyle": LINESTYLE.get(s.dash, "-")}
        if not s.line:
            ax.scatter(s.xs, s.ys, s=12, alpha=0.55, color=s.color, label=s.label, lw=0)
        elif s.step:
            ax.step(s.xs, s.ys, where="post", lw=1.8, **kw)
        else:
            ax.plot(s.xs, s.ys, marker=MARKER.get(s.marker), lw=2, ms=5, **kw)
        if s.whiskers:
            lo = [y - w[0] for y, w in zip(s.ys, s.whiskers, strict=False)]
            hi = [w[1] - y for y, w in zip(s.ys, s.whiskers, strict=False)]
            ax.errorbar(s.xs, s.ys, yerr=[lo, hi], fmt="none", ecolor=s.color, alpha=0.7, capsize=3)
    if fig.x_log:
        from matplotlib.ticker import FuncFormatter

        ax.set_xscale("log", base=2 if fig.x_ticks else 10)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    if fig.x_ticks:
        ax.set_xticks(fig.x_ticks, [f"{t:g}" for t in fig.x_ticks])
        if not fig.x_log and fig.x_max is None:  # as the SVG: from 0, not zoomed on the points
            ax.set_xlim(left=min(0, min(fig.x_ticks) * 1.05), right=max(fig.x_ticks) * 1.05)
    if fig.x_max is not None:
        ax.set_xlim(left=fig.x_min if fig.x_log else 0, right=fig.x_max)
    if fig.y_categories:
        ax.set_yticks(range(len(fig.y_categories)), fig.y_categories)
        ax.invert_yaxis()
    elif fig.bars and not fig.series:
        ax.invert_yaxis()
    else:
        ax.set_ylim(bottom=0, top=fig.y_max)
    ax.set_xlabel(fig.x_label)
    ax.set_ylabel(fig.y_label)
    ax.grid(True, color="#e6e6e6")
    ax.set_axisbelow(True)
    if fig.series:
        ax.legend(fontsize=8, frameon=False, loc="best")
    elif fig.legend:  # bars: the page's legend, as patches
        from matplotlib.patches import Patch

        handles = [Patch(color=c, alpha=0.35 if style == "light" else 1.0, label=label)
                   for label, c, style in fig.legend]  # fmt: skip
        ax.legend(handles=handles, fontsize=8, frameon=False, loc="best")


def export(figs: list[Figure], out_dir: Path) -> list[Path]:
    """One PNG per figure, named by its id; returns the paths written."""
    _pyplot()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--png {out_dir}: cannot create it ({e.strerror or e})") from None
    paths = []
    for fig in figs:
        p = out_dir / f"{fig.id}.png"
        draw(fig, p)
        paths.append(p)
    return paths
