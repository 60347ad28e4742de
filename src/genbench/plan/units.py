"""Counts read from flags, and numbers written for people: bytes, tokens, times."""

from __future__ import annotations

import math

from genbench.errors import UsageError


def parse_counts(flag: str, text: str) -> list[int]:
    """`100K,200k,1.5M` → [100000, 200000, 1500000]; every value must be a positive count."""
    mult = {"k": 1_000, "m": 1_000_000, "b": 1_000_000_000}
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"{flag} '{text}' is empty: expected counts like 100K,200K")
    out: list[int] = []
    for item in items:
        num, factor = item, 1
        if item[-1].lower() in mult:
            num, factor = item[:-1], mult[item[-1].lower()]
        try:
            value = float(num.replace("_", "")) * factor
        except ValueError:
            raise UsageError(f"{flag}: '{item}' is not a count (e.g. 100000 or 100K)") from None
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{flag}: {item} must be positive")
        if value != int(value):
            raise UsageError(f"{flag}: {item} is not a whole number of samples")
        out.append(int(value))
    return out


def human_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def human_tokens(n: float) -> str:
    if n >= 1e8:
        return f"{n / 1e9:,.4g}B"
    if n >= 1e6:
        return f"{n / 1e6:,.4g}M"
    if n >= 1e3:
        return f"{n / 1e3:,.4g}K"
    return f"{n:,.0f}"


def duration(seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "hours": seconds / 3600, "days": seconds / 86400}


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"


def fmt_days(seconds: float) -> str:
    return f"{seconds / 86400:,.2f}"


def fmt_range(lo: float, hi: float) -> str:
    """Both ends in the unit of the upper one: '61.9 – 74.7 min'."""
    text = fmt_time(hi)
    unit = text.split()[-1]
    div = {"s": 1, "min": 60, "h": 3600}[unit]
    return f"{lo / div:,.1f} – {text}"
