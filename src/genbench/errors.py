"""The one failure vocabulary: why a request failed, what that says, and how genbench exits.

Every command asks the same three questions of a failed request: is the server gone,
can a retry help, and which exit code does it mean? `ErrorKind` answers them from one
table (`KIND_TRAITS`), so `load`, `generate`, `check` and `plan` cannot disagree.
Exceptions carry the one-line message a person sees and an `ExitCode`.
"""

from __future__ import annotations

import re
import resource  # here, not when needed: an import needs a descriptor
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import TypeVar

T = TypeVar("T")


class ExitCode(IntEnum):
    """Every exit code genbench uses (README.md, "Exit codes"; generate's endings:
    docs/generate.md). BAD_RESPONSE is also `generate --token-ids on` meeting a server
    without ids, at the preflight or later (the job stops: generate/ending.py)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    REFUSED = 3
    DNS = 4
    TIMEOUT = 5
    AUTH = 6
    NOT_FOUND = 7
    MODEL = 8
    SERVER_ERROR = 9
    BAD_RESPONSE = 10
    REQUEST_FAILED = 11
    OUTPUT = 12
    ENGINE = 13  # an engine genbench started (--serve) never became healthy
    ENGINES_GONE = 14  # every --serve engine out of restarts, no other server: nothing can run
    INTERRUPTED = 130


class Retry(StrEnum):
    """What a retry of the same request can do."""

    YES = "yes"  # a passing fault: retry with backoff
    NO = "no"  # the request itself is the problem: retrying cannot help
    PROBE = "probe"  # the server may have died: ask its /health before retrying


class ErrorKind(StrEnum):
    """Why a request (or a row) failed. Stable strings: they are written to results."""

    CONNECT_REFUSED = "connect_refused"
    DNS = "dns"
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"
    TOTAL_TIMEOUT = "total_timeout"
    HTTP_STATUS = "http_status"
    # a router or proxy answered for its worker: the worker failed or none was free
    # (502, 504, a router's "no available workers" or "error sending request")
    UPSTREAM = "upstream"
    INBAND_ERROR = "inband_error"
    MALFORMED_CHUNK = "malformed_chunk"
    INCOMPLETE_STREAM = "incomplete_stream"
    DISCONNECTED = "disconnected"
    CANCELLED = "cancelled"
    # this machine ran out of file descriptors (or ports): the client's limit, not the server
    LOCAL_LIMIT = "local_limit"
    # a row cut by max_tokens, refused by `generate --truncated error`
    TRUNCATED = "truncated"
    # a row of the input file that cannot be sent (no prompt, bad field)
    INVALID_INPUT = "invalid_input"
    # generate --hidden-states: the engine answered, but its states file never appeared, or
    # is torn, or holds other ids or a NaN/Inf (generate/hidden.py)
    HIDDEN_STATES = "hidden_states"
    OTHER = "other"

    @property
    def traits(self) -> KindTraits:
        return KIND_TRAITS[self]

    @property
    def server_gone(self) -> bool:
        """Nothing answers at the server's address: stop sending to it."""
        return self.traits.gone

    @property
    def retry(self) -> Retry:
        return self.traits.retry

    @property
    def exit_code(self) -> ExitCode:
        return self.traits.exit

    @classmethod
    def parse(cls, value: str | None) -> ErrorKind | None:
        """A kind read back from a file; an unknown string (a newer genbench) is OTHER."""
        if value is None:
            return None
        try:
            return cls(value)
        except ValueError:
            return cls.OTHER


@dataclass(frozen=True)
class KindTraits:
    gone: bool
    retry: Retry
    exit: ExitCode


KIND_TRAITS: dict[ErrorKind, KindTraits] = {
    ErrorKind.CONNECT_REFUSED: KindTraits(True, Retry.YES, ExitCode.REFUSED),
    ErrorKind.DNS: KindTraits(True, Retry.YES, ExitCode.DNS),
    ErrorKind.CONNECT_TIMEOUT: KindTraits(True, Retry.YES, ExitCode.TIMEOUT),
    ErrorKind.READ_TIMEOUT: KindTraits(False, Retry.PROBE, ExitCode.TIMEOUT),
    ErrorKind.TOTAL_TIMEOUT: KindTraits(False, Retry.PROBE, ExitCode.TIMEOUT),
    ErrorKind.HTTP_STATUS: KindTraits(False, Retry.YES, ExitCode.SERVER_ERROR),
    # the address answers; the router sends the retry to another worker
    ErrorKind.UPSTREAM: KindTraits(False, Retry.YES, ExitCode.SERVER_ERROR),
    ErrorKind.INBAND_ERROR: KindTraits(False, Retry.YES, ExitCode.SERVER_ERROR),
    ErrorKind.MALFORMED_CHUNK: KindTraits(False, Retry.YES, ExitCode.BAD_RESPONSE),
    ErrorKind.INCOMPLETE_STREAM: KindTraits(False, Retry.PROBE, ExitCode.REQUEST_FAILED),
    ErrorKind.DISCONNECTED: KindTraits(False, Retry.PROBE, ExitCode.REQUEST_FAILED),
    ErrorKind.CANCELLED: KindTraits(False, Retry.YES, ExitCode.INTERRUPTED),
    ErrorKind.LOCAL_LIMIT: KindTraits(False, Retry.YES, ExitCode.REQUEST_FAILED),
    ErrorKind.TRUNCATED: KindTraits(False, Retry.NO, ExitCode.REQUEST_FAILED),
    ErrorKind.INVALID_INPUT: KindTraits(False, Retry.NO, ExitCode.USAGE),
    ErrorKind.HIDDEN_STATES: KindTraits(False, Retry.YES, ExitCode.REQUEST_FAILED),
    ErrorKind.OTHER: KindTraits(False, Retry.YES, ExitCode.REQUEST_FAILED),
}

