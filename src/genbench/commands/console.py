"""Terminal output: one rich Console for stdout, one for stderr (numbers: genbench.fmt)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rich.console import Console

T = TypeVar("T")


def _console(stderr: bool) -> Console:
    """Logs and pipes get 120 columns so tables are not squeezed; terminals their own width."""
    c = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=True, width=120)
    return c


out = _console(stderr=False)
err = _console(stderr=True)


def reading(what: str, read: Callable[[Callable[[int], None] | None], T]) -> T:
    """`read(progress)`, under a line on a terminal's stderr counting the rows read so far
    (a log gets no line redrawn)."""
    if not err.is_terminal:
        return read(None)
    with err.status(f"reading {what}") as status:
        return read(lambda n: status.update(f"reading {what}: {n:,} rows"))
