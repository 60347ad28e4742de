"""The one home of a failure's kind: everything that can go wrong with a request (an HTTP
status, a timeout, an OS error while connecting, a broken connection or framing, a stream
that breaks off or says it failed) becomes a `Failure`, its `ErrorKind` and the one line a
person reads, here and nowhere else. The transport (`connection`, `client`) and the
parser (`stream`) only say which of these happened; what the kind then means (is the
server gone, can a retry help, which exit code) is `genbench.errors`'s table.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

import orjson

from genbench.errors import ErrorKind, status_kind

MAX_ERROR_BODY = 64 * 1024


class Failure(Exception):
    """Why a request failed: its kind and the one line a person reads."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# -- the stream said it ----------------------------------------------------------------------


def malformed_failure(payload: bytes, what: str = "chunk") -> Failure:
    """A chunk (or a whole response) that is not JSON."""
    snippet = payload[:80].decode("utf-8", "replace")
    return Failure(ErrorKind.MALFORMED_CHUNK, f"{what} is not JSON: {snippet!r}")


def not_an_object_failure() -> Failure:
    return Failure(ErrorKind.MALFORMED_CHUNK, "chunk is not a JSON object")


def inband_failure(message: str | None) -> Failure:
    """An error event inside a 200 stream."""
    return Failure(ErrorKind.INBAND_ERROR, f"error event in stream: {message}")


def no_choices_failure(obj: Any, body: bytes) -> Failure:
    """A whole response without choices: the server's error (in-band) or a malformed body."""
    msg = error_message_from_body(body) if isinstance(obj, dict) else "not an object"
    inband = isinstance(obj, dict) and "error" in obj
    kind = ErrorKind.INBAND_ERROR if inband else ErrorKind.MALFORMED_CHUNK
    return Failure(kind, f"response has no choices: {msg}")


def incomplete_failure(why: str) -> Failure:
    """The response ended without saying why it finished."""
    return Failure(ErrorKind.INCOMPLETE_STREAM, why)


# -- the connection said it ------------------------------------------------------------------


def protocol_failure(what: str) -> Failure:
    """A response that is not HTTP genbench can read (a head too large, a bad status line or
    Content-Length), or a body that broke the parser."""
    return Failure(ErrorKind.OTHER, what)


def bad_chunking_failure(what: str) -> Failure:
    """Chunked framing that makes no sense: the stream is lost like a dropped connection."""
    return Failure(ErrorKind.DISCONNECTED, f"bad chunked encoding: {what}")


def cancelled_failure() -> Failure:
    return Failure(ErrorKind.CANCELLED, "cancelled")


def error_message_from_body(body: bytes, limit: int = 300) -> str:
    """The human part of an error body: OpenAI `error.message`, FastAPI `detail`, or the text."""
    text = body[:MAX_ERROR_BODY].decode("utf-8", "replace").strip()
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


def status_failure(status: int, body: bytes) -> Failure:
    """A response other than 200, with the server's own words."""
    message = error_message_from_body(body)
    return Failure(status_kind(status, message), f"HTTP {status}: " + message)


def read_timeout_failure() -> Failure:
    return Failure(ErrorKind.READ_TIMEOUT, "no data from the server within the read timeout")


def timeout_failure(got_head: bool) -> Failure:
    """The request's total timeout (or a GET's) ran out: after the response began, or before."""
    if got_head:
        return Failure(ErrorKind.TOTAL_TIMEOUT, "request exceeded its total timeout")
    return Failure(ErrorKind.CONNECT_TIMEOUT, "connecting timed out")


def lost_failure(got_head: bool, exc: BaseException | None) -> Failure:
    """The connection closed under a request."""
    if not got_head:
        why = "the server closed the connection before responding"
    else:
        why = "the connection closed before the response was complete"
    if exc is not None:
        why += f" ({type(exc).__name__}: {exc})"
    return Failure(ErrorKind.DISCONNECTED, why)


def connect_failure(exc: OSError, host: str, port: int) -> Failure:
    """Connecting failed. Running out of file descriptors or ports is this machine's limit,
    not the server's: it must not take a healthy server out of a job."""
    if isinstance(exc, socket.gaierror):
        return Failure(ErrorKind.DNS, f"cannot resolve {host}: {exc.strerror or exc}")
    if isinstance(exc, TimeoutError):
        return Failure(ErrorKind.CONNECT_TIMEOUT, "connecting timed out")
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        import resource  # not on Windows, where these errors do not arise

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        which = "this process" if exc.errno == errno.EMFILE else "the system"
        return Failure(
            ErrorKind.LOCAL_LIMIT,
            f"this machine ran out of file descriptors ({which}; ulimit -n is {soft}) "
            "opening a connection: not a server problem. Raise ulimit -n or lower the "
            "concurrency.",
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return Failure(
            ErrorKind.LOCAL_LIMIT,
            f"this machine has no local port free to connect to {host}:{port}: not a server "
            "problem. Lower the concurrency, or widen net.ipv4.ip_local_port_range.",
        )
    refused = isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED
    what = "connection refused" if refused else (exc.strerror or str(exc))
    # refused or unreachable: nothing answers there
    return Failure(ErrorKind.CONNECT_REFUSED, f"Cannot connect to host {host}:{port} [{what}]")
