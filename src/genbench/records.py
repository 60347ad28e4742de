"""The request record: the one thing that flows through genbench.

Every request, in every command, becomes one `RequestRecord`. Everything else
(statistics, forecasts, reports, generated data) is a function of records, so
the record keeps what was observed and nothing that can be derived later.

Times are seconds on the process-wide monotonic clock (`time.perf_counter`,
CLOCK_MONOTONIC on Linux, so comparable across processes on one host).
Chunk arrival times are stored as offsets from `t_send` to keep lines short.

A *compact* record (`RecordWriter(compact=True)`, what `generate` logs for every attempt
of a job that may make millions) keeps the same fields but summarises the per-chunk
arrays in `chunks` (chunk counts, decode time, the 99th percentile gap between chunks),
rounds times to 1 ms, and leaves out what a reader can restore: `ttft` (the first of
`ttft_answer` and `ttft_thinking`, as it always is), `sent_at` (`t_send` plus the
writer's `clock`, wall minus monotonic time, when within 5 ms of it) and every field
that holds its default: the dataclass's, or the writer's `defaults` (values most lines
share: the model, a server, `finish_reason: stop`), written once in a `{"defaults":
...}` line that applies to the lines after it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

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
    # where reasoning_tokens came from when the server did not count them (its thinking
    # arrived inline in `content`, split by genbench): "tokenizer" (the server's own
    # /tokenize) or "estimate" (the completion tokens shared out by chunks)
    reasoning_source: str | None = None
    finish_reason: str | None = None
    error_kind: ErrorKind | None = None
    error_message: str | None = None
    http_status: int | None = None
    answer_chars: int = 0
    thinking_chars: int = 0
    # the generated text, kept only when the caller asks (generate does)
    text: str | None = None
    reasoning: str | None = None
    # the content exactly as the server sent it, tags and all, where genbench split
    # thinking out of it and the caller asked to keep it (generate --keep-raw)
    raw: str | None = None
    # the tools the reply called, as the server sent them (ids, names, arguments joined
    # from their fragments), kept with the text; and how many there were, always counted
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_count: int = 0
    # the ids the server generated and the prompt's ids it saw (generate --token-ids),
    # 4 bytes an id; they go to the output row, never to a request log line
    prompt_token_ids: Any = None
    token_ids: Any = None
    # why ids that came cannot be kept (malformed), else None
    token_ids_error: str | None = None
    # speculative acceptance as the server said it for this request (steps, drafted, accepted,
    # length, hist, src: genbench.transport.acceptance); None where it said nothing
    spec: dict[str, Any] | None = None
    # why figures it said were dropped (genbench.transport.acceptance: NOT_COUNTS, ...)
    spec_dropped: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # in place of the chunk arrays, in a compact record: n chunks, r of them thinking,
    # decode_s (first to last chunk: its mean gap is decode_s / (n - 1)), itl_p99
    chunks: dict[str, Any] | None = None

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
    def tool_tokens(self) -> int | None:
        """A reply that only called tools: its answer tokens are the calls' (names and
        arguments, by the server's usage); None where the reply also answered in text."""
        if not self.tool_call_count or self.answer_chars:
            return None
        return self.answer_tokens

    @property
    def chunk_count(self) -> int:
        """Text chunks received (from the summary in a compact record)."""
        if self.chunks is not None and not self.chunk_offsets:
            return int(self.chunks.get("n", 0))
        return len(self.chunk_offsets)

    @property
    def decode_time(self) -> float | None:
        """Seconds from the first to the last text chunk."""
        if self.chunks is not None and not self.chunk_offsets:
            return self.chunks.get("decode_s")
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
        ids = self.prompt_token_ids, self.token_ids
        self.prompt_token_ids = self.token_ids = None  # not in a log line: asdict copies
        try:
            d = asdict(self)
        finally:
            self.prompt_token_ids, self.token_ids = ids
        for name in _IDS:
            del d[name]
        d["chunk_offsets"] = [round(x, 6) for x in self.chunk_offsets]
        for name in ("text", "reasoning", "raw", "chunks", "tool_calls", "spec", "spec_dropped"):
            if d[name] is None:
                del d[name]
        if not self.extra:
            del d["extra"]
        return d

    def to_compact_dict(self, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
        """The record without its per-chunk arrays (summarised) or text, and without any
        field equal to its default (`defaults`' value, else the dataclass's);
        `from_dict(d, defaults)` reads it back."""
        defaults = defaults or {}
        d: dict[str, Any] = {}
        for f in _COMPACT_FIELDS:
            v = getattr(self, f.name)
            if f.name in _TIMES and v:
                v = round(v, 3)
            if v != defaults.get(f.name, f.default):
                d[f.name] = v
        if self.extra != defaults.get("extra", {}):
            d["extra"] = self.extra
        if d.get("ttft") is not None and d["ttft"] == _first(d):
            del d["ttft"]  # the first of ttft_answer and ttft_thinking, as always
        if "clock" in defaults and abs(self.sent_at - self.t_send - defaults["clock"]) < 0.005:
            d.pop("sent_at", None)  # t_send on the wall clock
        summary = self.chunks if not self.chunk_offsets else summarise_chunks(self)
        if summary:
            d["chunks"] = summary
        return d

    def to_json(self, compact: bool = False, defaults: dict[str, Any] | None = None) -> bytes:
        return orjson.dumps(self.to_compact_dict(defaults) if compact else self.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any], defaults: dict[str, Any] | None = None) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        if defaults:
            d = {**defaults, **d}
        rec = cls(**{k: v for k, v in d.items() if k in known})
        if "ttft" not in d:
            rec.ttft = _first(d)
        if "sent_at" not in d and "clock" in d:
            rec.sent_at = round(rec.t_send + d["clock"], 3)
        if defaults and "extra" not in d:
            rec.extra = dict(rec.extra)  # not the one dict every such line shares
        return rec


