"""What a job tells while it runs (`Listener`: the console, the metrics server, a test) and
what it leaves when it ends (`JobResult`): apart from the job itself, so that those who
listen need not import the job, nor the job them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from genbench.errors import ExitCode
from genbench.generate.ending import failed_exit
from genbench.generate.progress import Snapshot
from genbench.records import RequestRecord


class Listener:
    """What the console (or a test) hears. Default: nothing."""

    def planned(self, info: dict[str, Any]) -> None: ...
    def note(self, text: str, style: str = "") -> None: ...
    # each tick's snapshot; one returned is what the listeners after this one see (the
    # console adds the plan's course)
    def tick(self, snap: Snapshot) -> Snapshot | None: ...
    def record(self, rec: RequestRecord) -> None: ...  # every request, as it ends
    def finished(self, result: JobResult) -> None: ...


@dataclass
class JobResult:
    status: str  # ending.py's (complete, unanswered, ...), nothing_to_do, interrupted
    message: str = ""
    model: str | None = None
    total: int = 0
    done: int = 0
    failed: int = 0
    done_this_run: int = 0
    failed_this_run: int = 0
    truncated_this_run: int = 0
    tokens: int = 0
    thinking_tokens: int = 0
    estimated_rows: int = 0  # rows of this run whose token counts are estimated
    tokenized_rows: int = 0  # and whose thinking the server's /tokenize counted
    thinking: str = ""  # where the thinking arrived, when the replies showed it, not check
    elapsed_s: float = 0.0
    sending_s: float = 0.0
    files: list[str] = field(default_factory=list)
    errors_file: str | None = None
    snapshot: Snapshot | None = None
    failure: dict[str, Any] | None = None  # this run's most common: {kind, rows, message}
    # rows of this run without an answer or without ids (ending.Unanswered.to_dict)
    unanswered: dict[str, Any] = field(default_factory=dict)
    ids_line: str = ""  # the rows without token ids, by server ('' when none)
    engines_line: str = ""  # --serve: how long the engines were down and why ('' if never)
    signal: int | None = None  # the operator's signal that stopped the job, if one did
    # --format parquet: the parts JSONL still, to be converted when the job finishes
    # (store/jobfile.unconverted: a stop converts nothing)
    unconverted: list[str] = field(default_factory=list)
    concurrency: list[dict[str, Any]] = field(default_factory=list)  # -c auto's changes
    # genbench's own process while it sent: CPU share of a core, event-loop lag, the host's
    # load (selfcheck.SelfCheck.to_dict; {} when nothing was sent)
    client: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As `generate --json` prints it: the snapshot as the progress lines write it."""
        return {**asdict(self), "snapshot": self.snapshot.to_dict() if self.snapshot else {}}

    @property
    def exit_code(self) -> int:
        if self.status == "failed":  # every row failed: its most common kind's exit code
            return failed_exit(self.failure)
        if self.status == "interrupted" and self.signal is not None:
            return 128 + self.signal  # the shell's: 130 SIGINT, 143 SIGTERM
        codes = {"interrupted": ExitCode.INTERRUPTED, "servers_down": ExitCode.REFUSED,
                 "engines_gone": ExitCode.ENGINES_GONE,
                 "no_token_ids": ExitCode.BAD_RESPONSE}  # fmt: skip
        return codes.get(self.status, ExitCode.OK)
