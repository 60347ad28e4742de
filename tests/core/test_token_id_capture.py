"""Token ids through the stream parser, in each engine's shape, at every read boundary;
the turn's check against the server's counts; the row's reader and its Parquet schema.

The vLLM bytes are the shape vLLM 0.32 sends with `return_token_ids` (captured from the
CPU test server: prompt ids at the first chunk's top level, ids in each choice, the EOS
id in the finishing chunk, a chunk with ids and no text); SGLang's are its `sglext`
extension, once, in a `choices: []` chunk before `[DONE]`."""

from __future__ import annotations

from array import array
from typing import Any

import orjson
import pytest

from genbench.records import RequestRecord
from genbench.rows import DataRow, RowMeta, parquet_schema, turn_ids
from genbench.transport.stream import DONE, StreamParser, parse_whole
from genbench.transport.token_ids import (
    EXACT,
    MISMATCH,
    NONE,
    PARTIAL,
    UNCHECKED,
    Ids,
    check_turn,
    row_status,
)

pytestmark = pytest.mark.core

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}
PROMPT = [1, 87, 85, 262, 201, 4096, 201]
GEN = [1620, 4065, 4097, 878, 77, 2]


def chunk(delta: dict[str, Any] | None, ids: list[int] | None = None, **extra: Any) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": None}
    if ids is not None:
        choice["token_ids"] = ids
    choice.update(extra.pop("choice", {}))
    return b"data: " + orjson.dumps({**HEAD, "choices": [choice], **extra}) + b"\n\n"


def vllm_body() -> bytes:
    """Thinking in `reasoning`, `</think>` a chunk with ids and no text, EOS in the last."""
    return b"".join(
        [
            chunk({"role": "assistant", "content": ""}, prompt_token_ids=PROMPT),
            chunk({"reasoning": " 978"}, [1620]),
            chunk({"reasoning": "365"}, [4065]),
            chunk({}, [4097]),  # </think>: the parser sends no text for it
            chunk({"content": " Wor"}, [878, 77]),  # two tokens in one chunk
            chunk({}, [2], choice={"finish_reason": "stop"}),
            b"data: "
            + orjson.dumps({**HEAD, "choices": [], "usage": {"prompt_tokens": 7,
                                                             "completion_tokens": 6}})
            + b"\n\n",
            b"data: [DONE]\n\n",
        ]
    )  # fmt: skip


def sglang_body() -> bytes:
    ext = {"input_ids": PROMPT, "output_ids": [GEN]}
    usage = {"prompt_tokens": 7, "completion_tokens": 6, "reasoning_tokens": 2}
    return b"".join(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning_content": " 978365"}),
            chunk({"content": " Wor"}),
            chunk({}, choice={"finish_reason": "stop"}),
            b"data: " + orjson.dumps({**HEAD, "choices": [], "sglext": ext}) + b"\n\n",
            b"data: " + orjson.dumps({**HEAD, "choices": [], "usage": usage}) + b"\n\n",
            b"data: [DONE]\n\n",
        ]
    )


def parse(body: bytes, cuts: list[int]) -> RequestRecord:
    rec = RequestRecord(id="r")
    p = StreamParser(rec, 0.0, keep_text=True, ids=Ids())
    pos = 0
    for i, cut in enumerate([*cuts, len(body)]):
        p.feed(body[pos:cut], 0.001 * (i + 1))
        pos = cut
    p.end(1.0)
    assert p.finish() is None
    return rec


@pytest.mark.parametrize("body", [vllm_body(), sglang_body()], ids=["vllm", "sglang"])
def test_ids_are_kept_exactly_at_every_read_boundary(body: bytes) -> None:
    for cut in range(1, len(body), 7):
        rec = parse(body, [cut])
        assert list(rec.prompt_token_ids) == PROMPT
        assert list(rec.token_ids) == GEN  # </think> and EOS included, in order
        assert rec.text == " Wor" and rec.reasoning == " 978365"
        assert check_turn(rec.prompt_token_ids, rec.token_ids, 7, 6, False) == (EXACT, None)


def test_no_ids_asked_none_kept_and_the_log_line_never_holds_them() -> None:
    rec = RequestRecord(id="r")
    p = StreamParser(rec, 0.0, keep_text=True)
    assert p.feed(vllm_body(), 0.1) == DONE
    p.finish()
    assert rec.token_ids is None and rec.prompt_token_ids is None
    rec.prompt_token_ids, rec.token_ids = array("i", PROMPT), array("i", GEN)
    assert b"token_ids" not in rec.to_json() and b"token_ids" not in rec.to_json(compact=True)
    assert list(rec.token_ids) == GEN  # to_dict gave them back


