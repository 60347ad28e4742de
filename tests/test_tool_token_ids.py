"""Token ids of agentic rows on the sim, in each engine's dialect: a tool-call turn is a
generated turn like an answer, so it keeps the ids the server generated it with, and
`genbench export` writes it as a training sample of its own (one sample per generated
turn: each call and the final answer).

The sim's ids are deterministic (genbench.sim.ids): a call's tokens are its thinking's
words, the call's head (99), then its argument fragments (`{"<parameter>": "`, the
argument's words, `"}`), each its word's id. So each turn's ids are checked against the
turn as the row keeps it (its thinking, its call's arguments, its text) and the
conversation sent before it: a call's ids lost, a call's ids on the answer, a prompt
from another turn, each fails here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import genbench

from genbench.rows import turn_ids
from genbench.sim.ids import prompt_ids, word_id

# 8 thinking tokens: a call is 17 tokens, an answer 28 to 48, none short or cut
SIM = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "2", "--thinking-tokens", "8",
       "--output-len", "uniform:20:40", "--tool-calls", "1:3")  # fmt: skip
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {param: {"type": "string"}}}}}
    for name, param in (("get_weather", "city"), ("search", "query"))
]  # fmt: skip
N = 12
HEAD = 99  # the sim's id of a call's head token


def agentic_row(i: int) -> dict[str, Any]:
    """System, tools, user, three calls each with its result, an answer: enough cached
    results for every call the sim makes (1 to 3)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": f"task {i}: look it up"},
    ]
    for k in range(3):
        cid = f"orig_{i}_{k}"
        fn = {"name": "search", "arguments": json.dumps({"query": f"q{k}"})}
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function", "function": fn}]})  # fmt: skip
        msgs.append({"role": "tool", "tool_call_id": cid, "content": f"result {i} {k}"})
    msgs.append({"role": "assistant", "content": f"the answer to task {i}"})
    return {"id": f"a{i}", "messages": msgs, "tools": TOOLS}


def expected_ids(turn: dict[str, Any]) -> list[int]:
    """The sim's ids for a turn as the row keeps it: a call's from its arguments."""
    thought = [word_id(w) for w in (turn.get("reasoning_content") or "").split()]
    calls = turn.get("tool_calls")
    if not calls:
        return thought + [word_id(w) for w in (turn.get("content") or "").split()]
    (c,) = calls
    ((param, value),) = json.loads(c["function"]["arguments"]).items()
    frags = ['{"' + param + '": "', *value.split(), '"}']
    return [*thought, HEAD, *map(word_id, frags)]


def sent(conv: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"role": m["role"], "content": m.get("content")} for m in conv]


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_every_call_and_answer_is_a_token_exact_sample(sim_factory, tmp_path: Path, dialect):
    extra = ("--dialect", "sglang") if dialect == "sglang" else ()
    sim = sim_factory(*SIM, "--token-ids", dialect, *extra)
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"".join(orjson.dumps(agentic_row(i)) + b"\n" for i in range(N)))
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(inp), "--out", str(out), "--url", sim.url, "-c", "4",
                 "--max-tokens", "64", "--token-ids", "on", timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [orjson.loads(line) for f in sorted(out.glob("data*.jsonl"))
            for line in f.read_bytes().splitlines()]  # fmt: skip
    assert sorted(r["id"] for r in rows) == sorted(f"a{i}" for i in range(N))
    samples: dict[str, list[int]] = {}
    made = []
    for r in rows:
        meta, conv = r["meta"], r["conversations"]
        assert meta["token_ids"] == "exact", (r["id"], meta)
        got = turn_ids(r)
        calls = [t for t in got if conv[t.turn].get("tool_calls")]
        assert len(calls) == meta["tool_call_turns"] >= 1 and len(got) == len(calls) + 1
        assert conv[got[-1].turn]["finish_reason"] == "stop"  # the answer, after the calls
        made.append(len(calls))
        for t in got:
            turn = conv[t.turn]
            assert t.exact and turn.get("token_ids_error") is None, (r["id"], t.turn)
            assert t.generated == expected_ids(turn), (r["id"], t.turn)  # id for id
            assert t.prompt == prompt_ids(sent(conv[: t.turn])), (r["id"], t.turn)
            samples[f"{r['id']}#{t.turn}"] = t.prompt + t.generated
        assert sum(len(t.generated or ()) for t in got) == meta["completion_tokens"]
        thought = sum(len(conv[t.turn]["reasoning_content"].split()) for t in calls)
        assert sum(len(t.generated or ()) for t in calls) - thought == meta["tool_call_tokens"]
    assert set(made) == {1, 2, 3}, made  # the sim's 1:3, each seen

    x = tmp_path / "x.jsonl"
    p = genbench("export", str(out), "-o", str(x), timeout=120)  # the default rules
    assert p.returncode == 0, p.stderr[-3000:]
    lines = [orjson.loads(line) for line in x.read_bytes().splitlines()]
    assert {s["id"]: s["input_ids"] for s in lines} == samples  # one per call and per answer
    assert len(lines) == len(samples) == sum(made) + N
    summary = orjson.loads(x.with_name(x.name + ".export.json").read_bytes())
    assert summary["turns_written"] == len(samples) and summary["left_out"] == {
        "no_ids": 0, "mismatch": 0, "cut": 0, "short": 0}  # fmt: skip
