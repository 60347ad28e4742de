"""Agentic rows on paper: the input shapes read into OpenAI's chat form, malformed tool
messages refused in one line naming file, line and field, `delta.tool_calls` fragments
joined at any read boundary, and the requests each tool policy makes for a row."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from genbench.errors import InputFileError
from genbench.generate.agent import AgentConversation, start
from genbench.generate.input.reader import parse_row, scan
from genbench.generate.recipe import Recipe, turn_count
from genbench.records import RequestRecord
from genbench.transport.stream import StreamParser, parse_whole

pytestmark = pytest.mark.core

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def call(cid: str, name: str = "get_weather", args: str = '{"city": "Paris"}') -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def agentic(calls: int = 2) -> dict:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "weather?"}]
    for k in range(calls):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [call(f"c{k}")]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"result {k}"})
    msgs.append({"role": "assistant", "content": "sunny"})
    return {"id": "a", "messages": msgs, "tools": TOOLS}


# -- input shapes ---------------------------------------------------------------------------


def test_openai_messages_keep_calls_and_results_as_given():
    row = parse_row(agentic(), 1)
    assert row.tools == TOOLS
    assert row.messages[2] == {"role": "assistant", "content": "", "tool_calls": [call("c0")]}
    assert row.messages[3] == {"role": "tool", "content": "result 0", "tool_call_id": "c0"}


def test_sharegpt_function_call_and_observation_become_calls_and_results():
    obj = {
        "conversations": [
            {"from": "human", "value": "weather?"},
            {"from": "function_call", "value": '{"name": "get_weather", "arguments": {"city": "Paris"}}'},  # noqa: E501
            {"from": "observation", "value": "18C"},
            {"from": "gpt", "value": "18C in Paris"},
        ],
        "tools": orjson.dumps([{"name": "get_weather", "parameters": {}}]).decode(),
    }
    row = parse_row(obj, 1)
    assert row.tools == TOOLS  # a bare schema wrapped, the JSON text decoded
    c = row.messages[1]["tool_calls"][0]
    assert c["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert row.messages[2] == {"role": "tool", "content": "18C", "tool_call_id": c["id"]}


def test_hermes_tags_become_calls_and_results():
    obj = {
        "conversations": [
            {"from": "human", "value": "weather?"},
            {"from": "gpt", "value": "<tool_call>\n{'arguments': {'city': 'Paris'}, 'name': "
             "'get_weather'}\n</tool_call>"},  # fmt: skip
            {"from": "tool", "value": '<tool_response>\n{"temp": 18}\n</tool_response>'},
            {"from": "gpt", "value": "18C"},
        ]
    }
    row = parse_row(obj, 1)
    turn = row.messages[1]
    assert turn["content"] == ""
    assert orjson.loads(turn["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert row.messages[2]["content"] == '{"temp": 18}'
    assert row.messages[2]["tool_call_id"] == turn["tool_calls"][0]["id"]


def test_a_row_with_tools_has_an_id_of_its_own_and_a_chat_row_keeps_its_id():
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    with_tools = {**plain, "tools": TOOLS}
    assert parse_row(plain, 1).id != parse_row(with_tools, 1).id
    assert parse_row(plain, 1).id == parse_row(dict(plain), 2).id


MALFORMED = [
    # no tool_call_id
    ({"role": "tool", "content": "r"}, "messages[3].tool_call_id", "names the call"),
    # a result answering a call that is not there
    ({"role": "tool", "tool_call_id": "nope", "content": "r"}, "messages[3].tool_call_id",
     "answers no call"),
]  # fmt: skip


def _write(path: Path, rows: list[dict]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


@pytest.mark.parametrize(("turn", "field", "says"), MALFORMED)
def test_a_malformed_result_fails_naming_file_line_and_field(tmp_path, turn, field, says):
    good = agentic(1)
    bad = agentic(1)
    bad["id"] = "b"
    bad["messages"][3] = turn
    inp = tmp_path / "in.jsonl"
    _write(inp, [good, bad])
    with pytest.raises(InputFileError) as e:
        scan(inp)
    msg = str(e.value)
    assert msg.startswith(f"{inp}, line 2: field '{field}'") and says in msg, msg
    assert "\n" not in msg


def test_arguments_not_text_and_a_result_with_no_call_fail_naming_the_field(tmp_path):
    args_obj = agentic(1)
    args_obj["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
    result = {"role": "tool", "tool_call_id": "c0", "content": "r"}
    orphan = {"id": "o", "messages": [{"role": "user", "content": "hi"}, result]}
    for row, field, says in (
        (args_obj, "messages[2].tool_calls[0].function.arguments", "JSON text"),
        (orphan, "messages[1].role", "no tool call before it"),
    ):
        inp = tmp_path / "in.jsonl"
        _write(inp, [row])
        with pytest.raises(InputFileError) as e:
            scan(inp)
        assert f"{inp}, line 1: field '{field}'" in str(e.value) and says in str(e.value)


def _refused(tmp_path: Path, row: dict) -> str:
    inp = tmp_path / "in.jsonl"
    _write(inp, [row])
    with pytest.raises(InputFileError) as e:
        scan(inp)
    msg = str(e.value)
    assert msg.startswith(f"{inp}, line 1: field '") and "\n" not in msg, msg
    return msg


def test_tools_text_that_does_not_parse_says_so_and_where(tmp_path):
    row = agentic(1)
    row["tools"] = "[{not json"
    msg = _refused(tmp_path, row)
    assert "field 'tools': the JSON text of a list of tools does not parse" in msg, msg
    assert "line 1 column 3" in msg, msg


def test_arguments_that_do_not_parse_or_are_no_object_fail_naming_the_call(tmp_path):
    field = "field 'messages[2].tool_calls[0].function.arguments'"
    cases = (
        ("{city: Paris", "JSON text does not parse: unexpected character"),
        ('["Paris"]', "expected the JSON text of an object, got a list"),
    )
    for args, says in cases:
        row = agentic(1)
        row["messages"][2]["tool_calls"][0]["function"]["arguments"] = args
        msg = _refused(tmp_path, row)
        assert f"{field}: " in msg and says in msg, msg
    row = agentic(1)
    row["messages"][2]["tool_calls"][0]["function"]["arguments"] = ""
    assert parse_row(row, 1).messages[2]["tool_calls"][0]["function"]["arguments"] == ""


def test_two_calls_of_one_turn_with_the_same_id_fail_naming_the_second(tmp_path):
    row = agentic(1)
    row["messages"][2]["tool_calls"].append(call("c0", args='{"city": "Rome"}'))
    msg = _refused(tmp_path, row)
    assert "field 'messages[2].tool_calls[1].id': 'c0' is also the id of call 0" in msg, msg


def test_a_structured_result_is_sent_as_its_json_text_and_text_parts_as_their_text():
    row = agentic(2)
    row["messages"][3]["content"] = {"temp": 18}
    row["messages"][5]["content"] = [{"type": "text", "text": "18"}, {"type": "text", "text": "C"}]
    msgs = parse_row(row, 1).messages
    assert msgs[3]["content"] == '{"temp":18}' and msgs[5]["content"] == "18C"


# -- the stream -----------------------------------------------------------------------------


def _chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None):
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + orjson.dumps({"choices": choices, **({"usage": usage} if usage else {})})


def vllm_body() -> bytes:
    """vLLM's shape: thinking, a head without arguments, then argument fragments."""
    parts = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"reasoning": "I should call."}),
        _chunk({"tool_calls": [{"id": "chatcmpl-tool-1", "type": "function", "index": 0,
                                "function": {"name": "get_weather"}}]}),  # fmt: skip
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        _chunk({}, finish="tool_calls"),
        _chunk(usage={"prompt_tokens": 9, "completion_tokens": 8,
                      "completion_tokens_details": {"reasoning_tokens": 3}}),  # fmt: skip
        b"data: [DONE]",
    ]
    return b"".join(p + b"\n\n" for p in parts)


