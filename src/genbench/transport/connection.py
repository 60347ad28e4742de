"""HTTP/1.1 on `asyncio.Protocol`: one connection, one request/response on it at a time.

Why a protocol and not a stream library: real servers send one SSE message per write, so
the fixed cost of every network read is paid per chunk. Here the event loop calls
`data_received` directly; the response (chunked, Content-Length or read-to-close) is
de-framed and its body handed to the `StreamParser` in that one callback, and the
request's coroutine wakes once, when the response ends (benchmarks/README.md, "Client
ceiling"). De-framing carries partial input (a size line, a CRLF) to the next read, so
any read boundary works, down to one byte per read.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Protocol

from genbench.transport.failures import (
    MAX_ERROR_BODY,
    Failure,
    bad_chunking_failure,
    lost_failure,
    protocol_failure,
    read_timeout_failure,
)
from genbench.transport.stream import StreamParser

_MAX_HEAD = 64 * 1024  # response headers larger than this are a protocol error
_DRAIN_S = 0.5  # after [DONE], how long to wait for the end of the HTTP body
_LENGTH, _CHUNKED, _EOF = 1, 2, 3  # body framing


class Exchange:
    """One response: status and headers, then the body, de-framed as it arrives.

    A 200 `text/event-stream` body goes to `parser` (when given) as it arrives; any other
    body is collected. `fut` resolves (always with None) when the coroutine waiting on
    it should take over: the response ended, failed, or the stream is over.
    """

    __slots__ = (
        "parser", "sse", "fut", "got_head", "head", "status", "headers", "mode", "left",
        "need_crlf", "trailers", "pend", "collect", "body", "body_limit", "failure",
        "reusable", "finished", "stopped",
    )  # fmt: skip

    def __init__(self, parser: StreamParser | None, fut: asyncio.Future[None]) -> None:
        self.parser = parser
        self.sse: StreamParser | None = None  # the parser, while it reads this body
        self.fut = fut
        self.got_head = False
        self.head = bytearray()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.mode = 0
        self.left = 0  # bytes left: of the current chunk (chunked) or of the body (length)
        self.need_crlf = False  # chunked: a chunk's data ended, its CRLF is next
        self.trailers = False  # chunked: the last chunk was seen, trailers until a blank line
        self.pend = b""  # chunked: an incomplete size line or CRLF from the previous read
        self.collect = False  # the body is collected, not parsed as it arrives
        self.body: list[bytes] = []
        self.body_limit = 0  # bytes still to collect
        self.failure: Failure | None = None
        self.reusable = True
        self.finished = False  # the HTTP response is completely read
        self.stopped = False  # the coroutine has been handed the result

    @property
    def streamed(self) -> bool:
        """The body went to the parser."""
        return self.got_head and not self.collect

    def resolve(self) -> None:
        if not self.stopped:
            self.stopped = True
            if not self.fut.done():
                self.fut.set_result(None)

    def fail(self, failure: Failure) -> None:
        if self.failure is None and not self.stopped:
            self.failure = failure
        self.reusable = False
        self.resolve()

    def feed(self, data: bytes, now: float) -> None:
        """Bytes from the network; `now` is their arrival time (perf_counter)."""
        if not self.got_head:
            data = self._feed_head(data, now)
            if not data or self.finished or self.failure is not None:
                return
        mode = self.mode
        if mode == _CHUNKED:
            if not (self.left or self.need_crlf or self.pend or self.trailers):
                # Fast path: the read is exactly one whole HTTP chunk, as token-by-token
                # servers write them. Anything else takes the general de-framer below.
                i = data.find(b"\r\n", 0, 18)
                if i > 0:
                    try:
                        size = int(data[:i], 16)
                    except ValueError:
                        size = 0
                    if size and i + size + 4 == len(data) and data.endswith(b"\r\n"):
                        sse = self.sse
                        if sse is not None:
                            if sse.feed(data[i + 2 : -2], now):
                                self._stream_over()
                        elif self.collect:
                            self._collect(data[i + 2 : -2])
                        return
            pieces = self._dechunk(data)
            piece = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        elif mode == _LENGTH:
            piece = data[: self.left]
            if len(data) >= self.left:
                if len(data) > self.left:
                    self.reusable = False  # bytes beyond the response: never reuse
                self.finished = True
            self.left -= len(piece)
        else:
            piece = data
        if piece:
            sse = self.sse
            if sse is not None:
                if sse.feed(piece, now):
                    self._stream_over()
            elif self.collect:
                self._collect(piece)
        if self.finished:
            self._body_done(now)

    def _feed_head(self, data: bytes, now: float) -> bytes:
        """Accumulate the status line and headers; return the body bytes after them."""
        head = self.head
        start = max(0, len(head) - 3)
        head += data
        while True:
            i = head.find(b"\r\n\r\n", start)
            if i < 0:
                if len(head) > _MAX_HEAD:
                    self.fail(protocol_failure("response headers larger than 64 KiB"))
                return b""
            rest = bytes(head[i + 4 :])
            try:
                status, headers = parse_head(bytes(head[:i]))
            except ValueError as e:
                self.fail(protocol_failure(f"bad HTTP response: {e}"))
                return b""
            if not 100 <= status < 200:
                break
            del head[:]  # 100 Continue and friends: the real head follows
            head += rest
            start = 0
        self.head = bytearray()
        self.got_head = True
        self.status, self.headers = status, headers
        if not self._framing(status, headers):
            return b""
        parser = self.parser
        if status == 200 and parser and "text/event-stream" in headers.get("content-type", ""):
            self.sse = parser
        else:
            self.collect = True
            self.body_limit = MAX_ERROR_BODY if status != 200 else 1 << 62
        if self.mode == _LENGTH and self.left == 0:
            self.finished = True
            self._body_done(now)
        return rest

    def _framing(self, status: int, headers: dict[str, str]) -> bool:
        """How the body ends (RFC 9112 6.3); False when the response is unreadable."""
        if "close" in headers.get("connection", "").lower():
            self.reusable = False
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.mode = _CHUNKED
        elif "content-length" in headers:
            try:
                self.left = int(headers["content-length"])
            except ValueError:
                self.fail(protocol_failure("bad HTTP response: bad Content-Length"))
                return False
            self.mode = _LENGTH
        elif status in (204, 304):
            self.mode = _LENGTH
        else:
            self.mode = _EOF
            self.reusable = False
        return True

    def _dechunk(self, data: bytes) -> list[bytes]:
        """Chunked transfer-encoding: the data bytes of this read, in order."""
        if self.pend:
            data = self.pend + data
            self.pend = b""
        out: list[bytes] = []
        pos, n = 0, len(data)
        while pos < n:
            left = self.left
            if left:
                end = pos + left
                if end <= n:
                    out.append(data[pos:end] if pos or end < n else data)
                    self.left = 0
                    self.need_crlf = True
                    pos = end
                else:
                    out.append(data[pos:] if pos else data)
                    self.left = end - n
                    break
            elif self.need_crlf:
                if n - pos < 2:
                    self.pend = data[pos:]
                    break
                if data[pos : pos + 2] != b"\r\n":
                    return self._bad_chunking("no CRLF after data")
                self.need_crlf = False
                pos += 2
            else:
                i = data.find(b"\r\n", pos)
                if i < 0:
                    if n - pos > 1024:
                        return self._bad_chunking("size line")
                    self.pend = data[pos:]
                    break
                line = data[pos:i]
                pos = i + 2
                if self.trailers:
                    if not line:  # the blank line that ends the body
                        self.finished = True
                        self.reusable = self.reusable and pos == n
                        break
                    continue
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    return self._bad_chunking(f"size {line[:20]!r}")
                if size == 0:
                    self.trailers = True
                else:
                    self.left = size
        return out

    def _bad_chunking(self, what: str) -> list[bytes]:
        self.fail(bad_chunking_failure(what))
        return []

    def _stream_over(self) -> None:
        """The parser saw [DONE], or a failure it recorded (STOP): it reads no more."""
        sse = self.sse
        self.sse = None
        if sse is not None and sse.failure is not None:
            self.reusable = False
            self.resolve()
        elif not self.finished:
            # Servers end the body right after [DONE], usually a read later: wait for that
            # so the connection goes back to the pool before the caller's next request
            # (else each request would open a new connection), but not for long.
            self.fut.get_loop().call_later(_DRAIN_S, self.resolve)

    def _collect(self, piece: bytes) -> None:
        if self.body_limit <= 0:
            return
        if len(piece) > self.body_limit:
            piece = piece[: self.body_limit]
        self.body.append(piece)
        self.body_limit -= len(piece)

    def _body_done(self, now: float) -> None:
        """The whole response is in."""
        if self.sse is not None:
            self.sse.end(now)
            self.sse = None
        self.resolve()

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed (by the server, or broken) while this exchange was on it."""
        if self.stopped:
            return
        parser = self.parser
        if parser is not None and parser.done:  # closed after [DONE]: the stream is whole
            self.reusable = False
            self.resolve()
        elif self.got_head and self.mode == _EOF and exc is None:
            self.finished = True
            self._body_done(time.perf_counter())
        else:
            self.fail(lost_failure(self.got_head, exc))


