"""The reference server: an OpenAI-compatible chat endpoint whose timing is known exactly.

One scheduler task runs continuous batching on absolute deadlines (see docs/sim.md):

    TTFT      = queue wait + ttft_ms/1000 + prompt_tokens/prefill_tps   (+ stall-first)
    step(n)   = a + b*n,  b = per_seq_ms/1000,  a = 1/tps - b
    rate(n)   = n / step(n) chunks/s over n decoding streams

The hot path is one transport write per chunk, built from pre-encoded bytes: the
scheduler writes HTTP chunks straight to each stream's transport instead of waking a
task per token, so hundreds of streams cost the server little and the client under
test stays the bottleneck.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import random
import signal
import socket
import sys
import time
from array import array
from collections import deque
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web

from genbench import __version__
from genbench.errors import UsageError
from genbench.sim.config import TEXT_FAULTS, Fault, SimConfig

clock = time.monotonic  # CLOCK_MONOTONIC, the same clock as time.perf_counter on Linux
INF = 1 << 62
# How far (seconds) the decode loop may fall behind its schedule and still catch up.
MAX_CATCH_UP = 0.1

_WORDS = (
    "the of and to in is that it for on with as was by at be this from or an are "
    "not but have one all were can which when there more will out some time into "
    "about other would these only then first could like over also after most made "
    "new many such way even well back good much through long great where just each"
)
VOCAB = _WORDS.split()  # 66 ASCII words: nothing to JSON-escape
# The text every answer is a window of: words drawn at random (fixed seed) from VOCAB, so no
# answer repeats itself within TEXT_LEN tokens. A plain rotation of VOCAB would repeat every
# 66 words, and a repetition-loop detector would rightly call every answer a loop. Long, so
# that two prompts rarely start at the same place (a duplicate-answer detector would be right
# about those too).
TEXT_LEN = 65536
TEXT = [VOCAB[i] for i in random.Random("genbench-sim-text").choices(range(len(VOCAB)), k=TEXT_LEN)]

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

    __slots__ = ("pos", "thinking", "loop_at", "period", "inline", "garble_at")

    def __init__(self, pos: int, thinking: int, faults: dict[str, Fault]) -> None:
        self.pos, self.thinking = pos, thinking
        loop = faults.get("loop")
        self.loop_at, self.period = (loop["at"], loop["period"]) if loop else (INF, 1)
        self.inline = "inline-think" in faults
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
        opening = "<think>\n" if start == 0 < th else ""
        closing = "\n</think>\n\n" if start <= th < end and th > 0 else ""
        return "", opening + think + closing + answer


class Req:
    """One chat completion inside the scheduler."""

    __slots__ = (
        "n", "stream", "total", "thinking", "pos", "emitted", "reasoning_emitted",
        "sink", "head", "pre_c", "pre_r", "usage_chunk_ok", "prompt_tokens", "finish",
        "done", "events", "event_at", "stall", "outcome", "released", "dead", "malformed",
        "error_message", "script",
        "id", "created",
    )  # fmt: skip

    def __init__(self) -> None:
        self.emitted = 0
        self.reasoning_emitted = 0
        self.released = True  # nothing to give back until admitted
        self.events: list[tuple[int, Fault]] = []
        self.event_at = INF
        self.stall = 0.0
        self.outcome = ""
        self.dead = False
        self.malformed = False
        self.sink: PlainSink | SplitSink | None = None
        self.script: Script | None = None


class Scheduler:
    """Continuous batching on absolute deadlines, plus the counters /metrics shows."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.loop = asyncio.get_running_loop()
        self.vocab = Vocab(max(cfg.spec_k, 64), TEXT)
        self.running = 0
        self.waiting: deque[asyncio.Future[float]] = deque()
        self.batch: list[Req] = []
        self.joining: list[Req] = []
        self._wake: asyncio.Future[float] | None = None
        self.rng = random.Random(f"{cfg.seed}/spec")
        self.steps = 0
        self.resyncs = 0
        self.resync_s = 0.0
        self.lag_sum = 0.0
        self.lag_max = 0.0
        self.first_lag_sum = 0.0  # how late first tokens were written, summed
        self.m_gen = 0
        self.m_prompt = 0
        self.m_reason = 0
        self.m_success = {"stop": 0, "length": 0}
        self.m_drafts = 0
        self.m_draft_tokens = 0
        self.m_accepted = 0
        self.drift = cfg.drift_model()
        self.started = clock()
        self.task = self.loop.create_task(self._run())

    def speed(self, t: float) -> float:
        """--drift: the speed multiplier at time t (1 without drift); steps and prefill take
        their nominal time divided by it."""
        return 1.0 if self.drift is None else self.drift.factor(t - self.started)

    # -- admission ------------------------------------------------------------------------

    async def admit(self) -> float:
        """Wait for a batch slot; return the (virtual) time it was granted."""
        if self.running < self.cfg.max_batch and not self.waiting:
            self.running += 1
            return clock()
        fut: asyncio.Future[float] = self.loop.create_future()
        self.waiting.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._free(clock())
            else:
                with contextlib.suppress(ValueError):
                    self.waiting.remove(fut)
            raise

    def num_waiting(self) -> int:
        return sum(1 for f in self.waiting if not f.done())

    def _free(self, t: float) -> None:
        self.running -= 1
        while self.waiting and self.running < self.cfg.max_batch:
            fut = self.waiting.popleft()
            if not fut.done():
                self.running += 1
                fut.set_result(t)

    def release(self, r: Req, t: float) -> None:
        if not r.released:
            r.released = True
            self._free(t)

    # -- request life ---------------------------------------------------------------------

    def start_decode(self, r: Req, t: float) -> None:
        """Prefill has ended at `t`: emit the first token now, then join the batch."""
        self.m_prompt += r.prompt_tokens
        if r.stream and not r.sink.write(r.head + ROLE):  # type: ignore[union-attr]
            self.drop(r, t)
            return
        if self._advance(r, 1, t):
            self.join(r, t)

    def join(self, r: Req, t: float) -> None:
        if r.dead:
            return
        if r.emitted >= r.total and not r.released:  # stalled right before the end
            self._finish(r, t)
            return
        self.joining.append(r)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(t)

    def _emit(self, r: Req, k: int) -> bool:
        """Account (and for streams, write) tokens [emitted, emitted + k)."""
        e = r.emitted
        th = r.thinking
        r.emitted = e + k
        self.m_gen += k
        if e < th:
            nr = min(k, th - e)
            r.reasoning_emitted += nr
            self.m_reason += nr
        if not r.stream:
            return True
        if r.script is not None:
            think, answer = r.script.split(e, e + k)
            delta = {self.cfg.reasoning_dialect: think} if think else {}
            if answer:
                delta["content"] = answer
            return r.sink.write(r.head + orjson.dumps(delta) + SUF[2:])  # type: ignore[union-attr]
        span = self.vocab.span
        if e >= th:
            body = r.pre_c + span(r.pos + e, k) + SUF
        elif e + k <= th:
            body = r.pre_r + span(r.pos + e, k) + SUF
        else:
            body = r.pre_r + span(r.pos + e, th - e) + MID + span(r.pos + th, e + k - th) + SUF
        return r.sink.write(body)  # type: ignore[union-attr]

    def _advance(self, r: Req, k: int, t: float) -> bool:
        """Emit up to k tokens at time t; True while the request stays in the batch."""
        if r.emitted == r.event_at and not self._events(r, t):
            return False
        rem = r.total - r.emitted
        if k > rem:
            k = rem
        room = r.event_at - r.emitted
        if k > room:
            k = room
        if not self._emit(r, k):
            self.drop(r, t)
            return False
        if r.emitted == r.event_at and not self._events(r, t):
            return False
        if r.emitted >= r.total:
            self._finish(r, t)
            return False
        return True

    def _events(self, r: Req, t: float) -> bool:
        """Apply the faults due after `r.emitted` tokens; True if the request decodes on."""
        stall = 0.0
        while r.events and r.events[-1][0] == r.emitted:
            _, f = r.events.pop()
            if f.kind == "malformed":
                if r.stream:
                    r.sink.write(MALFORMED)  # type: ignore[union-attr]
                else:
                    r.malformed = True
            elif f.kind == "stall-mid":
                stall += f["seconds"]
            elif f.kind == "inband-error":
                r.error_message = f["message"]
                if r.stream:
                    err = {"error": {"message": f["message"], "type": "InternalServerError",
                                     "code": 500}}  # fmt: skip
                    r.sink.write(b"data: " + orjson.dumps(err) + b"\n\n")  # type: ignore[union-attr]
                self._end(r, "inband-error", t)
                return False
            elif f.kind == "truncate":
                self._end(r, "truncate", t)
                return False
        r.event_at = r.events[-1][0] if r.events else INF
        if stall > 0:
            self.loop.call_later(max(0.0, t + stall - clock()), self.join, r, t + stall)
            return False
        return True

    def _finish(self, r: Req, t: float) -> None:
        finish = r.finish
        if r.stream:
            out = r.head + b'{},"finish_reason":"' + finish.encode() + b'"}]}\n\n'
            if r.usage_chunk_ok:
                usage = {
                    "id": r.id, "object": "chat.completion.chunk", "created": r.created,
                    "model": self.cfg.model, "choices": [], "usage": self.usage(r),
                }  # fmt: skip
                out += b"data: " + orjson.dumps(usage) + b"\n\n"
            if not r.sink.write(out + DONE):  # type: ignore[union-attr]
                self.drop(r, t)
                return
        self.m_success[finish] += 1
        self._end(r, "ok", t)

    def usage(self, r: Req) -> dict[str, Any]:
        return {
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.emitted,
            "total_tokens": r.prompt_tokens + r.emitted,
            "completion_tokens_details": {"reasoning_tokens": r.reasoning_emitted},
        }

    def _end(self, r: Req, outcome: str, t: float) -> None:
        r.outcome = outcome
        r.dead = True
        self.release(r, t)
        if not r.done.done():
            r.done.set_result(None)

    def drop(self, r: Req, t: float) -> None:
        """The client went away (or the handler was cancelled): free the slot."""
        if not r.dead:
            self._end(r, "gone", t)

    # -- the decode loop ------------------------------------------------------------------

    async def _run(self) -> None:
        cfg = self.cfg
        a, b, k_spec, p_acc = cfg.step_a, cfg.step_b, cfg.spec_k, cfg.spec_accept
        rnd = self.rng.random
        base = clock()
        while True:
            if not self.batch and not self.joining:
                self._wake = self.loop.create_future()
                base = await self._wake
                self._wake = None
            if self.joining:
                self.batch.extend(r for r in self.joining if not r.dead)
                self.joining.clear()
            batch = self.batch
            dur = (a + b * len(batch)) / self.speed(base)
            deadline = base + dur
            await sleep_until(deadline)
            keep: list[Req] = []
            for r in batch:
                if r.dead:
                    continue
                k = k_spec
                if k > 1 and p_acc < 1.0:
                    k = 1 + sum(1 for _ in range(k_spec - 1) if rnd() < p_acc)
                before = r.emitted
                try:
                    alive = self._advance(r, k, deadline)
                except Exception as exc:  # one broken stream must not stop the batch
                    print(f"genbench sim: stream failed: {exc!r}", file=sys.stderr)
                    self.drop(r, deadline)
                    alive = False
                if k_spec > 1:
                    self.m_drafts += 1
                    self.m_draft_tokens += k_spec - 1
                    self.m_accepted += max(0, r.emitted - before - 1)
                if alive:
                    keep.append(r)
            self.batch = keep
            self.steps += 1
            lag = clock() - deadline
            self.lag_sum += lag
            if lag > self.lag_max:
                self.lag_max = lag
            # Late by a little (a busy host): keep the absolute schedule, so the next steps
            # catch up and the mean rate stays exact. Late by more than a step and more
            # than MAX_CATCH_UP: resynchronise rather than burst a backlog of tokens.
            if lag > MAX_CATCH_UP and lag > a + b * len(keep):
                base = deadline + lag
                self.resyncs += 1
                self.resync_s += lag
            else:
                base = deadline


