"""Draw a `Figure` as inline SVG: no JavaScript, no fonts or files to fetch.

The report must open offline, years later, from an e-mail attachment; a page
that depends on a CDN or a JS bundle does not. SVG drawn here needs nothing
but the browser, scales with the window (viewBox), and keeps every data point
inspectable: hovering a mark shows its value (an SVG <title>).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape

from genbench.report.figures import Figure, Series

WIDTH = 720
WIDE = 1440
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 68, 18, 14, 50
DASH = {"": "", "dash": "7 4", "dot": "2 3"}
FONT = "font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, 'Liberation Sans', sans-serif\""


def nice_step(span: float, target: int = 5) -> float:
    """A 1, 2, 2.5 or 5 × 10^k step giving about `target` ticks over `span`."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    step = nice_step(hi - lo, target)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    return ticks


def fmt_tick(v: float) -> str:
    a = abs(v)
    if a >= 10000:
        return f"{v / 1000:,.0f}k"
    if a >= 1000:
        return f"{v / 1000:.1f}k".replace(".0k", "k")
    if a >= 10 or v == 0:
        return f"{v:,.0f}"
    if a >= 1:
        return f"{v:.1f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


class Scale:
    """Data to pixels on one axis, linear or log."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool = False) -> None:
        self.log = log and lo > 0
        self.floor = lo  # values at or below 0 sit at the left edge of a log axis
        if self.log:
            lo, hi = math.log(lo), math.log(hi)
        if hi <= lo:
            hi = lo + 1.0
        self.lo, self.hi, self.p0, self.p1 = lo, hi, p0, p1

    def __call__(self, v: float) -> float:
        x = math.log(max(v, self.floor)) if self.log else v
        return self.p0 + (x - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks per decade inside [lo, hi] (just 1 per decade over many decades). A range
    narrower than that (lengths of 1,100 to 1,900 tokens) gets evenly spaced ticks instead,
    so that an axis never goes without its labels."""
    steps = (1, 2, 5) if hi / lo < 1e4 else (1,)
    out = []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0**k for m in steps if lo <= m * 10.0**k <= hi]
    if len(out) < 3:
        even = [t for t in nice_ticks(lo, hi, 4) if t > 0]
        out = even if len(even) > len(out) else out
    return out


def _x_domain(fig: Figure) -> tuple[float, float, list[float]]:
    xs = [x for s in fig.series for x in s.xs]
    xs += [v for b in fig.bars for v in (b.x0, b.x1)]
    xs += [v for b in fig.bands for v in (b.x0, b.x1)]
    if fig.x_log and fig.x_ticks:
        lo, hi = min(fig.x_ticks), max(fig.x_ticks)
        return lo / 1.25, hi * 1.25, list(fig.x_ticks)
    if fig.x_log:
        pos = [x for x in xs if x > 0]
        lo = fig.x_min if fig.x_min is not None else min(pos, default=1.0)
        hi = min(max(pos, default=10.0), fig.x_max or math.inf)
        hi = hi if hi > lo else lo * 10
        return lo, hi, log_ticks(lo, hi)
    lo = min(xs, default=0.0)
    hi = max(xs, default=1.0)
    if fig.x_max is not None:
        hi = min(hi, fig.x_max)
    lo = 0.0 if lo >= 0 else lo
    if hi <= lo:
        hi = lo + 1.0
    ticks = list(fig.x_ticks) if fig.x_ticks else nice_ticks(lo, hi)
    if fig.x_ticks:
        hi = max(hi, max(fig.x_ticks)) * 1.05
        if min(fig.x_ticks) < 0:  # an axis around 0 (% off a forecast) shows both ends
            lo = min(lo, min(fig.x_ticks)) * 1.05
    return lo, hi, ticks


def _y_domain(fig: Figure) -> tuple[float, float, list[float]]:
    ys = [y for s in fig.series for y in s.ys]
    ys += [w for s in fig.series for pair in (s.whiskers or []) for w in pair]
    hi = fig.y_max if fig.y_max is not None else max(ys, default=1.0)
    hi = hi if hi > 0 else 1.0
    ticks = nice_ticks(0.0, hi)
    if fig.y_max is None:
        step = ticks[1] - ticks[0] if len(ticks) > 1 else hi
        while ticks[-1] < hi * 1.04:
            ticks.append(round(ticks[-1] + step, 10))
        hi = ticks[-1]
    return 0.0, hi, ticks


