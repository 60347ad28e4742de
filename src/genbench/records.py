"""The request record: the one thing that flows through genbench.

Every request, in every command, becomes one `RequestRecord`. Everything else
(statistics, forecasts, reports, generated data) is a function of records, so
the record keeps what was observed and nothing that can be derived later.

Times are seconds on the process-wide monotonic clock (`time.perf_counter`,
CLOCK_MONOTONIC on Linux, so comparable across processes on one host).
Chunk arrival times are stored as offsets from `t_send` to keep lines short.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

import orjson

from genbench.errors import ErrorKind

__all__ = ["ANSWER", "THINKING", "ErrorKind", "RecordWriter", "RequestRecord", "read_records"]


THINKING = "r"
ANSWER = "a"


@dataclass(slots=True)
class RequestRecord:
    """What one chat-completion request did, as seen by the client."""

    id: str
    phase: str = ""
    server: str = ""
    model: str = ""
    stream: bool = True
    max_tokens: int | None = None
    # wall-clock time of sending, for humans and logs (epoch seconds)
    sent_at: float = 0.0
    # monotonic seconds
    t_send: float = 0.0
    t_end: float | None = None
    ttft: float | None = None  # first token of any kind, seconds after t_send
    ttft_answer: float | None = None
    ttft_thinking: float | None = None
    # arrival offsets (seconds after t_send) of every chunk that carried text,
    # and its kind per chunk: "r" thinking, "a" answer
    chunk_offsets: list[float] = field(default_factory=list)
    chunk_kinds: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    # True when token counts did not come from the server's usage
    tokens_estimated: bool = False
    finish_reason: str | None = None
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    http_status: int | None = None
    answer_chars: int = 0
    thinking_chars: int = 0
    # the generated text, kept only when the caller asks (generate does)
    text: str | None = None
    reasoning: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.error_kind is not None and type(self.error_kind) is not ErrorKind:
            self.error_kind = ErrorKind.parse(self.error_kind)  # a plain string given

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def e2e(self) -> float | None:
        return None if self.t_end is None else self.t_end - self.t_send

    @property
    def answer_tokens(self) -> int | None:
        if self.completion_tokens is None:
            return None
        return self.completion_tokens - (self.reasoning_tokens or 0)

    @property
    def decode_time(self) -> float | None:
        """Seconds from the first to the last text chunk."""
        if len(self.chunk_offsets) < 2:
            return None
        return self.chunk_offsets[-1] - self.chunk_offsets[0]

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (server usage counts)."""
        dt = self.decode_time
        n = self.completion_tokens
        if dt is None or not n or n < 2:
            return None
        return dt / (n - 1)

    @property
    def decode_rate(self) -> float | None:
        """Per-request decode tokens/s after the first token."""
        tpot = self.tpot
        return None if not tpot else 1.0 / tpot

    def itls(self) -> list[float]:
        """Inter-chunk gaps in seconds (chunks, not tokens)."""
        o = self.chunk_offsets
        return [b - a for a, b in zip(o, o[1:], strict=False)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["chunk_offsets"] = [round(x, 6) for x in self.chunk_offsets]
        if self.text is None:
            del d["text"]
        if self.reasoning is None:
            del d["reasoning"]
        if not self.extra:
            del d["extra"]
        return d

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


class RecordWriter:
    """Append-only JSONL writer: each record is one line, flushed as it arrives.

    A crash loses at most what was in flight; a torn last line (power loss) is
    skipped by `read_records`.
    """

    def __init__(self, path: str | Path, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 - long-lived handle
        self._fsync = fsync
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        self._f.write(record.to_json() + b"\n")
        self._f.flush()
        if self._fsync:
            os.fsync(self._f.fileno())
        self.count += 1

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | Path) -> list[RequestRecord]:
    """Read a requests.jsonl file; a torn final line is ignored."""
    out: list[RequestRecord] = []
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break  # torn tail from a crash
            line = line.strip()
            if line:
                out.append(RequestRecord.from_dict(orjson.loads(line)))
    return out
