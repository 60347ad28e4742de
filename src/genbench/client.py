"""One streaming chat-completion call -> one `RequestRecord`.

The client timestamps every chunk on the monotonic clock as it is read, tells
thinking from answer in both reasoning dialects (`delta.reasoning_content`
from SGLang and llama.cpp, `delta.reasoning` from vLLM), takes token counts
from the server's `usage` (chunks are not tokens: with speculative decoding
one chunk carries several), and turns every way a request can fail into an
`ErrorKind` on the record. It never raises for a failed request.

SSE handling: OpenAI-compatible servers send one JSON object per `data:` line.
The parser splits on newlines over a byte buffer, so it is correct whatever
the network read boundaries are (a read may end anywhere, even inside
`data:`), and strips exactly one optional space after the colon, as the SSE
specification says.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from genbench.endpoint import Endpoint
from genbench.records import ANSWER, THINKING, ErrorKind, RequestRecord

_DATA = b"data:"
_DONE = b"[DONE]"
_A, _R = ord(ANSWER), ord(THINKING)
_MAX_ERROR_BODY = 64 * 1024
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


def error_message_from_body(body: bytes, limit: int = 300) -> str:
    """The human part of an error body: OpenAI `error.message`, FastAPI `detail`, or the text."""
    text = body[:_MAX_ERROR_BODY].decode("utf-8", "replace").strip()
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and err.get("message"):
            text = str(err["message"])
        elif isinstance(err, str):
            text = err
        elif obj.get("message"):
            text = str(obj["message"])
        elif obj.get("detail"):
            text = str(obj["detail"])
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def classify_exception(exc: BaseException, got_response: bool) -> ErrorKind:
    """Map a transport exception to an error kind."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_err = exc.os_error
        if isinstance(os_err, socket.gaierror) or type(exc).__name__ == "ClientConnectorDNSError":
            return ErrorKind.DNS
        if isinstance(os_err, ConnectionRefusedError):
            return ErrorKind.CONNECT_REFUSED
        if isinstance(os_err, TimeoutError):
            return ErrorKind.CONNECT_TIMEOUT
        return ErrorKind.CONNECT_REFUSED if not got_response else ErrorKind.DISCONNECTED
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ErrorKind.CONNECT_TIMEOUT
    if isinstance(exc, aiohttp.SocketTimeoutError):
        return ErrorKind.READ_TIMEOUT
    if isinstance(exc, TimeoutError):
        return ErrorKind.TOTAL_TIMEOUT if got_response else ErrorKind.CONNECT_TIMEOUT
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientPayloadError
        | aiohttp.ClientOSError
        | ConnectionError,
    ):
        return ErrorKind.DISCONNECTED
    return ErrorKind.OTHER


def make_session(timeouts: Timeouts, limit: int = 0) -> aiohttp.ClientSession:
    """One session per load engine: pooled keep-alive connections, no per-host cap by default."""
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(
        total=timeouts.total,
        connect=timeouts.connect,
        sock_connect=timeouts.connect,
        sock_read=timeouts.read,
    )
    return aiohttp.ClientSession(
        connector=connector, timeout=timeout, read_bufsize=1 << 18, auto_decompress=False
    )


class _StreamState:
    """Per-request parse state; kept out of the record so the hot path touches few attributes."""

    __slots__ = ("done", "finished", "kinds", "answer", "thinking")

    def __init__(self, keep_text: bool) -> None:
        self.done = False
        self.finished = False
        self.kinds = bytearray()  # one byte per text chunk: b"r" thinking, b"a" answer
        self.answer: list[str] | None = [] if keep_text else None
        self.thinking: list[str] | None = [] if keep_text else None