def _marker(s: Series, x: float, y: float, tip: str | None) -> str:
    title = f"<title>{escape(tip)}</title>" if tip else ""
    if s.marker == "dot":
        return (
            f'<circle class="mark point repeat" cx="{x:.1f}" cy="{y:.1f}" r="2.8" '
            f'fill="{s.color}" fill-opacity="0.55" stroke="{s.color}" stroke-width="0.8">'
            f"{title}</circle>"
        )
    if s.marker == "square":
        return (
            f'<rect class="mark point" x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" '
            f'fill="white" stroke="{s.color}" stroke-width="2">{title}</rect>'
        )
    return (
        f'<circle class="mark point" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{s.color}" '
        f'stroke="white" stroke-width="1.2">{title}</circle>'
    )


def _path(s: Series, sx: Callable[[float], float], sy: Callable[[float], float]) -> str:
    pts = [(sx(x), sy(y)) for x, y in zip(s.xs, s.ys, strict=False)]
    if not pts or not s.line:
        return ""
    if s.step:
        # F = 0 left of the first value, a jump at each value, flat to the right edge
        start = pts[0][0] if getattr(sx, "log", False) else min(sx(0), pts[0][0])
        d = f"M{start:.1f},{sy(0):.1f} " + "".join(f"H{x:.1f} V{y:.1f} " for x, y in pts)
        d += f"H{pts[-1][0] + 2000:.1f}"
    else:
        d = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in pts)
    dash = DASH.get(s.dash, "")
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    width = 2.2 if not s.dash else 1.8
    return (
        f'<path class="mark line" d="{d}" fill="none" stroke="{s.color}" '
        f'stroke-width="{width}" stroke-linejoin="round"{dash_attr}><title>{escape(s.label)}'
        "</title></path>"
    )


def draw(fig: Figure, width: int = WIDTH) -> str:
    """The figure as one <svg> element (class "plot"), sized by its viewBox.

    A figure that spans the page is drawn on a wider canvas, not scaled up, so that
    its text stays the size of every other figure's."""
    w, h = width, fig.height
    head = (
        f'<svg class="plot" data-figure="{escape(fig.id)}" viewBox="0 0 {w} {h}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(fig.title)}" {FONT}>'
        f"<title>{escape(fig.title)}</title>"
    )
    if not fig.has_data:
        return (
            head + f'<rect x="1" y="1" width="{w - 2}" height="{h - 2}" rx="6" fill="#fafafa" '
            f'stroke="#ddd"/><text class="empty" x="{w / 2}" y="{h / 2}" text-anchor="middle" '
            f'font-size="14" fill="#777">{escape(fig.empty or "nothing to plot")}</text></svg>'
        )
    left = MARGIN_L + (60 if fig.y_categories else 0)
    x0, x1, y0, y1 = left, w - MARGIN_R, h - MARGIN_B, MARGIN_T
    xlo, xhi, xticks = _x_domain(fig)
    sx = Scale(xlo, xhi, x0, x1, fig.x_log)
    parts = [head, f'<defs><clipPath id="clip-{escape(fig.id)}">']
    parts.append(
        f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}"/></clipPath></defs>'
    )
    parts.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="white"/>')
    rows = fig.y_categories or (
        [str(i) for i in range(int(max(b.y for b in fig.bars)) + 1)] if fig.bars else None
    )
    if rows is not None and not fig.series:
        n = len(rows)
        row_h = (y0 - y1) / max(n, 1)

        def sy(v: float) -> float:
            return y1 + (v + 0.5) * row_h

        yticks: list[float] = []
    else:
        ylo, yhi, yticks = _y_domain(fig)
        scale_y = Scale(ylo, yhi, y0, y1)

        def sy(v: float) -> float:
            return scale_y(v)

    clip = f'clip-path="url(#clip-{escape(fig.id)})"'
    # grid and ticks
    parts.append('<g class="grid" stroke="#e6e6e6" stroke-width="1">')
    for t in yticks:
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>')
    for t in xticks:
        if xlo <= t <= xhi:
            parts.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{y1}" y2="{y0}"/>')
    parts.append("</g>")
    box = (x0, x1, y0, y1)
    labels = _bands(parts, fig, sx, xlo, xhi, box, clip)
    _bars(parts, fig, sx, sy, box, rows, clip)
    _series(parts, fig, sx, sy, clip)
    parts.append(f'<g class="band-labels">{"".join(labels)}</g>')
    _axes(parts, fig, sx, sy, box, (xlo, xhi, xticks, yticks), h)
    parts.append("</svg>")
    return "".join(parts)


