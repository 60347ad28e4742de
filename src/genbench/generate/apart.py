"""Figures a person reads side by side: a time, a range and a forecast in one unit, with
as many decimals as keep them apart and their ratio the error said beside them."""

from __future__ import annotations

from genbench.fmt import duration, tokens


def apart(x: float, lo: float, hi: float, mid: float | None = None,
           agree: bool = True) -> tuple[str, str, str]:  # fmt: skip
    """`x`, the range lo – hi and its `mid` in the range's unit, with as many decimals (up
    to 3) as it takes for an `x` not to read as one of its ends ('on course for 2.5 min,
    past the plan's 2.4 – 2.5 min' was 148 s against 142 – 147 s; 'the job took 1.6 min'
    against '1.6 – 3.2 min', inside by 1.3 s), unless it is that end,
    nor the range's two ends as one figure (as fmt.duration_range), nor `mid` against `x`
    as another error than theirs (`_agrees`; `agree` False where none is said); none where none are
    needed (`_no_decimals`: the live ETA's whole seconds read '102.0 s (98.0 – 106.0 s)')."""
    xs, ls, hs, ms, unit = figures(x, lo, hi, mid, agree)
    return f"{xs} {unit}", f"{ls} – {hs} {unit}", f"{ms} {unit}"


def figures(
    x: float, lo: float, hi: float, mid: float | None = None, agree: bool = True
) -> tuple[str, str, str, str, str]:
    """`apart`'s figures, each without its unit, and the unit: the range's (the plan's, as
    the panel's line above shows it: 'on course for 125 s, past the plan's 31 – 38 s', not
    '2.1 min, past the plan's 0.5 – 0.6 min' under 'plan 34 s (31 – 38 s)'), unless `x` in
    it would run to four figures."""
    unit = duration(max(hi, x)).rsplit(" ", 1)[1]
    own = duration(hi).rsplit(" ", 1)[1]
    if own != unit and x / UNIT_S[own] < 1000:
        unit = own
    div = UNIT_S[unit]
    shown = [v / div for v in (x, lo, hi) + ((mid,) if mid is not None else ())]
    for nd in (0, 1, 2, 3) if _no_decimals(shown) else (1, 2, 3):
        xs, ls, hs, ms = (f"{v / div:,.{nd}f}" for v in (x, lo, hi, mid or 0.0))
        apart = xs not in (ls, hs) or x in (lo, hi)  # inside or out, never read as an end
        if apart and (ls != hs or lo == hi) and (not agree or _agrees(xs, ms, x, mid)):
            break
    return xs, ls, hs, ms, unit


UNIT_S = {"s": 1.0, "min": 60.0, "h": 3600.0}
WHOLE_FROM = 20.0  # units: a figure rounded to a whole one is then off by 2.5% at most
WHOLE_SPAN = 5.0  # units: and a range's ends by a tenth of its width at most


AGREE = 0.015  # the shown figures' ratio within 1.5 points of the error said beside them


def _agrees(xs: str, ms: str, x: float, mid: float | None) -> bool:
    """Whether the figures shown for `mid` (the forecast) and `x` (what the job took) give,
    divided, the error said beside them to within AGREE: '2.1 min … the job took 2.0 min:
    the forecast was +1.3% off' read as 5% (122 s against 120 s)."""
    if mid is None or x <= 0:
        return True
    shown_x, shown_m = float(xs.replace(",", "")), float(ms.replace(",", ""))
    if shown_x <= 0:
        return False
    return abs(shown_m / shown_x - mid / x) <= AGREE


def _no_decimals(values: list[float]) -> bool:
    """Whether figures in one unit may be shown without decimals: each a whole number in
    it (the live ETA's whole seconds: '102 s (98 – 106 s)'), or all large enough, and their
    range wide enough, that rounding loses nothing a person needs ('34 s (32 – 37 s)', but
    '2.3 min (1.4 – 3.1 min)', never '2 min (1 – 3 min)', and '25.0 h (24.6 – 25.6 h)')."""
    if all(abs(v - round(v)) < 1e-9 * max(1.0, abs(v)) for v in values):
        return True
    return min(values) >= WHOLE_FROM and max(values) - min(values) >= WHOLE_SPAN


def tokens_apart(x: float, lo: float, hi: float) -> tuple[str, str]:
    """Token counts as fmt.tokens says them ('71.2K', '58.1K – 61.9K'), or exact where
    three digits would make a count outside the range read as one of its ends, or the
    range's two ends one figure."""
    xs, ls, hs = (tokens(v) for v in (x, lo, hi))
    if (not lo <= x <= hi and xs in (ls, hs)) or (ls == hs and lo != hi):
        xs, ls, hs = (f"{v:,.0f}" for v in (x, lo, hi))
    return xs, (ls if ls == hs else f"{ls} – {hs}")  # fixed lengths: 'the plan's 60.0K'
