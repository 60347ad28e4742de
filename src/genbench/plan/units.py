"""Counts read from flags, and a duration as the plan document stores it (numbers written
for people are genbench.fmt's)."""

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


DEFAULT_DRIFT = "default"  # --speed-drift default: genbench's allowance, asked for


def speed_drift(given: str | None) -> float | str | None:
    """--speed-drift as a fraction: a number of percent (0 or more); DEFAULT_DRIFT where
    `default` asks for genbench's allowance (generate.wander.unseen_drift); None where not
    given (a pilot takes the default, a re-plan its pilot's plan's)."""
    if given is None:
        return None
    if str(given).strip().lower() == DEFAULT_DRIFT:
        return DEFAULT_DRIFT
    try:
        pct = float(given)
    except ValueError:
        pct = math.nan
    if not (math.isfinite(pct) and pct >= 0):
        raise UsageError(
            "--speed-drift must be 0 or more percent, or default (15 × job / (job + pilot)), "
            f"got {given}"
        )
    return pct / 100


def duration(seconds: float) -> dict[str, float]:
    return {"seconds": seconds, "hours": seconds / 3600, "days": seconds / 86400}
