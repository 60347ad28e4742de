"""Thinking that arrives inline in `content`, against the reference sim over loopback HTTP.

The sim's `inline-think` fault sends the thinking in `content`, as a server started without
a reasoning parser does; `cut=N` cuts `</think>` in two chunks after N characters, and the
`split` fault cuts the byte stream at random read boundaries on top. The split must be
the sim's own (its non-streamed answer, split at the tag) at every position. (The
splitter alone, at every chunking: tests/core/test_think_split.py.)
"""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import genbench
from sim_truth import FAST, assert_answer_after_thinking, req, truths

from genbench.transport.client import Client
from genbench.transport.endpoint import Endpoint
from genbench.transport.thinking import INLINE, INLINE_OPENED, ThinkMode

CLOSE = "</think>"
CUTS = range(-1, len(CLOSE) + 1)  # -1: the tag whole in one chunk


def cut_faults(opened: int) -> list[str]:
    args = []
    for c in CUTS:
        args += ["--fault", f"inline-think:cut={c},opened={opened},count=0,match=CUT{c}x"]
    return args


@pytest.mark.parametrize("opened", [1, 0])
def test_close_tag_cut_at_every_position_is_split_right(sim_factory, opened):
    sim = sim_factory(*FAST, "--thinking-tokens", "12", *cut_faults(opened),
                      "--fault", "split:min=1,max=7")  # fmt: skip
    reqs = []
    for c in CUTS:
        r = req(40, i=c + 1)
        r.messages[0]["content"] += f" CUT{c}x"
        reqs.append(r)
    mode = ThinkMode(INLINE_OPENED if opened else INLINE)

    async def main():
        async with Client(Endpoint.parse(sim.url), "genbench-sim", keep_text=True,
                          think=mode) as client:  # fmt: skip
            return await asyncio.gather(*(client.chat(r) for r in reqs))

    recs = asyncio.run(main())
    for c, rec, want in zip(CUTS, recs, truths(sim.url, reqs), strict=True):
        raw = want["text"]  # the whole reply, tags and all, as the sim sent it
        assert raw.count(CLOSE) == 1 and raw.startswith("<think>\n") is not opened, raw
        thinking, answer = raw.removeprefix("<think>").split(CLOSE)
        assert (rec.reasoning, rec.text) == (thinking, answer), c
        assert rec.thinking_chars == len(thinking) and rec.answer_chars == len(answer)
        assert_answer_after_thinking(rec)
        # the sim's usage leaves thinking uncounted: the split shares out its tokens
        assert rec.reasoning_source == "estimate" and rec.completion_tokens == 40
        assert abs(rec.reasoning_tokens - 12) <= 1, (c, rec.reasoning_tokens, rec.chunk_kinds)


def test_without_the_mode_the_tags_stay_in_the_answer(sim_factory):
    sim = sim_factory(*FAST, "--thinking-tokens", "5", "--fault", "inline-think:opened=1")

    async def main():
        async with Client(Endpoint.parse(sim.url), "genbench-sim", keep_text=True) as c:
            return await c.chat(req(20))

    rec = asyncio.run(main())
    assert CLOSE in rec.text and rec.reasoning == "" and rec.ttft_answer == rec.ttft
    assert rec.reasoning_tokens == 5  # the sim's usage counts it (count=1)