_IDS = ("prompt_token_ids", "token_ids", "token_ids_error")
_COMPACT_FIELDS = [
    f
    for f in fields(RequestRecord)
    if f.name
    not in ("chunk_offsets", "chunk_kinds", "text", "reasoning", "raw", "extra", "chunks", *_IDS)
    and f.name != "tool_calls"
]
_TIMES = {"sent_at", "t_send", "t_end", "ttft", "ttft_answer", "ttft_thinking"}


def _first(d: dict[str, Any]) -> float | None:
    """The first token of either kind, from the first of each kind."""
    got = [t for t in (d.get("ttft_answer"), d.get("ttft_thinking")) if t is not None]
    return min(got) if got else None


def summarise_chunks(rec: RequestRecord) -> dict[str, Any] | None:
    """What a compact record keeps of the chunk arrays: enough for decode rates, tokens
    per chunk and the spread of the gaps between chunks."""
    n = len(rec.chunk_offsets)
    if not n:
        return None
    out: dict[str, Any] = {"n": n}
    thinking = rec.chunk_kinds.count(THINKING)
    if thinking:
        out["r"] = thinking
    if n >= 2:
        out["decode_s"] = round(rec.chunk_offsets[-1] - rec.chunk_offsets[0], 3)
        gaps = sorted(rec.itls())
        out["itl_p99"] = round(gaps[round(0.99 * (len(gaps) - 1))], 4)
    return out


class RecordWriter:
    """Append-only JSONL writer: each record is one line, written as it arrives.

    A crash loses at most what was in flight; a torn last line (power loss) is
    skipped by `read_records`. `compact` writes compact records, and `defaults` first
    when given. `buffered` keeps lines in memory until `flush`, or `take` and then
    `write_out` in a worker thread, so the caller's event loop never waits on the disk.
    """

    def __init__(
        self,
        path: str | Path,
        fsync: bool = False,
        *,
        compact: bool = False,
        defaults: dict[str, Any] | None = None,
        buffered: bool = False,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync, self.compact, self.buffered = fsync, compact, buffered
        self.defaults = defaults if compact else None
        self._buf: list[bytes] = []
        if self.defaults:
            self._buf.append(orjson.dumps({"defaults": self.defaults}) + b"\n")
        self.count = 0
        self.bytes = 0

    def write(self, record: RequestRecord) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path}: the record writer is closed")
        line = record.to_json(self.compact, self.defaults) + b"\n"
        self.count += 1
        self.bytes += len(line)
        self._buf.append(line)
        if not self.buffered:
            self.flush()

    def flush(self) -> None:
        self.write_out(self.take())

    def take(self) -> bytes:
        """The buffered lines, taken out (on the thread that writes records)."""
        buf, self._buf = self._buf, []
        return b"".join(buf)

    def write_out(self, data: bytes) -> None:
        """Write lines taken by `take`; any thread."""
        view = memoryview(data)
        while view and self._fd is not None:
            view = view[os.write(self._fd, view) :]
        if data and self._fsync and self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | Path) -> list[RequestRecord]:
    """Read a requests.jsonl file (full or compact records); a torn final line is ignored."""
    out: list[RequestRecord] = []
    defaults: dict[str, Any] | None = None
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break  # torn tail from a crash
            line = line.strip()
            if line:
                d = orjson.loads(line)
                if "defaults" in d:
                    defaults = d["defaults"]
                else:
                    out.append(RequestRecord.from_dict(d, defaults))
    return out
