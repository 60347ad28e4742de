"""genbench through a router: sglang-router 0.3.2 and vllm-router 0.1.17 (the real wheels,
tests/fixtures_routers.py) in front of two sims, and in front of vLLM (CPU).

What must hold: `check`, `run` and `generate` work through either router; sglang-router's
`/v1/models` lists `unknown` (it learns no model from a worker without /model_info), so
`--model` is trusted and the test request decides; a worker SIGKILLed behind the router
mid-job loses and duplicates nothing, and the failed attempts carry what the router
answered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from conftest import genbench
from fixtures_routers import KINDS
from test_generate import (
    FAST,
    SIM,
    assert_exactly_once,
    assert_log_holds_every_attempt,
    error_rows,
    line_count,
    popen,
    prompts,
    wait_for,
    write_rows,
)

from genbench.check.preflight import Exit
from genbench.sim.process import SimProcess, start_all, stop_all

pytestmark = pytest.mark.router


@pytest.fixture
def two_sims():
    sims = [SimProcess(*SIM), SimProcess(*SIM)]
    start_all(sims)
    yield sims
    stop_all(sims)


def gen(inp: Path, out: Path, url: str, *args: str, timeout: float = 120):
    return genbench("generate", "-i", str(inp), "-o", str(out), "--url", url, *FAST, *args,
                    timeout=timeout)  # fmt: skip


def metrics_urls(sims) -> list[str]:
    return [a for s in sims for a in ("--metrics-url", s.root + "/metrics")]


def run_quick(url: str, out: Path, *extra: str, model: str = "genbench-sim") -> dict:
    """`run --quick`, its lengths and levels cut to what vLLM on CPU does in seconds."""
    p = genbench("run", "--quick", "--url", url, "--model", model, "--warmup-tokens",
                 "16", "--lengths", "48", "--prompts-per-length", "2", "--concurrency", "1,4",
                 "--sweep-tokens", "48", "--requests-per-slot", "2", "--out", str(out), *extra,
                 timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    return json.loads((out / "result.json").read_text())


@pytest.mark.parametrize("kind", KINDS)
def test_check_run_and_generate_through_a_router_over_two_sims(
    kind, router_factory, two_sims, tmp_path
):
    router = router_factory(kind, [s.root for s in two_sims])
    p = genbench("check", "--url", router.url, "--model", "genbench-sim", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["server"]["kind"] == kind, doc["server"]
    assert doc["server"]["details"]["workers"] == sorted(s.root for s in two_sims)
    if kind == "sglang-router":
        assert doc["models"] == ["unknown"]
        assert any("not listed by /v1/models" in n and "a router?" in n for n in doc["notes"])
        # no /metrics on the router's port: its own are on --prometheus-port
        assert doc["metrics"]["status"] == "absent" and "--metrics-url" in doc["metrics"]["hint"]
    else:
        # vllm-router forwards /metrics to one worker: not said to be the server's counters
        assert doc["metrics"]["dialect"] is None and "one worker's" in doc["metrics"]["hint"]
    result = run_quick(router.url, tmp_path / "run", *metrics_urls(two_sims))
    for ph in result["phases"]:
        # the two workers' counters, summed, are exactly what genbench counted
        assert ph["summary"]["failed"] == 0
        assert ph["server_metrics"]["dialect"] == "genbench-sim", ph["name"]
        assert ph["server_metrics"]["generation_tokens"] == ph["summary"]["output_tokens"]
    # without --metrics-url: the router's /metrics are not the workers' sum, so none
    result = run_quick(router.url, tmp_path / "run2", "--skip", "sweep")
    assert "not scraped" in result["target"]["server_metrics"]
    assert all(ph.get("server_metrics") is None for ph in result["phases"])
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(60))
    p = gen(inp, out, router.url, "--model", "genbench-sim", "-c", "6")
    assert p.returncode == 0, p.stderr + p.stdout
    assert_exactly_once(out, [f"r{i}" for i in range(60)])


def test_sglang_router_listing_unknown_is_a_model_diagnosis(router_factory, two_sims):
    """No --model: genbench takes the one listed, `unknown`; the worker's 404 says the model
    does not exist: exit 8 with the server's words, and a hint to name it."""
    router = router_factory("sglang-router", [s.root for s in two_sims])
    p = genbench("check", "--url", router.url)
    assert p.returncode == Exit.MODEL, p.stdout + p.stderr
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert "The model `unknown` does not exist" in line and "--model" in line
    assert "no such path" not in line


