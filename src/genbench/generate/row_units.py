"""A row as a unit of `genbench.load`: its conversation, plain (`conversation`) or agentic
(`agent`, which builds on the plain one). Chosen here, above both, so neither module
imports the other back."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from genbench.generate.agent import AgentConversation
from genbench.generate.conversation import Conversation
from genbench.generate.input.reader import BadRow, Row


def start(
    row: Row,
    params: dict[str, Any],
    all_turns: bool,
    rid: str | None = None,
    tool_policy: str = "replay",
) -> Conversation:
    """The row's conversation: an agentic row (tools, in the row or its params; calls,
    results) is an `AgentConversation` under `tool_policy` (genbench.generate.agent)."""
    tools = row.tools or "tools" in row.params
    if tools or any(m["role"] == "tool" or "tool_calls" in m for m in row.messages):
        return AgentConversation(row, params, all_turns, rid, tool_policy)
    return Conversation(row, params, all_turns, rid)


def turn_count(row: Row, all_turns: bool, tool_policy: str = "replay") -> int:
    """Requests one row makes: every user turn's answer with --turns all, else one; an
    agentic row's as its original made them (`AgentConversation.expected_requests`)."""
    return start(row, {}, all_turns, tool_policy=tool_policy).expected_requests()


Label = Callable[[int, Row], tuple[str, dict[str, Any]]]


def conversations(
    rows: Iterable[Row | BadRow],
    params: dict[str, Any],
    all_turns: bool,
    *,
    on_bad: Callable[[BadRow], None] | None = None,
    label: Label | None = None,
    tool_policy: str = "replay",
) -> Iterator[Conversation]:
    """The rows as units for `load`, read lazily; a row that cannot be sent goes to
    `on_bad`. `label(n, row)` gives the n-th row's request id and what its records
    carry in `extra` (default: the row's id, nothing); an agentic row regenerates its
    calls under `tool_policy` (genbench.generate.agent)."""
    for n, row in enumerate(rows):
        if isinstance(row, BadRow):
            if on_bad is not None:
                on_bad(row)
            continue
        rid, tag = label(n, row) if label else (row.id, {})
        conv = start(row, params, all_turns, rid, tool_policy)
        conv.tag = tag
        yield conv
