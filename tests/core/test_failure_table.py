"""One home per failure decision: the ErrorKind table answers exit codes, "may it come
back" and the retry step, and check's diagnoses and generate's pipeline read it."""

from __future__ import annotations

import pytest

from genbench.check.diagnosis import transport_diagnosis
from genbench.errors import ErrorKind, ExitCode, Retry, may_come_back
from genbench.generate.pipeline import ON_ADVICE, ON_KIND, RowPolicy
from genbench.transport.endpoint import Endpoint
from genbench.transport.failures import Failure, lost_failure

pytestmark = pytest.mark.core

EP = Endpoint.parse("http://127.0.0.1:9/v1", None)


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_check_says_the_tables_exit_code_for_every_transport_failure(kind):
    assert transport_diagnosis(EP, Failure(kind, "x"), "GET /health").exit_code == kind.exit_code


def test_a_dropped_connection_is_one_exit_code_everywhere():
    failure = lost_failure(got_head=False, exc=None)
    assert failure.kind is ErrorKind.DISCONNECTED
    assert transport_diagnosis(EP, failure, "GET /health").exit_code == ExitCode.REQUEST_FAILED
    assert ErrorKind.DISCONNECTED.exit_code == ExitCode.REQUEST_FAILED


@pytest.mark.parametrize(
    ("kind", "status", "back"),
    [
        (ErrorKind.CONNECT_REFUSED, None, True),  # gone: polled back
        (ErrorKind.DNS, None, True),
        (ErrorKind.READ_TIMEOUT, None, True),  # may have died: /health decides
        (ErrorKind.HTTP_STATUS, 503, True),
        (ErrorKind.HTTP_STATUS, 429, True),
        (ErrorKind.HTTP_STATUS, 401, False),  # the key is wrong: the job stops
        (ErrorKind.HTTP_STATUS, 404, False),
        (ErrorKind.INVALID_INPUT, None, False),
        (ErrorKind.TRUNCATED, None, False),
    ],
)
def test_may_come_back_reads_the_table(kind, status, back):
    assert may_come_back(kind, status) is back


def test_every_step_of_the_retry_lookup_is_a_step_of_the_policy():
    assert set(ON_ADVICE) == set(Retry)
    for step in {*ON_KIND.values(), *ON_ADVICE.values(), "down"}:
        assert callable(getattr(RowPolicy, f"_on_{step}"))
