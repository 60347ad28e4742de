"""genbench against a real vLLM server (CPU build, tiny model; tests/fixtures_vllm.py).

Server truth: the token totals genbench reports must equal vLLM's own
`vllm:generation_tokens_total` deltas exactly, reasoning must be counted as vLLM
counts it, and with n-gram speculative decoding the result must show acceptance
from /metrics while tok/s counts tokens, not chunks.
"""

from __future__ import annotations

import json

import pytest
from conftest import genbench

pytestmark = pytest.mark.vllm


def run_quick(url: str, out, *extra: str) -> dict:
    p = genbench("run", "--url", url, "--warmup", "1", "--warmup-tokens", "16", "--lengths",
                 "48", "--prompts-per-length", "2", "--concurrency", "1,4", "--sweep-tokens", "48",
                 "--requests-per-slot", "2", "--temperature", "0", "--out", str(out), *extra,
                 timeout=600)  # fmt: skip  (greedy: the n-gram drafter needs repeats to draft)
    assert p.returncode == 0, p.stderr + p.stdout
    return json.loads((out / "result.json").read_text())


def test_check_reports_vllm_and_its_version(vllm_server):
    p = genbench("check", "--url", vllm_server.url, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["server"]["kind"] == "vLLM"
    assert doc["server"]["version"]
    assert doc["model"] == vllm_server.model
    assert doc["server"]["max_model_len"] == 4096


def test_run_token_totals_equal_vllm_counters(vllm_server, tmp_path):
    doc = run_quick(vllm_server.url, tmp_path / "r")
    assert doc["target"]["server"]["kind"] == "vLLM"
    for ph in doc["phases"]:
        m = ph["server_metrics"]
        assert m and m["dialect"] == "vLLM", ph["name"]
        assert ph["summary"]["failed"] == 0
        assert ph["summary"]["output_tokens"] == m["generation_tokens"], ph["name"]
        assert ph["summary"]["prompt_tokens"] == m["prompt_tokens"], ph["name"]
        if ph["kind"] != "warmup":
            assert ph["length_forced"] is True, ph["name"]


def test_reasoning_tokens_match_usage(vllm_server, tmp_path):
    from genbench.records import read_records

    run_quick(vllm_server.url, tmp_path / "r", "--skip", "sweep")
    recs = [r for r in read_records(tmp_path / "r" / "requests.jsonl") if r.ok]
    assert recs
    thinking = [r for r in recs if r.reasoning_tokens]
    assert thinking, "the reasoning server produced no thinking"
    for r in recs:
        thinking_chunks, said = r.chunk_kinds.count("r"), r.reasoning_tokens or 0
        if len(r.chunk_kinds) == r.completion_tokens:
            # one token per chunk without speculative decoding: the stream's own split must
            # agree with usage.completion_tokens_details.reasoning_tokens
            assert thinking_chunks == said, r.id
        else:
            # vLLM merges the deltas a client has not read yet into one chunk (seen beside
            # a second suite: 47 chunks for 48 thinking tokens): each chunk is then a token
            # or more, of one kind or at the boundary, so the split is bounded by usage
            assert len(r.chunk_kinds) < r.completion_tokens, r.id
            assert thinking_chunks <= said, r.id
            assert len(r.chunk_kinds) - thinking_chunks <= r.completion_tokens - said, r.id
        assert not r.tokens_estimated


def test_speculative_decoding_shows_acceptance_and_counts_tokens(vllm_spec_server, tmp_path):
    doc = run_quick(vllm_spec_server.url, tmp_path / "r", "--skip", "warmup")
    sweep = [ph for ph in doc["phases"] if ph["kind"] in ("burst", "sustained")]
    assert sweep
    for ph in sweep:
        m, s = ph["server_metrics"], ph["summary"]
        assert m["spec_drafts"] > 0
        assert 0 < m["spec_acceptance_rate"] <= 1
        assert m["spec_mean_acceptance_length"] > 1
        assert s["output_tokens"] == m["generation_tokens"]
        assert s["tokens_per_chunk"] > 1  # chunks carry several tokens: rates count tokens
