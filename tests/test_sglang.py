"""genbench against the sim in SGLang's dialect (`genbench sim --dialect sglang`), over real
HTTP on 127.0.0.1: what SGLang serves, as its source has it (genbench/sim/dialect.py and
genbench/check/metric_names.py name the files read), and what check, run and generate make of it.

The sim's own counters stay at /sim/metrics whatever the dialect: the truth genbench's
reading of `sglang:*` is checked against."""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import genbench

from genbench.check.identity import ServerInfo, _read_identity
from genbench.check.preflight import Exit
from genbench.errors import UsageError
from genbench.records import read_records
from genbench.sim.config import SimConfig
from genbench.sim.process import SimProcess

# lengths: check's 16 tokens, warm-up's 64, run --quick's 256 and 1024 are all 1 + 3n, so
# with 3 tokens a step and every draft accepted, every step is whole: acceptance exactly 3
SGLANG = ("--dialect", "sglang", "--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1",
          "--output-len", "fixed:1000", "--spec-k", "3")  # fmt: skip


def sim_truth(root: str) -> dict[str, float]:
    """The sim's own counters (`sim:*`, unlabelled ones), from /sim/metrics."""
    with urllib.request.urlopen(root + "/sim/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(r"^sim:(\w+) (\S+)$", text, re.M)}


def health_requests(root: str) -> float:
    with urllib.request.urlopen(root + "/sim/metrics", timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(r'^sim:requests_total\{endpoint="health"\} (\S+)$', text, re.M)
    assert m
    return float(m[1])


def check_json(url: str) -> tuple[int, dict[str, Any]]:
    p = genbench("check", "--url", url, "--json")
    return p.returncode, json.loads(p.stdout)


def test_check_identifies_sglang_and_reads_its_server_info(sim_factory):
    sim = sim_factory(*SGLANG, "--thinking-tokens", "3")
    p = genbench("check", "--url", sim.url)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert any(re.search(r"server\s+SGLang \S+-genbench-sim, context 32768$", x) for x in lines)
    assert (
        "model genbench-sim, speculative EAGLE (3 draft tokens), reasoning parser "
        "genbench-sim, max running requests 256" in p.stdout
    )
    assert "/health_generate ok" in p.stdout
    assert "metrics  /metrics in SGLang's names (sglang:*)" in p.stdout
    assert "3 thinking" in p.stdout  # SGLang's reasoning_content read as thinking
    # check asked /health, then /health_generate: two health requests
    assert health_requests(sim.root) == 2
    code, doc = check_json(sim.url)
    assert code == 0 and doc["server"]["kind"] == "SGLang"
    assert doc["server"]["details"]["speculative_num_draft_tokens"] == 3
    assert doc["server"]["details"]["enable_metrics"] is True
    assert doc["deep_health"] == "ok" and doc["metrics"]["dialect"] == "SGLang"


def test_check_says_how_to_turn_sglangs_metrics_on(sim_factory):
    sim = sim_factory(*SGLANG, "--no-metrics")
    p = genbench("check", "--url", sim.url)
    assert p.returncode == 0, p.stderr  # no /metrics is no reason to refuse the server
    line = next(x for x in p.stdout.splitlines() if "metrics" in x and "no /metrics" in x)
    assert "HTTP 404" in line and "restart it with --enable-metrics" in line
    code, doc = check_json(sim.url)
    assert doc["metrics"] == {
        "status": "absent", "dialect": None, "http_status": 404,
        "hint": doc["metrics"]["hint"],
    }  # fmt: skip
    assert doc["server"]["details"]["enable_metrics"] is False


def test_check_fails_when_sglangs_generation_health_check_fails(sim_factory):
    # /health answers (the first health request), /health_generate does not
    sim = sim_factory(*SGLANG, "--fault", "unhealthy:after=1")
    p = genbench("check", "--url", sim.url)
    assert p.returncode == Exit.SERVER_ERROR, p.stdout + p.stderr
    assert "/health_generate with 503" in p.stderr and "SGLANG_HEALTH_CHECK_TIMEOUT" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_sim_serves_sglangs_routes_and_not_the_sims(sim_factory):
    sim = sim_factory(*SGLANG, "--thinking-tokens", "2")
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 7}
    post = urllib.request.Request(sim.url + "/chat/completions", data=json.dumps(body).encode())
    with urllib.request.urlopen(post, timeout=10) as resp:
        answer = json.loads(resp.read())
    # SGLang's usage: reasoning_tokens at the top, no details; its thinking field
    assert answer["usage"]["reasoning_tokens"] == 2 and answer["usage"]["completion_tokens"] == 7
    assert answer["usage"]["completion_tokens_details"] is None
    assert len(answer["choices"][0]["message"]["reasoning_content"].split()) == 2
    for path in ("/server_info", "/get_server_info"):
        with urllib.request.urlopen(sim.root + path, timeout=5) as resp:
            info = json.loads(resp.read())
        assert info["speculative_algorithm"] == "EAGLE" and "internal_states" in info
    for path in ("/model_info", "/get_model_info"):
        with urllib.request.urlopen(sim.root + path, timeout=5) as resp:
            assert json.loads(resp.read())["is_generation"] is True
    with urllib.request.urlopen(sim.url + "/models", timeout=5) as resp:
        assert json.loads(resp.read())["data"][0]["owned_by"] == "sglang"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(sim.root + "/version", timeout=5)
    assert e.value.code == 404


def run_quick(sim: SimProcess, out: Path) -> dict[str, Any]:
    p = genbench("run", "--quick", "--url", sim.url, "--out", str(out), timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    doc = json.loads((out / "result.json").read_text())
    assert doc["status"] == "complete" and doc["target"]["server"]["kind"] == "SGLang"
    doc["stdout"] = p.stdout
    return doc


def test_run_reads_sglangs_counters_and_acceptance_gauges(sim_factory, tmp_path):
    sim = sim_factory(*SGLANG)
    doc = run_quick(sim, tmp_path / "r")
    truth = sim_truth(sim.root)
    records = read_records(tmp_path / "r" / "requests.jsonl")
    by_phase: Counter[str] = Counter()
    for r in records:
        assert r.ok and r.completion_tokens
        by_phase[r.phase] += r.completion_tokens
    with_spec = 0
    for ph in doc["phases"]:
        m = ph["server_metrics"]
        assert m["dialect"] == "SGLang", ph["name"]
        # the deltas of sglang:* over the phase are the sim's tokens for the phase's requests
        assert m["generation_tokens"] == by_phase[ph["name"]] == ph["summary"]["output_tokens"]
        assert m["requests_finished"] == ph["summary"]["requests"], ph["name"]
        assert m["requests_aborted"] == 0 and m["preemptions"] == 0
        assert "spec_drafts" not in m  # SGLang has no draft counters: none are made up
        if "spec_mean_acceptance_length" in m:
            with_spec += 1
            assert m["spec_acceptance_source"] == "gauge"
            assert m["spec_mean_acceptance_length"] == 3.0
            assert m["spec_acceptance_rate"] == 1.0
    # every phase but warm-up (21 decode steps: SGLang logs every 40) reports acceptance
    assert with_spec == len(doc["phases"]) - 1
    # and all of the sim's tokens are accounted for: the phases' records plus check's 16
    assert truth["generation_tokens_total"] == sum(by_phase.values()) + 16
    drafts = truth["spec_decode_num_drafts_total"]
    assert truth["spec_decode_num_accepted_tokens_total"] == 2 * drafts
    line = (
        "speculative decoding single-256: acceptance 100.0%, mean acceptance length 3.00 "
        "(server gauge, mean of"
    )
    assert line in doc["stdout"]


def test_run_acceptance_below_one_follows_the_sims_draws(sim_factory, tmp_path):
    sim = sim_factory(*SGLANG, "--spec-accept", "0.6", "--seed", "3")
    doc = run_quick(sim, tmp_path / "r")
    truth = sim_truth(sim.root)
    true_len = (
        1 + truth["spec_decode_num_accepted_tokens_total"] / truth["spec_decode_num_drafts_total"]
    )
    assert true_len == pytest.approx(2.2, abs=0.1)  # 1 + 2 · 0.6
    spec = [ph["server_metrics"] for ph in doc["phases"][1:]]
    assert all(m["spec_acceptance_source"] == "gauge" for m in spec)
    for m in spec:  # each a mean over 40-step windows: near the truth, not equal to it
        assert m["spec_mean_acceptance_length"] == pytest.approx(true_len, abs=0.45)
        assert m["spec_mean_acceptance_length"] == pytest.approx(
            1 + 2 * m["spec_acceptance_rate"], abs=1e-9
        )  # k = 3: length = 1 + (k - 1) · rate, window by window


def test_run_without_sglangs_metrics_says_nothing_false(sim_factory, tmp_path):
    sim = sim_factory(*SGLANG, "--no-metrics")
    doc = run_quick(sim, tmp_path / "r")
    assert all(ph["server_metrics"] is None for ph in doc["phases"])
    assert "speculative decoding" not in doc["stdout"]
    hint = "no server counters: no /metrics; SGLang serves /metrics only when started with "
    assert hint + "--enable-metrics" in doc["stdout"]


def test_generate_against_sglang_writes_every_id_once(sim_factory, tmp_path):
    sim = sim_factory(*SGLANG, "--output-len", "uniform:10:40", "--thinking-tokens", "4")
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    ids = [f"r{i}" for i in range(40)]
    inp.write_text(
        "".join(
            json.dumps({"id": i, "messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
            for i in ids
        )
    )
    p = genbench("generate", "-i", str(inp), "-o", str(out), "--url", sim.url, "-c", "8")
    assert p.returncode == 0, p.stderr + p.stdout
    rows = [json.loads(x) for f in sorted(out.glob("data*.jsonl")) for x in f.open()]
    assert sorted(Counter(r["id"] for r in rows).items()) == sorted((i, 1) for i in ids)
    assert all(r["meta"]["reasoning_tokens"] == 4 for r in rows)  # from reasoning_content
    truth = sim_truth(sim.root)
    written = sum(r["meta"]["completion_tokens"] for r in rows)
    assert truth["generation_tokens_total"] == written + 16  # and check's test request


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        (SimConfig(dialect="trt"), "--dialect 'trt': expected sim or sglang or vllm"),
        (
            SimConfig(dialect="sglang", reasoning_dialect="reasoning"),
            "expected reasoning_content with --dialect sglang",
        ),
    ],
)
def test_bad_dialects_fail_before_binding(cfg: SimConfig, needle: str) -> None:
    with pytest.raises(UsageError) as e:
        cfg.validate()
    assert needle in str(e.value)


def test_server_info_in_either_shape_gives_the_same_details() -> None:
    flat = {
        "version": "0.5.4", "model_path": "Qwen/Qwen3-8B", "context_length": 40960,
        "speculative_algorithm": "EAGLE3", "speculative_num_draft_tokens": 4,
        "reasoning_parser": "qwen3", "max_running_requests": 128, "enable_metrics": False,
        "internal_states": [{"avg_spec_accept_length": 2.75}], "tp_size": 2,
    }  # fmt: skip
    nested = {"version": "0.5.4", "server_args": {k: v for k, v in flat.items() if k != "version"}}
    for obj in (flat, nested):
        info = ServerInfo(kind="SGLang")
        _read_identity(info, "SGLang", "/get_server_info", obj)
        assert info.version == "0.5.4" and info.max_model_len == 40960
        assert info.details == {
            "model_path": "Qwen/Qwen3-8B", "speculative_algorithm": "EAGLE3",
            "speculative_num_draft_tokens": 4, "reasoning_parser": "qwen3",
            "max_running_requests": 128, "context_length": 40960, "enable_metrics": False,
            "avg_spec_accept_length": 2.75,
        }  # fmt: skip
    unknown = ServerInfo()
    _read_identity(unknown, "SGLang", "/server_info", {"version": "1", "status": "ready"})
    assert unknown.kind is None  # another server's /server_info is not SGLang's


async def test_identify_asks_at_most_six_paths_of_an_unknown_server() -> None:
    from aiohttp import web

    from genbench.check.identity import identify
    from genbench.transport.client import ConnectionPool
    from genbench.transport.endpoint import Endpoint

    asked: list[str] = []

    async def nothing(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", nothing)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    ep = Endpoint.parse(f"http://127.0.0.1:{port}/v1")
    pool = ConnectionPool(ep.root)
    try:
        info = await identify(pool, ep, {"id": "m", "owned_by": "someone"})
    finally:
        await pool.close()
        await runner.cleanup()
    assert info.kind is None
    # /workers first: a router (sglang-router, vllm-router) forwards the others to a worker
    assert asked == ["/workers", "/version", "/props", "/server_info", "/get_server_info", "/info"]