def busiest(sims: list[SimProcess]) -> SimProcess:
    """The sim with the most requests running (sglang-router's default, cache-aware policy
    may send every row to one worker: the idle one's death would show nothing)."""

    def running(sim: SimProcess) -> float:
        text = httpx.get(sim.root + "/metrics", timeout=5).text
        return sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines()
                   if x.startswith("sim:num_requests_running"))  # fmt: skip

    return max(sims, key=running)


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_sigkilled_behind_the_router_loses_and_duplicates_nothing(
    kind, router_factory, two_sims, tmp_path
):
    router = router_factory(kind, [s.root for s in two_sims])
    n = 300
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(n))
    args = ("-i", str(inp), "-o", str(out), "--url", router.url, "--model", "genbench-sim")
    proc = popen(tmp_path, *args, "-c", "8", *FAST)
    try:
        wait_for(lambda: line_count(out) >= 40, 60, "40 rows written")
        busiest(two_sims).kill()
        killed_at = time.monotonic()
        assert proc.wait(120) == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    ids = [f"r{i}" for i in range(n)]
    assert_exactly_once(out, ids)
    assert error_rows(out) == []
    failed = assert_log_holds_every_attempt(out, ids)
    kinds = Counter(r.error_kind for r in failed)
    statuses = Counter(r.http_status for r in failed)
    print(f"{kind}: {len(failed)} failed attempts {dict(kinds)} statuses {dict(statuses)}, "
          f"finished {time.monotonic() - killed_at:.1f} s after the kill")  # fmt: skip
    # the router stays up: what the worker's death looks like through it is a router's
    # answer (500 "error sending request", 503 "no available workers": upstream) or a
    # stream it cut off; never "connection refused" (that would be the router itself)
    assert failed, "the rows in flight on the killed worker are in the log"
    assert set(kinds) <= {"upstream", "incomplete_stream", "disconnected"}, kinds
    assert "connect_refused" not in kinds


