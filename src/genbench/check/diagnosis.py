"""check's diagnoses: every failure as one line a person can act on and an exit code.

A transport failure, an HTTP status with the server's own words (a 404 that says the model
does not exist is a model problem, a router's 5xx for its worker is said as such), a
failed test request, said of the model when /v1/models did not list it. A failure's exit
code is its kind's, from `genbench.errors`' table: check keeps only the wording.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import orjson

from genbench.errors import ExitCode, GenbenchError, model_missing, status_kind, upstream_failed
from genbench.records import ErrorKind, RequestRecord
from genbench.transport.endpoint import Endpoint
from genbench.transport.failures import Failure, error_message_from_body

Exit = ExitCode  # the exit codes of check's diagnoses are genbench's own


@dataclass
class Diagnosis:
    exit_code: int
    message: str
    upstream: bool = False  # a router answered that its worker failed: another may not
    kind: ErrorKind | None = None  # the failure's kind, when a request failed
    http_status: int | None = None


class PreflightFailed(GenbenchError):
    """A check failed; `diagnosis` is the line a person reads and the exit code."""

    def __init__(self, diagnosis: Diagnosis) -> None:
        super().__init__(diagnosis.message, diagnosis.exit_code)
        self.diagnosis = diagnosis


def where(ep: Endpoint) -> str:
    return ep.root.split("://", 1)[1]


def transport_diagnosis(ep: Endpoint, failure: Failure, what: str) -> Diagnosis:
    kind = failure.kind
    return Diagnosis(kind.exit_code, _transport_words(ep, failure, what), kind=kind)


def _transport_words(ep: Endpoint, failure: Failure, what: str) -> str:
    kind = failure.kind
    host = where(ep)
    if kind is ErrorKind.CONNECT_REFUSED:
        return (
            f"connection refused at {host}: nothing is listening there. "
            "Is the server running? Was it killed (e.g. out of memory)?"
        )
    if kind is ErrorKind.DNS:
        return (
            f"unknown host '{host.rsplit(':', 1)[0]}': the name does not "
            "resolve. Check the spelling of --url."
        )
    if kind in (ErrorKind.CONNECT_TIMEOUT, ErrorKind.READ_TIMEOUT, ErrorKind.TOTAL_TIMEOUT):
        return (
            f"no answer from {host} to {what} in time: the host may be "
            "unreachable (firewall, wrong address) or the server hung."
        )
    if kind is ErrorKind.DISCONNECTED:
        return (
            f"{host} closed the connection during {what}: the "
            "server crashed or is not an HTTP server."
        )
    return f"{what} at {host} failed: {ep.redact(failure.message)}"


def status_diagnosis(ep: Endpoint, path: str, status: int, body: bytes) -> Diagnosis:
    msg = error_message_from_body(body, limit=200)
    diag = _status_words(ep, path, status, ep.redact(msg))
    diag.kind, diag.http_status = status_kind(status, msg), status
    return diag


def _status_words(ep: Endpoint, path: str, status: int, msg: str) -> Diagnosis:
    url = ep.redact(path)
    if status in (401, 403):
        hint = (
            "no API key was sent: set it in OPENAI_API_KEY or name its variable with --api-key-env"
            if not ep.api_key
            else "the API key was refused: is it the right one?"
        )
        return Diagnosis(Exit.AUTH, f"HTTP {status} from {url}: {hint} ({msg})")
    if status in (400, 404, 422) and model_missing(msg):
        return Diagnosis(Exit.MODEL, f"HTTP {status} from {url}: the server says: {msg}")
    if status == 404:
        hint = " Does the base URL need '/v1'?" if not ep.base_url.endswith("/v1") else ""
        return Diagnosis(Exit.NOT_FOUND, f"HTTP 404 from {url}: no such path on this server.{hint}")
    if status == 429:
        return Diagnosis(
            Exit.SERVER_ERROR,
            f"HTTP 429 from {url}: the server is rate-limiting or overloaded ({msg})",
        )
    if status >= 500 and upstream_failed(status, msg):
        return Diagnosis(
            Exit.SERVER_ERROR,
            f"HTTP {status} from {url}: a router or proxy answered that no worker behind it "
            f"could take the request: {msg}",
            upstream=True,
        )
    if status >= 500:
        return Diagnosis(Exit.SERVER_ERROR, f"HTTP {status} from {url}: the server failed: {msg}")
    return Diagnosis(Exit.BAD_RESPONSE, f"HTTP {status} from {url}: {msg}")


def request_diagnosis(ep: Endpoint, rec: RequestRecord) -> Diagnosis:
    kind = rec.error_kind
    msg = rec.error_message or ""
    if kind in (ErrorKind.HTTP_STATUS, ErrorKind.UPSTREAM) and rec.http_status:
        body_msg = msg.split(": ", 1)[1] if ": " in msg else msg  # the server's words
        body = orjson.dumps({"error": {"message": body_msg}})
        return status_diagnosis(ep, ep.base_url + "/chat/completions", rec.http_status, body)
    code = kind.exit_code if kind is not None else Exit.REQUEST_FAILED
    return Diagnosis(code, _request_words(where(ep), kind, msg), kind=kind)


def _request_words(host: str, kind: ErrorKind | None, msg: str) -> str:
    if kind == ErrorKind.CONNECT_REFUSED:
        return (
            f"connection refused at {host} during the test request: "
            "the server stopped (killed, e.g. out of memory?)"
        )
    if kind in (ErrorKind.READ_TIMEOUT, ErrorKind.TOTAL_TIMEOUT, ErrorKind.CONNECT_TIMEOUT):
        return (
            f"the test request to {host} timed out ({msg}): the server "
            "accepts connections but does not generate. Raise --timeout for a "
            "reasoning model that thinks long, or check the server's log."
        )
    if kind == ErrorKind.INBAND_ERROR:
        return f"the server sent an error inside the stream: {msg}"
    if kind == ErrorKind.MALFORMED_CHUNK:
        return f"the server's stream is not OpenAI-shaped: {msg}"
    if kind in (ErrorKind.INCOMPLETE_STREAM, ErrorKind.DISCONNECTED):
        return (
            f"the test request's stream broke off ({msg}): the "
            "server may have crashed mid-request."
        )
    return f"the test request failed ({kind}): {msg}"


def served(models: list[str]) -> str:
    return "served: " + (", ".join(models) or "none")


def model_diagnosis(
    model: str, models: list[str], url: str, wanted: str | None, diag: Diagnosis
) -> Diagnosis:
    """A failed test request, said of the model when /v1/models did not list it (the
    server's own message kept), or when the listed one was refused as a model. A router's
    failed worker says nothing of the model."""
    if diag.upstream:
        return diag
    if model not in models:
        return replace(
            diag,
            message=f"model '{model}' is not listed by /v1/models at {url} ({served(models)}) "
            f"and the test request failed: {diag.message}",
        )
    if diag.exit_code == Exit.MODEL and not wanted:
        said = diag.message.rstrip(".")
        return replace(
            diag,
            message=f"{said}. /v1/models lists '{model}' but it is not served under that "
            "name (a router that could not learn its workers' model?): name it with --model",
        )
    return diag
