"""Every bad row of an input file, reported in one pass, before any request.

A file with a broken line 57 and a duplicate id at line 121 is reported whole: each bad
row in one line naming the file, the line and the field (the first `SHOWN` of them),
then how many there are in all. Fixing them takes one rerun, not one per line, which on
a 900K-row file is the difference between minutes and a day.

A duplicate says where its id first appeared. Finding that takes a pass over the file;
it is done once, after the scan, for the duplicates shown (not once per duplicate), so
the cost of a file full of them stays one extra pass.
"""

from __future__ import annotations

from collections.abc import Callable

from genbench.errors import InputFileError, UsageError

SHOWN = 20  # bad rows printed; the rest are counted
AT = "\x00at\x00"  # where a duplicate's first line goes, once it is known


class InputErrors(InputFileError):
    """Several bad rows: one line each (the first SHOWN), then the count of all."""

    def __init__(self, path: object, lines: list[str], count: int, unit: str) -> None:
        shown = "all shown" if count <= len(lines) else f"the first {len(lines):,} shown"
        summary = (
            f"{path}: {count:,} bad {unit}s ({shown}); nothing was sent. Fix them, or "
            "--skip-invalid to send the other rows and write these to the errors file"
        )
        UsageError.__init__(self, "\n".join([*lines, summary]))
        self.path, self.line, self.field = path, None, None
        self.count = count


class BadRows:
    """The bad rows one scan found: the first SHOWN kept as text, every one counted."""

    def __init__(self, path: object, unit: str) -> None:
        self.path, self.unit = path, unit
        self.count = 0
        # (line, problem, field, the id a duplicate repeats)
        self.shown: list[tuple[int, str, str | None, str | None]] = []

    def add(self, n: int, problem: str, field: str | None, dup: str | None = None) -> None:
        """A bad row at `n`; `dup`: the id it repeats, its problem holding AT for where."""
        self.count += 1
        if len(self.shown) < SHOWN:
            self.shown.append((n, problem, field, dup))

    def resolved(
        self, first_lines: Callable[[set[str]], dict[str, int]]
    ) -> list[tuple[int, str, str | None]]:
        """The rows shown, each duplicate saying where its id first appeared:
        `first_lines(ids)` finds them in one pass."""
        ids = {d for *_, d in self.shown if d is not None}
        found = first_lines(ids) if ids else {}
        out = []
        for n, problem, field, dup in self.shown:
            if dup is not None:
                first = found.get(dup)
                where = f"{self.unit} {first}" if first and first < n else f"an earlier {self.unit}"
                problem = problem.replace(AT, f" as {where}")
            out.append((n, problem, field))
        return out

    def line(self, n: int, problem: str, field: str | None) -> str:
        what = f"field '{field}': {problem}" if field else problem
        return f"{self.path}, {self.unit} {n}: {what}"
