"""The sim as a tool-calling server: when a request's `tools` let it, some answers are a
call, streamed in `delta.tool_calls` fragments the way vLLM and SGLang send them.

When it calls (`--tool-calls N` or `LO:HI`, docs/sim.md): a conversation (the messages
up to its last user turn) makes N calls (or, with `LO:HI`, a number from LO to HI drawn from it and
`--seed`), one per reply, before it answers in text; the calls it has made are the
`tool` results after that user turn. `tool_choice` is obeyed: `none` never calls, a
named function or `required` always calls (as a server's forced call does, until the
client stops sending). Which declared function, and its arguments, are drawn from the
same hash; the arguments are one JSON object `{"<the function's first parameter>":
"<words>"}`.

A call is tokens like any other, decoded on the same schedule: thinking first (the
sim's `--thinking-tokens`), then one token for the call's head and one per argument
fragment; the reply ends with finish_reason `tool_calls`. The head names the call
(id, type, function name; vLLM sends no `arguments` in it, SGLang an empty one), the
fragments carry only `function.arguments` (SGLang with `id`, `name` null, and `content`
and `reasoning_content` null beside them).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from genbench.errors import UsageError
from genbench.sim.ids import word_id
from genbench.sim.text import TEXT, TEXT_LEN

ARG_WORDS = 6  # words in a call's argument value: a call is ARG_WORDS + 3 tokens
_TAIL = b',"finish_reason":null}]}\n\n'
HEAD_ID = 99  # the id of a call's head token (sim.ids: below its words' ids)


def parse_tool_calls(spec: str | None) -> tuple[int, int] | None:
    """`N` or `LO:HI`: how many calls a conversation makes before it answers."""
    if spec is None:
        return None
    lo, sep, hi = spec.strip().partition(":")
    try:
        a, b = int(lo), int(hi if sep else lo)
    except ValueError:
        a = b = -1
    if not 0 <= a <= b:
        raise UsageError(f"--tool-calls {spec!r}: expected N or LO:HI, 0 <= LO <= HI, e.g. 1:3")
    return a, b


def _names(tools: Any) -> list[tuple[str, str]]:
    """(name, first parameter) of each declared function."""
    out = []
    for t in tools if isinstance(tools, list) else ():
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            props = (fn.get("parameters") or {}).get("properties") or {}
            first = next(iter(props), "input") if isinstance(props, dict) else "input"
            out.append((fn["name"], first))
    return out


def plan_call(
    body: dict[str, Any], seed: int, calls: tuple[int, int] | None
) -> tuple[str, str, int] | None:
    """(function, parameter, text position) of the call this request answers with, or
    None for a text answer."""
    tools = _names(body.get("tools"))
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    messages = body["messages"]
    users = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"]
    last = users[-1] if users else -1
    key = orjson.dumps(messages[: last + 1])
    h = int.from_bytes(hashlib.blake2b(b"%d:tools:" % seed + key, digest_size=8).digest())
    made = sum(1 for m in messages[last + 1 :] if isinstance(m, dict) and m.get("role") == "tool")
    pick = tools[(h >> 16) % len(tools)]
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        pick = next((t for t in tools if t[0] == name), (str(name), "input"))
    elif choice != "required":
        if calls is None:
            return None
        lo, hi = calls
        if made >= lo + h % (hi - lo + 1):
            return None
        pick = tools[((h >> 16) + made) % len(tools)]
    return pick[0], pick[1], ((h >> 8) + made * ARG_WORDS) % TEXT_LEN


class ToolScript:
    """The tokens of a reply that is a call: `thinking` tokens of thinking, then the
    call's head, then its argument fragments."""

    __slots__ = ("thinking", "pos", "head", "frags", "dialect", "think_key", "call_id", "name")

    def __init__(
        self, call: tuple[str, str, int], thinking: int, dialect: str, think_key: str, cid: str
    ) -> None:
        name, param, pos = call
        words = [" " + TEXT[(pos + i) % TEXT_LEN] for i in range(ARG_WORDS)]
        words[0] = words[0][1:]
        self.frags = ['{"' + param + '": "', *words, '"}']
        self.thinking, self.pos, self.dialect, self.think_key = thinking, pos, dialect, think_key
        self.call_id, self.name = cid, name

    @property
    def tokens(self) -> int:
        return self.thinking + 1 + len(self.frags)

    def arguments(self) -> str:
        return "".join(self.frags)

    def whole(self) -> dict[str, Any]:
        """The call as a whole reply's `message.tool_calls` holds it."""
        fn = {"name": self.name, "arguments": self.arguments()}
        return {"id": self.call_id, "type": "function", "function": fn}

    def thought(self, start: int, end: int) -> str:
        return "".join(" " + TEXT[(self.pos + i) % TEXT_LEN] for i in range(start, end))

    def token_ids(self, start: int, end: int) -> list[int]:
        """The ids of tokens [start, end) (`sim.ids`): the thought's words, a marker for
        the call's head, then each argument fragment's."""
        out = []
        for i in range(start, end):
            j = i - self.thinking
            if j < 0:
                out.append(word_id(TEXT[(self.pos + i) % TEXT_LEN]))
            else:
                out.append(HEAD_ID if j == 0 else word_id(self.frags[j - 1]))
        return out

    def events(self, head: bytes, start: int, end: int, with_ids: bool = False) -> bytes:
        """The SSE events that carry tokens [start, end): the thinking among them, then
        the call's part; `with_ids` (vLLM's dialect) puts the chunk's ids in its first."""
        out = b""
        tail = _TAIL
        if with_ids:
            tail = b',"finish_reason":null,"token_ids":%b}]}\n\n' % orjson.dumps(
                self.token_ids(start, end)
            )
        th = self.thinking
        if start < th:
            delta = {self.think_key: self.thought(start, min(end, th))}
            out += head + orjson.dumps(delta) + tail
            tail = _TAIL
        a, b = max(start, th) - th, end - th
        if b <= 0:
            return out
        args = "".join(self.frags[max(a, 1) - 1 : b - 1])
        out += head + orjson.dumps(self._delta(a == 0, args)) + tail
        return out

    def _delta(self, first: bool, args: str) -> dict[str, Any]:
        sglang = self.dialect == "sglang"
        if first:
            fn: dict[str, Any] = {"name": self.name}
            if sglang or args:
                fn["arguments"] = args
            part = {"id": self.call_id, "type": "function", "index": 0, "function": fn}
        elif sglang:
            part = {"id": None, "index": 0, "type": "function",
                    "function": {"name": None, "arguments": args}}  # fmt: skip
        else:
            part = {"index": 0, "function": {"arguments": args}}
        if sglang:
            return {"role": None, "content": None, "reasoning_content": None, "tool_calls": [part]}
        return {"tool_calls": [part]}
