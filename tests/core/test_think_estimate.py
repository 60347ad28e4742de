"""Thinking sent in its own field and left out of `usage` (llama.cpp's `--reasoning-format`).

llama.cpp streams the thought in `reasoning_content` and its usage has only
`completion_tokens` (the sampled tokens, the thought's and the `</think>` it never
streams included). The record must then carry an estimate, marked as one, never 0.
"""

from __future__ import annotations

import orjson
import pytest

from genbench.records import RequestRecord
from genbench.run.thinking_count import note_thinking
from genbench.transport.stream import StreamParser, parse_whole
from genbench.transport.thinking import INLINE_OPENED, ThinkMode, ThinkState
from genbench.transport.thinking_count import SHAPES, ThinkingCounter

pytestmark = pytest.mark.core

# what llama.cpp's server sends after the last chunk (tests/test_llamacpp_thinking.py)
LLAMA_USAGE = {"completion_tokens": 9, "prompt_tokens": 19, "total_tokens": 28,
               "prompt_tokens_details": {"cached_tokens": 0}}  # fmt: skip


def sse(*deltas: dict, usage: dict | None = None) -> bytes:
    out = b""
    for d in deltas:
        out += b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": d}]}) + b"\n\n"
    fin = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    out += b"data: " + orjson.dumps(fin) + b"\n\n"
    if usage:
        out += b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"
    return out + b"data: [DONE]\n\n"


def parse(body: bytes) -> RequestRecord:
    rec = RequestRecord("q")
    p = StreamParser(rec, 0.0, True, None)  # the server split it: no splitter of ours
    for i in range(0, len(body), 7):
        p.feed(body[i : i + 7], 0.001 * (i + 1))
    assert p.finish() is None
    return rec


THOUGHT = [{"reasoning_content": w} for w in ("Let", " me", " think", " about", " it")]
ANSWER = [{"content": w} for w in ("\n\n", "OK", "!")]


def test_thinking_the_usage_left_out_is_shared_out_by_chunks():
    rec = parse(sse(*THOUGHT, *ANSWER, usage=LLAMA_USAGE))
    assert rec.chunk_kinds == "rrrrraaa" and rec.reasoning == "Let me think about it"
    # 9 tokens over 8 chunks (the unstreamed </think> among them): 5 of 8 are thinking
    assert rec.reasoning_tokens == round(9 * 5 / 8) == 6
    assert rec.reasoning_source == "estimate"
    assert rec.completion_tokens == 9 and not rec.tokens_estimated  # the total is the server's
    assert rec.answer_tokens == 3


def test_a_thought_cut_by_max_tokens_is_all_thinking():
    rec = parse(sse(*THOUGHT, usage={"completion_tokens": 5}))
    assert (rec.reasoning_tokens, rec.answer_tokens, rec.reasoning_source) == (5, 0, "estimate")


def test_thinking_counted_as_zero_tokens_is_not_believed():
    zero = {**LLAMA_USAGE, "completion_tokens_details": {"reasoning_tokens": 0}}
    rec = parse(sse(*THOUGHT, *ANSWER, usage=zero))  # text sent is never 0 tokens
    assert (rec.reasoning_tokens, rec.reasoning_source) == (6, "estimate")
    rec = parse(sse(*ANSWER, usage=zero))  # no thinking: 0 is right
    assert (rec.reasoning_tokens, rec.reasoning_source) == (0, None)


def test_counted_thinking_and_no_thinking_are_left_alone():
    details = {**LLAMA_USAGE, "completion_tokens_details": {"reasoning_tokens": 5}}
    rec = parse(sse(*THOUGHT, *ANSWER, usage=details))
    assert (rec.reasoning_tokens, rec.reasoning_source) == (5, None)
    rec = parse(sse(*ANSWER, usage={"completion_tokens": 3}))
    assert (rec.reasoning_tokens, rec.reasoning_source) == (None, None)


def test_a_whole_reply_is_shared_out_by_characters():
    rec = RequestRecord("q")
    msg = {"role": "assistant", "content": "abcd", "reasoning_content": "efghijkl"}
    body = orjson.dumps({"choices": [{"message": msg, "finish_reason": "stop"}],
                         "usage": {"completion_tokens": 6}})  # fmt: skip
    assert parse_whole(rec, body, 0.0, 1.0, True) is None
    assert (rec.reasoning_tokens, rec.reasoning_source) == (4, "estimate")  # 6 x 8/12


def test_tokenize_speaks_vllms_shape_then_llamacpps():
    assert SHAPES["prompt"]("m", "hi") == {"model": "m", "prompt": "hi",
                                           "add_special_tokens": False}  # fmt: skip
    assert SHAPES["content"]("m", "hi") == {"content": "hi", "add_special": False}


def counter_saw(*sources: str | None, available: bool | None = None) -> ThinkingCounter:
    c = ThinkingCounter.__new__(ThinkingCounter)
    c.sources, c.available = set(sources), available
    return c


def test_result_json_says_who_counted_the_thinking():
    doc: dict = {"dialect": "separate", "tokens_from": "server usage"}
    note_thinking(doc, None, counter_saw(None))
    assert doc["tokens_from"] == "server usage"  # the server counted every one
    note_thinking(doc, None, counter_saw(None, "tokenizer"))
    assert doc["tokens_from"] == "tokenizer"
    note_thinking(doc, None, counter_saw("tokenizer", "estimate"))
    assert doc["tokens_from"] == "estimate"  # one estimate makes the whole estimated
    inline: dict = {}
    note_thinking(inline, ThinkState(ThinkMode(INLINE_OPENED)), counter_saw(available=True))
    assert inline == {"dialect": "inline-opened", "tokens_from": "tokenizer"}
