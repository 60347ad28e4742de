"""Smoke tests of the real vLLM (CPU) test server over loopback HTTP.

They pin down the server behaviour that genbench relies on (see docs/vllm-test-server.md):
usage in streams, the reasoning stream, /metrics counters, exact lengths, and speculative
decoding's multi-token chunks and counters.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.vllm

THINK_CLOSE = "</think>"

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    """Prometheus text -> {(name, labels): value}; enough for vLLM's counters."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def metric_sum(metrics: dict[tuple[str, str], float], name: str) -> float:
    return sum(v for (n, _), v in metrics.items() if n == name)


def metric_by_label(
    metrics: dict[tuple[str, str], float], name: str, label: str
) -> dict[str, float]:
    out = {}
    for (n, labels), v in metrics.items():
        if n == name:
            m = re.search(rf'{label}="([^"]*)"', labels)
            if m:
                out[m.group(1)] = v
    return out


def stream_chat(client: httpx.Client, server, **body: Any) -> dict[str, Any]:
    """POST a streaming chat completion; collect deltas, chunks and the usage chunk."""
    payload = {
        "model": server.model,
        "messages": [{"role": "user", "content": "Tell me about the river and the city."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        **body,
    }
    content, reasoning, content_chunks, reasoning_chunks = [], [], 0, 0
    usage, finish, keys = None, None, set()
    with client.stream("POST", f"{server.url}/chat/completions", json=payload) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                keys.update(k for k, v in delta.items() if v)
                if delta.get("content"):
                    content.append(delta["content"])
                    content_chunks += 1
                if delta.get("reasoning"):
                    reasoning.append(delta["reasoning"])
                    reasoning_chunks += 1
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
    return {
        "content": "".join(content),
        "reasoning": "".join(reasoning),
        "content_chunks": content_chunks,
        "reasoning_chunks": reasoning_chunks,
        "usage": usage,
        "finish_reason": finish,
        "delta_keys": keys,
    }


def chat(client: httpx.Client, server, **body: Any) -> dict[str, Any]:
    payload = {
        "model": server.model,
        "messages": [{"role": "user", "content": "Say something."}],
        **body,
    }
    r = client.post(f"{server.url}/chat/completions", json=payload)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def client():
    with httpx.Client(timeout=httpx.Timeout(120.0, connect=10.0)) as c:
        yield c


def think_close_id(client: httpx.Client, server) -> int:
    r = client.post(f"{server.root}/tokenize", json={"model": server.model, "prompt": THINK_CLOSE})
    assert r.status_code == 200, r.text
    tokens = r.json()["tokens"]
    assert len(tokens) == 1, tokens
    return tokens[0]


def test_health_and_models(client, vllm_server):
    assert client.get(f"{vllm_server.root}/health").status_code == 200
    models = client.get(f"{vllm_server.url}/models").json()
    ids = [m["id"] for m in models["data"]]
    assert vllm_server.model in ids
    assert models["data"][0]["max_model_len"] == 4096


def test_stream_has_usage(client, vllm_server):
    out = stream_chat(client, vllm_server, max_tokens=32, ignore_eos=True, temperature=1.0)
    usage = out["usage"]
    assert usage is not None
    assert usage["completion_tokens"] == 32
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + 32
    text = out["reasoning"] + out["content"]
    assert text and "\ufffd" not in text and text.isascii()
    assert out["finish_reason"] == "length"


def test_reasoning_stream_and_reasoning_tokens(client, vllm_server):
    # thinking_token_budget=N: N-1 reasoning tokens, then the forced </think> (token N),
    # then content.
    out = stream_chat(
        client,
        vllm_server,
        max_tokens=40,
        ignore_eos=True,
        temperature=1.0,
        seed=7,
        thinking_token_budget=10,
    )
    usage = out["usage"]
    assert usage["completion_tokens"] == 40
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 9
    assert out["reasoning"] and out["content"]
    assert THINK_CLOSE not in out["content"] and THINK_CLOSE not in out["reasoning"]
    # vLLM 0.32 streams the thought in `reasoning` (not `reasoning_content`).
    assert "reasoning" in out["delta_keys"]
    assert "reasoning_content" not in out["delta_keys"]
    # Normally one chunk per token on the plain server (9 reasoning, 30 content; </think>
    # itself yields no text), but vLLM merges deltas when the client falls behind.
    assert 1 <= out["reasoning_chunks"] <= 9
    assert 1 <= out["content_chunks"] <= 30


def test_thinking_disabled_gives_content_only(client, vllm_server):
    out = stream_chat(
        client,
        vllm_server,
        max_tokens=16,
        ignore_eos=True,
        chat_template_kwargs={"enable_thinking": False},
    )
    assert out["reasoning"] == ""
    assert out["content"]
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


def test_logit_bias_on_think_close(client, vllm_server):
    close = think_close_id(client, vllm_server)
    # Strong negative bias: the thought never closes, every token is reasoning.
    never = chat(
        client,
        vllm_server,
        max_tokens=50,
        ignore_eos=True,
        temperature=1.0,
        seed=3,
        logit_bias={str(close): -100},
    )
    assert never["usage"]["completion_tokens_details"]["reasoning_tokens"] == 50
    assert never["choices"][0]["message"]["content"] in (None, "")
    # Strong positive bias: </think> is every token, so the thought closes at once
    # (reasoning 0) and the repeated </think> are swallowed by the parser.
    now = chat(
        client,
        vllm_server,
        max_tokens=10,
        ignore_eos=True,
        temperature=1.0,
        logit_bias={str(close): 100},
        return_token_ids=True,
    )
    assert now["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert now["choices"][0]["token_ids"] == [close] * 10


@pytest.mark.parametrize("n", [1, 17, 300])
def test_ignore_eos_forces_exact_length(client, vllm_server, n):
    resp = chat(client, vllm_server, max_tokens=n, ignore_eos=True, temperature=1.0)
    assert resp["usage"]["completion_tokens"] == n
    assert resp["choices"][0]["finish_reason"] == "length"


def _wait_for_counters(server, before, expect_gen, expect_prompt, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        after = parse_metrics(server.metrics_text())
        gen = metric_sum(after, "vllm:generation_tokens_total") - metric_sum(
            before, "vllm:generation_tokens_total"
        )
        prompt = metric_sum(after, "vllm:prompt_tokens_total") - metric_sum(
            before, "vllm:prompt_tokens_total"
        )
        if (gen, prompt) == (expect_gen, expect_prompt) or time.monotonic() > deadline:
            return gen, prompt, after
        time.sleep(0.2)


def test_metrics_deltas_equal_usage(client, vllm_server):
    before = parse_metrics(vllm_server.metrics_text())
    assert ("vllm:generation_tokens_total", '{engine="0",model_name="tiny-llama"}') in before
    usages = []
    for i, n in enumerate([5, 23, 64]):
        usages.append(
            stream_chat(client, vllm_server, max_tokens=n, ignore_eos=True, seed=i)["usage"]
        )
    usages.append(chat(client, vllm_server, max_tokens=40, ignore_eos=True)["usage"])
    exp_gen = sum(u["completion_tokens"] for u in usages)
    exp_prompt = sum(u["prompt_tokens"] for u in usages)
    gen, prompt, after = _wait_for_counters(vllm_server, before, exp_gen, exp_prompt)
    assert gen == exp_gen == 5 + 23 + 64 + 40
    assert prompt == exp_prompt
    ok_before = metric_by_label(before, "vllm:request_success_total", "finished_reason")
    ok_after = metric_by_label(after, "vllm:request_success_total", "finished_reason")
    assert ok_after["length"] - ok_before["length"] == 4


def test_completions_endpoint_stream_usage(client, vllm_server):
    body = {
        "model": vllm_server.model,
        "prompt": "The river",
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    usage, text = None, []
    with client.stream("POST", f"{vllm_server.url}/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                usage = chunk.get("usage") or usage
                text += [c["text"] for c in chunk.get("choices") or []]
    assert usage["completion_tokens"] == 12
    assert "".join(text)


SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def test_spec_chunks_carry_several_tokens_and_counters(client, vllm_spec_server):
    before = parse_metrics(vllm_spec_server.metrics_text())
    # Greedy: the random model repeats itself, so n-gram drafts are accepted.
    out = stream_chat(client, vllm_spec_server, max_tokens=200, ignore_eos=True, temperature=0)
    usage = out["usage"]
    chunks = out["content_chunks"] + out["reasoning_chunks"]
    assert usage["completion_tokens"] == 200
    assert 0 < chunks < usage["completion_tokens"], chunks
    gen, _, after = _wait_for_counters(vllm_spec_server, before, 200, usage["prompt_tokens"])
    assert gen == 200
    d = {k: metric_sum(after, k) - metric_sum(before, k) for k in SPEC_COUNTERS}
    drafts, draft_tokens, accepted = (d[k] for k in SPEC_COUNTERS)
    assert drafts > 0 and accepted > 0
    assert draft_tokens <= 4 * drafts
    assert accepted <= draft_tokens
    pos_before = metric_by_label(before, PER_POS, "position")
    pos_after = metric_by_label(after, PER_POS, "position")
    assert sorted(pos_after) == ["0", "1", "2", "3"]
    per_pos = [pos_after[p] - pos_before.get(p, 0.0) for p in sorted(pos_after)]
    assert sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True)  # position k needs 0..k-1 accepted
    # Every step emits 1 + accepted tokens: tokens = steps + accepted, steps >= drafts.
    assert gen >= accepted + drafts


def test_spec_server_reasoning_budget(client, vllm_spec_server):
    out = stream_chat(
        client,
        vllm_spec_server,
        max_tokens=60,
        ignore_eos=True,
        temperature=0,
        thinking_token_budget=20,
    )
    assert out["usage"]["completion_tokens"] == 60
    assert out["usage"]["completion_tokens_details"]["reasoning_tokens"] == 19
    assert out["reasoning"] and out["content"]
