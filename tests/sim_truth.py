"""The reference sim's truth about a request: what a record of it must say.

The sim's text is a function of the prompt, and its non-streamed answer carries the same
tokens as its stream (docs/sim.md): read with the stdlib, it is the truth a streamed
record is checked against, whatever the read boundaries were.
"""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from genbench.records import RequestRecord
from genbench.transport.client import ChatRequest

FAST = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1")


def req(n: int = 100, i: int = 0, **params: Any) -> ChatRequest:
    return ChatRequest(
        id=f"t{i}",
        messages=[{"role": "user", "content": f"hello there {i}"}],
        max_tokens=n,
        params={"ignore_eos": True, **params},
    )


def truth(url: str, r: ChatRequest) -> dict[str, Any]:
    """The sim's non-streamed answer to the same request, read with the stdlib."""
    body = {"model": "genbench-sim", "messages": r.messages, "max_tokens": r.max_tokens}
    body.update(r.params, stream=False)
    post = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode())
    with urllib.request.urlopen(post, timeout=30) as resp:
        obj = json.loads(resp.read())
    msg, usage = obj["choices"][0]["message"], obj.get("usage")
    return {
        "text": msg["content"],
        "reasoning": msg.get("reasoning_content") or msg.get("reasoning") or "",
        "finish_reason": obj["choices"][0]["finish_reason"],
        "usage": usage,
        "thinking": usage["completion_tokens_details"]["reasoning_tokens"] if usage else None,
    }


def truths(url: str, reqs: list[ChatRequest]) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda r: truth(url, r), reqs))


def assert_is_the_sims(rec: RequestRecord, want: dict[str, Any]) -> None:
    """Everything the record says of the answer is what the sim says of it."""
    assert rec.ok, rec.error_message
    assert (rec.text, rec.reasoning) == (want["text"], want["reasoning"])
    assert rec.answer_chars == len(rec.text) and rec.thinking_chars == len(rec.reasoning)
    assert rec.finish_reason == want["finish_reason"] and rec.http_status == 200
    usage, thinking = want["usage"], want["thinking"]
    if usage is not None:
        assert rec.completion_tokens == usage["completion_tokens"]
        assert rec.reasoning_tokens == thinking
        assert rec.prompt_tokens == usage["prompt_tokens"] and not rec.tokens_estimated
    n = rec.completion_tokens
    if rec.stream and thinking is not None and n == len(rec.chunk_offsets):  # a token a chunk
        assert rec.chunk_kinds == "r" * thinking + "a" * (n - thinking)


def assert_answer_after_thinking(rec: RequestRecord) -> None:
    """The answer came after the thinking, and each time to first token is the arrival of
    its kind's first chunk: thinking chunks, then answer chunks, in that order; `ttft` the
    first chunk's offset, `ttft_answer` the first answer chunk's (so not before `ttft`).
    Not `ttft_answer > ttft`: when one read brings the last thought and the first answer
    chunk, the two readings of the clock are one, and equal."""
    kinds, offsets = rec.chunk_kinds, rec.chunk_offsets
    assert "r" in kinds and "a" in kinds, kinds
    assert kinds == "r" * kinds.count("r") + "a" * kinds.count("a"), kinds
    assert len(offsets) == len(kinds) and offsets == sorted(offsets)
    assert rec.ttft is not None and rec.ttft_answer is not None
    assert rec.ttft == pytest.approx(offsets[0], abs=1e-6)
    assert rec.ttft_answer == pytest.approx(offsets[kinds.index("a")], abs=1e-6)
    assert rec.ttft_answer >= rec.ttft
