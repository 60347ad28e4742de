"""Inline thinking on a real vLLM (CPU): the same requests to a server without a reasoning
parser (thinking arrives in `content`, the chat template opened `<think>`) and to one with
`--reasoning-parser qwen3` give the same thinking/answer split in genbench's records.

The test model has random weights: it closes its thought only when pushed. A logit bias
of +3 on `</think>` (token 4097, asked of the server) makes it close somewhere inside 48
tokens at temperature 0 for most prompts, and keep emitting it now and then after (the
qwen3 parser streams those as answer text; so does genbench's split).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from conftest import genbench

from genbench.records import RequestRecord, read_records
from genbench.transport.client import ChatRequest, Client
from genbench.transport.endpoint import Endpoint
from genbench.transport.thinking import INLINE_OPENED, NONE, ThinkMode, ThinkState
from genbench.transport.thinking_count import ThinkingCounter

pytestmark = pytest.mark.vllm

PROMPTS = ["Tell me about rivers.", "Count to ten.", "What is a queue?", "Name a colour.",
           "Why is the sky blue?", "Write a line about bread."]  # fmt: skip
N = 48


def close_bias(server) -> dict[str, int]:
    r = httpx.post(f"{server.root}/tokenize", json={"prompt": "</think>",
                   "add_special_tokens": False}, timeout=30)  # fmt: skip
    (token,) = r.json()["tokens"]  # one token: the parser matches it by id
    return {str(token): 3}


def requests(bias: dict[str, int]) -> list[ChatRequest]:
    params = {"temperature": 0, "ignore_eos": True, "logit_bias": bias}
    return [ChatRequest(f"p{i}", [{"role": "user", "content": p}], N, params)
            for i, p in enumerate(PROMPTS)]  # fmt: skip


async def send(server, reqs: list[ChatRequest], think: ThinkMode | None) -> list[RequestRecord]:
    ep = Endpoint.parse(server.url)
    async with Client(ep, server.model, keep_text=True, think=think) as client:
        recs = [await client.chat(r) for r in reqs]  # one at a time: no batching effects
        if think is not None:
            counted = [RequestRecord(r.id, reasoning=r.reasoning, reasoning_source="estimate",
                                     completion_tokens=r.completion_tokens)
                       for r in recs]  # fmt: skip
            await ThinkingCounter(client.pool, ep, server.model).count(counted)
            for r, c in zip(recs, counted, strict=True):
                r.extra["tokenizer"] = (c.reasoning_tokens, c.reasoning_source)
    return recs


def test_the_split_is_the_parsers_with_and_without_one(vllm_server, vllm_noparse_server):
    reqs = requests(close_bias(vllm_server))
    parsed = asyncio.run(send(vllm_server, reqs, None))
    inline = asyncio.run(send(vllm_noparse_server, reqs, ThinkMode(INLINE_OPENED)))
    closed = 0
    for p, s in zip(parsed, inline, strict=True):
        assert p.ok and s.ok, (p.error_message, s.error_message)
        assert p.completion_tokens == s.completion_tokens == N
        # the texts are the parser's, character for character
        assert (s.reasoning, s.text) == (p.reasoning, p.text), p.id
        # thinking tokens: exact when the server's tokenizer counts them ...
        assert s.extra["tokenizer"] == (p.reasoning_tokens, "tokenizer"), p.id
        # ... within one token when shared out by chunks
        assert s.reasoning_source == "estimate"
        assert abs(s.reasoning_tokens - p.reasoning_tokens) <= 1, p.id
        if 0 < p.reasoning_tokens < N:  # thought, then closed: the answer comes after it
            closed += 1
            for r in (s, p):  # thought first (one read may bring both: equal times)
                kinds = r.chunk_kinds
                assert kinds == "r" * kinds.count("r") + "a" * kinds.count("a"), kinds
                assert "r" in kinds and r.ttft_answer >= r.ttft
        elif p.reasoning_tokens == 0:  # closed at once: the first text is answer
            assert s.ttft_answer == s.ttft and p.ttft_answer == p.ttft
    assert closed >= 2, [p.reasoning_tokens for p in parsed]


def test_a_watched_reply_is_the_parsers_once_it_closes(vllm_server, vllm_noparse_server):
    """Check's `none` (as on SGLang, whose /tokenize shows no template): each reply watched,
    a state of its own each, so every one that closes its thought is read again."""
    reqs = requests(close_bias(vllm_server))
    parsed = asyncio.run(send(vllm_server, reqs, None))
    ep = Endpoint.parse(vllm_noparse_server.url)

    async def watched() -> list[tuple[RequestRecord, ThinkState]]:
        out = []
        for r in reqs:
            state = ThinkState(ThinkMode(NONE))
            async with Client(ep, vllm_noparse_server.model, keep_text=True, think=state) as c:
                out.append((await c.chat(r), state))
        return out

    closed = 0
    for p, (s, state) in zip(parsed, asyncio.run(watched()), strict=True):
        assert p.ok and s.ok and s.completion_tokens == N, (p.error_message, s.error_message)
        if p.reasoning_tokens < N:  # the parser saw </think>: so did the watch
            closed += 1
            assert (state.mode.dialect, state.learned_from) == (INLINE_OPENED, p.id)
            assert (s.reasoning, s.text) == (p.reasoning, p.text), p.id
            assert abs(s.reasoning_tokens - p.reasoning_tokens) <= 1, p.id
        else:  # never closed: nothing to learn from, all of it stays answer
            assert state.mode.dialect == NONE and (s.reasoning, s.text) == ("", p.reasoning)
    assert closed >= 2, [p.reasoning_tokens for p in parsed]


def run_quick(url: str, out, bias: dict[str, int]) -> tuple[dict, list[RequestRecord]]:
    p = genbench("run", "--url", url, "--warmup", "1", "--warmup-tokens", "16", "--lengths",
                 str(N), "--prompts-per-length", "3", "--skip", "sweep", "--out", str(out),
                 "--temperature", "0",  # greedy: both servers generate the same tokens
                 "--extra-body", json.dumps({"logit_bias": bias}), timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    recs = [r for r in read_records(out / "requests.jsonl") if r.phase == f"single-{N}"]
    return json.loads((out / "result.json").read_text()), recs


def test_run_records_the_same_split_on_both_servers(vllm_server, vllm_noparse_server, tmp_path):
    bias = close_bias(vllm_server)
    doc_p, parsed = run_quick(vllm_server.url, tmp_path / "parser", bias)
    doc_s, inline = run_quick(vllm_noparse_server.url, tmp_path / "inline", bias)
    assert doc_p["thinking"]["dialect"] == "separate"
    assert doc_s["thinking"] == {"dialect": "inline-opened", "tags": ["<think>", "</think>"],
                                 "tokens_from": "tokenizer"}  # fmt: skip
    assert [r.id for r in parsed] == [r.id for r in inline] and len(parsed) == 3
    for p, s in zip(parsed, inline, strict=True):
        assert s.reasoning_source == "tokenizer" and p.reasoning_source is None
        assert s.completion_tokens == p.completion_tokens == N
        assert s.reasoning_tokens == p.reasoning_tokens, p.id
        assert (s.thinking_chars, s.answer_chars) == (p.thinking_chars, p.answer_chars)
        # thinking chunks, then answer chunks (how many tokens a chunk carries is vLLM's
        # choice under load, so the chunk counts may differ; the tokens may not)
        for kinds in (s.chunk_kinds, p.chunk_kinds):
            assert kinds == "r" * kinds.count("r") + "a" * kinds.count("a"), kinds
        if 0 < p.reasoning_tokens < N:  # thought first (the order above); one read: equal
            assert "r" in s.chunk_kinds and s.ttft_answer >= s.ttft
    assert any(0 < p.reasoning_tokens < N for p in parsed), [p.reasoning_tokens for p in parsed]
    single = [ph for ph in doc_s["phases"] if ph["kind"] == "single"][0]["summary"]
    assert single["thinking_tokens"] == sum(r.reasoning_tokens for r in parsed)
