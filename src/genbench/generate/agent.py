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

import time
from collections import deque
from typing import Any

from genbench.generate.conversation import Conversation
from genbench.generate.input.reader import Row
from genbench.generate.input.tools import wire
from genbench.records import RequestRecord
from genbench.rows import row_line
from genbench.transport.client import ChatRequest

_PROMPTS = ("user", "tool")


class AgentConversation(Conversation):
    """A row with tools: the requests it makes and what its answers say about calls."""

    __slots__ = (
        "policy", "results", "names", "made", "calls", "call_turns", "call_tokens",
        "ran_out", "differ", "last_prompt", "cut",
    )  # fmt: skip

    def __init__(
        self,
        row: Row,
        params: dict[str, Any],
        all_turns: bool,
        rid: str | None = None,
        policy: str = "replay",
    ) -> None:
        super().__init__(row, params, all_turns, rid)
        extra: dict[str, Any] = {"tools": row.tools} if row.tools else {}
        if row.tool_choice is not None:
            extra["tool_choice"] = row.tool_choice
        self.params = {**self.params, **extra}  # every request carries them
        self.policy = policy
        self.results: deque[dict[str, Any]] = deque()  # the segment's cached results
        self.names: list[str] = []  # the functions the original called in the segment
        self.made: list[str] = []  # and those the target called there
        self.calls = self.call_turns = self.call_tokens = 0
        self.ran_out = self.differ = self.cut = False
        msgs = row.messages
        self.last_prompt = max(i for i, m in enumerate(msgs) if m["role"] in _PROMPTS)

    # -- where the next request is ------------------------------------------------------

    def _advance(self) -> bool:
        if self.waiting:
            return True
        return self._keep() if self.policy == "keep" else self._replay()

    def _replay(self) -> bool:
        msgs = self.row.messages
        while self.pos < len(msgs):
            i = self.pos
            m = msgs[i]
            self.pos += 1
            if self.all_turns:
                if m["role"] in ("assistant", "tool"):
                    continue  # regenerated, and its results replayed
                self.out.append(m)
                if m["role"] == "user" and (i + 1 == len(msgs) or msgs[i + 1]["role"] != "user"):
                    return self._segment(i)
            elif i <= self.last_user:
                self.out.append(m)
                if i == self.last_user:
                    return self._segment(i)
        return False

    def _segment(self, user: int) -> bool:
        """The user turn at `user` is answered next: the results and calls that followed
        it in the original, up to the next user turn."""
        msgs = self.row.messages
        end = next((j for j in range(user + 1, len(msgs)) if msgs[j]["role"] == "user"), None)
        part = msgs[user + 1 : end]
        self.results = deque(m for m in part if m["role"] == "tool")
        self.names = [c["function"]["name"] for m in part for c in m.get("tool_calls", ())]
        self.made = []
        self.waiting = True
        return True

    def _keep(self) -> bool:
        msgs = self.row.messages
        while self.pos < len(msgs):
            i = self.pos
            m = msgs[i]
            self.pos += 1
            if self.all_turns:
                if m["role"] == "assistant":
                    if self._kept(i):
                        self.out.append(m)
                    continue  # a plain answer: generated at the point before it
                self.out.append(m)
                if m["role"] in _PROMPTS and self._answered_next(i):
                    self.waiting = True
                    return True
            elif i <= self.last_prompt:
                self.out.append(m)
                if i == self.last_prompt:
                    self.waiting = True
                    return True
        return False

    def _kept(self, i: int) -> bool:
        """An original call that results follow: history under `keep`."""
        msgs = self.row.messages
        return "tool_calls" in msgs[i] and i + 1 < len(msgs) and msgs[i + 1]["role"] == "tool"

    def _answered_next(self, i: int) -> bool:
        msgs = self.row.messages
        if i + 1 == len(msgs):
            return True
        nxt = msgs[i + 1]
        return nxt["role"] == "assistant" and not self._kept(i + 1)

    def next_request(self) -> ChatRequest | None:
        if not self._advance():
            return None
        if self.sent_at is None:
            self.sent_at = round(time.time(), 3)
        msgs = [wire(m) for m in self.out]
        return ChatRequest(self.rid, msgs, self.max_tokens, self._params_now(), self.row.group)

    def _params_now(self) -> dict[str, Any]:
        """The request's fields: a forcing tool_choice only where the original called."""
        choice = self.row.tool_choice
        if choice not in ("required",) and not isinstance(choice, dict):
            return self.params
        if self.policy == "replay":
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
        if self.policy != "replay":
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

    def meta(self, model: str) -> dict[str, Any]:
        out = super().meta(model)
        out.update(
            tool_policy=self.policy,
            tool_calls=self.calls,
            tool_call_turns=self.call_turns,
            tool_call_tokens=self.call_tokens,
            tool_results_ran_out=self.ran_out,
            tool_names_differ=self.differ,
            tool_call_cut=self.cut,
        )
        return out

    def line(self, model: str) -> bytes:
        return row_line(self.row.output_id, self.out, self.meta(model), tools=self.row.tools)

    def expected_requests(self) -> int:
        """Requests the row makes: under `replay`, as many as the original's assistant
        turns after each user turn it answers (the target may make more or fewer)."""
        if self.policy == "keep":
            return super().expected_requests()
        msgs = self.row.messages
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        if self.all_turns:
            users = [i for i in users if i + 1 == len(msgs) or msgs[i + 1]["role"] != "user"]
        else:
            users = users[-1:]
        n = 0
        for u in users:
            end = next((j for j in range(u + 1, len(msgs)) if msgs[j]["role"] == "user"), None)
            n += max(1, sum(m["role"] == "assistant" for m in msgs[u + 1 : end]))
        return n
