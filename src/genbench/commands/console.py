"""Terminal output: one rich Console for stdout, one for stderr (numbers: genbench.fmt)."""

from __future__ import annotations

from rich.console import Console


def _console(stderr: bool) -> Console:
    """Logs and pipes get 120 columns so tables are not squeezed; terminals their own width."""
    c = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=True, width=120)
    return c


out = _console(stderr=False)
err = _console(stderr=True)
