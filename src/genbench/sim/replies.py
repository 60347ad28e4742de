"""The sim's bytes on the wire: its answer text, pre-encoded SSE pieces, the sinks that
write them (whole or split at chosen read boundaries) and one request's script."""

from __future__ import annotations

import asyncio
import random
import time
from array import array
from typing import Any

from genbench.sim.config import TEXT_FAULTS, Fault
from genbench.sim.text import TEXT, TEXT_LEN, VOCAB

clock = time.monotonic  # CLOCK_MONOTONIC, the same clock as time.perf_counter on Linux

INF = 1 << 62
# How far (seconds) the decode loop may fall behind its schedule and still catch up.
MAX_CATCH_UP = 0.1

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}

NOT_OPENAI_HTML = (
    b"<!DOCTYPE html>\n<html><head><title>Welcome</title></head>"
    b"<body><h1>It works!</h1><p>This is not an OpenAI-compatible API.</p></body></html>\n"
)
SUF = b'"},"finish_reason":null}]}\n\n'
MID = b'","content":"'
DONE = b"data: [DONE]\n\n"
MALFORMED = b'data: {"choices": [\n\n'
ROLE = b'{"role":"assistant","content":""},"finish_reason":null}]}\n\n'


class Vocab:
    """Token i of a request starting at position p is words[(p + i) % V], with a leading space.

    The words are laid out repeatedly in one bytes object so that any run of up to
    `window` tokens is a single slice: no per-chunk joins or encodes.
    """

    def __init__(self, window: int, words_: list[str] = VOCAB) -> None:
        words = [(" " + w).encode() for w in words_]
        self.v = len(words)
        reps = 2 + (window + self.v - 1) // self.v
        self.window = (reps - 1) * self.v
        self.big = b"".join(words * reps)
        self.offs = array("Q", [0])
        for w in words * reps:
            self.offs.append(self.offs[-1] + len(w))

    def span(self, pos: int, n: int) -> bytes:
        """Bytes of `n` tokens starting at absolute token position `pos`."""
        p = pos % self.v
        big, offs = self.big, self.offs
        if n <= self.window:
            return big[offs[p] : offs[p + n]]
        full, rest = divmod(n, self.v)
        return big[offs[p] : offs[p + self.v]] * full + big[offs[p] : offs[p + rest]]


def frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk (chunked transfer encoding)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


async def sleep_until(deadline: float) -> None:
    """Sleep to an absolute monotonic deadline, never waking early.

    uvloop timers have millisecond granularity and may fire up to ~0.5 ms early;
    the remainder is yielded away so that no token is ever sent before its time.
    """
    d = deadline - clock()
    if d > 0:
        await asyncio.sleep(d)
    while clock() < deadline:
        await asyncio.sleep(0)


class PlainSink:
    """Writes each piece of the SSE stream as one HTTP chunk, straight to the transport."""

    __slots__ = ("transport",)

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport

    def write(self, data: bytes) -> bool:
        t = self.transport
        if t.is_closing():
            return False
        t.write(b"%x\r\n%b\r\n" % (len(data), data))
        return True

    async def flush(self) -> None:
        return None


class SplitSink:
    """The `split` fault: the SSE byte stream goes out in random-sized pieces.

    Each piece is its own HTTP chunk, and the event loop runs between writes (for
    `pause` seconds if given), so the pieces leave as separate TCP segments and a
    prompt client's reads end at arbitrary byte positions: mid-line, mid-JSON.
    """

    def __init__(
        self, transport: asyncio.Transport, rng: random.Random, lo: int, hi: int, pause: float
    ) -> None:
        self.transport = transport
        self.rng, self.lo, self.hi, self.pause = rng, lo, hi, pause
        self.buf = bytearray()
        self.ready = asyncio.Event()
        self.closing = False
        self.task = asyncio.get_running_loop().create_task(self._pump())

    def write(self, data: bytes) -> bool:
        if self.transport.is_closing():
            return False
        self.buf += data
        self.ready.set()
        return True

    async def _pump(self) -> None:
        t = self.transport
        while True:
            await self.ready.wait()
            self.ready.clear()
            while self.buf:
                n = self.rng.randint(self.lo, self.hi)
                piece = bytes(self.buf[:n])
                del self.buf[:n]
                if t.is_closing():
                    return
                t.write(frame(piece))
                await asyncio.sleep(self.pause)
            if self.closing:
                return

    async def flush(self) -> None:
        self.closing = True
        self.ready.set()
        await self.task


