"""A minimal OpenAI-style streaming server that costs almost nothing and stamps every write.

Why not the sim: a benchmark of the *client* needs a server that is never the bottleneck
and that knows, to the microsecond, when it wrote each chunk. This one is a bare
asyncio.Protocol (uvloop when installed) with no framework, writing pre-encoded chunks
in vLLM's format; in `tokens` mode it records `time.perf_counter()` (CLOCK_MONOTONIC,
shared by every process on the host) just before each write, so a client's arrival
timestamps can be compared with the true send times: that difference is the client's
timing error.

Modes:
  tokens  continuous-batching decode: every 1/tps s, one chunk per running stream, each
          its own write and HTTP chunk (as vLLM does); per-chunk send times are kept.
  bulk    the whole pre-rendered response in one write (the "server is free" case, like
          nginx serving a file), framed as `--framing chunked|length|eof` (eof: no length,
          the server closes); `--workers N` runs N processes on one port (SO_REUSEPORT).

    python benchmarks/stamp_server.py --mode tokens --tps 50 --port 0
    -> prints "stamp server listening on http://127.0.0.1:PORT/v1"
    GET /stamps  -> JSON {key: {"recv": t, "sends": [t, ...]}} for finished streams, then
                    forgets them (key: the content of the request's last message)

A request with `return_token_ids` gets vLLM's ids with its chunks: the prompt's at the top
level of the first chunk, each token's (6-digit ids, as from a ~150K vocabulary) in its
chunk's choice.

Standalone on purpose (stdlib, optional uvloop): it also runs from vLLM's venv.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

clock = time.perf_counter
_TEXT = (
    "the of and to in is that it for on with as was by at be this from or an are not "
    "but have one all were can which when there more will out some time into about"
)
WORDS = [(" " + w).encode() for w in _TEXT.split(" ")]


def sse(obj: bytes) -> bytes:
    return b"data: " + obj + b"\n\n"


class Render:
    """Pre-encoded pieces of one response in vLLM's chat-completion chunk format."""

    def __init__(self, model: str, thinking: int) -> None:
        self.model = model.encode()
        self.thinking = thinking
        self.created = str(int(time.time())).encode()
        self._bodies: dict[tuple[int, bool, bool], list[bytes]] = {}

    def _head(self, rid: bytes) -> bytes:
        return (
            b'{"id":"chatcmpl-' + rid + b'","object":"chat.completion.chunk","created":'
            + self.created + b',"model":"' + self.model + b'","choices":[{"index":0,"delta":'
        )  # fmt: skip

    def messages(
        self, n: int, usage: bool, prompt_tokens: int = 8, ids: bool = False
    ) -> list[bytes]:
        """The SSE messages of a response of n tokens: one per write in `tokens` mode.

        Message 0 is the role chunk together with token 0 (vLLM writes them back to back);
        the last token chunk carries finish_reason, then usage and [DONE] follow it."""
        key = (n, usage, ids)
        if key in self._bodies:
            return self._bodies[key]
        head = self._head(b"%024x" % (n * 7919 + usage))
        # vLLM's return_token_ids: after finish_reason in each choice, and the prompt's
        tok = (lambda i: b',"token_ids":[%d]' % (100003 + i * 7919 % 50000)) if ids else None
        prompt = b',"prompt_token_ids":[%s]' % b",".join(
            b"%d" % (100000 + j * 31) for j in range(prompt_tokens)
        )
        out: list[bytes] = []
        for i in range(n):
            word = WORDS[i % len(WORDS)]
            field = b"reasoning" if i < self.thinking else b"content"
            last = i == n - 1
            fin = b'"length","stop_reason":null' if last else b"null"
            msg = sse(
                head + b'{"' + field + b'":"' + word + b'"},"logprobs":null,"finish_reason":'
                + fin + (tok(i) if tok else b"") + b"}]}"
            )  # fmt: skip
            if i == 0:
                role = head + b'{"role":"assistant","content":""},"logprobs":null,'
                first = b'"finish_reason":null}]' + (prompt if ids else b"") + b"}"
                msg = sse(role + first) + msg
            if last:
                if usage:
                    u = b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
                        prompt_tokens,
                        prompt_tokens + n,
                        n,
                    )
                    msg += sse(head.split(b'"choices"')[0] + b'"choices":[],"usage":' + u + b"}")
                msg += b"data: [DONE]\n\n"
            out.append(msg)
        self._bodies[key] = out
        return out


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    b"Cache-Control: no-cache\r\n"
)


