"""genbench against the real local llama.cpp engine (the default target of `genbench run`).

This is the path a new user takes first: `genbench run --quick` with no --url builds the
tiny model, starts llama.cpp on a free loopback port and benchmarks it. The token totals
must equal llama.cpp's own /metrics counter deltas in every phase.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import genbench

from genbench.records import read_records

pytestmark = pytest.mark.llamacpp


@pytest.fixture(scope="module")
def llama():
    from genbench.local.llamacpp import LocalLlamaServer

    with LocalLlamaServer(n_parallel=8) as srv:
        yield srv


def test_check_against_real_llamacpp(llama):
    p = genbench("check", "--url", llama.base_url, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["ok"] and doc["server"]["kind"] == "llama.cpp"
    assert doc["completion_tokens"] and doc["ttft_s"] > 0
    assert doc["metrics"]["status"] == "ok" and doc["metrics"]["dialect"] == "llama.cpp"


def test_check_reports_a_dead_llamacpp():
    from genbench.local.llamacpp import LocalLlamaServer

    srv = LocalLlamaServer(n_parallel=2).start()
    url = srv.base_url
    srv.stop()
    p = genbench("check", "--url", url)
    assert p.returncode == 3 and "nothing is listening" in p.stderr


def test_default_run_quick_matches_the_servers_counters(tmp_path):
    out = tmp_path / "r"
    p = genbench("run", "--quick", "--out", str(out), timeout=600)
    assert p.returncode == 0, p.stderr + p.stdout
    assert "local demo target" in p.stdout
    doc = json.loads((out / "result.json").read_text())
    assert doc["status"] == "complete" and doc["target"]["local_demo"] is True
    assert doc["target"]["server"]["kind"] == "llama.cpp"
    for ph in doc["phases"]:
        s, m = ph["summary"], ph["server_metrics"]
        assert s["failed"] == 0, (ph["name"], s["errors"])
        assert m and m["dialect"] == "llama.cpp"
        assert s["output_tokens"] == m["generation_tokens"], ph["name"]
        assert s["prompt_tokens"] == m["prompt_tokens"], ph["name"]  # cached ones included
        if ph["kind"] != "warmup":
            assert ph["length_forced"] is True, ph["name"]
    recs = read_records(out / "requests.jsonl")
    assert len(recs) == sum(ph["summary"]["requests"] for ph in doc["phases"])
    assert "single stream" in p.stdout and "concurrency sweep" in p.stdout
    # the demo's sustained levels run for a time, long enough to average a shared CPU
    assert doc["config"]["duration"] == 3.0
    for ph in doc["phases"]:
        if ph["kind"] == "sustained":
            a, b = ph["summary"]["steady_window_s"]
            assert b - a >= 2.5, (ph["name"], a, b)
    # a window that is not steady is explained in words a newcomer reads, never bare
    shaky = [ph for ph in doc["phases"] if ph["summary"].get("steady_stable") is False]
    if shaky:
        assert "* unstable (" in p.stdout and "the server's speed moved" in p.stdout
        assert "this machine was busy (load" in p.stdout or "shares this machine's" in p.stdout
    assert "use more --requests-per-slot" not in p.stdout
    assert not re.search(r"\b1 requests\b", p.stdout), p.stdout  # one plural helper
