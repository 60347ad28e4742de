"""Agentic rows: a `tools` schema, assistant turns that call tools, `tool` messages with
their results, read from the shapes the common function-calling data sets use.

A row's turns come out in OpenAI's chat form, whatever shape they came in:

  * an assistant turn that calls tools: `{"role": "assistant", "content": ...,
    "tool_calls": [{"id", "type": "function", "function": {"name", "arguments"}}]}`,
    `arguments` a JSON text (the wire form: what the server sends and is sent back);
  * a result: `{"role": "tool", "tool_call_id": ..., "content": ...}`, answering a call
    of the assistant turn before it.

Shapes read (docs/generate.md has an example of each):

  * OpenAI messages: `tool_calls` and `tool` turns as above, the row's `tools` and
    `tool_choice` beside its messages;
  * ShareGPT with function turns (LLaMA-Factory, and the sets converted to it):
    `from: function_call` (the value a JSON `{"name", "arguments"}`, or a list of them),
    `from: observation` (the result); `tools` a list or its JSON text;
  * Hermes function calling (NousResearch): a `gpt` turn holding `<tool_call>{...}
    </tool_call>` blocks, `from: tool` turns holding `<tool_response>...</tool_response>`;
  * xLAM / APIGen (Salesforce): `query`, `answers` (the calls that answer it, no
    results) and `tools` whose `parameters` map each name to `{type: "str, optional",
    description}` (turned into a JSON schema).

Calls read from ShareGPT or Hermes text get ids `call_<turn>_<k>`, and the results after
them are paired with them in order. A result that answers no call before it, a result
without `tool_call_id`, `arguments` that are not the JSON text of an object, two calls of
one turn with the same id, or a `tools` text that does not parse is a bad row, named by
field. A result whose content is structured (an object, a number) is sent as its JSON
text; one that is a list of text parts, as their text.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import orjson

from genbench.generate.input.modes import ToolPolicy

# ShareGPT `from` values of tool turns: "call" (an assistant turn that calls) or "tool"
SHAREGPT_TOOL_FROM = {
    "function_call": "call",
    "tool_call": "call",
    "observation": "tool",
    "function": "tool",
    "function_response": "tool",
    "tool_response": "tool",
    "tool": "tool",
}
POLICIES = tuple(ToolPolicy)
TOOL_CHOICES = ("auto", "none", "required")
_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_RESPONSE_TAG = re.compile(r"^\s*<tool_response>\s*(.*?)\s*</tool_response>\s*$", re.S)


class BadTool(Exception):
    """A tool shape that cannot be sent: the problem and the field it is in."""

    def __init__(self, problem: str, field: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.field = problem, field


def _json(value: Any) -> Any:
    """A JSON text decoded, or the value itself when it is not text."""
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def _json_list(value: Any, what: str, field: str) -> list[Any]:
    """A list, or the JSON text of one: text that looks like JSON but does not parse is
    named as such, with orjson's position, not as "text"."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as e:
            raise BadTool(f"the JSON text of {what} does not parse: {e}", field) from None
    value = _json(value)
    if not isinstance(value, list):
        raise BadTool(f"expected {what} (or its JSON text), got {_kind(value)}", field)
    return value


# -- the row's tools ----------------------------------------------------------------------


def row_tools(obj: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, Any]:
    """The row's `tools` (OpenAI function schema; a bare `{name, parameters}` is wrapped
    in it; a JSON text is decoded) and `tool_choice`, validated."""
    raw = obj.get("tools")
    tools = None
    if raw not in (None, "", []):
        value = _json_list(raw, "a list of tools", "tools")
        tools = [_tool(t, f"tools[{i}]") for i, t in enumerate(value)]
    choice = obj.get("tool_choice")
    if choice is not None:
        named = isinstance(choice, dict) and isinstance(
            (choice.get("function") or {}).get("name"), str
        )
        if choice not in TOOL_CHOICES and not named:
            raise BadTool(
                "expected auto, none, required or {\"type\": \"function\", \"function\": "
                f"{{\"name\": ...}}}}, got {choice!r}",
                "tool_choice",
            )
        if tools is None:
            raise BadTool("a tool_choice without tools", "tool_choice")
    return tools, choice


