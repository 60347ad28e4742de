"""Thinking tokens llama.cpp does not count, against the real server (xllamacpp).

llama.cpp started with a reasoning format (`--reasoning-format deepseek`, Jinja chat
template; the local target's `thinking=True` starts it so, and the tiny model's template
opens `<think>` in the prompt) streams the thought in `reasoning_content` but its usage
has no `reasoning_tokens`: `completion_tokens` only. genbench must estimate the thought
by chunks, then count it with llama.cpp's own `/tokenize` (`{"content": ...}`, answered
with `tokens`), mark it, and show it. The tiny model's weights are random, so a thought
re-tokenized may split or merge a few tokens (a trained model's seldom do): /tokenize's
count is pinned exactly, and near the chunks.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from conftest import genbench

from genbench.records import THINKING, read_records
from genbench.transport.client import ChatRequest, Client
from genbench.transport.endpoint import Endpoint
from genbench.transport.thinking_count import ThinkingCounter

pytestmark = pytest.mark.llamacpp

BUDGET = {"thinking_budget_tokens": 20}  # llama.cpp closes the thought after 20 tokens


@pytest.fixture(scope="module")
def llama():
    from genbench.local.llamacpp import LocalLlamaServer

    with LocalLlamaServer(n_parallel=4, ctx_per_slot=1024, thinking=True) as srv:
        yield srv


def tokenize(llama, text: str) -> int:
    r = httpx.post(llama.root + "/tokenize", json={"content": text}, timeout=60)
    return len(r.json()["tokens"])


def test_records_estimate_by_chunks_then_count_with_tokenize(llama):
    reqs = [ChatRequest(f"q{i}", [{"role": "user", "content": f"Think about {i}."}], 40,
                        {"ignore_eos": True, **BUDGET}) for i in range(3)]  # fmt: skip

    ep = Endpoint.parse(llama.base_url)

    async def main():
        async with Client(ep, "genbench-tiny", keep_text=True) as c:
            recs = await asyncio.gather(*(c.chat(r) for r in reqs))
            chunked = [(r.reasoning_tokens, r.reasoning_source) for r in recs]
            counter = ThinkingCounter(c.pool, ep, "genbench-tiny")
            return recs, chunked, await counter.count(recs), counter.shape

    recs, chunked, counted, shape = asyncio.run(main())
    assert counted == 3 and shape == "content"  # llama.cpp's /tokenize body
    for rec, (by_chunks, source) in zip(recs, chunked, strict=True):
        assert rec.ok and rec.completion_tokens == 40, rec.error_message
        thought = rec.chunk_kinds.count(THINKING)
        assert 15 <= thought <= 20 and rec.reasoning, rec.chunk_kinds  # the budget's thought
        # by chunks: the server's 40 shared out, one chunk a token; never the 0 usage implies
        assert source == "estimate" and abs(by_chunks - thought) <= 1, (by_chunks, thought)
        assert rec.reasoning_source == "tokenizer"
        assert rec.reasoning_tokens == min(tokenize(llama, rec.reasoning), 40)
        assert abs(rec.reasoning_tokens - by_chunks) <= max(3, by_chunks // 3), (
            rec.reasoning_tokens, by_chunks)  # fmt: skip


def test_a_blank_first_thought_does_not_teach_the_wrong_tokenize_body(llama):
    """A random model's thinking can be a blank line: llama.cpp answers vLLM's /tokenize body
    with no tokens, so a blank first text must not fix that body, or every later thought
    counts 0 (seen in a rehearsal: a row's thinking text, counted 0 tokens)."""
    ep = Endpoint.parse(llama.base_url)

    async def main():
        async with Client(ep, "genbench-tiny", keep_text=True) as c:
            counter = ThinkingCounter(c.pool, ep, "genbench-tiny")
            blank = await counter.tokens("")
            words = await counter.tokens("module United which So the night system")
            return blank, words, counter.shape

    blank, words, shape = asyncio.run(main())
    text = "module United which So the night system"
    assert blank == 0 and shape == "content" and words == tokenize(llama, text) > 0


def test_check_counts_the_short_thought(llama):
    doc = json.loads(genbench("check", "--url", llama.base_url, "--json").stdout)
    assert doc["thinking_dialect"] == "separate" and doc["thinking"] is True
    assert doc["reasoning_source"] == "tokenizer"
    assert 12 <= doc["reasoning_tokens"] <= doc["completion_tokens"] == 16
    p = genbench("check", "--url", llama.base_url)
    assert "thinking (counted by the server's /tokenize: its usage did not)" in p.stdout, p.stdout
    assert "16 tokens, 0 thinking" not in p.stdout


def test_run_shows_the_counted_thinking(llama, tmp_path):
    out = tmp_path / "run"
    p = genbench("run", "--url", llama.base_url, "--warmup", "1", "--warmup-tokens", "16",
                 "--lengths", "40", "--prompts-per-length", "2", "--skip", "sweep",
                 "--sweep-tokens", "40", "--extra-body", json.dumps(BUDGET), "--out", str(out),
                 timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    doc = json.loads((out / "result.json").read_text())
    assert doc["thinking"]["dialect"] == "separate"
    assert doc["thinking"]["tokens_from"] == "tokenizer"
    recs = [r for r in read_records(out / "requests.jsonl") if r.phase == "single-40"]
    assert len(recs) == 2
    for r in recs:  # random weights' tokens re-tokenize into a few more or fewer
        thought = r.chunk_kinds.count(THINKING)
        assert r.reasoning_source == "tokenizer", r.id
        off = abs(r.reasoning_tokens - thought)
        assert off <= max(3, thought // 3), (r.reasoning_tokens, thought)
    single = next(ph for ph in doc["phases"] if ph["name"] == "single-40")["summary"]
    assert single["thinking_tokens"] == sum(r.reasoning_tokens for r in recs) > 0
    assert "thinking and answer" in p.stdout
    assert "its tokens counted by the server's /tokenize" in p.stdout, p.stdout


def test_generate_counts_each_rows_thinking_with_tokenize(llama, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"r{i}", "messages": [
        {"role": "user", "content": f"Think about {i}."}]}) + "\n" for i in range(4)))  # fmt: skip
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(inp), "-o", str(out), "--url", llama.base_url,
                 "--max-tokens", "40", "--param", "thinking_budget_tokens=20",
                 "--progress-every", "1", timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    rows = [json.loads(x) for f in sorted(out.glob("data*.jsonl")) for x in f.open()]
    assert len(rows) == 4
    thinking = 0
    for row in rows:
        m = row["meta"]
        assert m["reasoning_tokens_from"] == "tokenizer" and m["tokens_estimated"] is False
        assert 0 <= m["reasoning_tokens"] <= m["completion_tokens"] == 40, m
        said_thinking = [t.get("reasoning_content") for t in row["conversations"]
                         if t.get("role") == "assistant"]  # fmt: skip
        # a random model may close its thinking at once: no text, then 0 is the exact count
        assert (m["reasoning_tokens"] > 0) == any(said_thinking), (m, said_thinking)
        thinking += m["reasoning_tokens"]
    assert thinking > 0
    said = f"({thinking:,} thinking, counted by the server's /tokenize on 4 rows)"
    assert said in p.stdout, p.stdout
