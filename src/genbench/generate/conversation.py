"""A row on its way: the unit `generate` hands to `load`.

A row is one or more requests: with `turns="all"` every user turn of a multi-turn
conversation gets a freshly generated answer, in order, each request carrying the
regenerated history (as SpecForge's regenerate script does); with `turns="last"` only
the final assistant turn is generated. Which turns are asked for, and which are sent as
written, is the row's `TurnPlan` (recipe.py): one walk through the row, for a chat row and
an agentic one (agent.py) under either tool policy alike. Progress within a row survives a
failed request, so a retry resumes at the turn that failed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from genbench.generate.input.params import merge, split_max_tokens
from genbench.generate.input.reader import Row
from genbench.generate.input.tools import wire
from genbench.generate.recipe import Recipe, TurnPlan, turn_plan
from genbench.records import RequestRecord
from genbench.rows import DataRow, RowMeta
from genbench.transport.client import ChatRequest
from genbench.transport.token_ids import check_turn, row_status

# who counted a turn's thinking tokens, the least exact first: genbench by chunks (no
# usage, or usage without them), the server's /tokenize, the server's usage
THINKING_FROM = ("chunks", "tokenizer", "server")


def thinking_from(rec: RequestRecord, before: str | None) -> str | None:
    """Who counted the thinking of a row that had `before` and now `rec`: the least exact
    of its turns'; None while no turn thought."""
    if not (rec.reasoning_tokens or rec.thinking_chars):
        return before
    if rec.tokens_estimated or rec.reasoning_source == "estimate":
        now = "chunks"
    else:
        now = "tokenizer" if rec.reasoning_source == "tokenizer" else "server"
    return now if before is None else THINKING_FROM[min(map(THINKING_FROM.index, (before, now)))]


