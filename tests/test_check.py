"""`genbench check` as a user runs it: a subprocess against real servers on 127.0.0.1.

Each failure must be one actionable line on stderr, a distinct exit code, and
no traceback.
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import genbench
from tests_helpers import closed_port_url

from genbench.check.preflight import Exit


def assert_one_line_diagnosis(p, code: int, *needles: str) -> None:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr + p.stdout
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1, p.stderr
    for n in needles:
        assert n.lower() in line.lower(), (n, line)


def test_help_lists_check_and_sim():
    p = genbench("--help")
    assert p.returncode == 0
    assert "check" in p.stdout and "sim" in p.stdout


def test_nothing_listening_is_diagnosed_fast():
    t0 = time.monotonic()
    p = genbench("check", "--url", closed_port_url())
    assert time.monotonic() - t0 < 10
    assert_one_line_diagnosis(p, Exit.REFUSED, "nothing is listening", "is the server running")


def test_unknown_host():
    p = genbench("check", "--url", "http://no-such-host.invalid:8000/v1")
    assert_one_line_diagnosis(p, Exit.DNS, "unknown host", "no-such-host.invalid")


def test_healthy_sim_reports_ttft_and_thinking(sim_factory):
    sim = sim_factory("--tps", "500", "--ttft-ms", "40", "--thinking-tokens", "4")
    p = genbench("check", "--url", sim.url)
    assert p.returncode == 0, p.stderr
    assert "TTFT" in p.stdout and "4 thinking" in p.stdout and "ready" in p.stdout
    assert "genbench-sim" in p.stdout


def test_json_output_is_one_object(fast_sim):
    p = genbench("check", "--url", fast_sim.url, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["ok"] is True and doc["model"] == "genbench-sim"
    assert doc["server"]["kind"] == "genbench-sim" and doc["ttft_s"] > 0
    assert doc["thinking"] is False


def test_url_without_path_assumes_v1(fast_sim):
    p = genbench("check", "--url", fast_sim.root)
    assert p.returncode == 0, p.stderr
    assert "/v1" in p.stdout


@pytest.mark.parametrize(
    ("fault", "code", "needles"),
    [
        ("refuse", Exit.REFUSED, ("nothing is listening",)),
        (
            "http:status=503,message=CUDA out of memory",
            Exit.SERVER_ERROR,
            ("HTTP 503", "CUDA out of memory"),
        ),
        ("http:status=500", Exit.SERVER_ERROR, ("HTTP 500",)),
        ("http:status=429", Exit.SERVER_ERROR, ("429",)),
        ("unhealthy", Exit.SERVER_ERROR, ("not ready",)),
        ("not-openai", Exit.BAD_RESPONSE, ("OpenAI",)),
        ("inband-error:at=2", Exit.SERVER_ERROR, ("error inside the stream",)),
        ("malformed:at=1", Exit.BAD_RESPONSE, ("not openai-shaped",)),
        ("truncate:at=2", Exit.REQUEST_FAILED, ("broke off",)),
        ("die:after=0", Exit.REQUEST_FAILED, ()),
    ],
)
def test_each_fault_gets_its_diagnosis(sim_factory, fault, code, needles):
    sim = sim_factory("--tps", "500", "--ttft-ms", "10", "--fault", fault)
    p = genbench("check", "--url", sim.url)
    if fault.startswith("die"):
        # the sim dies on the test request: the stream breaks, or the connection is refused
        assert p.returncode in (Exit.REQUEST_FAILED, Exit.REFUSED), p.stderr
        assert "Traceback" not in p.stderr
        return
    assert_one_line_diagnosis(p, code, *needles)


def test_stall_beyond_timeout(sim_factory):
    sim = sim_factory("--fault", "stall-first:seconds=30")
    t0 = time.monotonic()
    p = genbench("check", "--url", sim.url, "--test-timeout", "1")
    assert time.monotonic() - t0 < 10
    assert_one_line_diagnosis(p, Exit.TIMEOUT, "timed out", "--timeout")


def test_missing_and_wrong_api_key(sim_factory, monkeypatch):
    monkeypatch.setenv("SIM_KEY_FOR_TEST", "sk-right-key-xyz")  # the sim inherits it
    sim = sim_factory("--api-key-env", "SIM_KEY_FOR_TEST")
    env = {"SIM_KEY_FOR_TEST": "sk-right-key-xyz", "OPENAI_API_KEY": ""}
    p = genbench("check", "--url", sim.url, env={"OPENAI_API_KEY": ""})
    assert_one_line_diagnosis(p, Exit.AUTH, "401", "no API key")
    p = genbench("check", "--url", sim.url, env={"OPENAI_API_KEY": "sk-wrong-secret-123"})
    assert_one_line_diagnosis(p, Exit.AUTH, "401", "refused")
    assert "sk-wrong-secret-123" not in p.stdout + p.stderr
    p = genbench("check", "--url", sim.url, "--api-key-env", "SIM_KEY_FOR_TEST", env=env)
    assert p.returncode == 0, p.stderr
    assert "sk-right-key-xyz" not in p.stdout + p.stderr


def test_api_key_file(sim_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("SIM_KEY_FILE_TEST", "sk-from-file-77")
    sim = sim_factory("--api-key-env", "SIM_KEY_FILE_TEST")
    key = tmp_path / "key.txt"
    key.write_text("sk-from-file-77\n")
    p = genbench("check", "--url", sim.url, "--api-key-file", str(key))
    assert p.returncode == 0, p.stderr
    assert "sk-from-file-77" not in p.stdout + p.stderr


def test_model_not_served_lists_the_served_ones(fast_sim):
    # --model is trusted (a router may not list it): the test request is sent, and the
    # server's own 404 says the model does not exist
    p = genbench("check", "--url", fast_sim.url, "--model", "llama-405b")
    assert_one_line_diagnosis(
        p, Exit.MODEL, "llama-405b", "served: genbench-sim", "does not exist", "not listed"
    )
    # the model line does not tick a model nobody listed
    assert "! model    llama-405b: not listed by /v1/models (genbench-sim)" in p.stdout
    assert "✓ model" not in p.stdout


def test_wrong_path_suggests_v1(fast_sim):
    p = genbench("check", "--url", fast_sim.root + "/api")
    assert_one_line_diagnosis(p, Exit.NOT_FOUND, "404", "/v1")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--url", "not a url"], "--url"),
        (["--url", "ftp://127.0.0.1:8000/v1"], "scheme"),
        (["--url", "http://127.0.0.1:99999/v1"], "--url"),
        (["--url", "http://127.0.0.1:8000/v1", "--timeout", "-1"], "--timeout"),
        (["--url", "http://127.0.0.1:8000/v1", "--timeout", "0"], "--timeout"),
        (
            ["--url", "http://127.0.0.1:8000/v1", "--api-key-file", "/nonexistent/key"],
            "--api-key-file",
        ),
        (["--url", "http://127.0.0.1:8000/v1", "--timeout", "abc"], "timeout"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, needle):
    p = genbench("check", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert needle in p.stderr