def _tool(t: Any, where: str) -> dict[str, Any]:
    if not isinstance(t, dict):
        raise BadTool(f"expected an object, got {_kind(t)}", where)
    fn = t.get("function") if t.get("type", "function") == "function" else None
    if fn is None and isinstance(t.get("name"), str):
        t = {**t, "parameters": _schema(t["parameters"])} if "parameters" in t else t
        return {"type": "function", "function": t}  # a bare function schema
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise BadTool("expected {\"type\": \"function\", \"function\": {\"name\": ...}}", where)
    return t


_PY_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean",
             "list": "array", "dict": "object", "tuple": "array", "set": "array"}  # fmt: skip


def _schema(params: Any) -> Any:
    """xLAM's `{"param": {"type": "str, optional", "description"}}` as a JSON schema;
    a JSON schema (or anything else) as it is."""
    schema = isinstance(params, dict) and (
        isinstance(params.get("type"), str) or "properties" in params
    )  # a JSON schema's type is a word; an xLAM parameter's spec is an object
    if schema or not isinstance(params, dict) or not params:
        return params
    props: dict[str, Any] = {}
    required = []
    for name, spec in params.items():
        spec = spec if isinstance(spec, dict) else {}
        words = str(spec.get("type", "str")).lower()
        base = re.split(r"[\[,\s]", words, maxsplit=1)[0]
        prop = {"type": _PY_TYPES.get(base, "string")}
        if isinstance(spec.get("description"), str):
            prop["description"] = spec["description"]
        props[name] = prop
        if "optional" not in words and "default" not in spec:
            required.append(name)
    return {"type": "object", "properties": props, "required": required}


def xlam_turns(obj: dict[str, Any]) -> list[dict[str, Any]] | None:
    """An xLAM / APIGen row (`query`, `answers`: the calls that answer it, no results):
    the user's query and an assistant turn making those calls; None for another shape."""
    if not isinstance(obj.get("query"), str) or obj.get("answers") is None:
        return None
    answers = _json_list(obj["answers"], "a list of calls", "answers")
    calls = [_loose_call(c, f"answers[{k}]") for k, c in enumerate(answers)]
    for k, c in enumerate(calls):
        c["id"] = f"call_1_{k}"
    return [{"role": "user", "content": obj["query"]},
            {"role": "assistant", "content": "", "tool_calls": calls}]  # fmt: skip


def declared(tools: list[dict[str, Any]] | None) -> set[str]:
    """The names of the functions a row declares."""
    return {t["function"]["name"] for t in tools or ()}


# -- turns --------------------------------------------------------------------------------


def tool_turn(item: dict[str, Any], role: str, sharegpt: str | None, where: str) -> dict | None:
    """The normalised turn for a tool-related item (a result, an assistant turn with
    `tool_calls`, a ShareGPT function call), or None for any other item."""
    kind = SHAREGPT_TOOL_FROM.get(sharegpt or "")
    if role == "tool" or kind == "tool":
        return _result(item, where)
    if kind == "call":
        value = item.get("value") if item.get("content") is None else item.get("content")
        calls = _json(value)
        calls = calls if isinstance(calls, list) else [calls]
        return {"role": "assistant", "content": "", "tool_calls": [
            _loose_call(c, f"{where}.value") for c in calls
        ], "_unpaired": True}  # fmt: skip
    if role == "assistant" and item.get("tool_calls") not in (None, []):
        raw = item["tool_calls"]
        if not isinstance(raw, list):
            raise BadTool(f"expected a list of calls, got {_kind(raw)}", f"{where}.tool_calls")
        calls = [_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(raw)]
        _distinct_ids(calls, f"{where}.tool_calls")
        content = item.get("content")
        turn = {"role": "assistant", "content": content if isinstance(content, str) else ""}
        if isinstance(item.get("reasoning_content"), str):
            turn["reasoning_content"] = item["reasoning_content"]
        turn["tool_calls"] = calls
        return turn
    return None


