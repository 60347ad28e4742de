"""Thinking tokens counted by the server's own tokenizer, for thinking genbench split.

When thinking arrives inline in `content` the server's `usage` counts only completion
tokens; the stream parser shares them out by chunks and marks the split estimated
(`reasoning_source: "estimate"`). Where the server has a tokenizer endpoint (vLLM and
SGLang: `POST /tokenize` with `prompt`), `ThinkingCounter` counts each record's thinking
text with it instead (`reasoning_source: "tokenizer"`): what the server's reasoning parser
would have counted, as long as the model's tokens are the tokenizer's own encoding of
their text (true of what real models generate, nearly always).

`run` counts a phase's records after the phase, a few at a time, so no request of the
measurement waits on it; `generate` does not (a million rows would be a million more
requests): its inline splits stay estimated, and say so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import orjson

from genbench.records import RequestRecord
from genbench.transport.client import ConnectionPool
from genbench.transport.endpoint import Endpoint
from genbench.transport.thinking import ThinkState


class ThinkingCounter:
    """Counts thinking text with the server's /tokenize; `available` turns False (and
    every later call does nothing) once the server shows it has none."""

    def __init__(
        self, pool: ConnectionPool, ep: Endpoint, model: str, concurrency: int = 4
    ) -> None:
        self.pool, self.ep, self.model = pool, ep, model
        self.concurrency = concurrency
        self.available: bool | None = None  # not yet asked

    async def tokens(self, text: str, timeout: float = 30.0) -> int | None:
        """The number of tokens in `text`, or None when the server cannot say."""
        if self.available is False:
            return None
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
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
        if not isinstance(count, int):
            if self.available is None:
                self.available = False
            return None
        self.available = True
        return count

    def wants(self, rec: RequestRecord) -> bool:
        """Whether `rec` has thinking genbench split (none, even: exactly 0 tokens) and may
        count it; else the record is final."""
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


def note_thinking(doc: dict[str, Any], state: ThinkState, counter: ThinkingCounter) -> None:
    """run's result.json `thinking`, after a phase: the dialect (`learned`, and the request
    it was learned from, where check saw none and a reply showed it) and who counted the
    tokens of the thinking genbench split."""
    doc["dialect"] = state.mode.dialect
    if state.learned_from is not None:
        doc["learned"], doc["learned_from"] = True, state.learned_from
    if state.mode.inline:
        doc["tokens_from"] = "tokenizer" if counter.available else "estimate"
