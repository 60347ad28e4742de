"""Tool calls against the real engine: vLLM (CPU) with `tool_choice` naming a function.
The call's turn is a generated turn like the answer's: vLLM's token ids come with it.
vLLM 0.32 wants a tool parser set for it (the fixture starts one, hermes); its structured
output then holds even the test's random-weight model to a `strict` function's schema,
and a logit bias against the whitespace tokens keeps it from wandering in blanks between
JSON tokens, so the call it writes is valid and short. The call arrives in
vLLM's own `delta.tool_calls` shape, is kept as vLLM sent it, the row's cached result is
fed back, and the final answer is generated; the request log shows every request."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import orjson
import pytest
from conftest import genbench
from fixtures_vllm import REPO

from genbench.records import RequestRecord, read_records
from genbench.rows import turn_ids
from genbench.transport.stream import StreamParser

pytestmark = pytest.mark.vllm

CITY = {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}  # a short, sure argument
SCHEMA = {"type": "object", "properties": {"city": CITY}, "required": ["city"],
          "additionalProperties": False}  # fmt: skip
FN = {"name": "get_weather", "description": "The weather in a city", "strict": True,
      "parameters": SCHEMA}  # fmt: skip
TOOLS = [{"type": "function", "function": FN}]
FORCE = {"type": "function", "function": {"name": "get_weather"}}


def no_blanks() -> dict[str, int]:
    """A logit bias against every token that is whitespace only (the model's tokenizer)."""
    model = Path(os.environ.get("GENBENCH_VLLM_MODEL", REPO / ".cache" / "vllm-model"))
    vocab = orjson.loads((model / "tokenizer.json").read_bytes())["model"]["vocab"]
    return {str(i): -100 for s, i in vocab.items() if s and all(c in "ĠĊĉčĀ " for c in s)}


def row(i: int) -> dict:
    return {
        "id": f"v{i}",
        "messages": [
            {"role": "system", "content": "Answer with the tools."},
            {"role": "user", "content": f"What is the weather in city number {i}?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": f"o{i}", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},  # fmt: skip
            {"role": "tool", "tool_call_id": f"o{i}", "content": f"sunny, {10 + i} C"},
            {"role": "assistant", "content": "It is sunny."},
        ],
        "tools": TOOLS,
        "tool_choice": FORCE,
    }


def test_vllm_streams_a_forced_call_in_its_own_shape_and_the_parser_joins_it(vllm_tools_server):
    body = {
        "model": vllm_tools_server.model, "messages": row(0)["messages"][:2], "tools": TOOLS,
        "tool_choice": FORCE, "max_tokens": 200, "stream": True, "temperature": 0,
        "logit_bias": no_blanks(),
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"enable_thinking": False},
    }  # fmt: skip
    raw = httpx.post(f"{vllm_tools_server.url}/chat/completions", json=body, timeout=120).content
    parts = [
        d["tool_calls"]
        for line in raw.split(b"\n")
        if line.startswith(b"data: {")
        for c in orjson.loads(line[6:]).get("choices") or ()
        if (d := c.get("delta") or {}).get("tool_calls")
    ]
    assert parts, raw[-2000:]
    head = parts[0][0]
    assert head["id"] and head["type"] == "function"
    assert head["function"]["name"] == "get_weather"
    args = "".join(p[0]["function"].get("arguments") or "" for p in parts)
    assert json.loads(args)["city"] in CITY["enum"]
    rec = RequestRecord(id="x")
    p = StreamParser(rec, 0.0, keep_text=True)
    for k in range(0, len(raw), 7):  # read boundaries anywhere
        p.feed(raw[k : k + 7], 0.001 * k)
    assert p.finish() is None, rec
    fn = {"name": "get_weather", "arguments": args}
    assert rec.tool_calls == [{"id": head["id"], "type": "function", "function": fn}]
    assert rec.tool_call_count == 1 and rec.completion_tokens


def _sent(conv: list[dict]) -> list[dict]:
    """The messages a turn was sent, as a request carries them (no earlier thinking)."""
    keep = ("role", "content", "tool_calls", "tool_call_id", "name")
    return [{k: m[k] for k in keep if k in m} for m in conv]