def _result(item: dict[str, Any], where: str) -> dict[str, Any]:
    content = item.get("content")
    if content is None:
        content = item.get("value")
    if content is None:
        raise BadTool("missing content", f"{where}.content")
    if _text_parts(content):
        content = "".join(p["text"] for p in content)  # OpenAI's content parts
    elif not isinstance(content, str):
        content = orjson.dumps(content).decode()  # a structured result: its JSON text
    m = _RESPONSE_TAG.match(content)
    turn: dict[str, Any] = {"role": "tool", "content": m.group(1) if m else content}
    call_id = item.get("tool_call_id")
    if call_id is not None:
        if not isinstance(call_id, str) or not call_id:
            raise BadTool(f"expected the id of a call, got {call_id!r}", f"{where}.tool_call_id")
        turn["tool_call_id"] = call_id
    if isinstance(item.get("name"), str):
        turn["name"] = item["name"]
    if item.get("role") == "tool" and call_id is None:
        turn["_needs_id"] = True  # OpenAI form: the id is required
    return turn


def _call(c: Any, where: str) -> dict[str, Any]:
    """One call in OpenAI's form, checked: an id, a function name, arguments as text."""
    if not isinstance(c, dict):
        raise BadTool(f"expected an object, got {_kind(c)}", where)
    fn = c.get("function")
    if not isinstance(fn, dict):
        raise BadTool("expected {\"name\", \"arguments\"}", f"{where}.function")
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        raise BadTool("missing the function's name", f"{where}.function.name")
    args = fn.get("arguments")
    if not isinstance(args, str):
        raise BadTool(
            f"expected the arguments' JSON text (as servers send them), got {_kind(args)}",
            f"{where}.function.arguments",
        )
    _arguments_object(args, f"{where}.function.arguments")
    cid = c.get("id")
    if not isinstance(cid, str) or not cid:
        raise BadTool("missing: a call needs an id for its result to answer", f"{where}.id")
    return {"id": cid, "type": c.get("type") or "function",
            "function": {"name": fn["name"], "arguments": args}}  # fmt: skip


def _loose_call(c: Any, where: str) -> dict[str, Any]:
    """A call written as `{"name", "arguments"}` (ShareGPT, Hermes): arguments an object
    or its text; the id is given when the row is linked."""
    if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
        raise BadTool("expected a call {\"name\": ..., \"arguments\": {...}}", where)
    args = c.get("arguments", c.get("parameters", {}))
    if isinstance(args, str):
        _arguments_object(args, f"{where}.arguments")
    text = args if isinstance(args, str) else orjson.dumps(args).decode()
    return {"id": "", "type": "function", "function": {"name": c["name"], "arguments": text}}


def _arguments_object(args: str, field: str) -> None:
    """Arguments must be the JSON text of an object (what a tool is called with; a
    server's template decodes them): text that does not parse, or parses to something
    else, is a bad row. Empty text is a call without arguments."""
    if not args.strip():
        return
    try:
        value = orjson.loads(args)
    except orjson.JSONDecodeError as e:
        raise BadTool(f"the arguments' JSON text does not parse: {e}", field) from None
    if not isinstance(value, dict):
        raise BadTool(f"expected the JSON text of an object, got {_kind(value)}", field)


def _distinct_ids(calls: list[dict[str, Any]], where: str) -> None:
    """Two calls of one turn with the same id: a result could not say which it answers."""
    seen: dict[str, int] = {}
    for k, c in enumerate(calls):
        if c["id"] in seen:
            raise BadTool(
                f"{c['id']!r} is also the id of call {seen[c['id']]}: "
                "a result could not say which call it answers",
                f"{where}[{k}].id",
            )
        seen[c["id"]] = k