@pytest.mark.vllm
@pytest.mark.parametrize("kind", KINDS)
def test_vllm_behind_the_router_check_run_and_generate(kind, vllm_server, router_factory, tmp_path):
    """The issue's set-up: vLLM (CPU) as the only worker behind each router."""
    router = router_factory(kind, [vllm_server.root])
    model = vllm_server.model
    if kind == "sglang-router":
        # it lists `unknown`; vLLM answers that model with 404 "does not exist": exit 8
        p = genbench("check", "--url", router.url, timeout=300)
        assert p.returncode == Exit.MODEL, p.stdout + p.stderr
        assert "The model `unknown` does not exist" in p.stderr and "--model" in p.stderr
    p = genbench("check", "--url", router.url, "--model", model, "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["server"]["kind"] == kind and doc["server"]["details"]["workers"] == [
        vllm_server.root
    ]
    # one worker: vllm-router's /metrics are vLLM's; sglang-router's need --metrics-url
    extra = ["--metrics-url", vllm_server.root] if kind == "sglang-router" else []
    result = run_quick(router.url, tmp_path / "run", *extra, model=model)
    for ph in result["phases"]:
        m = ph["server_metrics"]
        assert ph["summary"]["failed"] == 0 and m["dialect"] == "vLLM", ph["name"]
        assert ph["summary"]["output_tokens"] == m["generation_tokens"], ph["name"]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(6))
    p = gen(inp, out, router.url, "--model", model, "--max-tokens", "16", "-c", "3", timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    rows = assert_exactly_once(out, [f"r{i}" for i in range(6)])
    assert all(r["meta"]["completion_tokens"] > 0 for r in rows)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dead_worker_the_router_still_routes_to_is_upstream_requeued(
    kind, router_factory, two_sims, tmp_path
):
    """A worker dead before the job, still in the router's pool (its health check runs once a
    minute): round-robin sends it requests, the router answers 500 "error sending request"
    (then 503 "no available workers" while its circuit is open): kind `upstream`, each
    requeued uncharged; the other worker answers every row. (With its own retries on, a
    round-robin router hides the dead worker: its retry goes to the live one.)"""
    router = router_factory(
        kind, [s.root for s in two_sims], "--policy", "round_robin", "--disable-retries"
    )
    two_sims[0].kill()
    # check gets through: vllm-router forwards GET /v1/models to one worker, the same each
    # time (dead here, or not): --model needs no listing; the test request is sent again
    # after a router's 500 (round-robin: the next goes to the live worker)
    p = genbench("check", "--url", router.url, "--model", "genbench-sim", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    notes = json.loads(p.stdout)["notes"]
    assert all("trying again" in n for n in notes if n.startswith("test request "))
    n = 40
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(n))
    p = gen(inp, out, router.url, "--model", "genbench-sim", "-c", "4")
    assert p.returncode == 0, p.stderr + p.stdout
    ids = [f"r{i}" for i in range(n)]
    assert_exactly_once(out, ids)
    failed = assert_log_holds_every_attempt(out, ids)
    print(f"{kind}: {Counter((r.error_kind, r.http_status) for r in failed)}")
    assert failed and {r.error_kind for r in failed} == {"upstream"}
    assert {r.http_status for r in failed} <= {500, 503}
    assert all(r.extra["outcome"] == "requeued" for r in failed)


@pytest.mark.parametrize("kind", KINDS)
def test_every_worker_dead_the_router_is_down_until_one_is_back(
    kind, router_factory, two_sims, tmp_path
):
    """Both workers SIGKILLed mid-job: the router answers 503 "No available workers", its
    /health still 200. The job takes the router out (as a dead server) instead of failing
    row after row, polls it with a tiny request, and goes on once a worker restarted on the
    same port is routed to again: every id once, no row in the errors file."""
    quick = ("--health-check-interval-secs", "1", "--cb-timeout-duration-secs", "1")
    router = router_factory(kind, [s.root for s in two_sims], *quick)
    n = 200
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(n))
    args = ("-i", str(inp), "-o", str(out), "--url", router.url, "--model", "genbench-sim")
    proc = popen(tmp_path, *args, "-c", "8", *FAST)
    restarted = None
    try:
        wait_for(lambda: line_count(out) >= 40, 60, "40 rows written")
        for sim in two_sims:
            sim.kill()
        wait_for(lambda: "is down" in (tmp_path / "stdout.txt").read_text(), 60, "router down")
        assert proc.poll() is None, "the job must wait for a worker, not exit"
        restarted = SimProcess(*SIM, "--port", str(two_sims[0].port)).start()
        assert proc.wait(120) == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        if restarted is not None:
            restarted.close()
    stdout = (tmp_path / "stdout.txt").read_text()
    assert "No available workers" in stdout and "is back" in stdout, stdout[-2000:]
    ids = [f"r{i}" for i in range(n)]
    assert_exactly_once(out, ids)
    assert error_rows(out) == []
    failed = assert_log_holds_every_attempt(out, ids)
    kinds = Counter((r.error_kind, r.http_status) for r in failed)
    print(f"{kind}: {dict(kinds)}")
    assert {k for k, _ in kinds} <= {"upstream", "disconnected", "incomplete_stream"}, kinds


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_worker_sigkilled_behind_sglang_router_mid_generate(router_factory, tmp_path):
    """A real engine lost behind the router: vLLM (its own, started here) and a sim serving
    the same model name behind sglang-router; vLLM's process group SIGKILLed mid-job (an
    OOM kill). The rows finish on the sim: every id once, none in the errors file."""
    import fixtures_vllm as fx

    if fx._skip_requested():
        pytest.skip("GENBENCH_SKIP_VLLM=1: vLLM test server disabled")
    fx._setup_once()
    name, port = f"router-kill-{os.getpid()}", fx._free_port()
    script = ["bash", str(fx.SCRIPT)]
    p = subprocess.run([*script, "start", name, str(port)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]
    root = p.stdout.strip().splitlines()[-1]
    sim = SimProcess(*SIM, "--model", fx.SERVED_MODEL_NAME, "--tps", "200").start()
    try:
        router = router_factory("sglang-router", [root, sim.root], "--policy", "round_robin")
        n = 40
        inp, out = tmp_path / "in.jsonl", tmp_path / "out"
        write_rows(inp, prompts(n))
        args = ("-i", str(inp), "-o", str(out), "--url", router.url)
        args += ("--model", fx.SERVED_MODEL_NAME, "--max-tokens", "48", "-c", "4")
        proc = popen(tmp_path, *args, *FAST)
        try:
            wait_for(lambda: line_count(out) >= 4, 240, "4 rows written")
            os.killpg(int((fx.RUN_DIR / f"vllm-{name}.pid").read_text()), signal.SIGKILL)
            assert proc.wait(300) == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
        ids = [f"r{i}" for i in range(n)]
        rows = assert_exactly_once(out, ids)
        assert error_rows(out) == []
        failed = assert_log_holds_every_attempt(out, ids)
        print(f"vLLM killed: {Counter((r.error_kind, r.http_status) for r in failed)}, "
              f"rows by model reply: {len(rows)}")  # fmt: skip
    finally:
        sim.close()
        subprocess.run([*script, "stop", name], capture_output=True)
