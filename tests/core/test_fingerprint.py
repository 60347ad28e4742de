"""A row's request fingerprint: what it covers (everything a request asks) and what it
does not (the answers generate replaces, the order of fields, a new field left unset)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from genbench.generate.input.reader import Row
from genbench.generate.recipe import Recipe
from genbench.generate.request_hash import _canonical, job_salt, line_key, request_hash
from genbench.transport.client import ChatRequest

pytestmark = pytest.mark.core


def row(*turns: tuple[str, str], params: dict | None = None) -> Row:
    return Row("x", [{"role": r, "content": c} for r, c in turns], params or {}, 1)


CONV = (("system", "be brief"), ("user", "hi"), ("assistant", "old answer"), ("user", "why"))


def test_what_is_asked_changes_it_and_nothing_else_does():
    base = request_hash(row(*CONV), Recipe({"temperature": 0.6}))
    assert base == request_hash(row(*CONV), Recipe({"temperature": 0.6}))  # stable
    changed = [
        request_hash(row(*CONV[:-1], ("user", "why not")), Recipe({"temperature": 0.6})),
        request_hash(row(*CONV), Recipe({"temperature": 0.7})),  # the job's sampling
        request_hash(row(*CONV, params={"max_tokens": 9}), Recipe({"temperature": 0.6})),
        request_hash(row(*CONV), Recipe({"temperature": 0.6}, "last")),  # --turns last
        request_hash(row(*CONV[1:]), Recipe({"temperature": 0.6})),  # no system prompt
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    # --turns all regenerates every answer: the old one in the input is not asked
    other = (*CONV[:2], ("assistant", "another old answer"), CONV[3])
    assert request_hash(row(*other), Recipe({"temperature": 0.6})) == base
    # --turns last sends the earlier answers as written: then they are asked
    last = Recipe(turns="last")
    assert request_hash(row(*other), last) != request_hash(row(*CONV), last)


def test_the_order_of_fields_and_max_tokens_spelling_do_not_matter():
    a = request_hash(row(("user", "hi")), Recipe({"temperature": 0.6, "top_p": 0.9}))
    b = request_hash(row(("user", "hi")), Recipe({"top_p": 0.9, "temperature": 0.6}))
    assert a == b
    c = request_hash(row(("user", "hi")), Recipe({"max_tokens": 5}))
    d = request_hash(row(("user", "hi")), Recipe({"max_completion_tokens": 5}))
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
    salt = job_salt(Recipe())
    assert salt == job_salt(Recipe()) != job_salt(Recipe({"temperature": 0.6}))
    assert job_salt(Recipe()) != job_salt(Recipe(turns="last"))
    line = b'{"id": "a", "prompt": "hi"}'
    assert line_key(salt, line) == line_key(salt, line) != line_key(salt, line + b" ")
    assert line_key(salt, line) != line_key(job_salt(Recipe({"temperature": 0.6})), line)
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
        return request_hash(r, Recipe(tool_policy=policy))

    base = fp()
    assert base == fp()
    others = [fp(tools=()), fp(choice="required"), fp(result="rainy"), fp(policy="keep")]
    assert base not in others and len(set(others)) == len(others)
    keep, replay = Recipe(tool_policy="keep"), Recipe(tool_policy="replay")
    assert job_salt(keep) != job_salt(Recipe()) == job_salt(replay)


def test_salts_and_fingerprints_stay_those_earlier_runs_wrote():
    """An output directory made by an earlier genbench resumes as it was: its line keys'
    salts and its rows' fingerprints, pinned."""
    assert f"{job_salt(Recipe()):016x}" == "a549275c8416c598"
    assert f"{job_salt(Recipe(turns='last')):016x}" == "f92b3b085c364240"
    assert f"{job_salt(Recipe(tool_policy='keep')):016x}" == "0d976a3f1150b52c"
    assert f"{job_salt(Recipe({'temperature': 0.6, 'max_tokens': 100})):016x}" == "79bb50c2736b5ad5"
    chat = row(*CONV, ("assistant", "y"))
    assert f"{request_hash(chat, Recipe({'temperature': 0.6, 'max_tokens': 100})):016x}" == (
        "e5d8494b43da85d1"
    )
    assert f"{request_hash(chat, Recipe(turns='last')):016x}" == "0e138d3173d611f1"
    call = {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "assistant", "content": "doneA"},
    ]
    agent = Row("ag", msgs, {}, 1, tools=[TOOL])
    assert f"{request_hash(agent, Recipe()):016x}" == "4c25561e3ec329f3"
    assert f"{request_hash(agent, Recipe(tool_policy='keep')):016x}" == "a2c9deb6717480bb"
