"""Terminal output: one rich Console for stdout, one for stderr, and small formatting helpers."""

from __future__ import annotations

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"


def rate(x: float | None, unit: str = "tok/s") -> str:
    if x is None:
        return "—"
    return f"{x:,.1f} {unit}" if x < 1000 else f"{x:,.0f} {unit}"
