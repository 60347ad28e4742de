"""A faster transport for the same records: `FastClient` is `Client` on asyncio.Protocol.

Why: with aiohttp every network read goes parser -> StreamReader -> future -> task
wake-up -> `iter_any` before genbench sees a byte, and real servers send one SSE
message per write, so that fixed cost is paid per chunk: measured on one core, the
aiohttp path ingests 50-100K one-chunk reads per CPU-second, this one 110-190K
(benchmarks/README.md, "Client ceiling"). Here the event loop calls `data_received`
directly: the HTTP/1.1 response (chunked, Content-Length or read-to-close) is
de-framed, split into SSE lines, timestamped and parsed in that one callback; the
request's coroutine wakes once, when its stream ends.

The records are the same by construction: `FastClient` subclasses `Client` and uses its
`_on_event`, `_on_text`, `_finish` and `_read_whole`. The one shortcut is for the common
chunk (one choice, a delta, no finish_reason, no usage), which `_Exchange._sse` handles
inline exactly as `_on_event` would; every other chunk goes to `_on_event` itself. Each
chunk gets one `orjson.loads`: at ~0.8 us it beats the cheapest safe byte scan written in
Python (~1.1 us), so a partial parse would buy nothing. Only the transport is new:
keep-alive pool, connect / read / total timeouts, and the mapping of transport failures
to the same `ErrorKind`s `classify_exception` gives for aiohttp (the messages are worded
for this transport). tests/test_fastclient.py checks the records field by field.

Correct at any read boundary: framing and SSE lines are both parsed over buffers
that carry partial input to the next read, down to one byte per read
(tests/test_fastclient.py runs the sim's `split:min=1,max=1` fault).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import orjson
from orjson import JSONDecodeError, loads

from genbench import __version__
from genbench.client import (
    _STALE_RETRIES,
    ChatRequest,
    Client,
    Timeouts,
    _StreamState,
    error_message_from_body,
)
from genbench.endpoint import Endpoint
from genbench.records import ErrorKind, RequestRecord

_DATA = b"data:"
_DONE = b"[DONE]"
_MAX_ERROR_BODY = 64 * 1024
_MAX_HEAD = 64 * 1024  # response headers larger than this are a protocol error
_DNS_TTL = 300.0
_DRAIN_S = 0.5  # after [DONE], how long to wait for the end of the HTTP body

# body framing
_LENGTH, _CHUNKED, _EOF = 1, 2, 3
# what the body is for
_SSE, _COLLECT = 1, 2


class _Failure(Exception):
    """A request failed with a known kind; raised inside `FastClient.chat` only."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class _Exchange:
    """One request/response on a connection: HTTP de-framing, SSE lines, the record.

    Lives in the protocol callbacks; `fut` resolves (always with None) when the coroutine
    in `FastClient.chat` should take over: the stream ended, failed, or the body is in.
    """

    __slots__ = (
        "client", "rec", "st", "t0", "fut", "want_sse", "got_head", "head", "status",
        "headers", "mode", "purpose", "left", "need_crlf", "trailers", "pend", "sse",
        "body", "body_limit", "failure", "reusable", "finished", "stopped",
    )  # fmt: skip

    def __init__(self, client: FastClient, rec: RequestRecord, t0: float, fut: Any) -> None:
        self.client = client
        self.rec = rec
        self.st: _StreamState | None = None
        self.t0 = t0
        self.fut = fut
        self.want_sse = client.stream
        self.got_head = False
        self.head = bytearray()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.mode = 0
        self.purpose = 0
        self.left = 0  # bytes left: of the current chunk (chunked) or of the body (length)
        self.need_crlf = False  # chunked: a chunk's data ended, its CRLF is next
        self.trailers = False  # chunked: the last chunk was seen, trailers until a blank line
        self.pend = b""  # chunked: an incomplete size line or CRLF from the previous read
        self.sse = b""  # an incomplete SSE line from the previous read
        self.body: list[bytes] = []
        self.body_limit = 0
        self.failure: _Failure | None = None
        self.reusable = True
        self.finished = False  # the HTTP response is completely read
        self.stopped = False  # the coroutine has been handed the result

    # -- results --------------------------------------------------------------------------

    def _resolve(self) -> None:
        if not self.stopped:
            self.stopped = True
            if not self.fut.done():
                self.fut.set_result(None)

    def fail(self, kind: ErrorKind, message: str) -> None:
        if self.failure is None and not self.stopped:
            self.failure = _Failure(kind, message)
        self.reusable = False
        self._resolve()

    # -- input ----------------------------------------------------------------------------

    def feed(self, data: bytes, now: float) -> None:
        """Bytes from the network; `now` is their arrival time (perf_counter)."""
        if not self.got_head:
            data = self._feed_head(data)
            if not data or self.finished or self.failure is not None:
                return
        mode = self.mode
        if mode == _CHUNKED:
            if not (self.left or self.need_crlf or self.pend or self.trailers or self.stopped):
                # Fast path: the read is exactly one whole HTTP chunk, as token-by-token
                # servers write them. Anything else takes the general de-framer below.
                i = data.find(b"\r\n", 0, 18)
                if i > 0:
                    try:
                        size = int(data[:i], 16)
                    except ValueError:
                        size = 0
                    if size and i + size + 4 == len(data) and data.endswith(b"\r\n"):
                        if self.purpose == _SSE:
                            self._sse(data[i + 2 : -2], now)
                        else:
                            self._collect(data[i + 2 : -2])
                        return
            pieces = self._dechunk(data)
            if not pieces:
                if self.finished:
                    self._body_done(now)
                return
            piece = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        elif mode == _LENGTH:
            left = self.left
            if len(data) >= left:
                if len(data) > left:
                    self.reusable = False  # bytes beyond the response: never reuse
                piece = data[:left]
                self.left = 0
                self.finished = True
            else:
                piece = data
                self.left = left - len(data)
        else:
            piece = data
        if self.stopped:  # draining the rest of a response already handed over
            if self.finished:
                self._body_done(now)
            return
        if self.purpose == _SSE:
            self._sse(piece, now)
        else:
            self._collect(piece)
        if self.finished:
            self._body_done(now)

    def _feed_head(self, data: bytes) -> bytes:
        """Accumulate the status line and headers; return the body bytes after them."""
        head = self.head
        start = max(0, len(head) - 3)
        head += data
        while True:
            i = head.find(b"\r\n\r\n", start)
            if i < 0:
                if len(head) > _MAX_HEAD:
                    self.fail(ErrorKind.OTHER, "response headers larger than 64 KiB")
                return b""
            rest = bytes(head[i + 4 :])
            try:
                status, headers = _parse_head(bytes(head[:i]))
            except ValueError as e:
                self.fail(ErrorKind.OTHER, f"bad HTTP response: {e}")
                return b""
            if 100 <= status < 200:  # 100 Continue and friends: the real head follows
                del head[:]
                head += rest
                start = 0
                continue
            break
        self.head = bytearray()
        self.got_head = True
        self.status = status
        self.headers = headers
        rec = self.rec
        rec.http_status = status
        conn = headers.get("connection", "").lower()
        if "close" in conn:
            self.reusable = False
        te = headers.get("transfer-encoding", "").lower()
        if "chunked" in te:
            self.mode = _CHUNKED
        elif "content-length" in headers:
            try:
                self.left = int(headers["content-length"])
            except ValueError:
                self.fail(ErrorKind.OTHER, "bad HTTP response: bad Content-Length")
                return b""
            self.mode = _LENGTH
        elif status in (204, 304):
            self.mode = _LENGTH
        else:
            self.mode = _EOF
            self.reusable = False
        if (
            status == 200
            and self.want_sse
            and "text/event-stream" in headers.get("content-type", "")
        ):
            self.purpose = _SSE
            self.st = _StreamState(self.client.keep_text)
        else:
            self.purpose = _COLLECT
            self.body_limit = _MAX_ERROR_BODY if status != 200 else 1 << 62
        if self.mode == _LENGTH and self.left == 0:
            self.finished = True
            self._body_done(time.perf_counter())
        return rest

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
                    self.fail(ErrorKind.DISCONNECTED, "bad chunked encoding: no CRLF after data")
                    return []
                self.need_crlf = False
                pos += 2
            else:
                i = data.find(b"\r\n", pos)
                if i < 0:
                    if n - pos > 1024:
                        self.fail(ErrorKind.DISCONNECTED, "bad chunked encoding: size line")
                        return []
                    self.pend = data[pos:]
                    break
                line = data[pos:i]
                pos = i + 2
                if self.trailers:
                    if not line:  # the blank line that ends the body
                        self.finished = True
                        if pos < n:
                            self.reusable = False
                        break
                    continue
                try:
                    size = int(line.split(b";", 1)[0], 16)
                except ValueError:
                    self.fail(ErrorKind.DISCONNECTED, f"bad chunked encoding: size {line[:20]!r}")
                    return []
                if size == 0:
                    self.trailers = True
                else:
                    self.left = size
        return out

    def _sse(self, piece: bytes, now: float) -> None:
        """Split into lines (over reads) and hand each data payload to Client._on_event."""
        lines = (self.sse + piece if self.sse else piece).split(b"\n")
        self.sse = lines.pop()
        if not lines:
            return
        rec, st = self.rec, self.st
        assert st is not None
        client = self.client
        rel = now - self.t0
        for line in lines:
            if not line.startswith(_DATA):
                continue  # blank separators, ": keep-alive" comments, "event:" fields
            payload = line[5:].strip()
            if payload == _DONE:
                st.done = True
                continue
            if not payload:
                continue
            # The common chunk (one choice, a delta, no finish_reason, no usage) is handled
            # here exactly as Client._on_event would; every other chunk goes to it.
            try:
                obj = loads(payload)
            except JSONDecodeError:
                obj = None
            if type(obj) is dict:
                choices = obj.get("choices")
                if type(choices) is list and choices:
                    choice = choices[0]
                    if (
                        type(choice) is dict
                        and not choice.get("finish_reason")
                        and not obj.get("usage")
                    ):
                        delta = choice.get("delta")
                        if not delta:
                            continue
                        if type(delta) is dict:
                            thinking = delta.get("reasoning_content") or delta.get("reasoning")
                            content = delta.get("content")
                            if thinking or content:
                                client._on_text(rec, st, rel, thinking, content)
                            continue
            if not client._on_event(payload, rec, st, rel):
                rec.t_end = time.perf_counter()
                self.reusable = False
                self._resolve()
                return
        if st.done:
            rec.t_end = time.perf_counter()
            if self.finished:
                return  # _body_done resolves
            # Servers end the body right after [DONE], usually a read later: wait for that
            # so the connection goes back to the pool before the caller's next request
            # (else each request would open a new connection), but not for long.
            self.client.pool.loop.call_later(_DRAIN_S, self._resolve)

    def _collect(self, piece: bytes) -> None:
        if self.body_limit <= 0:
            return
        if len(piece) > self.body_limit:
            piece = piece[: self.body_limit]
        self.body.append(piece)
        self.body_limit -= len(piece)

    def _body_done(self, now: float) -> None:
        """The whole response is in: end of the stream for SSE, the body for the rest."""
        if self.stopped:
            return
        if self.purpose == _SSE and not self.st.done:  # type: ignore[union-attr]
            rec, st = self.rec, self.st
            assert st is not None
            rec.t_end = time.perf_counter()
            tail = self.sse.strip()
            self.sse = b""
            if tail.startswith(_DATA) and not st.done:
                payload = tail[5:].strip()
                if payload == _DONE:
                    st.done = True
                elif payload:
                    self.client._on_event(payload, rec, st, rec.t_end - self.t0)
        self._resolve()

    def lost(self, exc: BaseException | None) -> None:
        """The connection closed (by the server, or broken) while this exchange was on it."""
        if self.stopped:
            return
        if self.st is not None and self.st.done:  # closed after [DONE]: the stream is whole
            self.reusable = False
            self._resolve()
            return
        if self.got_head and self.mode == _EOF and exc is None:
            self.finished = True
            self._body_done(time.perf_counter())
            return
        if not self.got_head:
            why = "the server closed the connection before responding"
        else:
            why = "the connection closed before the response was complete"
        if exc is not None:
            why += f" ({type(exc).__name__}: {exc})"
        self.fail(ErrorKind.DISCONNECTED, why)


