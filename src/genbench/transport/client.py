"""One streaming chat-completion call -> one `RequestRecord`, over a keep-alive pool.

`Client.chat` never raises for a failed request: every way a request can fail becomes an
`ErrorKind` and a message on its record (the mapping is in `genbench.transport.failures`). The
response is read by `genbench.transport.connection` and parsed by
`genbench.transport.stream.StreamParser` as it arrives, each chunk timestamped on the
monotonic clock as it is read.

`ConnectionPool` holds the keep-alive connections to one server. One pool serves every
request genbench sends to that server: the chat requests of one or several clients, and
the GETs (`ConnectionPool.get`) of `check`, the /metrics scraper and the health probe.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from genbench import __version__
from genbench.errors import ErrorKind
from genbench.records import RequestRecord
from genbench.transport import acceptance
from genbench.transport.connection import Connection, Exchange
from genbench.transport.endpoint import Endpoint
from genbench.transport.failures import (
    Failure,
    cancelled_failure,
    connect_failure,
    status_failure,
    timeout_failure,
)
from genbench.transport.stream import StreamParser, parse_whole
from genbench.transport.thinking import Splitter, ThinkMode, ThinkState
from genbench.transport.token_ids import REQUEST_FIELDS, Ids

_DNS_TTL = 300.0
_STALE_RETRIES = 8


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `read` is the longest silence between bytes; `total` bounds a whole request."""

    connect: float = 5.0
    read: float = 600.0
    total: float | None = None


@dataclass
class ChatRequest:
    """What to send. `params`: sampling and server-specific fields (temperature, ignore_eos…)."""

    id: str
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    group: str | None = None  # the prompt's group, kept on the record (extra.group)