def _bands(
    parts: list[str],
    fig: Figure,
    sx: Scale,
    xlo: float,
    xhi: float,
    box: tuple[float, float, float, float],
    clip: str,
) -> list[str]:
    """Bands behind the data; their names, returned, are drawn over it."""
    x0, x1, y0, y1 = box
    # bands (behind the data), with their names along the top
    parts.append(f'<g class="bands" {clip}>')
    label_rows: list[list[tuple[float, float]]] = []
    labels: list[str] = []  # drawn over the data, so bars cannot hide them
    for b in fig.bands:
        bx0, bx1 = sx(max(b.x0, xlo)), sx(min(b.x1, xhi))
        if bx1 <= bx0:
            continue
        parts.append(
            f'<rect class="band" x="{bx0:.1f}" y="{y1}" width="{bx1 - bx0:.1f}" '
            f'height="{y0 - y1}" fill="{b.color}" fill-opacity="{b.opacity}">'
            f"<title>{escape(b.label)}: {b.x0:.2f}–{b.x1:.2f} s</title></rect>"
        )
        half = 3.3 * len(b.label)
        mid = (bx0 + bx1) / 2
        if bx1 - bx0 > 2 * half + 6:
            # the first row where this label overlaps no other
            row = next(
                (
                    i
                    for i, used in enumerate(label_rows)
                    if all(mid + half < a or mid - half > z for a, z in used)
                ),
                len(label_rows),
            )
            if row == len(label_rows):
                label_rows.append([])
            label_rows[row].append((mid - half, mid + half))
            labels.append(
                f'<text x="{mid:.1f}" y="{y1 + 13 + 14 * row}" text-anchor="middle" '
                f'font-size="11" fill="#444" stroke="white" stroke-width="3" '
                f'paint-order="stroke">{escape(b.label)}</text>'
            )
    parts.append("</g>")
    return labels


def _bars(
    parts: list[str],
    fig: Figure,
    sx: Scale,
    sy: Callable[[float], float],
    box: tuple[float, float, float, float],
    rows: list[str] | None,
    clip: str,
) -> None:
    x0, x1, y0, y1 = box
    # bars
    if fig.bars:
        parts.append(f'<g class="bars" {clip}>')
        n = len(rows or [])
        row_h = (y0 - y1) / max(n, 1)
        bh = max(row_h * fig.bar_height, 0.6)
        for b in fig.bars:
            cy = sy(b.y)
            bw = max(sx(b.x1) - sx(b.x0), 0.8)
            title = f"<title>{escape(b.tip)}</title>" if b.tip else ""
            op = f' fill-opacity="{b.opacity}"' if b.opacity < 1 else ""
            parts.append(
                f'<rect class="mark bar" x="{sx(b.x0):.2f}" y="{cy - bh / 2:.2f}" '
                f'width="{bw:.2f}" height="{bh:.2f}" fill="{b.color}"{op}>{title}</rect>'
            )
            if b.text and bw > 7 * len(b.text) + 12:
                fill = "white" if b.opacity >= 0.8 else "#222"
                parts.append(
                    f'<text x="{sx(b.x0) + 8:.1f}" y="{cy + 4.5:.1f}" font-size="13" '
                    f'fill="{fill}">{escape(b.text)}</text>'
                )
        parts.append("</g>")