def test_a_server_without_ids_gives_none_and_malformed_ids_are_named() -> None:
    plain = vllm_body().replace(b',"token_ids":', b',"x":').replace(b',"prompt_token_ids"', b',"y"')
    rec = parse(plain, [])
    assert rec.token_ids is None and rec.prompt_token_ids is None
    assert check_turn(None, None, 7, 6, False) == (NONE, None)
    bad = vllm_body().replace(b"[878,77]", b'["a",77]')
    rec = parse(bad, [])
    assert rec.token_ids_error and "32-bit integers" in rec.token_ids_error


def test_a_whole_response_gives_its_ids_in_each_dialect() -> None:
    msg = {"role": "assistant", "content": "x", "reasoning_content": "y"}
    usage = {"prompt_tokens": 7, "completion_tokens": 6}
    vllm = {"choices": [{"message": msg, "finish_reason": "stop", "token_ids": GEN}],
            "prompt_token_ids": PROMPT, "usage": usage}  # fmt: skip
    sglang = {"choices": [{"message": msg, "finish_reason": "stop"}], "usage": usage,
              "sglext": {"input_ids": PROMPT, "output_ids": [GEN]}}  # fmt: skip
    for obj in (vllm, sglang):
        rec = RequestRecord(id="r")
        assert parse_whole(rec, orjson.dumps(obj), 0.0, 0.5, True, ids=Ids()) is None
        assert list(rec.prompt_token_ids) == PROMPT and list(rec.token_ids) == GEN


def test_a_turn_is_checked_against_the_servers_counts() -> None:
    p, g = array("i", PROMPT), array("i", GEN)
    assert check_turn(p, g, 7, 7, False)[0] == MISMATCH  # a chunk's ids lost
    assert "6 generated ids for 7" in (check_turn(p, g, 7, 7, False)[1] or "")
    assert check_turn(p, g, 8, 6, False)[0] == MISMATCH
    assert check_turn(None, g, 7, 6, False)[0] == MISMATCH
    assert check_turn(p, g, None, None, True)[0] == UNCHECKED  # no usage to count with
    assert row_status([EXACT, EXACT]) == EXACT
    assert row_status([EXACT, NONE]) == PARTIAL
    assert row_status([NONE]) == NONE and row_status([]) == NONE
    assert row_status([EXACT, MISMATCH, NONE]) == MISMATCH


def row() -> dict[str, Any]:
    conv = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "kept from the input"},  # --turns last: no ids
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "x", "reasoning_content": "y", "finish_reason": "stop",
         "prompt_token_ids": array("i", PROMPT), "token_ids": array("i", GEN)},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "z", "reasoning_content": "", "finish_reason": "length",
         "token_ids_error": "3 generated ids for 4 completion tokens",
         "prompt_token_ids": array("i", PROMPT), "token_ids": array("i", [5, 6, 7])},
    ]  # fmt: skip
    return orjson.loads(DataRow("q-1", conv, RowMeta(token_ids=MISMATCH)).line())


def test_the_reader_gives_each_generated_turn_as_lists_of_ints() -> None:
    turns = turn_ids(row())
    assert [t.turn for t in turns] == [3, 5]
    assert turns[0].prompt == PROMPT and turns[0].generated == GEN and turns[0].exact
    assert turns[1].generated == [5, 6, 7] and not turns[1].exact
    assert turns[1].finish_reason == "length" and "3 generated" in (turns[1].error or "")


def test_parquet_keeps_the_ids_as_int32_lists() -> None:
    pa = pytest.importorskip("pyarrow")
    r = row()
    r["meta"] = {"token_ids": MISMATCH}
    table = pa.Table.from_pylist([r], schema=parquet_schema())
    turn_type = table.schema.field("conversations").type.value_type
    assert turn_type.field("token_ids").type == pa.list_(pa.int32())
    assert turn_type.field("prompt_token_ids").type == pa.list_(pa.int32())
    back = table.to_pylist()[0]
    assert [t.generated for t in turn_ids(back)] == [GEN, [5, 6, 7]]
    assert turn_ids(back)[0].prompt == PROMPT