def sglang_body() -> bytes:
    """SGLang's shape: every field present, null where unused; two parallel calls."""
    nulls = {"role": None, "content": None, "reasoning_content": None}

    def part(i: int, cid: str | None, name: str | None, args: str) -> dict:
        fn = {"name": name, "arguments": args}
        one = {"id": cid, "index": i, "type": "function", "function": fn}
        return {**nulls, "tool_calls": [one]}

    parts = [
        _chunk(part(0, "call_a", "get_weather", "")),
        _chunk(part(0, None, None, '{"city": "Paris"}')),
        _chunk(part(1, "call_b", "get_weather", "")),
        _chunk(part(1, None, None, '{"city": "Rome"}')),
        _chunk({**nulls}, finish="tool_calls"),
        b"data: [DONE]",
    ]
    return b"".join(p + b"\n\n" for p in parts)


def _parse(body: bytes, cuts: list[int], keep: bool = True) -> RequestRecord:
    rec = RequestRecord(id="x")
    p = StreamParser(rec, 0.0, keep_text=keep)
    pos = 0
    for i, cut in enumerate([*cuts, len(body)]):
        p.feed(body[pos:cut], 0.01 * (i + 1))
        pos = cut
    assert p.finish() is None
    return rec


def test_vllm_calls_are_joined_at_every_read_boundary():
    body = vllm_body()
    for cut in range(1, len(body)):
        rec = _parse(body, [cut])
        assert rec.tool_calls == [call("chatcmpl-tool-1")], cut
        assert rec.tool_call_count == 1 and rec.finish_reason == "tool_calls"
        assert rec.reasoning == "I should call."
        assert rec.chunk_kinds == "raaa"  # the thought, the head, two fragments
        assert rec.tool_tokens == 5  # 8 completion tokens less 3 of thinking


