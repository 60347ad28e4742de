"""A streamed reply's tool calls, joined from their `delta.tool_calls` fragments.

OpenAI-compatible servers stream a call in pieces keyed by `index`: the first fragment of
a call carries its `id`, `type` and `function.name` (vLLM leaves `arguments` out of it,
SGLang sends it empty), the later ones only `function.arguments` text (SGLang repeats
`id`, `type` and `name` as null). `ToolCalls.feed` takes each chunk's list as it comes;
`calls` gives them in the form a whole (non-streamed) reply holds them, which is also
the form a request sends them back in.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ToolCalls"]


class ToolCalls:
    """The calls of one reply so far: per index, the call and its argument fragments."""

    __slots__ = ("calls", "args", "chars")

    def __init__(self) -> None:
        self.calls: dict[int, dict[str, Any]] = {}
        self.args: dict[int, list[str]] = {}
        self.chars = 0  # argument characters received

    def feed(self, parts: Any) -> None:
        """One chunk's `delta.tool_calls`; a part without an index is the next call's
        when it names one, else the latest call's (servers that stream one call)."""
        if not isinstance(parts, list):
            return
        for p in parts:
            if not isinstance(p, dict):
                continue
            fn = p.get("function")
            fn = fn if isinstance(fn, dict) else {}
            index = p.get("index")
            if not isinstance(index, int):
                named = p.get("id") or fn.get("name")
                index = len(self.calls) if named or not self.calls else max(self.calls)
            call = self.calls.get(index)
            if call is None:
                call = self.calls[index] = {"id": None, "type": "function", "name": None}
                self.args[index] = []
            if p.get("id"):
                call["id"] = p["id"]
            if p.get("type"):
                call["type"] = p["type"]
            if fn.get("name"):
                call["name"] = fn["name"]
            text = fn.get("arguments")
            if isinstance(text, str) and text:
                self.args[index].append(text)
                self.chars += len(text)

    def __len__(self) -> int:
        return len(self.calls)

    def result(self) -> list[dict[str, Any]]:
        """The calls in index order, arguments joined: `{id, type, function: {name,
        arguments}}`."""
        out = []
        for i in sorted(self.calls):
            c = self.calls[i]
            fn = {"name": c["name"], "arguments": "".join(self.args[i])}
            out.append({"id": c["id"], "type": c["type"], "function": fn})
        return out
