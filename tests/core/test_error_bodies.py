"""What an error body says beyond its status: a missing model, a router without a worker.

The messages are the servers' own, copied from vLLM, sglang-router 0.3.2 and
vllm-router 0.1.17 (docs/generate.md, "Many servers")."""

from __future__ import annotations

import orjson
import pytest

from genbench.check.diagnosis import status_diagnosis
from genbench.errors import (
    ErrorKind,
    ExitCode,
    Retry,
    model_missing,
    no_worker_left,
    retry_for,
    status_kind,
)
from genbench.transport.endpoint import Endpoint
from genbench.transport.failures import status_failure

pytestmark = pytest.mark.core

VLLM_404 = b'{"object":"error","error":{"message":"The model `unknown` does not exist.",'
VLLM_404 += b'"type":"NotFoundError","param":null,"code":404}}'
SGL_500 = (
    b'{"error":{"type":"Internal Server Error","code":"call_upstream_request_error",'
    b'"message":"error sending request for url (http://127.0.0.1:8011/v1/chat/completions)."}}'
)
SGL_503 = (
    b'{"error":{"type":"Service Unavailable","code":"no_available_workers",'
    b'"message":"No available workers (all circuits open or unhealthy)"}}'
)
VR_500 = (
    b"Request failed: error sending request for url (http://127.0.0.1:8011/v1/chat/completions)"
)
VR_503 = b"No available workers (all circuits open or unhealthy)"


@pytest.mark.parametrize(
    "message",
    [
        "The model `unknown` does not exist.",
        "The model 'llama' does not exist",
        "model 'x' not found",
        "Unknown model: foo",
        "model not found",
    ],
)
def test_a_missing_model_is_read_from_the_message(message):
    assert model_missing(message)


@pytest.mark.parametrize(
    "message", ["Not Found", "404: Not Found", "CUDA out of memory", "modelling failed"]
)
def test_other_messages_are_not_a_missing_model(message):
    assert not model_missing(message)


def test_a_404_that_says_the_model_does_not_exist_is_exit_8_with_its_message():
    ep = Endpoint.parse("http://127.0.0.1:8000/v1")
    d = status_diagnosis(ep, ep.base_url + "/chat/completions", 404, VLLM_404)
    assert d.exit_code == ExitCode.MODEL
    assert "The model `unknown` does not exist." in d.message and "no such path" not in d.message
    plain = status_diagnosis(ep, ep.base_url + "/models", 404, b"404: Not Found")
    assert plain.exit_code == ExitCode.NOT_FOUND and "no such path" in plain.message


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (500, SGL_500, ErrorKind.UPSTREAM),
        (503, SGL_503, ErrorKind.UPSTREAM),
        (500, VR_500, ErrorKind.UPSTREAM),
        (503, VR_503, ErrorKind.UPSTREAM),
        (502, b"Bad Gateway", ErrorKind.UPSTREAM),
        (504, b"", ErrorKind.UPSTREAM),
        (503, b'{"error": {"message": "CUDA out of memory"}}', ErrorKind.HTTP_STATUS),
        (500, b"Internal Server Error", ErrorKind.HTTP_STATUS),
        (404, VLLM_404, ErrorKind.HTTP_STATUS),
    ],
)
def test_a_router_answering_for_its_worker_is_upstream(status, body, kind):
    f = status_failure(status, body)
    assert f.kind is kind
    assert status_kind(status, f.message) is kind
    if kind is ErrorKind.UPSTREAM:
        # the address answers and the router sends a retry to another worker
        assert not kind.server_gone and retry_for(kind, status) is Retry.YES
        assert kind.exit_code == ExitCode.SERVER_ERROR


def test_the_router_diagnosis_says_no_worker_could_take_it():
    ep = Endpoint.parse("http://127.0.0.1:8000/v1")
    d = status_diagnosis(ep, ep.base_url + "/chat/completions", 503, SGL_503)
    assert d.exit_code == ExitCode.SERVER_ERROR
    assert "no worker behind it" in d.message and "No available workers" in d.message
    assert orjson.loads(SGL_503)  # the body is the router's own JSON


def test_no_worker_left_is_told_from_one_worker_failed():
    """503 "No available workers" means the router has none: it is down as a server is;
    500 "error sending request" means one failed: the router routes the retry elsewhere."""
    assert no_worker_left(status_failure(503, SGL_503).message)
    assert no_worker_left(status_failure(503, VR_503).message)
    assert no_worker_left("No workers are currently available")
    assert not no_worker_left(status_failure(500, SGL_500).message)
    assert not no_worker_left(status_failure(500, VR_500).message)