class _Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; at most one exchange at a time."""

    __slots__ = (
        "pool",
        "reused",
        "transport",
        "ex",
        "closed",
        "last_read",
        "watchdog",
        "read_timeout",
    )

    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.reused = False  # taken from the pool's idle set for this exchange
        self.transport: asyncio.Transport | None = None
        self.ex: _Exchange | None = None
        self.closed = False
        self.last_read = 0.0
        self.watchdog: asyncio.TimerHandle | None = None
        self.read_timeout = 0.0

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
        except Exception as e:  # a chunk Client would also choke on: same kind, OTHER
            ex.fail(ErrorKind.OTHER, f"{type(e).__name__}: {e}")
        if ex.finished or (ex.stopped and not ex.reusable):
            self._end_exchange()

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.discard(self)
        self._cancel_watchdog()
        ex = self.ex
        self.ex = None
        if ex is not None:
            ex.lost(exc)

    # -- exchanges ------------------------------------------------------------------------

    def start(self, ex: _Exchange, request: bytes, read_timeout: float) -> None:
        assert self.transport is not None
        self.ex = ex
        self.last_read = time.perf_counter()
        self.read_timeout = read_timeout
        self.watchdog = self.pool.loop.call_later(read_timeout, self._check_read)
        self.transport.write(request)

    def _check_read(self) -> None:
        ex = self.ex
        if ex is None:
            return
        idle = time.perf_counter() - self.last_read
        if idle >= self.read_timeout * 0.999:
            self.ex = None
            self.watchdog = None
            ex.fail(ErrorKind.READ_TIMEOUT, "no data from the server within the read timeout")
            self.close()
        else:
            self.watchdog = self.pool.loop.call_later(self.read_timeout - idle, self._check_read)

    def _cancel_watchdog(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None

    def _end_exchange(self) -> None:
        """The response is fully read (or abandoned): back to the pool, or closed."""
        ex = self.ex
        self.ex = None
        self._cancel_watchdog()
        if ex is not None and ex.finished and ex.reusable and not self.closed:
            self.pool.put(self)
        else:
            self.close()

    def detach(self) -> None:
        """The coroutine gave up on the exchange (cancelled, timed out): drop the connection."""
        self.ex = None
        self._cancel_watchdog()
        self.close()

    def close(self) -> None:
        self.closed = True
        self.pool.discard(self)
        if self.transport is not None:
            self.transport.abort()


class ConnectionPool:
    """Idle keep-alive connections to one origin, like aiohttp's connector with no limit.

    Several `FastClient`s to the same endpoint may share one pool (the `session` argument).
    """

    def __init__(self, base_url: str, timeouts: Timeouts | None = None) -> None:
        parts = urlsplit(base_url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        self.netloc = parts.netloc.rsplit("@", 1)[-1]
        self.timeouts = timeouts or Timeouts()
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if self.scheme == "https" else None
        )
        self.fresh_only = False
        self._idle: dict[_Conn, None] = {}  # ordered: popitem() takes the latest (LIFO)
        self._all: set[_Conn] = set()
        self._addrs: list[tuple[Any, ...]] = []
        self._addrs_at = -_DNS_TTL
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set in acquire

    async def acquire(self) -> _Conn:
        """An idle connection (marked `reused`) or a new one; only new ones in fresh mode."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        while self._idle and not self.fresh_only:
            conn = self._idle.popitem()[0]
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                conn.reused = True
                return conn
        conn = await self._connect()
        conn.reused = False
        return conn

    def put(self, conn: _Conn) -> None:
        if self.fresh_only:
            conn.close()  # this server closes kept-alive connections: never reuse one
        elif not conn.closed:
            self._idle[conn] = None

    def use_fresh_connections(self) -> None:
        """Some servers (llama.cpp) close a keep-alive connection after a streamed reply,
        racing a client that reuses it at once: from now on, one connection per request."""
        self.fresh_only = True
        while self._idle:
            self._idle.popitem()[0].close()

    def discard(self, conn: _Conn) -> None:
        self._all.discard(conn)
        self._idle.pop(conn, None)

    async def _resolve(self) -> list[tuple[Any, ...]]:
        now = time.monotonic()
        if self._addrs and now - self._addrs_at < _DNS_TTL:
            return self._addrs
        try:
            infos = await self.loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise _Failure(ErrorKind.DNS, f"cannot resolve {self.host}: {e.strerror or e}") from e
        self._addrs = [(fam, addr) for fam, _, _, _, addr in infos]
        self._addrs_at = now
        return self._addrs

    async def _connect(self) -> _Conn:
        where = f"{self.host}:{self.port}"
        try:
            async with asyncio.timeout(self.timeouts.connect):
                addrs = await self._resolve()
                last: OSError | None = None
                for family, addr in addrs:
                    conn = _Conn(self)
                    try:
                        await self.loop.create_connection(
                            lambda c=conn: c,
                            host=addr[0],
                            port=addr[1],
                            family=family,
                            ssl=self._ssl,
                            server_hostname=self.host if self._ssl else None,
                        )
                    except OSError as e:
                        last = e
                        continue
                    self._all.add(conn)
                    return conn
        except TimeoutError:
            raise _Failure(ErrorKind.CONNECT_TIMEOUT, "connecting timed out") from None
        assert last is not None
        if isinstance(last, TimeoutError):
            raise _Failure(ErrorKind.CONNECT_TIMEOUT, "connecting timed out")
        refused = isinstance(last, ConnectionRefusedError) or last.errno == errno.ECONNREFUSED
        what = "connection refused" if refused else (last.strerror or str(last))
        # refused or unreachable: nothing answers there (aiohttp's Client says the same)
        raise _Failure(ErrorKind.CONNECT_REFUSED, f"Cannot connect to host {where} [{what}]")

    async def close(self) -> None:
        for conn in [*self._all, *self._idle]:
            conn.close()
        self._idle.clear()
        self._all.clear()
        await asyncio.sleep(0)  # let the transports run their connection_lost


