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
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web

from genbench import __version__
from genbench.errors import UsageError
from genbench.sim import ids, spec
from genbench.sim.config import TEXT_FAULTS, Fault, SimConfig, startup_line
from genbench.sim.dialect import DIALECTS, Handler, render_metrics, sim_rows
from genbench.sim.kv_http import dialect_metrics, set_kv_tokens
from genbench.sim.replies import (
    ERROR_TYPES,
    NOT_OPENAI_HTML,
    TEXT_LEN,
    VOCAB,
    PlainSink,
    Req,
    Script,
    SplitSink,
    Vocab,
    check_body,
    clock,
    count_prompt,
    in_flight,
    sleep_until,
)
from genbench.sim.scheduler import (
    Scheduler,
)
from genbench.sim.tools import ToolScript, parse_tool_calls, plan_call

__all__ = ["VOCAB", "SimServer", "Vocab", "run", "serve", "startup_line"]


# vLLM's answer to a request with tools when it was started without a tool parser
NO_TOOL_PARSER = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)


def _asks_tools(body: Any) -> bool:
    return isinstance(body, dict) and bool(body.get("tools")) and body.get("tool_choice") != "none"


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
        self.dialect = DIALECTS[cfg.dialect]
        self.tool_calls = parse_tool_calls(cfg.tool_calls)

    # -- helpers --------------------------------------------------------------------------

    def _hits(self, f: Fault, n: int, body: bytes | None = None) -> bool:
        """Does fault f apply to the n-th (1-based) request of its endpoint (whose raw
        body, for chat, is `body`)?"""
        if n <= f.after or n > f.params.get("until", n):
            return False
        if f.match and (body is None or f.match.encode() not in body):
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
            "owned_by": self.dialect.owned_by, "max_model_len": self.cfg.max_model_len,
        }  # fmt: skip
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, request: web.Request) -> web.Response:
        """/metrics in the dialect's names."""
        return dialect_metrics(self)

    async def set_kv(self, request: web.Request) -> web.Response:
        return await set_kv_tokens(self, request)  # POST /sim/kv: a new capacity now

    async def sim_metrics(self, request: web.Request) -> web.Response:
        """The sim's own counters (`sim:*`), whatever the dialect: the truth for tests."""
        return render_metrics("sim:", sim_rows(self))

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
        if "no-tools" in kinds and _asks_tools(body):  # vLLM without a tool parser
            return self.error(400, NO_TOOL_PARSER)
        r = self._plan(body, n, active)
        if isinstance(r, web.Response):
            return r
        if not r.stream:
            await self._generate(r)
            if r.outcome == "truncate":  # close without any response
                if request.transport is not None:
                    request.transport.close()
                return web.Response()
            return self._complete(r, "no-usage" in kinds, body)
        return await self._stream(request, r, active)

    def _plan(self, body: Any, n: int, active: list[Fault]) -> Req | web.Response:
        """Validate a chat request and fix everything about its answer but the timing."""
        cfg = self.cfg
        if not isinstance(body, dict):
            return self.error(400, "The request body must be a JSON object.")
        problem = check_body(body)
        if problem:
            return self.error(400, problem)
        model = body.get("model") or cfg.model
        if model != cfg.model:
            return self.error(404, f"The model `{model}` does not exist.")

        messages = body["messages"]
        prompt = count_prompt(messages)
        asked = ids.asked(cfg.token_ids, body)
        if asked == "sglang-refused":
            return self.error(400, ids.SGLANG_STREAM_REFUSED)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        room = cfg.max_model_len - prompt
        if (max_tokens is not None and max_tokens > room) or room < 1:
            return self._too_long(prompt, max_tokens)

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

        tool = None
        if body.get("tools") and not text_faults and not body.get("ignore_eos"):  # forced: text
            tool = self._tool(body, thinking)
            if tool is not None:
                total, finish = min(tool.tokens, cap), "tool_calls"
                if tool.tokens > cap:
                    finish = "length"
                thinking = min(thinking, total)

        r = Req()
        r.tool = tool
        r.n = n
        r.stream = bool(body.get("stream"))
        r.total = total
        r.thinking = thinking
        r.pos = h % TEXT_LEN
        if text_faults.keys() - {"ignore-prompt"}:
            r.script = Script(r.pos, thinking, text_faults)
        r.prompt_tokens = prompt
        if asked is not None and all(f.kind != "no-ids" for f in active):
            r.ids, r.prompt_ids = cfg.token_ids, ids.prompt_ids(messages)
        r.finish = finish
        r.uncounted = any(f.kind == "uncounted-think" for f in active)
        spec.setup(r, cfg, body, messages, {f.kind for f in active})
        r.id = "chatcmpl-" + os.urandom(12).hex()
        r.created = int(time.time())
        in_flight(r, body, active)
        return r

    def _too_long(self, prompt: int, max_tokens: int | None) -> web.Response:
        """vLLM's answer to a request past the context length."""
        cfg = self.cfg
        asked = prompt + (max_tokens or 1)
        return self.error(
            400,
            f"This model's maximum context length is {cfg.max_model_len} tokens. However, "
            f"you requested {asked} tokens ({prompt} in the messages, "
            f"{max_tokens or 0} in the completion). Please reduce the length of the "
            "messages or completion.",
        )

    def _tool(self, body: dict[str, Any], thinking: int) -> ToolScript | None:
        """The tool call this request answers with, if the script calls one."""
        cfg = self.cfg
        call = plan_call(body, cfg.seed, self.tool_calls)
        if call is None:
            return None
        cid = ("call_" if cfg.dialect == "sglang" else "chatcmpl-tool-") + os.urandom(8).hex()
        return ToolScript(call, thinking, cfg.dialect, cfg.reasoning_dialect, cid)

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
        """Queue, prefill, then decode in the batch until r.done; a request preempted for
        the KV cache (sim/kv.py) queues and prefills again, then generates its tokens again
        before it sends more."""
        s = self.sched
        self.requests.add(r)
        try:
            while True:
                t0 = await s.admit(r)
                if r.dead:  # dropped (shutdown) while queued
                    s.release(r, t0)
                    return
                t_first = t0 + self.cfg.prefill_seconds(r.prompt_tokens) / s.speed(t0) + r.stall
                r.stall = 0.0
                await sleep_until(t_first)
                s.first_lag_sum += clock() - t_first  # the host's timers, not the schedule
                if r.stream and r.sink is not None and r.sink.transport.is_closing():
                    s.drop(r, t_first)
                elif r.preempted:
                    r.preempted = False
                    s.join(r, t_first)
                else:
                    s.start_decode(r, t_first)
                await r.done
                if not r.preempted:
                    return
        finally:
            self.requests.discard(r)
            if not r.dead:  # cancelled (shutdown): give the slot back
                r.dead = True
                s.release(r, clock())

    def _complete(self, r: Req, no_usage: bool, body: dict[str, Any]) -> web.Response:
        """The non-streaming answer, built from the same tokens a stream would carry."""
        if r.outcome == "inband-error":
            return self.error(500, r.error_message)
        if r.malformed:
            return web.Response(body=b'{"choices": [', content_type="application/json")
        span = self.sched.vocab.span
        th = r.thinking_emitted
        if r.script is not None:
            think, answer = r.script.split(0, r.emitted)
        else:
            think, answer = span(r.pos, th).decode(), span(r.pos + th, r.emitted - th).decode()
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        if r.tool is not None:
            think = r.tool.thought(0, r.thinking_emitted)
            message = {"role": "assistant", "content": None, "tool_calls": [r.tool.whole()]}
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
        if r.ids is not None:
            ids.whole(r.ids, body, out, r.prompt_ids, ids.generated(r))
        if (said := spec.said(r, self.cfg.dialect, r.emitted)) is not None:
            out.setdefault(said[0], {}).update(said[1])
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    def shutdown(self) -> None:
        """Break every in-flight stream so that the runner can stop at once."""
        for r in list(self.requests):
            if r.sink is not None:
                r.sink.transport.abort()
            self.sched.drop(r, clock())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        routes: dict[str, Handler | None] = {
            "/health": self.health, "/version": self.version, "/sim/config": self.config,
            "/sim/metrics": self.sim_metrics, "/metrics": self.metrics, "/v1/models": self.models,
        }  # fmt: skip
        routes.update(self.dialect.routes(self))
        if not self.cfg.metrics:
            routes["/metrics"] = None
        for path, handler in routes.items():
            if handler is not None and path.startswith("POST "):
                app.router.add_post(path[5:], handler)
            elif handler is not None:
                app.router.add_get(path, handler)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/sim/kv", self.set_kv)
        return app


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