class Client:
    """Chat completions to one endpoint and model; one instance serves many concurrent calls."""

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        *,
        timeouts: Timeouts | None = None,
        stream: bool = True,
        keep_text: bool = False,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.timeouts = timeouts or Timeouts()
        self.stream = stream
        self.keep_text = keep_text
        self._session = session
        self._own_session = session is None
        self._url = endpoint.base_url + "/chat/completions"
        self._headers = endpoint.headers()
        self.fresh_connections = False  # set once the server is seen closing kept-alive ones

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = make_session(self.timeouts)
        return self._session

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    def payload(self, req: ChatRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": req.messages}
        if req.max_tokens is not None:
            body["max_tokens"] = req.max_tokens
        body.update(req.params)
        body["stream"] = self.stream
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def new_record(self, req: ChatRequest, phase: str = "") -> RequestRecord:
        return RequestRecord(
            id=req.id,
            phase=phase,
            server=self.endpoint.base_url,
            model=self.model,
            stream=self.stream,
            max_tokens=req.max_tokens,
        )

    async def chat(
        self, req: ChatRequest, phase: str = "", record: RequestRecord | None = None
    ) -> RequestRecord:
        """Send one request and return its record. A caller that must keep in-flight records
        (to save them on Ctrl-C) passes its own `record`; on cancellation it is marked and the
        CancelledError propagates."""
        rec = record if record is not None else self.new_record(req, phase)
        data = orjson.dumps(self.payload(req))
        for attempt in range(_STALE_RETRIES + 1):
            stale = await self._attempt(rec, data, last=attempt == _STALE_RETRIES)
            if not stale:
                break
            rec.extra["stale_connection_retries"] = attempt + 1
            if not self.fresh_connections:
                # this server closes connections it advertised as kept alive: stop reusing
                # them, or every pooled connection races the server's close
                self.fresh_connections = True
                self._headers = {**self._headers, "Connection": "close"}
        if rec.t_end is None:
            rec.t_end = time.perf_counter()
        return rec

    async def _attempt(self, rec: RequestRecord, data: bytes, last: bool) -> bool:
        """One try. True when the pooled connection was already closed by the server and the
        request never left: some servers (llama.cpp) close a keep-alive connection after a
        streamed reply, racing a client that reuses it at once. Such a request is resent."""
        got_response = False
        rec.sent_at = time.time()
        rec.t_send = t0 = time.perf_counter()
        try:
            async with self.session.post(self._url, data=data, headers=self._headers) as resp:
                got_response = True
                rec.http_status = resp.status
                if resp.status != 200:
                    body = await resp.content.read(_MAX_ERROR_BODY)
                    self._fail(
                        rec,
                        ErrorKind.HTTP_STATUS,
                        f"HTTP {resp.status}: " + error_message_from_body(body),
                    )
                elif self.stream and _is_event_stream(resp.headers):
                    await self._read_stream(resp, rec, t0)
                else:
                    await self._read_whole(resp, rec, t0)
        except asyncio.CancelledError:
            rec.t_end = time.perf_counter()
            self._fail(rec, ErrorKind.CANCELLED, "cancelled")
            raise
        except Exception as e:  # every transport failure becomes a record
            if not got_response and not last and _is_stale_connection(e):
                return True
            kind = classify_exception(e, got_response)
            self._fail(rec, kind, _describe(e, kind))
        return False

    def _fail(self, rec: RequestRecord, kind: ErrorKind, message: str) -> None:
        if rec.error_kind is None:
            rec.error_kind = kind
            rec.error_message = self.endpoint.redact(message)

    async def _read_stream(
        self, resp: aiohttp.ClientResponse, rec: RequestRecord, t0: float
    ) -> None:
        st = _StreamState(self.keep_text)
        try:
            await self._parse_stream(resp, rec, st, t0)
        finally:
            rec.chunk_kinds = st.kinds.decode("ascii")
        if rec.error_kind is None:
            self._finish(rec, st)

    async def _parse_stream(
        self, resp: aiohttp.ClientResponse, rec: RequestRecord, st: _StreamState, t0: float
    ) -> None:
        buf = b""
        perf = time.perf_counter
        async for data in resp.content.iter_any():
            now = perf() - t0
            buf = buf + data if buf else data
            if b"\n" not in buf:
                continue
            lines = buf.split(b"\n")
            buf = lines.pop()
            for line in lines:
                if not line.startswith(_DATA):
                    continue  # blank separators, ": keep-alive" comments, "event:" fields
                payload = line[5:].strip()
                if payload == _DONE:
                    st.done = True
                    continue
                if not payload:
                    continue
                if not self._on_event(payload, rec, st, now):
                    rec.t_end = perf()
                    return
            if st.done:
                break
        rec.t_end = perf()
        tail = buf.strip()
        if tail.startswith(_DATA) and not st.done:
            payload = tail[5:].strip()
            if payload == _DONE:
                st.done = True
            elif payload:
                self._on_event(payload, rec, st, rec.t_end - t0)

    def _on_event(self, payload: bytes, rec: RequestRecord, st: _StreamState, now: float) -> bool:
        """Handle one SSE data payload; False stops the stream (an error was recorded)."""
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            snippet = payload[:80].decode("utf-8", "replace")
            self._fail(rec, ErrorKind.MALFORMED_CHUNK, f"chunk is not JSON: {snippet!r}")
            return False
        if not isinstance(obj, dict):
            self._fail(rec, ErrorKind.MALFORMED_CHUNK, "chunk is not a JSON object")
            return False
        choices = obj.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if delta:
                thinking = delta.get("reasoning_content") or delta.get("reasoning")
                content = delta.get("content")
                if thinking or content:
                    self._on_text(rec, st, now, thinking, content)
            fr = choice.get("finish_reason")
            if fr:
                rec.finish_reason = fr
                st.finished = True
        elif "error" in obj:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else str(err)
            self._fail(rec, ErrorKind.INBAND_ERROR, f"error event in stream: {msg}")
            return False
        usage = obj.get("usage")
        if usage:
            _apply_usage(rec, usage)
        return True

    @staticmethod
    def _on_text(
        rec: RequestRecord, st: _StreamState, now: float, thinking: str | None, content: str | None
    ) -> None:
        if rec.ttft is None:
            rec.ttft = now
        rec.chunk_offsets.append(now)
        if content:
            st.kinds.append(_A)
            rec.answer_chars += len(content)
            if rec.ttft_answer is None:
                rec.ttft_answer = now
            if st.answer is not None:
                st.answer.append(content)
        else:
            st.kinds.append(_R)
        if thinking:
            rec.thinking_chars += len(thinking)
            if rec.ttft_thinking is None:
                rec.ttft_thinking = now
            if st.thinking is not None:
                st.thinking.append(thinking)

    def _finish(self, rec: RequestRecord, st: _StreamState) -> None:
        if st.answer is not None:
            rec.text = "".join(st.answer)
            rec.reasoning = "".join(st.thinking or [])
        if not st.finished:
            why = "[DONE] without a finish_reason" if st.done else "stream ended before finish"
            self._fail(rec, ErrorKind.INCOMPLETE_STREAM, why)
        if rec.completion_tokens is None:
            _estimate_tokens(rec)

    async def _read_whole(
        self, resp: aiohttp.ClientResponse, rec: RequestRecord, t0: float
    ) -> None:
        body = await resp.read()
        rec.t_end = time.perf_counter()
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            snippet = body[:80].decode("utf-8", "replace")
            self._fail(rec, ErrorKind.MALFORMED_CHUNK, f"response is not JSON: {snippet!r}")
            return
        if not isinstance(obj, dict) or not obj.get("choices"):
            msg = error_message_from_body(body) if isinstance(obj, dict) else "not an object"
            kind = (
                ErrorKind.INBAND_ERROR
                if isinstance(obj, dict) and "error" in obj
                else ErrorKind.MALFORMED_CHUNK
            )
            self._fail(rec, kind, f"response has no choices: {msg}")
            return
        choice = obj["choices"][0]
        msg = choice.get("message") or {}
        content = msg.get("content") or ""
        thinking = msg.get("reasoning_content") or msg.get("reasoning") or ""
        rec.answer_chars, rec.thinking_chars = len(content), len(thinking)
        rec.ttft = rec.t_end - t0  # non-streaming: the whole reply arrives at once
        if self.keep_text:
            rec.text, rec.reasoning = content, thinking
        rec.finish_reason = choice.get("finish_reason")
        if obj.get("usage"):
            _apply_usage(rec, obj["usage"])
        else:
            rec.tokens_estimated = True
        if not rec.finish_reason:
            self._fail(rec, ErrorKind.INCOMPLETE_STREAM, "response without a finish_reason")


def _is_stale_connection(e: BaseException) -> bool:
    """A reused keep-alive connection that the server had closed: nothing was processed."""
    if isinstance(e, aiohttp.ClientConnectorError):
        return False  # a new connection that failed: the server is really unreachable
    return isinstance(e, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError) and (
        isinstance(e, aiohttp.ServerDisconnectedError)
        or "write request body" in str(e)
        or isinstance(e.__cause__ or e.__context__, ConnectionResetError | BrokenPipeError)
    )


def _is_event_stream(headers: Mapping[str, str]) -> bool:
    return "text/event-stream" in headers.get("Content-Type", "")


def _apply_usage(rec: RequestRecord, usage: dict[str, Any]) -> None:
    rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
    rec.completion_tokens = usage.get("completion_tokens", rec.completion_tokens)
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict) and details.get("reasoning_tokens") is not None:
        rec.reasoning_tokens = details["reasoning_tokens"]
    elif usage.get("reasoning_tokens") is not None:
        rec.reasoning_tokens = usage["reasoning_tokens"]


def _estimate_tokens(rec: RequestRecord) -> None:
    """No usage from the server: one token per text chunk (true for servers without
    speculative decoding), marked as estimated."""
    rec.tokens_estimated = True
    rec.completion_tokens = len(rec.chunk_kinds)
    rec.reasoning_tokens = rec.chunk_kinds.count(THINKING)


def _describe(e: BaseException, kind: ErrorKind) -> str:
    if kind is ErrorKind.READ_TIMEOUT:
        return "no data from the server within the read timeout"
    if kind is ErrorKind.TOTAL_TIMEOUT:
        return "request exceeded its total timeout"
    if kind is ErrorKind.CONNECT_TIMEOUT:
        return "connecting timed out"
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}"