class SimServer:
    """The aiohttp application around one Scheduler."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.sched = Scheduler(cfg)
        self.created = int(time.time())
        key = os.environ.get(cfg.api_key_env, "") if cfg.api_key_env else ""
        self._key = f"Bearer {key}".encode() if key else None
        self.auth_required = self._key is not None
        self.out_len = cfg.output_len_dist()
        faults = cfg.faults
        self.chat_faults = [f for f in faults if f.kind not in ("refuse", "unhealthy")]
        self.match_faults = any(f.match for f in self.chat_faults)
        self.rngs = {id(f): random.Random(f"{cfg.seed}/fault/{i}") for i, f in enumerate(faults)}
        self.counts = {"chat": 0, "models": 0, "health": 0}
        self.requests: set[Req] = set()

    # -- helpers --------------------------------------------------------------------------

    def _hits(self, f: Fault, n: int, body: bytes | None = None) -> bool:
        """Does fault f apply to the n-th (1-based) request of its endpoint (whose raw
        body, for chat, is `body`)?"""
        if n <= f.after or (f.match and (body is None or f.match.encode() not in body)):
            return False
        return f.rate >= 1.0 or self.rngs[id(f)].random() < f.rate

    def _active(self, kind: str, endpoint: str) -> bool:
        faults = self.cfg.fault(kind)
        if not faults:
            return False
        n = self.counts[endpoint]
        return any([self._hits(f, n) for f in faults])

    @staticmethod
    def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        body = {
            "object": "error",
            "error": {"message": message, "type": ERROR_TYPES.get(status, "APIError"),
                      "param": None, "code": status},
        }  # fmt: skip
        return web.Response(
            status=status, body=orjson.dumps(body), content_type="application/json",
            headers=headers,
        )  # fmt: skip

    def _authorized(self, request: web.Request) -> bool:
        if self._key is None:
            return True
        got = request.headers.get("Authorization", "").encode()
        return hmac.compare_digest(got, self._key)

    def _unauthorized(self) -> web.Response:
        return self.error(401, "Invalid or missing API key (expected Authorization: Bearer ...)")

    # -- small endpoints ------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        self.counts["health"] += 1
        if self._active("unhealthy", "health"):
            return web.json_response({"status": "loading"}, status=503)
        return web.json_response({"status": "ok"})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": __version__, "server": "genbench-sim"})

    async def config(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.cfg.to_dict()), content_type="application/json")

    async def models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        self.counts["models"] += 1
        if self._active("not-openai", "models"):
            return web.Response(body=NOT_OPENAI_HTML, content_type="text/html")
        card = {
            "id": self.cfg.model, "object": "model", "created": self.created,
            "owned_by": "genbench-sim", "max_model_len": self.cfg.max_model_len,
        }  # fmt: skip
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        s = self.sched
        success = [(f'{{finish_reason="{k}"}}', v) for k, v in s.m_success.items()]
        table: list[tuple[str, str, str, list[tuple[str, float]]]] = [
            ("num_requests_running", "gauge", "Requests in prefill or decode.", [("", s.running)]),
            ("num_requests_waiting", "gauge", "Requests queued.", [("", s.num_waiting())]),
            ("prompt_tokens_total", "counter", "Prefilled prompt tokens.", [("", s.m_prompt)]),
            ("generation_tokens_total", "counter", "Generated tokens.", [("", s.m_gen)]),
            ("reasoning_tokens_total", "counter", "Generated thinking tokens.", [("", s.m_reason)]),
            ("request_success_total", "counter", "Requests finished normally.", success),
            ("spec_decode_num_drafts_total", "counter", "Speculative drafts.", [("", s.m_drafts)]),
            ("spec_decode_num_draft_tokens_total", "counter", "Speculative draft tokens.",
             [("", s.m_draft_tokens)]),
            ("spec_decode_num_accepted_tokens_total", "counter", "Accepted draft tokens.",
             [("", s.m_accepted)]),
            ("decode_steps_total", "counter", "Decode steps run.", [("", s.steps)]),
            ("decode_resyncs_total", "counter", "Times the decode loop fell too far behind and "
             "resynchronised.", [("", s.resyncs)]),
            ("decode_resync_seconds_total", "counter", "Seconds the decode schedule was shifted "
             "by resynchronising.", [("", s.resync_s)]),
            ("decode_step_lag_seconds_total", "counter", "Sum over decode steps of how late "
             "each step's tokens were written.", [("", s.lag_sum)]),
            ("decode_step_lag_seconds_max", "gauge", "The latest a decode step was written.",
             [("", s.lag_max)]),
            ("first_token_lag_seconds_total", "counter", "Sum over requests of how late the "
             "first token was written after its scheduled time (slow host timers).",
             [("", s.first_lag_sum)]),
            ("requests_total", "counter", "HTTP requests received, by endpoint.",
             [(f'{{endpoint="{k}"}}', v) for k, v in self.counts.items()]),
        ]  # fmt: skip
        lines: list[str] = []
        for name, kind, help_, samples in table:
            lines.append(f"# HELP sim:{name} {help_}")
            lines.append(f"# TYPE sim:{name} {kind}")
            lines.extend(f"sim:{name}{labels} {float(value)!r}" for labels, value in samples)
        return web.Response(
            text="\n".join(lines) + "\n",
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    # -- chat completions -----------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.counts["chat"] += 1
        n = self.counts["chat"]
        raw = await request.read() if self.match_faults else None
        active = [f for f in self.chat_faults if self._hits(f, n, raw)]
        kinds = {f.kind for f in active}
        if "die" in kinds:
            os._exit(137)
        if not self._authorized(request):
            return self._unauthorized()
        if "not-openai" in kinds:
            return web.Response(body=NOT_OPENAI_HTML, content_type="text/html")
        for f in active:
            if f.kind == "http":
                status = f["status"]
                msg = f["message"] or f"{HTTPStatus(status).phrase} (injected by genbench sim)"
                headers = {"Retry-After": "1"} if status == 429 else None
                return self.error(status, msg, headers)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as e:
            return self.error(400, f"Invalid JSON body: {e}")
        r = self._plan(body, n, active)
        if isinstance(r, web.Response):
            return r
        if not r.stream:
            await self._generate(r)
            if r.outcome == "truncate":  # close without any response
                if request.transport is not None:
                    request.transport.close()
                return web.Response()
            return self._complete(r, "no-usage" in kinds)
        return await self._stream(request, r, active)

    def _plan(self, body: Any, n: int, active: list[Fault]) -> Req | web.Response:
        """Validate a chat request and fix everything about its answer but the timing."""
        cfg = self.cfg
        if not isinstance(body, dict):
            return self.error(400, "The request body must be a JSON object.")
        problem = _check_body(body)
        if problem:
            return self.error(400, problem)
        model = body.get("model") or cfg.model
        if model != cfg.model:
            return self.error(404, f"The model `{model}` does not exist.")

        messages = body["messages"]
        prompt = _count_prompt(messages)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        room = cfg.max_model_len - prompt
        if (max_tokens is not None and max_tokens > room) or room < 1:
            asked = prompt + (max_tokens or 1)
            return self.error(
                400,
                f"This model's maximum context length is {cfg.max_model_len} tokens. However, "
                f"you requested {asked} tokens ({prompt} in the messages, "
                f"{max_tokens or 0} in the completion). Please reduce the length of the "
                "messages or completion.",
            )

        # the same messages (and seed) always give the same length and text; ignore-prompt
        # answers every request it hits as if they all had one (empty) prompt
        text_faults = {f.kind: f for f in active if f.kind in TEXT_FAULTS}
        key = b"" if "ignore-prompt" in text_faults else orjson.dumps(messages)
        h = int.from_bytes(hashlib.blake2b(b"%d:" % cfg.seed + key, digest_size=8).digest())
        cap = room if max_tokens is None else max_tokens
        min_tokens = body.get("min_tokens") or 0
        if body.get("ignore_eos") or (max_tokens is not None and min_tokens >= max_tokens):
            total, finish = cap, "length"
        else:
            natural = max(self.out_len.sample(random.Random(h)), min_tokens)
            total, finish = min(natural, cap), ("stop" if natural <= cap else "length")
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = cfg.thinking_tokens
        if isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False:
            thinking = 0
        thinking = min(thinking, total)
        if "unclosed" in text_faults:  # thinks until max_tokens
            total, finish = cap, "length"
            thinking = total
        if "loop" in text_faults:  # repeats itself until max_tokens, in the thought or after it
            total, finish = cap, "length"
            if text_faults["loop"]["at"] < thinking:
                thinking = total
        if "empty-answer" in text_faults:  # closes its thought and stops: no answer
            thinking = total = max(1, min(cfg.thinking_tokens, cap))
            finish = "stop"

        r = Req()
        r.n = n
        r.stream = bool(body.get("stream"))
        r.total = total
        r.thinking = thinking
        r.pos = h % TEXT_LEN
        if text_faults.keys() - {"ignore-prompt"}:
            r.script = Script(r.pos, thinking, text_faults)
        r.prompt_tokens = prompt
        r.finish = finish
        r.id = "chatcmpl-" + os.urandom(12).hex()
        r.created = int(time.time())
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
        return r

    async def _stream(
        self, request: web.Request, r: Req, active: list[Fault]
    ) -> web.StreamResponse:
        """Answer with SSE: headers now, then chunks written by the scheduler."""
        cfg = self.cfg
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8",
                     "Cache-Control": "no-cache"},
        )  # fmt: skip
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b"")  # send the headers now, as vLLM does, not with the first token
        transport = request.transport
        if transport is None:
            return resp
        head = (
            b'data: {"id":"' + r.id.encode() + b'","object":"chat.completion.chunk","created":'
            + str(r.created).encode() + b',"model":' + orjson.dumps(cfg.model)
            + b',"choices":[{"index":0,"delta":'
        )  # fmt: skip
        r.head = head
        r.pre_c = head + b'{"content":"'
        r.pre_r = head + b'{"' + cfg.reasoning_dialect.encode() + b'":"'
        split = next((f for f in active if f.kind == "split"), None)
        if split is not None:
            rng = random.Random(f"{cfg.seed}/split/{r.n}")
            pause = split["pause_ms"] / 1000.0
            r.sink = SplitSink(transport, rng, split["min"], split["max"], pause)
        else:
            r.sink = PlainSink(transport)
        await self._generate(r)
        await r.sink.flush()
        if r.outcome in ("truncate", "gone"):
            transport.close()
        else:
            with contextlib.suppress(ConnectionError):
                await resp.write_eof()
        return resp

    async def _generate(self, r: Req) -> None:
        """Queue, prefill, then decode in the batch until r.done."""
        s = self.sched
        self.requests.add(r)
        try:
            t0 = await s.admit()
            r.released = False
            if r.dead:  # dropped (shutdown) while queued
                s.release(r, t0)
                return
            t_first = t0 + self.cfg.prefill_seconds(r.prompt_tokens) / s.speed(t0) + r.stall
            await sleep_until(t_first)
            s.first_lag_sum += clock() - t_first  # the host's timers, not the schedule
            if r.stream and r.sink is not None and r.sink.transport.is_closing():
                s.drop(r, t_first)
            else:
                s.start_decode(r, t_first)
            await r.done
        finally:
            self.requests.discard(r)
            if not r.dead:  # cancelled (shutdown): give the slot back
                r.dead = True
                s.release(r, clock())

    def _complete(self, r: Req, no_usage: bool) -> web.Response:
        """The non-streaming answer, built from the same tokens a stream would carry."""
        if r.outcome == "inband-error":
            return self.error(500, r.error_message)
        if r.malformed:
            return web.Response(body=b'{"choices": [', content_type="application/json")
        span = self.sched.vocab.span
        th = r.reasoning_emitted
        if r.script is not None:
            think, answer = r.script.split(0, r.emitted)
        else:
            think, answer = span(r.pos, th).decode(), span(r.pos + th, r.emitted - th).decode()
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        if think:
            message[self.cfg.reasoning_dialect] = think
        out: dict[str, Any] = {
            "id": r.id, "object": "chat.completion", "created": r.created,
            "model": self.cfg.model,
            "choices": [{"index": 0, "message": message, "finish_reason": r.finish,
                         "logprobs": None}],
        }  # fmt: skip
        if not no_usage:
            out["usage"] = self.sched.usage(r)
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    def shutdown(self) -> None:
        """Break every in-flight stream so that the runner can stop at once."""
        for r in list(self.requests):
            if r.sink is not None:
                r.sink.transport.abort()
            self.sched.drop(r, clock())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/sim/config", self.config)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app


def _check_body(body: dict[str, Any]) -> str | None:
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


def _count_prompt(messages: list[dict[str, Any]]) -> int:
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


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def startup_line(cfg: SimConfig, port: int, auth: bool = False) -> str:
    faults = ", ".join(f.kind for f in cfg.faults) or "none"
    return (
        f"genbench sim listening on http://{_url_host(cfg.host)}:{port}/v1 "
        f"(model {cfg.model}, tps {cfg.tps}, per-seq-ms {cfg.per_seq_ms}, "
        f"ttft-ms {cfg.ttft_ms}, max-batch {cfg.max_batch}, "
        f"api key {'required' if auth else 'not required'}, faults: {faults})"
    )


def _bind(cfg: SimConfig, reuse: bool) -> socket.socket:
    infos = socket.getaddrinfo(cfg.host, cfg.port, type=socket.SOCK_STREAM)
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    if reuse:  # not for `refuse`: another SO_REUSEADDR socket could share a non-listening port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


async def serve(cfg: SimConfig) -> None:
    """Bind, print the startup line, serve until SIGTERM/SIGINT."""
    try:
        sock = _bind(cfg, reuse=not cfg.fault("refuse"))
    except OSError as e:
        where = f"--host {cfg.host} --port {cfg.port}"
        raise UsageError(f"{where}: cannot bind: {e.strerror}") from None
    port = sock.getsockname()[1]
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    if cfg.fault("refuse"):  # the port stays reserved, but nobody listens: ECONNREFUSED
        print(startup_line(cfg, port), flush=True)
        await stop.wait()
        sock.close()
        return

    server = SimServer(cfg)
    if cfg.api_key_env and not server.auth_required:
        print(
            f"genbench sim: warning: ${cfg.api_key_env} is unset or empty: no API key required",
            file=sys.stderr,
            flush=True,
        )
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=4096)
    await site.start()
    print(startup_line(cfg, port, auth=server.auth_required), flush=True)
    await stop.wait()
    server.shutdown()
    server.sched.task.cancel()
    await runner.cleanup()


def run(cfg: SimConfig) -> None:
    """Run the server on uvloop when it is installed (faster I/O), else asyncio."""
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(cfg))