# HTTP statuses worth retrying although they are 4xx: timeout, conflict, rate limit
RETRYABLE_4XX = frozenset({408, 409, 429})


# what a server's error message says beyond its status code (see `model_missing`,
# `upstream_failed`); messages of vLLM, SGLang, llama.cpp, sglang-router, vllm-router
_MODEL_MISSING = re.compile(
    r"model\W+\S+\W+(does not exist|not found|is not (served|available|loaded))"
    r"|(unknown|no such|invalid) model|model (is )?not found",
    re.IGNORECASE,
)
_UPSTREAM = re.compile(
    r"no (available|healthy) workers?|no workers are( currently)? available"
    r"|error sending request for url|upstream",
    re.IGNORECASE,
)


def model_missing(message: str) -> bool:
    """The server's error message says the requested model is not there."""
    return bool(_MODEL_MISSING.search(message))


_NO_WORKER = re.compile(
    r"no (available|healthy) workers?|no workers are( currently)? available", re.IGNORECASE
)


def no_worker_left(message: str) -> bool:
    """A router says none of its workers can take a request (every one dead or its circuit
    open), as opposed to one that failed."""
    return bool(_NO_WORKER.search(message))


def upstream_failed(status: int, message: str) -> bool:
    """A router or proxy answered for the worker behind it: 502 and 504 always, another
    5xx when its message says no worker could take the request."""
    return status in (502, 504) or (status >= 500 and bool(_UPSTREAM.search(message)))


def status_kind(status: int, message: str) -> ErrorKind:
    """The kind of a response other than 200: UPSTREAM when a router answered for its
    worker, else HTTP_STATUS."""
    return ErrorKind.UPSTREAM if upstream_failed(status, message) else ErrorKind.HTTP_STATUS


def retry_for(kind: ErrorKind, http_status: int | None = None) -> Retry:
    """The retry advice for a failure, with the HTTP status where there is one: a 4xx other
    than 408/409/429 is the request's fault (context too long, bad field), a 5xx may be a
    dying server."""
    if kind is ErrorKind.HTTP_STATUS and http_status is not None:
        if 400 <= http_status < 500:
            return Retry.YES if http_status in RETRYABLE_4XX else Retry.NO
        if http_status >= 500:
            return Retry.PROBE
    return kind.retry


def may_come_back(kind: ErrorKind, http_status: int | None = None) -> bool:
    """A failure of the server, not of the request or its configuration: the server is gone,
    or a retry (after /health, where the table says so) can help. A server that fails so at
    the start of a job is left out and polled back; any other failure stops the job."""
    return kind.server_gone or retry_for(kind, http_status) is not Retry.NO


class GenbenchError(Exception):
    """An error genbench explains in one line and exits with `exit_code`."""

    exit_code: int = ExitCode.FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(GenbenchError):
    """Bad input from the user: a flag value, a file, a line of a file."""

    exit_code = ExitCode.USAGE


def checked(parse: Callable[[str], T], text: str) -> T:
    """`parse(text)`, a flag's parser: its ValueError said as a one-line UsageError."""
    try:
        return parse(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def positive(name: str, value: float | int | None) -> None:
    """A flag that must be above zero when given."""
    if value is not None and value <= 0:
        raise UsageError(f"{name} must be a positive number, got {value}")


class InputFileError(UsageError):
    """Bad content in an input file; names the file, line and field."""

    def __init__(self, path: object, line: int | None, problem: str, field: str | None = None):
        where = f"{path}" + (f", line {line}" if line is not None else "")
        what = f"field '{field}': {problem}" if field else problem
        super().__init__(f"{where}: {what}")
        self.path, self.line, self.field = path, line, field


class OutputError(GenbenchError):
    """Output could not be written (disk full, permissions); what was written is kept."""

    exit_code = ExitCode.OUTPUT


class OutOfDescriptors(OutputError):
    """This process has as many files and connections open as its limit allows (EMFILE,
    ENFILE): a limit of this machine, not a fault of the disk or the server. A job can
    go on with fewer streams."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}: {descriptor_advice()}")


def descriptor_advice() -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return f"out of file descriptors: raise ulimit -n (now {soft})"


class EngineFailed(GenbenchError):
    """An engine genbench started (`--serve`) exited, or did not answer in time, before it
    was healthy; the message says why in one line (genbench.engines.death)."""

    exit_code = ExitCode.ENGINE


class ServerDown(GenbenchError):
    """The server stopped answering during load; everything sent was recorded first."""

    exit_code = ExitCode.REFUSED

    def __init__(self, at_wall: float, message: str, exit_code: int | None = None) -> None:
        super().__init__(message, exit_code)
        self.at_wall = at_wall