class Script:
    """The text of a request with a text fault (loop, inline-think, garble, ...).

    The slow path: each chunk is built word by word and JSON-encoded, which the fast path
    never does; only faulted requests pay for it. Token i is `word(i)`; the first
    `thinking` tokens are thinking, as in the fast path.
    """

    __slots__ = (
        "pos", "thinking", "loop_at", "period", "inline", "garble_at", "cut", "opened", "count",
    )  # fmt: skip

    def __init__(self, pos: int, thinking: int, faults: dict[str, Fault]) -> None:
        self.pos, self.thinking = pos, thinking
        loop = faults.get("loop")
        self.loop_at, self.period = (loop["at"], loop["period"]) if loop else (INF, 1)
        inline = faults.get("inline-think")
        self.inline = inline is not None
        # inline-think: `</think>` cut across two chunks after `cut` characters (-1: whole);
        # `opened`: the template opened the block, no `<think>` is sent; `count=0`: usage
        # leaves the thinking uncounted, as a server without a reasoning parser does
        self.cut = inline["cut"] if inline else -1
        self.opened = bool(inline["opened"]) if inline else False
        self.count = bool(inline["count"]) if inline else True
        self.garble_at = faults["garble"]["at"] if "garble" in faults else -1

    def word(self, i: int) -> str:
        """From `loop_at` on, the `period` tokens starting there repeat until the end."""
        j = i if i < self.loop_at else self.loop_at + (i - self.loop_at) % self.period
        w = " " + TEXT[(self.pos + j) % TEXT_LEN]
        return w + "\ufffd" if i == self.garble_at else w

    def split(self, start: int, end: int) -> tuple[str, str]:
        """(thinking, answer) text of tokens [start, end). Inline thinking goes in the answer
        between <think> tags, as from a server started without a reasoning parser."""
        th = self.thinking
        think = "".join(self.word(i) for i in range(start, min(end, th)))
        answer = "".join(self.word(i) for i in range(max(start, th), end))
        if not self.inline:
            return think, answer
        opening = "<think>\n" if start == 0 < th and not self.opened else ""
        closing = "\n</think>\n\n" if start <= th < end and th > 0 else ""
        return "", opening + think + closing + answer

    def deltas(self, start: int, end: int) -> list[tuple[str, str]]:
        """What tokens [start, end) send: one delta, or two when `cut` cuts the closing
        tag between them."""
        think, answer = self.split(start, end)
        i = answer.find("</think>") if self.cut >= 0 and not think else -1
        if i < 0:
            return [(think, answer)]
        at = i + min(self.cut, len("</think>"))
        return [("", answer[:at]), ("", answer[at:])]


class Req:
    """One chat completion inside the scheduler."""

    __slots__ = (
        "n", "stream", "total", "thinking", "pos", "emitted", "thinking_emitted",
        "sink", "head", "pre_c", "pre_r", "usage_chunk_ok", "prompt_tokens", "finish",
        "done", "events", "event_at", "stall", "outcome", "released", "dead", "malformed",
        "error_message", "script",
        "id", "created", "ids", "prompt_ids", "tool", "uncounted", "accept", "spec",
        "kv", "seq", "redo", "grant", "preempted",
    )  # fmt: skip

    def __init__(self) -> None:
        self.emitted = 0
        self.thinking_emitted = 0
        self.released = True  # nothing to give back until admitted
        self.events: list[tuple[int, Fault]] = []
        self.event_at = INF
        self.stall = 0.0
        self.outcome = ""
        self.dead = False
        self.malformed = False
        self.sink: PlainSink | SplitSink | None = None
        self.script: Script | None = None
        self.tool: Any = None  # a reply that is a tool call: its ToolScript (sim/tools.py)
        self.ids: str | None = None  # the token-id dialect this request is answered in
        self.prompt_ids: list[int] = []
        self.uncounted = False  # uncounted-think: usage leaves its thinking out
        self.accept = 1.0  # this request's draft acceptance (sim/spec.py)
        self.spec: Any = None  # its acceptance Tally, when it is to be said (sim/spec.py)
        # the KV cache (sim/kv.py): tokens held, admission order, tokens to generate again
        # after a preemption, the queue's grant it waits for, and whether it was preempted
        self.kv = self.seq = self.redo = 0
        self.grant: asyncio.Future[float] | None = None
        self.preempted = False


def check_body(body: dict[str, Any]) -> str | None:
    """The first problem with a chat request body, as a one-line message, or None."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list."
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            return f"messages[{i}] must be an object with a 'role'."
    for key in ("max_tokens", "max_completion_tokens", "min_tokens"):
        v = body.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            return f"'{key}' must be a non-negative integer, got {v!r}."
    for key in ("max_tokens", "max_completion_tokens"):
        if body.get(key) == 0:
            return f"'{key}' must be at least 1."
    if body.get("n", 1) != 1:
        return "genbench sim supports only n=1."
    return None


def count_prompt(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens: whitespace-separated words of every message's text, plus 4 per message."""
    words = 0
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            words += len(content.split())
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    words += len(part["text"].split())
    return words + 4 * len(messages)


def in_flight(r: Req, body: dict[str, Any], active: list[Fault]) -> None:
    """What happens to the request while it streams: its usage chunk, its timed faults."""
    opts = body.get("stream_options") or {}
    r.usage_chunk_ok = (
        all(f.kind != "no-usage" for f in active)
        and isinstance(opts, dict)
        and bool(opts.get("include_usage"))
    )
    timed = [(f["at"], f) for f in active if "at" in f.params and f.kind not in TEXT_FAULTS]
    r.events = sorted(timed, key=lambda e: -e[0])
    r.event_at = r.events[-1][0] if r.events else INF
    r.stall = sum(f["seconds"] for f in active if f.kind == "stall-first")
    r.done = asyncio.get_running_loop().create_future()