class Conversation:
    """The conversation so far, what its attempts cost, and the next request to send."""

    __slots__ = (
        "row", "rid", "plan", "max_tokens", "params", "out", "pos", "waiting", "attempts",
        "losses", "turns", "prompt_tokens", "tokens", "thinking", "estimated", "truncated",
        "ttft", "latency", "sent_at", "finish", "last", "server", "tag", "ids", "thinking_from",
        "spec", "spec_dropped",
    )  # fmt: skip

    def __init__(
        self, row: Row, recipe: Recipe, rid: str | None = None, plan: TurnPlan | None = None
    ) -> None:
        self.row, self.rid = row, rid or row.id
        self.plan = turn_plan(row, recipe) if plan is None else plan  # its turns asked
        merged = merge(recipe.params, row.params) if row.params else dict(recipe.params)
        self.max_tokens, self.params = split_max_tokens(merged)
        self.out: list[dict[str, Any]] = []
        self.pos = 0
        self.waiting = False
        self.attempts = self.losses = self.turns = 0
        self.prompt_tokens = self.tokens = self.thinking = 0
        self.estimated = self.truncated = False
        self.thinking_from: str | None = None  # who counted its thinking (THINKING_FROM)
        self.ttft: float | None = None
        self.latency = 0.0
        self.sent_at: float | None = None
        self.finish: str | None = None
        self.last: RequestRecord | None = None
        self.server = ""
        self.tag: dict[str, Any] = {}  # what every record of this row carries in `extra`
        # each generated turn's token-id status (genbench.transport.token_ids)
        self.ids: list[str] = []
        self.spec: list[dict[str, Any]] = []  # each answered turn's acceptance, when said
        self.spec_dropped: str | None = None  # why a turn's figures could not be kept

    def _advance(self) -> bool:
        """Move through the row to the next turn its plan asks for; False when it is done."""
        if self.waiting:
            return True
        msgs, plan = self.row.messages, self.plan
        while self.pos < len(msgs):
            i = self.pos
            self.pos += 1
            if plan.sent[i]:
                self.out.append(msgs[i])
            if i in plan.asks:
                self._asking(i)
                self.waiting = True
                return True
        return False

    def _asking(self, i: int) -> None:
        """The turn at `i` is answered next (agent.py readies its cached results)."""

    def next_request(self) -> ChatRequest | None:
        if not self._advance():
            return None
        if self.sent_at is None:
            self.sent_at = round(time.time(), 3)
        msgs = [wire(m) for m in self.out]
        return ChatRequest(self.rid, msgs, self.max_tokens, self._params_now(), self.row.group)

    def _params_now(self) -> dict[str, Any]:
        return self.params

    def asked(self) -> Iterator[ChatRequest]:
        """The requests this fresh conversation makes, each answered by an empty turn: what
        it asks, whatever comes back (its request hash: request_hash.py)."""
        while (req := self.next_request()) is not None:
            yield req
            self.out.append({"role": "assistant", "content": ""})
            self.waiting = False

    def answered(self, rec: RequestRecord) -> None:
        """A turn's answer: it joins the conversation, its costs the row's."""
        turn = {"role": "assistant", "content": rec.text or ""}
        turn["reasoning_content"] = rec.reasoning or ""
        if rec.raw is not None:  # --keep-raw: the text as generated, tags and all
            turn["raw"] = rec.raw
        turn["finish_reason"] = rec.finish_reason  # marks a generated turn
        self._keep_ids(turn, rec)
        self.out.append(turn)
        self.waiting = False
        self.turns += 1
        self.prompt_tokens += _prompt_tokens(rec)
        self.tokens += rec.completion_tokens or 0
        self.thinking += rec.reasoning_tokens or 0
        # estimated: no usage, or thinking split by genbench and its tokens shared out
        estimated = rec.tokens_estimated or rec.reasoning_source == "estimate"
        self.estimated = self.estimated or estimated
        self.thinking_from = thinking_from(rec, self.thinking_from)
        self.truncated = self.truncated or rec.finish_reason == "length"
        self.finish = rec.finish_reason
        if self.ttft is None and rec.ttft is not None:
            self.ttft = rec.ttft
        self.latency += rec.e2e or 0.0
        if rec.spec:
            self.spec.append(rec.spec)
        elif rec.spec_dropped:
            self.spec_dropped = rec.spec_dropped

    def _keep_ids(self, turn: dict[str, Any], rec: RequestRecord) -> None:
        """The turn's ids as served (arrays: `rows.DataRow.line` writes them as lists), and why
        they cannot be trusted when they cannot."""
        status, why = check_turn(
            rec.prompt_token_ids, rec.token_ids, rec.prompt_tokens, rec.completion_tokens,
            rec.tokens_estimated,
        )  # fmt: skip
        why = rec.token_ids_error or why
        if rec.token_ids_error is not None:
            status = "mismatch"
        if rec.prompt_token_ids is not None:
            turn["prompt_token_ids"] = rec.prompt_token_ids
        if rec.token_ids is not None:
            turn["token_ids"] = rec.token_ids
        if why is not None:
            turn["token_ids_error"] = why
        self.ids.append(status)

    def meta(self, model: str) -> RowMeta:
        return RowMeta(
            server=self.server, model=model, prompt_tokens=self.prompt_tokens,
            completion_tokens=self.tokens, reasoning_tokens=self.thinking,
            answer_tokens=self.tokens - self.thinking, tokens_estimated=self.estimated,
            reasoning_tokens_from=self.thinking_from, finish_reason=self.finish,
            truncated=self.truncated, turns=self.turns, attempts=self.attempts + 1,
            ttft_s=None if self.ttft is None else round(self.ttft, 4),
            latency_s=round(self.latency, 4), sent_at=self.sent_at,
            finished_at=round(time.time(), 3), token_ids=row_status(self.ids),
            group=self.row.group or None, **self._accept(),
        )  # fmt: skip

    def _accept(self) -> dict[str, Any]:
        """The row's acceptance over its turns (pooled: 1 + accepted / steps); where a
        turn's figures could not be, why, and no sums (the row's would not be whole)."""
        if self.spec_dropped:
            return {"spec_dropped": self.spec_dropped}
        if not self.spec:
            return {}
        steps = sum(s["steps"] for s in self.spec)
        accepted = sum(s["accepted"] for s in self.spec)
        length = round(1.0 + accepted / steps, 4) if steps else 1.0  # none drafted: said so
        out = {"spec_steps": steps, "spec_accepted": accepted, "spec_length": length}
        if all(s.get("drafted") is not None for s in self.spec):
            out["spec_drafted"] = sum(s["drafted"] for s in self.spec)
        return out

    def done(self, meta: RowMeta) -> DataRow:
        """The row as the store takes it (an agentic row's `tools` beside its turns)."""
        return DataRow(self.row.output_id, self.out, meta, self.row.tools)

    def line(self, model: str) -> bytes:
        """The row as the data file holds it."""
        return self.done(self.meta(model)).line()


def _prompt_tokens(rec: RequestRecord) -> int:
    """The server's prompt count (`usage`); where it sent no usage, the length of the prompt
    ids it gave (its own tokenization, so not an estimate); 0 where it gave neither."""
    if rec.prompt_tokens is not None:
        return rec.prompt_tokens
    return len(rec.prompt_token_ids) if rec.prompt_token_ids is not None else 0
