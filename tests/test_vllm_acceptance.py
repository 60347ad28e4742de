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


@pytest.mark.vllm
def test_run_versus_autoregressive_and_ngram_and_plan_names_the_faster(
    vllm_server, vllm_spec_server, tmp_path: Path
):
    """The same model served plainly and with n-gram drafts, measured in turn by one `run`;
    `plan --from` compares the two configurations for the job and names the faster."""
    out = tmp_path / "runs"
    r = genbench("run", "--url", vllm_server.url, "--versus", vllm_spec_server.url, "-o",
                 str(out), "--skip", "single", "-c", "4", "--shape", "sustained",
                 "--requests-per-slot", "3", "--warmup", "1", "--sweep-tokens", "128",
                 "--temperature", "0", timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    side_b = json.loads((out / "b" / "repeat-1" / "result.json").read_text())
    assert side_b["target"]["url"].startswith(vllm_spec_server.root)
    assert f"genbench plan --from {out}" in r.stdout  # the hint, run as printed below
    p = genbench("plan", "--from", str(out), "--samples", "100000", "--tokens-per-sample", "128",
                 "-o", str(tmp_path / "plan"), "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    # the tiny random model repeats itself: n-gram drafts are accepted, so b decodes faster
    # on a quiet host; on a loaded one the two runs met different load, so the plan must
    # name whichever each run measured faster, whatever it is
    best = {}
    for name in ("a", "b"):
        doc = json.loads((out / name / "repeat-1" / "result.json").read_text())
        best[name] = max((((doc.get("sweep") or {}).get("sustained") or {})
                          .get("by_concurrency") or {}).values())  # fmt: skip
    fastest = max(best, key=lambda n: best[n])
    assert f"the forecast tables and `generate --plan` use the fastest, {fastest}" in p.stderr, (
        best, p.stderr[-2000:])  # fmt: skip