@pytest.mark.parametrize(
    ("args", "dialect", "line"),
    [
        (("--thinking-tokens", "4"), "separate", "thinking in its own field (the server splits it"),
        (("--thinking-tokens", "4", "--fault", "inline-think"), "inline",
         "thinking inline in content, between <think> and </think>: genbench splits it"),
        (("--thinking-tokens", "4", "--fault", "inline-think:opened=1,count=0"), "inline-opened",
         "opened by the chat template and ended by </think>"),
        ((), "none", "thinking none seen"),
    ],
)  # fmt: skip
def test_check_says_where_the_thinking_arrives(sim_factory, args, dialect, line):
    sim = sim_factory(*FAST, *args)
    p = genbench("check", "--url", sim.url, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["thinking_dialect"] == dialect
    assert doc["thinking"] is (dialect != "none")
    if dialect.startswith("inline"):
        assert CLOSE not in doc["reply"] and doc["reasoning_tokens"] is not None
    p = genbench("check", "--url", sim.url)
    assert line in p.stdout, p.stdout


def run_sim(sim, out, *extra: str):
    p = genbench("run", "--url", sim.url, "--warmup", "1", "--warmup-tokens", "16", "--lengths",
                 "30", "--prompts-per-length", "3", "--skip", "sweep", "--out", str(out), *extra,
                 timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    from genbench.records import read_records

    doc = json.loads((out / "result.json").read_text())
    recs = [r for r in read_records(out / "requests.jsonl") if r.phase == "single-30"]
    return p.stdout, doc, recs


def test_run_splits_inline_thinking_and_shows_the_time_to_the_answer(sim_factory, tmp_path):
    sim = sim_factory(*FAST, "--ttft-ms", "30", "--tps", "200", "--thinking-tokens", "10",
                      "--fault", "inline-think:opened=1,count=0")  # fmt: skip
    stdout, doc, recs = run_sim(sim, tmp_path / "on")
    assert doc["thinking"] == {"dialect": "inline-opened", "tags": ["<think>", "</think>"],
                               "tokens_from": "estimate"}  # fmt: skip
    assert len(recs) == 3
    for r in recs:
        assert r.reasoning_source == "estimate" and abs(r.reasoning_tokens - 10) <= 1
        assert_answer_after_thinking(r)  # 10 thinking tokens come first
        assert r.text is None and r.reasoning is None  # kept only to count, not written
    single = next(p for p in doc["phases"] if p["name"] == "single-30")["summary"]
    assert single["ttft_answer_s"]["p50"] >= single["ttft_s"]["p50"]
    assert abs(single["thinking_tokens"] - 30) <= 3
    assert "thinking and answer" in stdout and "to answer p99" in stdout
    assert "opened by the chat template" in stdout and "estimated" in stdout

    _, doc, recs = run_sim(sim, tmp_path / "off", "--no-thinking")
    assert doc["config"]["thinking"] is False
    for r in recs:  # the template closed the block in the prompt: all of it is answer
        assert r.reasoning_tokens == 0 and r.ttft_answer == r.ttft


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_generate_writes_thinking_and_answer_apart_and_the_raw_text_on_request(
    sim_factory, tmp_path, fmt
):
    sim = sim_factory(*FAST, "--thinking-tokens", "6", "--output-len", "uniform:20:30",
                      "--fault", "inline-think:opened=1,count=0")  # fmt: skip
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "messages": [{"role": "user",
                   "content": f"question {i}"}]}) + "\n" for i in range(4)))  # fmt: skip
    rows = {}
    for keep in (False, True):
        out = tmp_path / f"out-{keep}"
        p = genbench("generate", "-i", str(src), "-o", str(out), "--url", sim.url, "--format",
                     fmt, *(["--keep-raw"] if keep else []))  # fmt: skip
        assert p.returncode == 0, p.stderr + p.stdout
        if fmt == "jsonl":
            lines = [json.loads(x) for f in out.glob("data*.jsonl") for x in f.open()]
        else:
            import pyarrow.parquet as pq

            lines = [r for f in out.glob("data*.parquet") for r in pq.read_table(f).to_pylist()]
        rows[keep] = {r["id"]: r for r in lines}
    assert len(rows[True]) == 4
    for rid, row in rows[True].items():
        turn = row["conversations"][-1]
        plain = rows[False][rid]["conversations"][-1]
        assert turn["role"] == "assistant" and CLOSE not in turn["content"]
        assert turn["reasoning_content"] and turn["content"]
        # the raw text is the model's: thinking, the tag, the answer, nothing dropped
        assert turn["raw"] == turn["reasoning_content"] + CLOSE + turn["content"]
        assert (plain["content"], plain["reasoning_content"]) == (
            turn["content"],
            turn["reasoning_content"],
        )
        assert plain.get("raw") is None
        assert abs(row["meta"]["reasoning_tokens"] - 6) <= 1
        assert row["meta"]["tokens_estimated"] is True  # the split's tokens are shared out


def test_a_plan_from_an_inline_server_sees_its_thinking(sim_factory, tmp_path):
    sim = sim_factory(*FAST, "--thinking-tokens", "10", "--output-len", "uniform:30:40",
                      "--fault", "inline-think:opened=1,count=0")  # fmt: skip
    tok = plan_tokens(sim.url, tmp_path)
    # 10 of 30-40 tokens are thinking: the share is not 0 (the split found it), near 10/35
    assert 0.2 < tok["thinking"] / tok["output"] < 0.4, tok


def plan_tokens(url: str, tmp_path) -> dict:
    """A small plan's forecast tokens (output, thinking) from a 20-request pilot."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user",
                       "content": f"item {i}"}]}) + "\n" for i in range(40)))  # fmt: skip
    p = genbench("plan", "--prompts", str(prompts), "--url", url, "--concurrency", "4",
                 "--pilot", "20", "--samples", "40", "--out", str(tmp_path / "pilot"),
                 "--bootstrap", "50", "--warmup-time", "0", "--json", timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    return json.loads(p.stdout)["rows"][0]["tokens"]
