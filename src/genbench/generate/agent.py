"""An agentic row on its way: tool calls regenerated under one of two policies.

Every request of such a row carries the row's `tools` (and `tool_choice`). What is sent
again and what is kept (docs/generate.md shows both on one row):

  * `replay` (the default): the history up to a user turn is sent and the target
    generates; when it calls tools, the original conversation's next cached results
    (the `tool` messages that followed that user turn, in order) are fed back, each
    paired with the id of the call the target just made, and the target generates
    again, until it answers without a call or the results run out. A call the results
    cannot answer (more calls than results, or a parallel call with too few left) ends
    the row: that call is the row's last turn, and `meta.tool_results_ran_out` says so.
    A call cut by max_tokens (finish_reason `length`) is not answered either: its
    arguments may be half written, so no cached result is fed to it; the row ends with
    it, and `meta.tool_call_cut` says so.
    `--turns last` replays the last user turn only, the turns before it kept as they
    are; `--turns all` replays every user turn, each with its own results.
  * `keep`: the original calls and results stay as history; only the assistant turns
    that are plain answers (and a call no result follows) are generated again.
    `--turns last` regenerates the final one, `--turns all` every one.

A `tool_choice` that forces a call (`required`, or a named function) leaves a target no
way to stop calling: it is sent where the original called (under `replay`, while cached
results remain to answer the forced call), and `tool_choice: none` where the original
answered in text, so that the target answers there too.

The target's calls are kept as the server sent them (`tool_calls`, ids, names and the
arguments text), with its `reasoning_content` beside them when it thought first, in an
ordinary assistant turn: one generated turn, one training sample.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from genbench.generate.conversation import Conversation
from genbench.generate.input.reader import Row
from genbench.generate.recipe import REPLAY, Recipe, TurnPlan, turn_plan
from genbench.records import RequestRecord
from genbench.rows import RowMeta


class AgentConversation(Conversation):
    """A row with tools: the requests it makes and what its answers say about calls."""

    __slots__ = (
        "results", "names", "made", "calls", "call_turns", "call_tokens", "ran_out", "differ",
        "cut",
    )  # fmt: skip

    def __init__(
        self, row: Row, recipe: Recipe, rid: str | None = None, plan: TurnPlan | None = None
    ) -> None:
        super().__init__(row, recipe, rid, plan)
        extra: dict[str, Any] = {"tools": row.tools} if row.tools else {}
        if row.tool_choice is not None:
            extra["tool_choice"] = row.tool_choice
        self.params = {**self.params, **extra}  # every request carries them
        self.results: deque[dict[str, Any]] = deque()  # the segment's cached results
        self.names: list[str] = []  # the functions the original called in the segment
        self.made: list[str] = []  # and those the target called there
        self.calls = self.call_turns = self.call_tokens = 0
        self.ran_out = self.differ = self.cut = False

    def _asking(self, i: int) -> None:
        """Under `replay`, the user turn at `i` is answered next: the results and calls
        that followed it in the original, up to the next user turn."""
        if self.plan.tools == REPLAY:
            part = self.plan.segment(i)
            self.results = deque(m for m in part if m["role"] == "tool")
            self.names = [c["function"]["name"] for m in part for c in m.get("tool_calls", ())]
            self.made = []

    def _params_now(self) -> dict[str, Any]:
        """The request's fields: a forcing tool_choice only where the original called."""
        choice = self.row.tool_choice
        if choice not in ("required",) and not isinstance(choice, dict):
            return self.params
        if self.plan.tools == REPLAY:
            called = bool(self.results)
        else:
            msgs = self.row.messages
            called = self.pos < len(msgs) and "tool_calls" in msgs[self.pos]
        return self.params if called else {**self.params, "tool_choice": "none"}

    # -- what an answer does -------------------------------------------------------------

    def answered(self, rec: RequestRecord) -> None:
        super().answered(rec)
        calls = rec.tool_calls
        if not calls:
            return
        self.out[-1]["tool_calls"] = calls
        self.calls += len(calls)
        self.call_turns += 1
        self.call_tokens += rec.tool_tokens or 0
        if self.plan.tools != REPLAY:
            return
        if rec.finish_reason == "length":  # a call cut by max_tokens: no result answers it
            self.cut = True
            self.pos = len(self.row.messages)  # the row ends with this call
            return
        self._feed(calls)

    def _feed(self, calls: list[dict[str, Any]]) -> None:
        """The target called: the next cached results answer its calls, matched to the
        new ids; too few left and the row ends with this call."""
        for c in calls:
            name = (c.get("function") or {}).get("name")
            k = len(self.made)
            self.made.append(name)
            if k < len(self.names) and self.names[k] != name:
                self.differ = True
        if len(self.results) < len(calls):
            self.ran_out = True
            self.pos = len(self.row.messages)  # nothing can follow an unanswered call
            return
        for c in calls:
            cached = self.results.popleft()
            result = {"role": "tool", "tool_call_id": c.get("id"), "content": cached["content"]}
            if "name" in cached:
                result["name"] = cached["name"]
            self.out.append(result)
        self.waiting = True  # the target goes on from its results

    # -- the row as written --------------------------------------------------------------

    def meta(self, model: str) -> RowMeta:
        return replace(
            super().meta(model),
            tool_policy=self.plan.tools,
            tool_calls=self.calls,
            tool_call_turns=self.call_turns,
            tool_call_tokens=self.call_tokens,
            tool_results_ran_out=self.ran_out,
            tool_names_differ=self.differ,
            tool_call_cut=self.cut,
        )


def start(row: Row, recipe: Recipe, rid: str | None = None) -> Conversation:
    """The row's conversation: an agentic row's (tools, in the row or its params; calls,
    results) is an `AgentConversation`, its calls under the recipe's tool policy."""
    plan = turn_plan(row, recipe)
    return (Conversation if plan.tools is None else AgentConversation)(row, recipe, rid, plan)