class ConnectionPool:
    """Idle keep-alive connections to one server (scheme, host and port of `base_url`),
    with no limit on their number; shared by whatever talks to that server."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.scheme = parts.scheme
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.scheme == "https" else 80)
        self.netloc = parts.netloc.rsplit("@", 1)[-1]
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if self.scheme == "https" else None
        )
        self.fresh_only = False
        self._idle: dict[Connection, None] = {}  # ordered: popitem() takes the latest (LIFO)
        self._all: set[Connection] = set()
        self._addrs: list[tuple[Any, ...]] = []
        self._addrs_at = -_DNS_TTL
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set in acquire

    async def roundtrip(
        self,
        request: bytes,
        timeouts: Timeouts,
        parser: StreamParser | None,
        tries: list[tuple[Connection, Exchange]],
    ) -> Exchange:
        """Send `request` and wait for its response (or the parser's end of stream).

        Some servers (llama.cpp) close a keep-alive connection after a streamed reply,
        racing a client that reuses it at once: a request that finds its pooled connection
        closed before any response is resent on a new one, and from then on the pool opens
        one connection per request. Each try is appended to `tries`."""
        for attempt in range(_STALE_RETRIES + 1):
            conn = await self.acquire(timeouts.connect)
            ex = Exchange(parser, self.loop.create_future())
            tries.append((conn, ex))
            conn.start(ex, request, timeouts.read)
            await ex.fut
            f = ex.failure
            stale = conn.reused and f is not None and f.kind is ErrorKind.DISCONNECTED
            if not stale or ex.got_head or attempt == _STALE_RETRIES:
                break
            self.use_fresh_connections()
        return ex

    async def get(
        self,
        url: str,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        json: Any = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """GET a path (or a URL on this server), or POST `json` to it when given: status,
        lower-cased headers, body (up to 64 KiB of it when the status is not 200). Raises
        `Failure` when there is no answer."""
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        method = "GET" if json is None else "POST"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.netloc}"]
        lines += [f"User-Agent: genbench/{__version__}"]
        # the body's type is ours to say, once (a strict server refuses a repeated header)
        own = ("host", "content-type", "content-length")
        lines += [f"{k}: {v}" for k, v in (headers or {}).items() if k.lower() not in own]
        data = b"" if json is None else orjson.dumps(json)
        if json is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data
        tries: list[tuple[Connection, Exchange]] = []
        try:
            async with asyncio.timeout(timeout):
                ex = await self.roundtrip(request, Timeouts(timeout, timeout), None, tries)
        except BaseException as e:
            if tries:
                tries[-1][0].detach(tries[-1][1])
            if isinstance(e, TimeoutError):
                raise timeout_failure(bool(tries) and tries[-1][1].got_head) from None
            raise
        if ex.failure is not None:
            raise ex.failure
        return ex.status, ex.headers, b"".join(ex.body)

    async def acquire(self, connect_timeout: float) -> Connection:
        """An idle connection (marked `reused`) or a new one; only new ones in fresh mode."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        while self._idle and not self.fresh_only:
            conn = self._idle.popitem()[0]
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                conn.reused = True
                return conn
        conn = await self._connect(connect_timeout)
        conn.reused = False
        return conn

    def put(self, conn: Connection) -> None:
        if self.fresh_only:
            conn.close()  # this server closes kept-alive connections: never reuse one
        elif not conn.closed:
            self._idle[conn] = None

    def use_fresh_connections(self) -> None:
        self.fresh_only = True
        while self._idle:
            self._idle.popitem()[0].close()

    def discard(self, conn: Connection) -> None:
        self._all.discard(conn)
        self._idle.pop(conn, None)

    async def _resolve(self) -> list[tuple[Any, ...]]:
        now = time.monotonic()
        if not self._addrs or now - self._addrs_at >= _DNS_TTL:
            infos = await self.loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            self._addrs = [(fam, addr) for fam, _, _, _, addr in infos]
            self._addrs_at = now
        return self._addrs

    async def _connect(self, timeout: float) -> Connection:
        last: OSError | None = None
        try:
            async with asyncio.timeout(timeout):
                for family, addr in await self._resolve():
                    conn = Connection(self)
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
        except TimeoutError as e:
            last = e
        except OSError as e:  # resolving failed
            last = e
        raise connect_failure(last or OSError("no address"), self.host, self.port)

    async def close(self) -> None:
        for conn in [*self._all, *self._idle]:
            conn.close()
        self._idle.clear()
        self._all.clear()
        await asyncio.sleep(0)  # let the transports run their connection_lost


class Client:
    """Chat completions to one endpoint and model; one instance serves many concurrent calls.
    `session`: a `ConnectionPool` to share (the caller closes it), or None for its own."""

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        *,
        timeouts: Timeouts | None = None,
        stream: bool = True,
        keep_text: bool = False,
        session: ConnectionPool | None = None,
        think: ThinkMode | ThinkState | None = None,
        keep_raw: bool = False,
        token_ids: str | None = None,
        accept: str | None = None,
        hidden_states: bool | dict[str, Any] = False,
    ) -> None:
        self.endpoint = endpoint
        # ask vLLM to write each request's hidden states (docs/hidden-states.md): the request
        # carries its own id, by which its file is found (a streamed answer names no path);
        # a dict: the kv_transfer_params to send (generate/hidden.py's Capture.kv_params)
        self.hidden_states = bool(hidden_states)
        self.states_params = (
            hidden_states if isinstance(hidden_states, dict) else {"include_output_tokens": True}
        )
        # ask for each request's speculative acceptance in this dialect (sglang; vLLM's is the
        # server's flag): genbench.transport.acceptance
        self.accept = accept
        # ask for the token ids in this dialect (genbench.transport.token_ids: vllm, sglang) and
        # keep them on the record; None: neither asked nor kept
        self.token_ids = token_ids
        # thinking inline in content: split it (genbench.transport.thinking); a ThinkState may be
        # shared by several Clients, which then learn the dialect together
        self.think = ThinkState(think) if isinstance(think, ThinkMode) else think
        self.keep_raw = keep_raw  # and keep the content as sent, too (rec.raw)
        self.model = model
        self.timeouts = timeouts or Timeouts()
        self.stream = stream
        self.keep_text = keep_text
        self._pool = session
        self._own_pool = session is None
        parts = urlsplit(endpoint.base_url + "/chat/completions")
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rsplit("@", 1)[-1]
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"User-Agent: genbench/{__version__}"]
        lines += [f"{k}: {v}" for k, v in endpoint.headers().items() if k.lower() != "host"]
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            self._pool = ConnectionPool(self.endpoint.base_url)
        return self._pool

    async def close(self) -> None:
        if self._own_pool and self._pool is not None:
            await self._pool.close()
            self._pool = None

    def payload(self, req: ChatRequest, states_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": req.messages}
        if req.max_tokens is not None:
            body["max_tokens"] = req.max_tokens
        body.update(req.params)
        body["stream"] = self.stream
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if self.token_ids is not None:
            body.update(REQUEST_FIELDS[self.token_ids])
        if self.accept is not None:
            body.update(acceptance.REQUEST_FIELDS[self.accept])
        if states_id is not None:
            body["request_id"] = states_id
            body["kv_transfer_params"] = self.states_params
        return body

    def _request(self, req: ChatRequest, states_id: str | None = None) -> bytes:
        """The request as bytes. orjson's output holds a 4 KiB buffer whatever its length:
        only this copy of it stays alive while the request is in flight."""
        data = orjson.dumps(self.payload(req, states_id))
        return self._head + b"%d\r\n\r\n" % len(data) + data

    def new_record(self, req: ChatRequest, phase: str = "") -> RequestRecord:
        rec = RequestRecord(
            id=req.id,
            phase=phase,
            server=self.endpoint.base_url,
            model=self.model,
            stream=self.stream,
            max_tokens=req.max_tokens,
        )
        if req.group:
            rec.extra["group"] = req.group
        return rec

    async def chat(
        self, req: ChatRequest, phase: str = "", record: RequestRecord | None = None
    ) -> RequestRecord:
        """Send one request and return its record. A caller that must keep in-flight records
        (to save them on Ctrl-C) passes its own `record`; on cancellation it is marked and the
        CancelledError propagates."""
        rec = record if record is not None else self.new_record(req, phase)
        states_id = None
        if self.hidden_states:  # the engine names its file after it (generate/hidden.py)
            states_id = rec.extra["states_id"] = f"gb{uuid.uuid4().hex}"
        request = self._request(req, states_id)
        pool, total = self.pool, self.timeouts.total
        rec.sent_at = time.time()
        rec.t_send = t0 = time.perf_counter()
        split = self.think.splitter(req.params, req.id) if self.think is not None else None
        ids = Ids() if self.token_ids is not None else None
        parser = (
            StreamParser(rec, t0, self.keep_text, split, self.keep_raw, ids)
            if self.stream
            else None
        )
        tries: list[tuple[Connection, Exchange]] = []
        try:
            if total is None:
                ex = await pool.roundtrip(request, self.timeouts, parser, tries)
            else:
                async with asyncio.timeout(total):
                    ex = await pool.roundtrip(request, self.timeouts, parser, tries)
        except asyncio.CancelledError:
            rec.t_end = time.perf_counter()
            self._abandon(tries, parser)
            self._fail(rec, cancelled_failure())
            raise
        except Failure as f:
            self._fail(rec, f)
        except TimeoutError:
            self._abandon(tries, parser)
            self._fail(rec, timeout_failure(tries[-1][1].got_head if tries else False))
        else:
            self._fail(rec, self._complete(rec, ex, parser, t0, split, ids))
        finally:
            if tries and tries[-1][1].got_head:
                rec.http_status = tries[-1][1].status
        if len(tries) > 1:
            rec.extra["stale_connection_retries"] = len(tries) - 1
        if rec.t_end is None:
            rec.t_end = time.perf_counter()
        return rec

    def _complete(
        self,
        rec: RequestRecord,
        ex: Exchange,
        parser: StreamParser | None,
        t0: float,
        split: Splitter | None = None,
        ids: Ids | None = None,
    ) -> Failure | None:
        """The response is in (or the stream over): what it says, as a failure or None."""
        if ex.failure is not None:
            if parser is not None:
                parser.stop()
            return ex.failure
        if parser is not None and ex.streamed:
            return parser.finish()
        body = b"".join(ex.body)
        if ex.status != 200:
            return status_failure(ex.status, body)
        now = time.perf_counter()
        return parse_whole(rec, body, t0, now, self.keep_text, split, self.keep_raw, ids)

    @staticmethod
    def _abandon(tries: list[tuple[Connection, Exchange]], parser: StreamParser | None) -> None:
        if tries:
            tries[-1][0].detach(tries[-1][1])
        if parser is not None:
            parser.stop()

    def _fail(self, rec: RequestRecord, failure: Failure | None) -> None:
        if failure is not None and rec.error_kind is None:
            rec.error_kind = failure.kind
            rec.error_message = self.endpoint.redact(failure.message)
