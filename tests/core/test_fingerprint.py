"""A row's request fingerprint: what it covers (everything a request asks) and what it
does not (the answers generate replaces, the order of fields, a new field left unset)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from genbench.generate.fingerprint import _canonical, job_salt, line_key, row_fingerprint
from genbench.generate.input.reader import Row
from genbench.transport.client import ChatRequest

pytestmark = pytest.mark.core


def row(*turns: tuple[str, str], params: dict | None = None) -> Row:
    return Row("x", [{"role": r, "content": c} for r, c in turns], params or {}, 1)


CONV = (("system", "be brief"), ("user", "hi"), ("assistant", "old answer"), ("user", "why"))


def test_what_is_asked_changes_it_and_nothing_else_does():
    base = row_fingerprint(row(*CONV), {"temperature": 0.6}, True)
    assert base == row_fingerprint(row(*CONV), {"temperature": 0.6}, True)  # stable
    changed = [
        row_fingerprint(row(*CONV[:-1], ("user", "why not")), {"temperature": 0.6}, True),
        row_fingerprint(row(*CONV), {"temperature": 0.7}, True),  # the job's sampling
        row_fingerprint(row(*CONV, params={"max_tokens": 9}), {"temperature": 0.6}, True),
        row_fingerprint(row(*CONV), {"temperature": 0.6}, False),  # --turns last
        row_fingerprint(row(*CONV[1:]), {"temperature": 0.6}, True),  # no system prompt
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    # --turns all regenerates every answer: the old one in the input is not asked
    other = (*CONV[:2], ("assistant", "another old answer"), CONV[3])
    assert row_fingerprint(row(*other), {"temperature": 0.6}, True) == base
    # --turns last sends the earlier answers as written: then they are asked
    assert row_fingerprint(row(*other), {}, False) != row_fingerprint(row(*CONV), {}, False)


def test_the_order_of_fields_and_max_tokens_spelling_do_not_matter():
    a = row_fingerprint(row(("user", "hi")), {"temperature": 0.6, "top_p": 0.9}, True)
    b = row_fingerprint(row(("user", "hi")), {"top_p": 0.9, "temperature": 0.6}, True)
    assert a == b
    c = row_fingerprint(row(("user", "hi")), {"max_tokens": 5}, True)
    d = row_fingerprint(row(("user", "hi")), {"max_completion_tokens": 5}, True)
    assert c == d  # both are sent as max_tokens


@dataclass
class Wider(ChatRequest):
    """A request as a later genbench may build it: one more field."""

    tools: list | None = None
    logprobs: bool = False


def test_a_field_added_to_requests_changes_no_fingerprint_until_it_is_set():
    req = ChatRequest("x", [{"role": "user", "content": "hi"}], 5, {"temperature": 0.6})
    wide = Wider("x", req.messages, 5, req.params)
    assert _canonical(wide) == _canonical(req)
    assert _canonical(Wider("x", req.messages, 5, req.params, logprobs=True)) != _canonical(req)
    assert _canonical(Wider("x", req.messages, 5, req.params, tools=[{"a": 1}])) != _canonical(req)


def test_line_keys_and_salts():
    salt = job_salt({}, True)
    assert salt == job_salt({}, True) != job_salt({"temperature": 0.6}, True)
    assert job_salt({}, True) != job_salt({}, False)
    line = b'{"id": "a", "prompt": "hi"}'
    assert line_key(salt, line) == line_key(salt, line) != line_key(salt, line + b" ")
    assert line_key(salt, line) != line_key(job_salt({"temperature": 0.6}, True), line)
    assert all(line_key(s, b"") != 0 for s in range(100))  # 0 means unknown


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}


def test_an_agentic_rows_tools_tool_choice_and_results_are_part_of_its_request():
    msgs = [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        {"role": "assistant", "content": "It is sunny."},
    ]  # fmt: skip

    def fp(tools=(TOOL,), choice=None, result="sunny", policy="replay"):
        m = [dict(x) for x in msgs]
        m[2]["content"] = result
        r = Row("x", m, {}, 1, tools=list(tools), tool_choice=choice)
        return row_fingerprint(r, {}, True, policy)

    base = fp()
    assert base == fp()
    others = [fp(tools=()), fp(choice="required"), fp(result="rainy"), fp(policy="keep")]
    assert base not in others and len(set(others)) == len(others)
    assert job_salt({}, True, "keep") != job_salt({}, True) == job_salt({}, True, "replay")