def _series(
    parts: list[str], fig: Figure, sx: Scale, sy: Callable[[float], float], clip: str
) -> None:
    # series: lines, whiskers, markers
    parts.append(f'<g class="series" {clip}>')
    for s in fig.series:
        parts.append(_path(s, sx, sy))
        for (lo, hi), x in zip(s.whiskers or [], s.xs, strict=False):
            px = sx(x)
            parts.append(
                f'<path class="mark whisker" d="M{px:.1f},{sy(lo):.1f} V{sy(hi):.1f} '
                f'M{px - 4:.1f},{sy(lo):.1f} h8 M{px - 4:.1f},{sy(hi):.1f} h8" '
                f'stroke="{s.color}" stroke-width="1.5" fill="none" opacity="0.7"/>'
            )
    for s in fig.series:
        if s.marker == "none":
            continue
        for i, (x, y) in enumerate(zip(s.xs, s.ys, strict=False)):
            tip = s.tips[i] if s.tips and i < len(s.tips) else f"{s.label}: {x:g}, {y:,.1f}"
            parts.append(_marker(s, sx(x), sy(y), tip))
    parts.append("</g>")


def _axes(
    parts: list[str],
    fig: Figure,
    sx: Scale,
    sy: Callable[[float], float],
    box: tuple[float, float, float, float],
    ticks: tuple[float, float, list[float], list[float]],
    h: float,
) -> None:
    x0, x1, y0, y1 = box
    xlo, xhi, xticks, yticks = ticks
    # axes, tick labels, axis titles
    parts.append(
        f'<g class="axes" font-size="12" fill="#444"><line x1="{x0}" x2="{x1}" y1="{y0}" '
        f'y2="{y0}" stroke="#888"/><line x1="{x0}" x2="{x0}" y1="{y1}" y2="{y0}" stroke="#888"/>'
    )
    for t in xticks:
        if xlo <= t <= xhi:
            parts.append(
                f'<text class="xtick" x="{sx(t):.1f}" y="{y0 + 17}" text-anchor="middle">'
                f"{fmt_tick(t)}</text>"
            )
    for t in yticks:
        parts.append(
            f'<text x="{x0 - 7}" y="{sy(t) + 4:.1f}" text-anchor="end">{fmt_tick(t)}</text>'
        )
    if fig.y_categories:
        for i, label in enumerate(fig.y_categories):
            parts.append(
                f'<text x="{x0 - 8}" y="{sy(i) + 4:.1f}" text-anchor="end">{escape(label)}</text>'
            )
    parts.append(
        f'<text class="xlabel" x="{(x0 + x1) / 2:.1f}" y="{h - 10}" text-anchor="middle" '
        f'font-size="13" fill="#222">{escape(fig.x_label)}</text>'
    )
    if fig.y_label:
        cy = (y0 + y1) / 2
        parts.append(
            f'<text class="ylabel" x="16" y="{cy:.1f}" transform="rotate(-90 16 {cy:.1f})" '
            f'text-anchor="middle" font-size="13" fill="#222">{escape(fig.y_label)}</text>'
        )
    parts.append("</g>")


def swatch(color: str, style: str, marker: str = "none") -> str:
    """A small legend sample: line style (solid, dash, dot), block (light, solid) or marker."""
    if style in ("light", "block"):
        op = "0.35" if style == "light" else "1"
        return (
            f'<svg class="swatch" width="22" height="12" viewBox="0 0 22 12">'
            f'<rect x="1" y="1" width="20" height="10" rx="2" fill="{color}" fill-opacity="{op}"/>'
            "</svg>"
        )
    dash = DASH.get(style, "")
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    mark = ""
    if marker == "dot":
        return (
            f'<svg class="swatch" width="28" height="12" viewBox="0 0 28 12">'
            f'<circle cx="9" cy="6" r="2.6" fill="{color}" fill-opacity="0.55"/>'
            f'<circle cx="17" cy="5" r="2.6" fill="{color}" fill-opacity="0.55"/></svg>'
        )
    if marker == "circle":
        mark = f'<circle cx="14" cy="6" r="3.5" fill="{color}"/>'
    elif marker == "square":
        mark = (
            f'<rect x="10.5" y="2.5" width="7" height="7" fill="white" stroke="{color}" '
            'stroke-width="2"/>'
        )
    return (
        f'<svg class="swatch" width="28" height="12" viewBox="0 0 28 12">'
        f'<line x1="1" x2="27" y1="6" y2="6" stroke="{color}" stroke-width="2.2"{dash_attr}/>'
        f"{mark}</svg>"
    )