def test_sglang_parallel_calls_join_by_index_and_a_plain_stream_still_counts_them():
    rec = _parse(sglang_body(), [])
    assert rec.tool_calls == [call("call_a"), call("call_b", args='{"city": "Rome"}')]
    bare = _parse(sglang_body(), [], keep=False)
    assert bare.tool_calls is None and bare.tool_call_count == 2
    assert len(bare.chunk_offsets) == 4


def test_a_whole_reply_keeps_its_calls_as_sent():
    msg = {"role": "assistant", "content": None, "tool_calls": [call("c9")]}
    body = orjson.dumps({"choices": [{"message": msg, "finish_reason": "tool_calls"}]})
    rec = RequestRecord(id="x")
    assert parse_whole(rec, body, 0.0, 0.1, keep_text=True) is None
    assert rec.tool_calls == [call("c9")] and rec.tool_call_count == 1


# -- the policies ---------------------------------------------------------------------------


def answer(conv, text: str = "", calls: list | None = None) -> None:
    rec = RequestRecord(id="x", completion_tokens=5, finish_reason="stop", text=text)
    if calls:
        rec.tool_calls, rec.tool_call_count = calls, len(calls)
        rec.finish_reason = "tool_calls"
    conv.answered(rec)


def test_replay_feeds_the_cached_results_in_order_to_the_new_calls():
    row = parse_row(agentic(2), 1)
    conv = start(row, Recipe({}, "last"))
    assert isinstance(conv, AgentConversation)
    first = conv.next_request()
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert first.params["tools"] == TOOLS
    answer(conv, calls=[call("new0", "other_fn")])
    second = conv.next_request()
    assert second.messages[-1] == {"role": "tool", "content": "result 0", "tool_call_id": "new0"}
    answer(conv, calls=[call("new1")])
    assert conv.next_request().messages[-1]["content"] == "result 1"
    answer(conv, "done")
    assert conv.next_request() is None
    meta = conv.meta("m")
    assert meta.tool_calls == 2 and meta.turns == 3
    assert meta.tool_names_differ is True and meta.tool_results_ran_out is False
    line = orjson.loads(conv.line("m"))
    assert line["tools"] == TOOLS
    assert [t.get("tool_call_id") for t in line["conversations"] if t["role"] == "tool"] == [
        "new0",
        "new1",
    ]


def test_replay_ends_the_row_when_the_results_run_out():
    conv = start(parse_row(agentic(1), 1), Recipe({}))
    conv.next_request()
    answer(conv, calls=[call("n0")])
    conv.next_request()
    answer(conv, calls=[call("n1")])
    assert conv.next_request() is None
    assert conv.meta("m").tool_results_ran_out is True
    assert conv.out[-1]["tool_calls"] == [call("n1")]  # the call is kept: a generated turn


