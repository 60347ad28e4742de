"""Thinking tokens counted by the server's own tokenizer, where the server did not count them.

When thinking arrives inline in `content` (no reasoning parser), or in its own field
with no `reasoning_tokens` in `usage` (llama.cpp's `--reasoning-format`), the server
counts only completion tokens; the stream parser shares them out by chunks and marks
the thinking estimated (`reasoning_source: "estimate"`). Where the server has a
tokenizer endpoint, `ThinkingCounter` counts each record's thinking text with it
instead (`reasoning_source: "tokenizer"`): what the server's reasoning parser would
have counted, as long as the model's tokens are the tokenizer's own encoding of their
text (true of what real models generate, nearly always). Two shapes of `POST /tokenize`
are spoken, the first that answers is kept: vLLM's and SGLang's (`prompt`, answered
with `count` and `tokens`) and llama.cpp's (`content`, answered with `tokens` only; it
answers the other shape with no tokens, so an empty answer to text is no answer).

Why the thinking text and not `completion - answer`: the completion also holds the
tokens of the tags (`<think>`, `</think>`) and of a tool call, which are neither.

Off the hot path: `run` counts a phase's records after the phase, a few at a time, so no
request of the measurement waits on it; `check` its one reply after it came; `generate`
each request's after it ended, before the row's next turn (`generate/pipeline.py`): one
small request per turn, never one per chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from genbench.records import RequestRecord
from genbench.transport.client import ConnectionPool
from genbench.transport.endpoint import Endpoint

# the bodies of POST /tokenize, by the key that holds the text
SHAPES: dict[str, Callable[[str, str], dict[str, Any]]] = {
    "prompt": lambda model, text: {"model": model, "prompt": text, "add_special_tokens": False},
    "content": lambda model, text: {"content": text, "add_special": False},  # llama.cpp
}


class ThinkingCounter:
    """Counts thinking text with the server's /tokenize; `available` turns False (and
    every later call does nothing) once the server shows it has none."""

    def __init__(
        self, pool: ConnectionPool, ep: Endpoint, model: str, concurrency: int = 4
    ) -> None:
        self.pool, self.ep, self.model = pool, ep, model
        self.concurrency = concurrency
        self.available: bool | None = None  # not yet asked
        self.shape: str | None = None  # the body /tokenize understood (SHAPES)
        # where the thinking tokens of the records made final came from (reasoning_source)
        self.sources: set[str | None] = set()

    async def tokens(self, text: str, timeout: float = 30.0) -> int | None:
        """The number of tokens in `text`, or None when the server cannot say."""
        if self.available is False:
            return None
        answered = False
        for shape in [self.shape] if self.shape else list(SHAPES):
            count = await self._ask(shape, text, timeout)
            # this shape's answer counts when it is the one learned, or says something: a
            # request that began before another learned the shape must not take the empty
            # answer of the other body (concurrent rows: one counted 0, another's shape kept)
            if count is not None and (shape == self.shape or count > 0):
                self.shape, self.available = shape, True
                return count
            answered |= count is not None
        if answered and not text.strip():
            # blank text tokenized to nothing by every shape: 0, and the shape still unknown
            # (a shape learned here would be the first that answers at all: llama.cpp gives
            # vLLM's body an empty answer, and every later count would be 0)
            return 0
        if self.available is None:
            self.available = False
        return None

    async def _ask(self, shape: str, text: str, timeout: float) -> int | None:
        body = SHAPES[shape](self.model, text)
        try:
            status, _, raw = await self.pool.get(
                self.ep.root + "/tokenize", timeout, self.ep.headers(), json=body
            )
            obj = orjson.loads(raw) if status == 200 else None
        except Exception:  # no answer, not JSON: the tokenizer tells us nothing
            obj = None
        count = None
        if isinstance(obj, dict):
            count = obj.get("count")
            if not isinstance(count, int) and isinstance(obj.get("tokens"), list):
                count = len(obj["tokens"])
        return count if isinstance(count, int) else None

    def wants(self, rec: RequestRecord) -> bool:
        """Whether `rec` has thinking the server did not count (split by genbench: none,
        even, is exactly 0 tokens) and may count it; else the record is final."""
        return (
            self.available is not False
            and rec.ok
            and rec.reasoning_source == "estimate"
            and rec.reasoning is not None
        )

    async def count(self, records: Iterable[RequestRecord]) -> int:
        """Count the thinking of every record split inline and kept with its text; the
        number counted."""
        todo = [r for r in records if self.wants(r)]
        if not todo or self.available is False:
            return 0
        first = todo[0]
        if not await self._one(first):
            return 0
        sem = asyncio.Semaphore(self.concurrency)

        async def one(r: RequestRecord) -> bool:
            async with sem:
                return await self._one(r)

        done = await asyncio.gather(*(one(r) for r in todo[1:]))
        return 1 + sum(done)

    async def _one(self, rec: RequestRecord) -> bool:
        text = rec.reasoning or ""
        n = await self.tokens(text) if text else 0
        if n is None:
            return False
        total = rec.completion_tokens
        rec.reasoning_tokens = n if total is None else min(n, total)
        rec.reasoning_source = "tokenizer"
        return True
