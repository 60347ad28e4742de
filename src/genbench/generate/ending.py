"""How a run of `genbench generate` ended, in words: the status and its one-line cause.

"all rows done" is said only when it is true: a run whose rows failed says how many and
names the most common failure (its kind and the server's message, once), and a run in
which every row failed is a failed run (non-zero exit, the code of that failure's kind);
a `--limit` run says how many rows of the input it left for later.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from genbench.errors import ErrorKind, ExitCode
from genbench.fmt import counted

# the cause, once: the status is printed before it and the resume hint after it
MESSAGES = {
    "complete": "all rows done",
    "interrupted": "stopped before every row was done",
    "servers_down": "every server was down for {down:g} s",
}
# how a status is printed, where it is not its own name
LABELS = {"some_failed": "done, with failures", "limit": "done"}


def rows(n: int) -> str:
    return counted(n, "row")


@dataclass
class Failures:
    """The rows that failed in this run, by kind, with the first message of each kind."""

    kinds: Counter[str] = field(default_factory=Counter)
    first: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, why: str) -> None:
        self.kinds[str(kind)] += 1
        self.first.setdefault(str(kind), why)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def most_common(self) -> dict[str, Any] | None:
        """{kind, rows, message} of the kind most rows failed with, or None."""
        if not self.kinds:
            return None
        kind, n = self.kinds.most_common(1)[0]
        return {"kind": kind, "rows": n, "message": self.first[kind]}


def ending(
    status: str, failures: Failures, done_now: int, failed_before: int, left: int | None,
    first: int, down_timeout: float,
) -> tuple[str, str]:  # fmt: skip
    """(status, message) of a run whose load ended with `status`. `left`: the input's rows
    after the first `first` that --limit took (None or 0: it took them all)."""
    if status != "complete":
        return status, MESSAGES[status].format(down=down_timeout)
    limited = f"the first {first:,} (--limit); {left:,} left" if left else ""
    failed = failures.total
    if failed and not done_now:
        why = f"every row failed ({rows(failed)}, none done)"
        return "failed", why + (f"; {limited}" if limited else "")
    if failed:
        why = f"{rows(failed)} failed, {done_now:,} done"
        return "some_failed", why + (f"; {limited}" if limited else "")
    if limited:
        return "limit", limited
    if failed_before:
        return "complete", (
            f"all rows tried; {rows(failed_before)} failed in an earlier run "
            "(--retry-errors to try them again)"
        )
    return "complete", MESSAGES["complete"]


def failed_exit(failure: dict[str, Any] | None) -> int:
    """The exit of a run in which every row failed: its most common kind's code (errors.py),
    or 9 (a server error) where the kind has none."""
    kind = ErrorKind.parse(failure["kind"]) if failure else None
    code = kind.exit_code if kind is not None else ExitCode.SERVER_ERROR
    return int(code) if code != ExitCode.OK else int(ExitCode.SERVER_ERROR)