class Stream:
    __slots__ = ("proto", "msgs", "i", "key", "recv", "sends")

    def __init__(self, proto: Http, msgs: list[bytes], key: str, recv: float) -> None:
        self.proto, self.msgs, self.i, self.key, self.recv = proto, msgs, 0, key, recv
        self.sends: list[float] = []


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.render = Render(args.model, args.thinking)
        self.joining: list[Stream] = []
        self.running: list[Stream] = []
        self.stamps: dict[str, dict[str, object]] = {}
        self.wake: asyncio.Event | None = None
        self._bulk: dict[tuple[int, bool, str, bool], bytes] = {}

    def bulk_response(self, n: int, usage: bool, ids: bool = False) -> bytes:
        key = (n, usage, self.args.framing, ids)
        if key not in self._bulk:
            msgs = self.render.messages(n, usage, ids=ids)
            if self.args.framing == "length":
                body = b"".join(msgs)
                head = SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(body)
            elif self.args.framing == "eof":  # HTTP/1.0 style: the body ends when we close
                body = b"".join(msgs)
                head = SSE_HEAD + b"Connection: close\r\n\r\n"
            else:
                body = b"".join(chunk(m) for m in msgs) + b"0\r\n\r\n"
                head = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
            self._bulk[key] = head + body
        return self._bulk[key]

    async def ticker(self) -> None:
        """Decode steps on an absolute schedule: every running stream gets one chunk."""
        assert self.wake is not None
        dt = 1.0 / self.args.tps
        ttft = self.args.ttft_ms / 1000.0
        nxt = clock()
        while True:
            if not self.running and not self.joining:
                self.wake.clear()
                await self.wake.wait()
                nxt = clock()
            now = clock()
            if self.joining:
                keep = []
                for s in self.joining:
                    (self.running if now - s.recv >= ttft else keep).append(s)
                self.joining = keep
            alive: list[Stream] = []
            for s in self.running:
                t = s.proto.transport
                if t is None or t.is_closing():
                    continue
                msg = s.msgs[s.i]
                s.sends.append(clock())
                t.write(b"%x\r\n%b\r\n" % (len(msg), msg))
                s.i += 1
                if s.i < len(s.msgs):
                    alive.append(s)
                else:
                    t.write(b"0\r\n\r\n")
                    self.stamps[s.key] = {"recv": s.recv, "sends": s.sends}
                    s.proto.busy = False
            self.running = alive
            nxt += dt
            delay = nxt - clock()
            if delay < -dt:  # fell behind by more than a step: do not burst to catch up
                nxt = clock()
                delay = 0.0
            await asyncio.sleep(max(0.0, delay))

    def start_stream(self, proto: Http, body: dict[str, object], recv: float) -> None:
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)  # type: ignore[arg-type]
        opts = body.get("stream_options") or {}
        usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        ids = bool(body.get("return_token_ids"))
        key = request_key(body)
        if self.args.mode == "bulk":
            assert proto.transport is not None
            proto.transport.write(self.bulk_response(n, usage, ids))
            proto.busy = False
            if self.args.framing == "eof":
                proto.transport.close()
            return
        assert proto.transport is not None
        proto.transport.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        msgs = self.render.messages(n, usage, ids=ids)
        self.joining.append(Stream(proto, msgs, key, recv))
        assert self.wake is not None
        self.wake.set()


def request_key(body: dict[str, object]) -> str:
    """The text of the last message: plain content, or text parts (vLLM's client sends
    `[{"type": "text", "text": ...}]`)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict):
        return ""
    content = msgs[-1].get("content", "")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


class Http(asyncio.Protocol):
    """HTTP/1.1 keep-alive, one request at a time: POST chat, GET /stamps, GET others."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        recv = clock()
        self.buf += data
        while not self.busy:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = self.buf[:i].decode("latin-1")
            lines = head.split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = 0
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v)
            if len(self.buf) < i + 4 + length:
                return
            raw = self.buf[i + 4 : i + 4 + length]
            self.buf = self.buf[i + 4 + length :]
            self.handle(method, path, raw, recv)

    def reply(self, status: str, body: bytes, ctype: str = "application/json") -> None:
        assert self.transport is not None
        self.transport.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
            .encode() + body
        )  # fmt: skip

    def handle(self, method: str, path: str, raw: bytes, recv: float) -> None:
        srv = self.server
        if method == "POST" and path.endswith("/chat/completions"):
            body = json.loads(raw)
            self.busy = True
            srv.start_stream(self, body, recv)
        elif path.startswith("/stamps"):
            out, srv.stamps = srv.stamps, {}
            self.reply("200 OK", json.dumps(out).encode())
        elif path.endswith("/models"):
            card = {"id": srv.args.model, "object": "model", "owned_by": "stamp"}
            self.reply("200 OK", json.dumps({"object": "list", "data": [card]}).encode())
        else:
            self.reply("200 OK", b'{"status":"ok"}')


def listen(port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(8192)
    sock.setblocking(False)
    return sock


async def serve(args: argparse.Namespace, sock: socket.socket, announce: bool) -> None:
    loop = asyncio.get_running_loop()
    server = Server(args)
    server.wake = asyncio.Event()
    make: Callable[[], Http] = lambda: Http(server)  # noqa: E731
    srv = await loop.create_server(make, sock=sock, backlog=8192)
    ticker = asyncio.create_task(server.ticker()) if args.mode == "tokens" else None
    if announce:
        print(f"stamp server listening on http://127.0.0.1:{args.port}/v1", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if ticker is not None:
        ticker.cancel()
    srv.close()


def run(args: argparse.Namespace, sock: socket.socket, announce: bool) -> None:
    try:
        import uvloop

        uvloop.run(serve(args, sock, announce))
    except ImportError:
        asyncio.run(serve(args, sock, announce))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--mode", choices=["tokens", "bulk"], default="tokens")
    p.add_argument("--tps", type=float, default=50.0, help="chunks/s per stream (tokens mode)")
    p.add_argument("--ttft-ms", type=float, default=0.0)
    p.add_argument("--thinking", type=int, default=0, help="first N tokens are reasoning")
    p.add_argument("--model", default="stamp")
    p.add_argument("--framing", choices=["chunked", "length", "eof"], default="chunked")
    p.add_argument("--workers", type=int, default=1, help="processes (bulk mode)")
    args = p.parse_args(argv)
    multi = args.workers > 1
    sock = listen(args.port, multi)
    args.port = sock.getsockname()[1]
    children: list[int] = []
    if multi:
        for _ in range(args.workers - 1):
            pid = os.fork()
            if pid == 0:
                sock.close()
                run(args, listen(args.port, True), False)
                os._exit(0)
            children.append(pid)
    try:
        run(args, sock, True)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except OSError:
                pass
    sys.exit(0)


if __name__ == "__main__":
    main()