def _text_parts(content: Any) -> bool:
    """A list of OpenAI text parts (`[{"type": "text", "text": ...}]`)."""
    return isinstance(content, list) and bool(content) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    )


def _hermes_calls(content: str, where: str) -> tuple[str, list[dict[str, Any]]] | None:
    """`<tool_call>{...}</tool_call>` blocks in an assistant's text: the text around them
    and the calls (JSON, or the Python-literal dicts some Hermes rows hold)."""
    blocks = _CALL_TAG.findall(content)
    if not blocks:
        return None
    calls = []
    for b in blocks:
        try:
            value = orjson.loads(b)
        except orjson.JSONDecodeError:
            try:
                value = ast.literal_eval(b)
            except (ValueError, SyntaxError):
                raise BadTool(f"a <tool_call> block that is not JSON: {b[:60]!r}", where) from None
        calls.append(_loose_call(value, where))
    return _CALL_TAG.sub("", content).strip(), calls


def link(turns: list[dict[str, Any]], key: str) -> None:
    """Give calls read from text their ids, pair each result with a call of the assistant
    turn before it, and refuse a result that answers none."""
    pending: list[str] = []  # ids of the latest calls not yet answered
    for i, t in enumerate(turns):
        where = f"{key}[{i}]"
        if t["role"] == "assistant":
            nxt = turns[i + 1]["role"] if i + 1 < len(turns) else None
            if "tool_calls" not in t and nxt == "tool" and isinstance(t["content"], str):
                found = _hermes_calls(t["content"], f"{where}.content")
                if found is not None:
                    t["content"], t["tool_calls"] = found[0], found[1]
                    t["_unpaired"] = True
            if t.pop("_unpaired", False):
                for k, c in enumerate(t["tool_calls"]):
                    c["id"] = f"call_{i}_{k}"
            pending = [c["id"] for c in t.get("tool_calls", ())]
        elif t["role"] == "tool":
            _pair(t, pending, where)
        else:
            pending = []


def _pair(t: dict[str, Any], pending: list[str], where: str) -> None:
    if t.pop("_needs_id", False):
        raise BadTool("missing: a tool result names the call it answers", f"{where}.tool_call_id")
    if not pending:
        raise BadTool("a tool result with no tool call before it", f"{where}.role")
    cid = t.get("tool_call_id")
    if cid is None:
        t["tool_call_id"] = pending.pop(0)  # ShareGPT/Hermes: results in the calls' order
    elif cid in pending:
        pending.remove(cid)
    else:
        raise BadTool(
            f"{cid!r} answers no call of the assistant turn before it "
            f"(unanswered: {', '.join(pending)})",
            f"{where}.tool_call_id",
        )


def is_agentic(turns: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bool:
    """A row that declares tools or holds a call or a result."""
    return bool(tools) or any(t["role"] == "tool" or "tool_calls" in t for t in turns)


def wire(turn: dict[str, Any]) -> dict[str, Any]:
    """A turn as a request carries it: role and content, and a call's or a result's
    fields (the thinking of earlier turns stays out, as for chat rows)."""
    out = {"role": turn["role"], "content": turn["content"]}
    if "tool_calls" in turn:
        out["tool_calls"] = turn["tool_calls"]
    if turn["role"] == "tool":
        out["tool_call_id"] = turn.get("tool_call_id")
        if "name" in turn:
            out["name"] = turn["name"]
    return out


def arguments_parse(calls: list[dict[str, Any]]) -> bool:
    """Every call's arguments are a JSON object (what a tool can be called with)."""
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        try:
            if not isinstance(orjson.loads(args or ""), dict):
                return False
        except (orjson.JSONDecodeError, TypeError):
            return False
    return True


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "a list", str: "text"}.get(type(v), type(v).__name__)