def test_keep_sends_the_original_calls_and_regenerates_the_answer():
    row = parse_row(agentic(2), 1)
    conv = start(row, Recipe({"temperature": 0}, tool_policy="keep"))
    req = conv.next_request()
    assert req.messages == [
        {k: v for k, v in m.items()} for m in row.messages[:-1]
    ]  # every call and result, as in the input
    answer(conv, "sunny again")
    assert conv.next_request() is None
    assert conv.out[-1]["content"] == "sunny again" and conv.meta("m").tool_calls == 0


def test_requests_per_row_follow_the_original_under_each_policy():
    row = parse_row(agentic(3), 1)
    assert turn_count(row, Recipe(tool_policy="replay")) == 4  # three calls and the answer
    assert turn_count(row, Recipe(tool_policy="keep")) == 1
    assert turn_count(parse_row({"prompt": "hi"}, 1), Recipe()) == 1


def test_replay_with_every_turn_uses_each_user_turns_own_results():
    msgs = [{"role": "user", "content": "first"}]
    msgs += [{"role": "assistant", "content": "", "tool_calls": [call("a")]},
             {"role": "tool", "tool_call_id": "a", "content": "result A"},
             {"role": "assistant", "content": "done A"},
             {"role": "user", "content": "second"},
             {"role": "assistant", "content": "", "tool_calls": [call("b")]},
             {"role": "tool", "tool_call_id": "b", "content": "result B"},
             {"role": "assistant", "content": "done B"}]  # fmt: skip
    conv = start(parse_row({"messages": msgs, "tools": TOOLS}, 1), Recipe({}))
    assert turn_count(conv.row, Recipe()) == 4
    conv.next_request()
    answer(conv, "no call: the first turn's result is left unused")
    req = conv.next_request()
    assert [m["content"] for m in req.messages] == [
        "first", "no call: the first turn's result is left unused", "second",
    ]  # fmt: skip
    answer(conv, calls=[call("n1")])
    assert conv.next_request().messages[-1]["content"] == "result B"  # not result A
    answer(conv, "done")
    assert conv.next_request() is None and conv.meta("m").tool_calls == 1


def test_an_xlam_row_is_a_query_and_its_calls_with_a_schema_made_of_its_parameters():
    obj = {
        "query": "Live giveaways for beta access?",
        "answers": orjson.dumps([{"name": "giveaways", "arguments": {"type": "beta"}}]).decode(),
        "tools": orjson.dumps([{"name": "giveaways", "description": "Live giveaways",
                                "parameters": {"type": {"type": "str", "description": "kind"},
                                               "n": {"type": "List[int], optional"}}}]).decode(),
    }  # fmt: skip
    row = parse_row(obj, 1)
    assert [m["role"] for m in row.messages] == ["user", "assistant"]
    assert row.messages[1]["tool_calls"][0]["function"]["arguments"] == '{"type":"beta"}'
    params = row.tools[0]["function"]["parameters"]
    assert params == {"type": "object", "required": ["type"], "properties": {
        "type": {"type": "string", "description": "kind"}, "n": {"type": "array"}}}  # fmt: skip
    conv = start(row, Recipe({}))
    assert [m["role"] for m in conv.next_request().messages] == ["user"]
    answer(conv, calls=[call("x")])
    assert conv.next_request() is None and conv.meta("m").tool_results_ran_out is True


def test_a_forcing_tool_choice_goes_where_the_original_called_and_none_where_it_answered():
    force = {"type": "function", "function": {"name": "get_weather"}}
    row = parse_row({**agentic(1), "tool_choice": force}, 1)
    conv = start(row, Recipe({}, "last"))
    assert conv.next_request().params["tool_choice"] == force  # a result is there to answer
    answer(conv, calls=[call("n0")])
    assert conv.next_request().params["tool_choice"] == "none"  # the original answered here
    keep = start(row, Recipe(turns="last", tool_policy="keep"))
    assert keep.next_request().params["tool_choice"] == "none"
    auto = start(parse_row({**agentic(1), "tool_choice": "auto"}, 1), Recipe({}, "last"))
    conv_req = auto.next_request()
    assert conv_req.params["tool_choice"] == "auto" and conv_req.params["tools"] == TOOLS