class Idle(Protocol):
    """Where a connection goes when its exchange ends: `genbench.transport.client`'s
    `ConnectionPool`, seen as the connection needs it (no import back: no cycle)."""

    def put(self, conn: Connection) -> None: ...

    def discard(self, conn: Connection) -> None: ...


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection of a `ConnectionPool`."""

    __slots__ = ("pool", "reused", "transport", "ex", "closed", "last_read", "watchdog", "timeout")

    def __init__(self, pool: Idle) -> None:
        self.pool = pool
        self.reused = False  # taken from the pool's idle set for this exchange
        self.transport: asyncio.Transport | None = None
        self.ex: Exchange | None = None
        self.closed = False
        self.last_read = 0.0
        self.watchdog: asyncio.TimerHandle | None = None
        self.timeout = 0.0  # the read timeout of the current exchange

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.last_read = now
        ex = self.ex
        if ex is None:  # bytes on an idle connection: the server is confused; drop it
            self.close()
            return
        try:
            ex.feed(data, now)
        except Exception as e:  # a chunk that breaks the parser (e.g. "choices": [1])
            ex.fail(protocol_failure(f"{type(e).__name__}: {e}"))
        if ex.finished or (ex.stopped and not ex.reusable):
            self._end_exchange()

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.discard(self)
        self._cancel_watchdog()
        ex, self.ex = self.ex, None
        if ex is not None:
            ex.lost(exc)

    def start(self, ex: Exchange, request: bytes, read_timeout: float) -> None:
        assert self.transport is not None
        self.ex = ex
        self.last_read = time.perf_counter()
        self.timeout = read_timeout
        self.watchdog = ex.fut.get_loop().call_later(read_timeout, self._check_read)
        self.transport.write(request)

    def _check_read(self) -> None:
        ex = self.ex
        if ex is None:
            return
        idle = time.perf_counter() - self.last_read
        if idle >= self.timeout * 0.999:
            self.ex = self.watchdog = None
            ex.fail(read_timeout_failure())
            self.close()
        else:
            self.watchdog = ex.fut.get_loop().call_later(self.timeout - idle, self._check_read)

    def _cancel_watchdog(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None

    def _end_exchange(self) -> None:
        """The response is fully read (or abandoned): back to the pool, or closed."""
        ex, self.ex = self.ex, None
        self._cancel_watchdog()
        if ex is not None and ex.finished and ex.reusable and not self.closed:
            self.pool.put(self)
        else:
            self.close()

    def detach(self, ex: Exchange) -> None:
        """The coroutine gave up on `ex` (cancelled, timed out): drop the connection."""
        ex.stopped = True
        if self.ex is ex:
            self.ex = None
            self._cancel_watchdog()
            self.close()

    def close(self) -> None:
        self.closed = True
        self.pool.discard(self)
        if self.transport is not None:
            self.transport.abort()


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """Status code and lower-cased headers (repeated headers joined with ', ')."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError(f"status line {lines[0][:60]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise ValueError(f"status line {lines[0][:60]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            continue
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return status, headers
