"""Speculative acceptance per request on a real vLLM server (CPU build, tiny random-weight
model, n-gram speculation, `--per-request-spec-decode-metrics summary`; the session's one
spec server, tests/fixtures_vllm.py).

Two prompt groups: `repeat` decodes greedily (the tiny model loops, so n-gram drafts from its
own output and the repeating prompt are accepted, ~4 tokens a step), `free` samples at
temperature 1 (its row's params: n-gram drafts seldom match). `run --workload` must show two
clearly apart distributions whose pooled length is the server's own /metrics delta over the
phase within 2%; `generate` keeps acceptance per row and `inspect` ranks the groups.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from conftest import genbench

pytestmark = pytest.mark.vllm


def workload(path: Path) -> Path:
    rows = []
    for i in range(4):
        text = " ".join(["alpha beta gamma delta"] * 6) + f" {i}"
        rows.append({"id": f"rep{i}", "group": "repeat", "params": {"temperature": 0},
                     "messages": [{"role": "user", "content": text}]})  # fmt: skip
        ask = [{"role": "user", "content": f"Tell me something, {i}."}]
        rows.append({"id": f"free{i}", "group": "free", "params": {"temperature": 1.0},
                     "messages": ask})  # fmt: skip
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def test_check_says_vllm_gives_acceptance(vllm_spec_server):
    res = genbench("check", "--url", vllm_spec_server.url, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["acceptance"] == "vllm"


def test_run_shows_two_groups_apart_and_agrees_with_metrics(vllm_spec_server, tmp_path):
    out = tmp_path / "run"
    res = genbench("run", "--url", vllm_spec_server.url, "--workload",
                   str(workload(tmp_path / "w.jsonl")), "--lengths", "128",
                   "--prompts-per-length", "8", "--skip", "warmup,sweep", "-o", str(out),
                   timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    (phase,) = json.loads((out / "result.json").read_text())["phases"]
    acc, m = phase["summary"]["acceptance"], phase["server_metrics"]
    # vLLM says zero steps for a request that never drafted (a `free` one, on a loaded
    # host): it is counted in `of`, not in `requests`; its server counters hold no step
    assert acc["src"] == "vllm" and acc["of"] == 8
    groups = {g["group"]: g for g in acc["by_group"]}
    rep = groups["repeat"]
    assert rep["requests"] == 4 and acc["requests"] == 4 + groups.get("free", {}).get(
        "requests", 0)  # fmt: skip
    assert rep["length"] > 3.0
    if "free" in groups:
        free = groups["free"]
        assert [g["group"] for g in acc["by_group"]] == ["free", "repeat"]  # worst first
        assert rep["p10"] > free["p90"] + 1.0, (free, rep)  # two distributions, apart
        assert free["length"] < 1.5
    # the per-request figures pool to the server's own counters over the same phase
    assert m["spec_acceptance_source"] == "counters"
    assert acc["length"] == pytest.approx(m["spec_mean_acceptance_length"], rel=0.02)
    assert acc["steps"] == pytest.approx(m["spec_drafts"], rel=0.02)
    assert "by group, worst first: " + ("free" if "free" in groups else "repeat") in res.stdout


def test_generate_keeps_it_per_row_and_inspect_ranks_the_groups(vllm_spec_server, tmp_path):
    out = tmp_path / "gen"
    res = genbench("generate", "-i", str(workload(tmp_path / "w.jsonl")), "--url",
                   vllm_spec_server.url, "-o", str(out), "--max-tokens", "96", "--param",
                   "ignore_eos=true", timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr + res.stdout
    rows = [orjson.loads(x) for x in (out / "data-00000.jsonl").read_bytes().splitlines()]
    assert len(rows) == 8
    # every row says it: vLLM says zero steps for a request that never drafted (loaded,
    # 8 in flight, a `free` row may draft nothing), which inspect counts at one token a step
    said = [r["meta"] for r in rows if "spec_steps" in r["meta"]]
    assert len(said) == 8 and {m["group"] for m in said} == {"repeat", "free"}, rows
    for meta in said:
        assert meta["spec_drafted"] >= meta["spec_accepted"] >= 0
        assert meta["spec_steps"] > 0 or (meta["spec_accepted"], meta["group"]) == (0, "free")
        steps = meta["spec_steps"] or 1
        assert meta["spec_length"] == pytest.approx(1 + meta["spec_accepted"] / steps, abs=1e-4)
    assert all(m["spec_steps"] > 0 for m in said if m["group"] == "repeat")
    res = genbench("inspect", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "inspect.json").read_text())
    ranked = doc["acceptance"]["by_group"]
    assert [g["group"] for g in ranked] == ["free", "repeat"]
    assert ranked[1]["length"] > ranked[0]["length"]
    assert "by group, worst first: free" in res.stdout