class _Body:
    """The one method `Client._read_whole` calls on a response: the whole body."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def read(self) -> bytes:
        return self.data


class FastClient(Client):
    """`Client` with the protocol-level transport; same constructor, `chat`, `new_record`,
    `close` and async context manager. `session` is a `ConnectionPool` to share, or None."""

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        *,
        timeouts: Timeouts | None = None,
        stream: bool = True,
        keep_text: bool = False,
        session: ConnectionPool | None = None,
    ) -> None:
        super().__init__(endpoint, model, timeouts=timeouts, stream=stream, keep_text=keep_text)
        self._pool: ConnectionPool | None = session
        self._own_pool = session is None
        parts = urlsplit(self._url)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        host = parts.netloc.rsplit("@", 1)[-1]
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"User-Agent: genbench/{__version__}"]
        lines += [f"{k}: {v}" for k, v in self._headers.items() if k.lower() != "host"]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    @property
    def session(self) -> Any:  # the aiohttp session of `Client` has no use here
        return self.pool

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            self._pool = ConnectionPool(self.endpoint.base_url, self.timeouts)
        return self._pool

    async def close(self) -> None:
        if self._own_pool and self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def chat(
        self, req: ChatRequest, phase: str = "", record: RequestRecord | None = None
    ) -> RequestRecord:
        """Send one request and return its record; as `Client.chat`, it never raises for a
        failed request, and on cancellation marks the record and re-raises."""
        rec = record if record is not None else self.new_record(req, phase)
        data = orjson.dumps(self.payload(req))
        request = self._head + b"%d\r\n\r\n" % len(data) + data
        pool = self.pool
        rec.sent_at = time.time()
        rec.t_send = t0 = time.perf_counter()
        held: list[Any] = [None, None]  # the connection and exchange, once they exist
        try:
            if self.timeouts.total is None:
                await self._exchange(pool, rec, t0, request, held)
            else:
                async with asyncio.timeout(self.timeouts.total):
                    await self._exchange(pool, rec, t0, request, held)
        except asyncio.CancelledError:
            rec.t_end = time.perf_counter()
            self._abandon(*held)
            self._fail(rec, ErrorKind.CANCELLED, "cancelled")
            raise
        except _Failure as f:
            self._fail(rec, f.kind, f.message)
        except TimeoutError:
            self._abandon(*held)
            ex = held[1]
            got = ex is not None and ex.got_head
            kind = ErrorKind.TOTAL_TIMEOUT if got else ErrorKind.CONNECT_TIMEOUT
            msg = "request exceeded its total timeout" if got else "connecting timed out"
            self._fail(rec, kind, msg)
        else:
            await self._complete(rec, held[1], t0)
        if rec.t_end is None:
            rec.t_end = time.perf_counter()
        return rec

    async def _exchange(
        self, pool: ConnectionPool, rec: RequestRecord, t0: float, request: bytes, held: list[Any]
    ) -> None:
        for attempt in range(_STALE_RETRIES + 1):
            held[0] = conn = await pool.acquire()
            held[1] = ex = _Exchange(self, rec, t0, pool.loop.create_future())
            conn.start(ex, request, self.timeouts.read)
            await ex.fut
            f = ex.failure
            stale = conn.reused and f is not None and f.kind is ErrorKind.DISCONNECTED
            if not stale or ex.got_head or attempt == _STALE_RETRIES:
                return
            # the server had closed this pooled connection: the request never reached it
            rec.extra["stale_connection_retries"] = attempt + 1
            self.fresh_connections = True
            pool.use_fresh_connections()

    def _abandon(self, conn: _Conn | None, ex: _Exchange | None) -> None:
        if ex is not None:
            ex.stopped = True
            if ex.st is not None:
                _kinds_to_record(ex)
        if conn is not None and conn.ex is ex:
            conn.detach()

    async def _complete(self, rec: RequestRecord, ex: _Exchange | None, t0: float) -> None:
        """The protocol handed over: turn what it saw into the record, as `Client` does."""
        assert ex is not None
        if ex.st is not None:
            _kinds_to_record(ex)
        if ex.failure is not None:
            self._fail(rec, ex.failure.kind, ex.failure.message)
            return
        if ex.purpose == _SSE:
            if rec.error_kind is None:
                self._finish(rec, ex.st)  # type: ignore[arg-type]
            return
        body = b"".join(ex.body)
        if ex.status != 200:
            msg = f"HTTP {ex.status}: " + error_message_from_body(body)
            self._fail(rec, ErrorKind.HTTP_STATUS, msg)
            return
        await self._read_whole(_Body(body), rec, t0)  # type: ignore[arg-type]


def _kinds_to_record(ex: _Exchange) -> None:
    assert ex.st is not None
    ex.rec.chunk_kinds = ex.st.kinds.decode("ascii")


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
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
