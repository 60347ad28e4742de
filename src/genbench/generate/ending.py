"""How a run of `genbench generate` ended, in words: the status and its one-line cause.

"all rows done" is said only when it is true: a run whose rows failed says how many and
names the most common failure (its kind and the server's message, once), and a run in
which every row failed is a failed run (non-zero exit, the code of that failure's kind);
a `--limit` run says how many rows of the input it left for later.

A row written without an answer is named too, never "all rows done" over it: one that
ended on a tool call the input had no result left for (`--tool-policy replay`: the
results ran out) or on a call cut by max_tokens ("done, N without an answer", exit 0:
the rows hold what the target generated, which a drafter can train on). Under
`--token-ids on` a server that answers without ids stops the job (`no_token_ids`, exit
10, the code `on` refuses such a server with before any request): the rows without ids
are not kept, so a resume once the server gives ids again makes them (README, "Exit
codes"; docs/generate.md).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from genbench.errors import ErrorKind, ExitCode
from genbench.fmt import counted
from genbench.transport.token_ids import NONE, PARTIAL, IdsMode, row_status

# the cause, once: the status is printed before it and the resume hint after it
MESSAGES = {
    "complete": "all rows done",
    "interrupted": "stopped before every row was done",
    "servers_down": "every server was down for {down:g} s",
    "engines_gone": "every engine is out of restarts (--engine-restarts) and no other server",
}
# how a status is printed, where it is not its own name
LABELS = {
    "some_failed": "done, with failures", "limit": "done",
    "unanswered": "done, some rows without an answer", "no_token_ids": "stopped",
    "engines_gone": "stopped, no server left",
}  # fmt: skip


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


@dataclass
class Unanswered:
    """Rows this run ended without an answer: written ones that end on a tool call (no
    result left in the input, or the call cut by max_tokens), and, under `--token-ids`
    auto or on, rows without token ids, by server (`on`: not written, the job stops)."""

    ran_out: int = 0
    call_cut: int = 0
    no_ids: Counter[str] = field(default_factory=Counter)
    stopped_by: str | None = None  # --token-ids on: the server that gave none

    def without_ids(self, ids: list[str], server: str, mode: str) -> bool:
        """Count a row whose generated turns (their statuses: `ids`) lack token ids, under
        `--token-ids` auto or on; True when it is not to be kept (`on`, which then stops
        the job: `stopped_by` names the first server that gave none)."""
        if mode == IdsMode.OFF or row_status(ids) not in (NONE, PARTIAL):
            return False
        self.no_ids[server] += 1
        if mode != IdsMode.ON:
            return False
        self.stopped_by = self.stopped_by or server
        return True

    def on_call(self) -> str:
        """'' or how many rows end on a call without an answer, and why."""
        n = self.ran_out + self.call_cut
        if not n:
            return ""
        why = []
        if self.ran_out:
            why.append(f"{self.ran_out:,} with no result left in the input: "
                       "--tool-policy replay, the results ran out")  # fmt: skip
        if self.call_cut:
            why.append(f"{self.call_cut:,} cut by max_tokens mid-call")
        end = "ends" if n == 1 else "end"
        return f"{rows(n)} of this run {end} on a tool call without an answer ({'; '.join(why)})"

    def ids_line(self, written: int) -> str:
        """'' or the rows without token ids, by server."""
        n = sum(self.no_ids.values())
        if not n:
            return ""
        by = ", ".join(f"{k}: {v:,}" for k, v in self.no_ids.most_common())
        kept = "not kept" if self.stopped_by else f"of {written:,} written"
        return f"{rows(n)} of this run without token ids ({kept}; {by})"

    def to_dict(self) -> dict[str, Any]:
        return {"results_ran_out": self.ran_out, "call_cut": self.call_cut,
                "no_token_ids": dict(self.no_ids)}  # fmt: skip


def ending(
    status: str, failures: Failures, done_now: int, failed_before: int, left: int | None,
    first: int, down_timeout: float, unanswered: Unanswered | None = None,
) -> tuple[str, str]:  # fmt: skip
    """(status, message) of a run whose load ended with `status`. `left`: the input's rows
    after the first `first` that --limit took (None or 0: it took them all)."""
    u = unanswered or Unanswered()
    if u.stopped_by:
        return "no_token_ids", (
            f"{u.stopped_by} answered without token ids and --token-ids on needs them: "
            f"{u.ids_line(0)}; rerun once it gives ids (or with --token-ids auto, to keep "
            "the text and mark the rows) to make them"
        )
    status, message = _ending(
        status, failures, done_now, failed_before, left, first, down_timeout
    )
    on_call = u.on_call() if status in ("complete", "some_failed", "limit") else ""
    if not on_call:
        return status, message
    if status == "complete":
        answered = done_now - u.ran_out - u.call_cut
        also = f"; {message}" if message != MESSAGES["complete"] else ""
        return "unanswered", f"{on_call}; {answered:,} answered{also}"
    return status, f"{message}; {on_call}"


def _ending(
    status: str, failures: Failures, done_now: int, failed_before: int, left: int | None,
    first: int, down_timeout: float,
) -> tuple[str, str]:  # fmt: skip
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
