"""A row's turns, as the input gives them, normalised to `{role, content}` (thinking kept as
`reasoning_content`, tool calls and results as tools.py reads them): OpenAI messages,
ShareGPT's `{from, value}`, xLAM's query and answers, or a bare prompt. A problem is a
`BadField` naming the field, which the input reader turns into its one line."""

from __future__ import annotations

from typing import Any

from genbench.generate.input.files import PROMPT_KEYS
from genbench.generate.input.tools import link, tool_turn, xlam_turns

ROLES = ("system", "developer", "user", "assistant", "tool")
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "chatgpt": "assistant", "bot": "assistant"}


class BadField(Exception):
    """A problem with one field of a row: what is wrong, where, and the row's id if known."""

    def __init__(self, problem: str, field: str | None = None, id: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.field, self.id = problem, field, id


def _content(value: Any, where: str, role: str) -> Any:
    if value is None:
        if role == "assistant":
            return ""
        raise BadField("missing content", where)
    if isinstance(value, str | list):
        return value
    raise BadField(f"expected text or a list of parts, got {type(value).__name__}", where)


def _turns(value: Any, key: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise BadField("expected a non-empty list of {role, content}", key)
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadField(f"expected an object, got {type(item).__name__}", f"{key}[{i}]")
        role, src = item.get("role"), None
        if role is None and item.get("from") is not None:
            src = str(item["from"]).lower()
            role = SHAREGPT_ROLES.get(src, src)
        tool = tool_turn(item, role, src, f"{key}[{i}]")
        if tool is not None:
            out.append(tool)
            continue
        if role not in ROLES:
            got = "no role" if role is None else f"role {role!r}"
            raise BadField(f"{got}: expected one of {', '.join(ROLES)}", f"{key}[{i}].role")
        raw = item.get("content")
        if raw is None:
            raw = item.get("value")
        turn = {"role": role, "content": _content(raw, f"{key}[{i}].content", role)}
        if role == "assistant" and isinstance(item.get("reasoning_content"), str):
            turn["reasoning_content"] = item["reasoning_content"]
        out.append(turn)
    if not any(t["role"] == "user" for t in out):
        raise BadField("no user turn to answer", key)
    link(out, key)
    return out


def messages(obj: dict[str, Any]) -> list[dict[str, Any]]:
    for key in PROMPT_KEYS:
        if obj.get(key) is not None:
            return _turns(obj[key], key)
    xlam = xlam_turns(obj)
    if xlam is not None:
        return xlam
    prompt = obj.get("prompt")
    if prompt is None:
        raise BadField(
            "no prompt: expected 'conversations' or 'messages' (a list of {role, content}) "
            "or 'prompt' (text)"
        )
    if not isinstance(prompt, str):
        raise BadField(f"expected text, got {type(prompt).__name__}", "prompt")
    msgs: list[dict[str, Any]] = []
    system = obj.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise BadField(f"expected text, got {type(system).__name__}", "system")
        msgs.append({"role": "system", "content": system})
    msgs.append({"role": "user", "content": prompt})
    return msgs