# A forced call as vLLM 0.32 streams it (the CPU test server, hermes parser): the
# `<tool_call>` and name tokens held back by the parser come as chunks with ids and an
# empty delta, then the head and the argument fragments each with their ids, `</tool_call>`
# ids again without a delta, the EOS id in the finishing chunk.
CALL_GEN = [30, 412, 81, 4, 93, 4, 69, 95, 95, 30, 17, 2]
CALL_ARGS = '{"city":"Paris"}'


def vllm_call_body() -> bytes:
    head = {"id": "chatcmpl-tool-1", "type": "function", "index": 0,
            "function": {"name": "get_weather"}}  # fmt: skip

    def frag(args: str) -> dict[str, Any]:
        return {"content": None, "tool_calls": [{"index": 0, "function": {"arguments": args}}]}

    usage = {"prompt_tokens": 7, "completion_tokens": len(CALL_GEN)}
    return b"".join(
        [
            chunk({"role": "assistant", "content": ""}, prompt_token_ids=PROMPT),
            chunk({}, [30]),
            chunk({}, [412, 81]),
            chunk({"content": None, "tool_calls": [head]}, [4]),
            chunk(frag('{"city":'), [93, 4]),
            chunk(frag('"Paris"'), [69]),
            chunk(frag("}"), [95]),
            chunk({}, [95, 30, 17]),
            chunk({}, [2], choice={"finish_reason": "stop"}),
            b"data: " + orjson.dumps({**HEAD, "choices": [], "usage": usage}) + b"\n\n",
            b"data: [DONE]\n\n",
        ]
    )


def sglang_call_body() -> bytes:
    """SGLang's shapes: the ids once, whole, in the sglext chunk (here framed as the named
    `sglext_ids` event SGLang sends on request), after the call's chunks."""
    head = {"id": "call_1", "index": 0, "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}  # fmt: skip
    frag = {"id": None, "index": 0, "type": "function",
            "function": {"name": None, "arguments": CALL_ARGS}}  # fmt: skip
    nulls = {"role": None, "content": None, "reasoning_content": None}
    ext = {"input_ids": PROMPT, "output_ids": [CALL_GEN]}
    usage = {"prompt_tokens": 7, "completion_tokens": len(CALL_GEN)}
    return b"".join(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({**nulls, "tool_calls": [head]}),
            chunk({**nulls, "tool_calls": [frag]}),
            chunk({}, choice={"finish_reason": "tool_calls"}),
            b"event: sglext_ids\ndata: "
            + orjson.dumps({**HEAD, "choices": [], "sglext": ext})
            + b"\n\n",
            b"data: " + orjson.dumps({**HEAD, "choices": [], "usage": usage}) + b"\n\n",
            b"data: [DONE]\n\n",
        ]
    )


@pytest.mark.parametrize("body", [vllm_call_body(), sglang_call_body()], ids=["vllm", "sglang"])
def test_a_tool_call_keeps_every_id_it_was_generated_with(body: bytes) -> None:
    for cut in range(1, len(body), 5):
        rec = parse(body, [cut])
        assert rec.tool_call_count == 1 and rec.tool_calls is not None
        assert rec.tool_calls[0]["function"] == {"name": "get_weather", "arguments": CALL_ARGS}
        assert list(rec.prompt_token_ids) == PROMPT
        assert list(rec.token_ids) == CALL_GEN  # the held-back tokens and EOS included
        counts = (rec.prompt_tokens, rec.completion_tokens, rec.tokens_estimated)
        assert check_turn(rec.prompt_token_ids, rec.token_ids, *counts) == (EXACT, None)


def test_a_whole_tool_call_reply_gives_its_ids() -> None:
    fn = {"name": "get_weather", "arguments": CALL_ARGS}
    msg = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                                "function": fn}]}  # fmt: skip
    usage = {"prompt_tokens": 7, "completion_tokens": len(CALL_GEN)}
    obj = {"choices": [{"message": msg, "finish_reason": "tool_calls", "token_ids": CALL_GEN}],
           "prompt_token_ids": PROMPT, "usage": usage}  # fmt: skip
    rec = RequestRecord(id="r")
    assert parse_whole(rec, orjson.dumps(obj), 0.0, 0.5, True, ids=Ids()) is None
    assert rec.tool_call_count == 1 and list(rec.token_ids) == CALL_GEN
    assert check_turn(rec.prompt_token_ids, rec.token_ids, 7, len(CALL_GEN), False)[0] == EXACT