def test_vllm_tool_call_turn_keeps_the_ids_vllm_generated_and_export_writes_it(
    vllm_tools_server, tmp_path
):
    """With `--token-ids on`, the forced call's turn keeps vLLM's own ids: the ids the tool
    parser held back (`<tool_call>`, the name's JSON, `</tool_call>`) and EOS with the ones
    it streamed as the call. vLLM says so itself: its /detokenize of the kept ids is the
    Hermes block whose JSON is the call the parser gave (the raw arguments inside it), then
    EOS; its /tokenize of the messages the turn was sent, with the tools, is the kept prompt.
    A chunk's ids lost or out of order fail the one, another turn's prompt the other. The
    call turn is then one sample of `genbench export`: its prompt ids and generated ids."""
    server = vllm_tools_server
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"".join(orjson.dumps(row(i)) + b"\n" for i in range(2)))
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(inp), "--out", str(out), "--url", server.url,
                 "--max-tokens", "200", "--no-thinking", "--temperature", "0", "-c", "2",
                 "--token-ids", "on", "--param", "logit_bias=" + json.dumps(no_blanks()),
                 timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [orjson.loads(line) for f in out.glob("data*.jsonl") for line in f.read_bytes().split(b"\n") if line]  # noqa: E501
    assert len(rows) == 2
    samples = {}
    for r in rows:
        conv = r["conversations"]
        got = turn_ids(r)
        assert [t.turn for t in got] == [2, 4], r["id"]  # the call's turn and the answer's
        call, answer = got
        assert call.exact and answer.exact and r["meta"]["token_ids"] == "exact", r["meta"]
        (c,) = conv[2]["tool_calls"]
        text = httpx.post(f"{server.root}/detokenize", timeout=60, json={
            "model": server.model, "tokens": call.generated}).json()["prompt"]  # fmt: skip
        assert text.startswith("<tool_call>") and text.endswith("</tool_call><|im_end|>"), text
        block = text[len("<tool_call>") : -len("</tool_call><|im_end|>")]
        assert c["function"]["arguments"] in block, (block, c)
        args = json.loads(c["function"]["arguments"])
        assert json.loads(block) == {"name": "get_weather", "arguments": args}
        for t in got:
            tok = httpx.post(f"{server.root}/tokenize", timeout=60, json={
                "model": server.model, "messages": _sent(conv[: t.turn]), "tools": TOOLS,
                "add_generation_prompt": True,
                "chat_template_kwargs": {"enable_thinking": False}}).json()  # fmt: skip
            assert tok["tokens"] == t.prompt, (r["id"], t.turn)
        samples[f"{r['id']}#2"] = (call.prompt, call.generated)
    x = tmp_path / "x.jsonl"
    p = genbench("export", str(out), "-o", str(x), "--format", "speculators", timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [orjson.loads(line) for line in x.read_bytes().splitlines()]
    written = {s["id"]: s for s in lines}
    for sid, (prompt, gen) in samples.items():  # the answers, cut at max_tokens, left out
        s = written[sid]
        assert s["input_ids"] == prompt + gen and s["metadata"]["finish_reason"] == "stop"
        assert s["loss_mask"] == [0] * len(prompt) + [1] * len(gen)


def test_vllm_regenerates_an_agentic_file_call_result_and_answer(vllm_tools_server, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"".join(orjson.dumps(row(i)) + b"\n" for i in range(3)))
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(inp), "--out", str(out), "--url", vllm_tools_server.url,
                 "--max-tokens", "200", "--no-thinking", "--temperature", "0", "-c", "3",
                 "--param", "logit_bias=" + json.dumps(no_blanks()), timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [orjson.loads(line) for f in out.glob("data*.jsonl") for line in f.read_bytes().split(b"\n") if line]  # noqa: E501
    assert sorted(r["id"] for r in rows) == ["v0", "v1", "v2"]
    recs = read_records(out / ".genbench" / "requests.jsonl")
    for r in rows:
        i = int(r["id"][1:])
        conv = r["conversations"]
        assert [t["role"] for t in conv] == ["system", "user", "assistant", "tool", "assistant"]
        (c,) = conv[2]["tool_calls"]  # the call, as vLLM sent it
        assert c["function"]["name"] == "get_weather" and c["id"] != f"o{i}"
        assert json.loads(c["function"]["arguments"])["city"] in CITY["enum"]
        assert conv[3] == {"role": "tool", "tool_call_id": c["id"], "content": f"sunny, {10 + i} C"}
        assert not conv[4].get("tool_calls")  # the final answer, in text
        assert r["meta"]["tool_calls"] == 1 and r["meta"]["turns"] == 2
        mine = [x for x in recs if x.id == r["id"]]
        assert len(mine) == 2 and all(x.ok for x in mine)  # the call's request and the answer's
        assert [x.tool_call_count for x in mine] == [1, 0]
        # one training sample per generated turn, the call's too: vLLM's own ids beside it
        samples = turn_ids(r)
        assert [s.turn for s in samples] == [2, 4], r["meta"]
        assert samples[0].generated and len(samples[0].generated) == mine[0].completion_tokens
        assert r["meta"]["token_ids"] == "exact", (r["meta"], samples)
