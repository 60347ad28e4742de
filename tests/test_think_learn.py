"""The dialect learned from the replies, against the reference sim over loopback HTTP.

A reasoning model whose chat template opens `<think>` in the prompt, on a server with no
reasoning parser and no messages-aware /tokenize (SGLang, llama.cpp, TGI), thinks longer
than check's 16-token reply: check sees no `</think>` and says `none`. The sim plays it
with `--thinking-tokens 40 --fault inline-think:opened=1,count=0` (no `<think>` sent,
usage leaves the thinking uncounted, no /tokenize). The first reply that shows `</think>`
is read again as thinking up to the tag, and the run's later requests are split as they
stream. (The watching splitter at every chunking: tests/core/test_think_learn.py.)
"""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import genbench
from sim_truth import FAST, assert_answer_after_thinking, req, truths
from test_think import plan_tokens

from genbench.records import read_records
from genbench.transport.client import Client
from genbench.transport.endpoint import Endpoint
from genbench.transport.thinking import INLINE, INLINE_OPENED, NONE, ThinkMode, ThinkState

CLOSE = "</think>"
CUTS = range(-1, len(CLOSE) + 1)  # -1: the tag whole in one chunk
LONG = ("--thinking-tokens", "40", "--fault", "inline-think:opened=1,count=0")
LEARNED = "(seen in the replies; check's short reply did not show it)"


def test_check_cannot_tell_from_its_short_reply(sim_factory):
    sim = sim_factory(*FAST, *LONG)
    doc = json.loads(genbench("check", "--url", sim.url, "--json").stdout)
    assert doc["thinking_dialect"] == NONE and CLOSE not in doc["reply"]


@pytest.mark.parametrize("opened", [1, 0])
def test_a_reply_read_again_is_split_right_at_every_cut_of_the_tag(sim_factory, opened):
    sim = sim_factory(*FAST, "--thinking-tokens", "12", "--fault", "split:min=1,max=7",
                      *(a for c in CUTS for a in ("--fault", f"inline-think:cut={c},"
                        f"opened={opened},count=0,match=CUT{c}x")))  # fmt: skip
    reqs = []
    for c in CUTS:
        r = req(40, i=c + 1)
        r.messages[0]["content"] += f" CUT{c}x"
        reqs.append(r)

    async def one(r, state):  # a state of its own each: every reply is read again
        async with Client(Endpoint.parse(sim.url), "genbench-sim", keep_text=True,
                          think=state, keep_raw=True) as client:  # fmt: skip
            return await client.chat(r)

    async def main():
        states = [ThinkState(ThinkMode(NONE)) for _ in reqs]
        recs = await asyncio.gather(*(one(r, s) for r, s in zip(reqs, states, strict=True)))
        return recs, states

    recs, states = asyncio.run(main())
    for c, rec, state, want in zip(CUTS, recs, states, truths(sim.url, reqs), strict=True):
        raw = want["text"]
        thinking, answer = raw.removeprefix("<think>").split(CLOSE)
        assert (rec.reasoning, rec.text, rec.raw) == (thinking, answer, raw), c
        assert rec.thinking_chars == len(thinking) and rec.answer_chars == len(answer)
        assert_answer_after_thinking(rec)
        assert rec.reasoning_source == "estimate" and abs(rec.reasoning_tokens - 12) <= 1, c
        assert state.mode.dialect == (INLINE_OPENED if opened else INLINE)
        assert state.learned_from == rec.id


def run(sim, out, *extra: str):
    p = genbench("run", "--url", sim.url, "--out", str(out), *extra, timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    doc = json.loads((out / "result.json").read_text())
    return p.stdout, doc, list(read_records(out / "requests.jsonl"))


def test_run_quick_learns_it_from_the_warm_up(sim_factory, tmp_path):
    sim = sim_factory(*FAST, *LONG)
    stdout, doc, recs = run(sim, tmp_path / "q", "--quick")
    assert doc["target"]["check"]["thinking_dialect"] == NONE
    assert doc["thinking"] == {"dialect": INLINE_OPENED, "tags": ["<think>", CLOSE],
                               "tokens_from": "estimate", "learned": True,
                               "learned_from": "warmup-0"}  # fmt: skip
    measured = [r for r in recs if r.phase != "warmup"]
    assert measured and all(r.ok for r in measured)
    for r in measured:  # split as they streamed: 40 thinking tokens, the answer after
        assert r.reasoning_source == "estimate" and abs(r.reasoning_tokens - 40) <= 1, r.id
        assert_answer_after_thinking(r)
    for p in doc["phases"]:
        if p["kind"] != "warmup":  # each p50 the median of its records' (one read: equal)
            s = p["summary"]
            assert s["thinking_tokens"] > 0 and s["ttft_answer_s"]["p50"] >= s["ttft_s"]["p50"]
    assert "opened by the chat template" in stdout and LEARNED in stdout


def test_run_without_warm_up_learns_it_from_its_first_reply(sim_factory, tmp_path):
    sim = sim_factory(*FAST, *LONG)
    _, doc, recs = run(sim, tmp_path / "w", "--warmup", "0", "--lengths", "80",
                       "--prompts-per-length", "3", "--skip", "sweep")  # fmt: skip
    first = recs[0]
    assert doc["thinking"]["learned_from"] == first.id and first.phase == "single-80"
    assert len(recs) == 3
    for r in recs:  # the first read again, the others split as they came: the same
        assert r.reasoning_source == "estimate" and abs(r.reasoning_tokens - 40) <= 1, r.id
        assert_answer_after_thinking(r)
        assert r.chunk_kinds.count("r") == 40, r.id


def test_on_sglang_the_learned_thinking_is_counted_by_its_tokenize(sim_factory, tmp_path):
    """SGLang's /tokenize takes text only: check cannot read the template, but run's count
    of the thinking split in each phase takes the learned replies."""
    sim = sim_factory(*FAST, *LONG, "--dialect", "sglang")
    _, doc, recs = run(sim, tmp_path / "s", "--warmup", "0", "--lengths", "80",
                       "--prompts-per-length", "2", "--skip", "sweep")  # fmt: skip
    assert doc["target"]["check"]["thinking_dialect"] == NONE
    assert doc["thinking"]["tokens_from"] == "tokenizer" and doc["thinking"]["learned"] is True
    assert len(recs) == 2
    for r in recs:  # the first read again, the second split as it came: both counted
        assert (r.reasoning_source, r.reasoning_tokens) == ("tokenizer", 40), r.id


def test_once_learned_a_reply_cut_inside_its_thought_is_thinking(sim_factory, tmp_path):
    sim = sim_factory(*FAST, *LONG)  # the warm-up (64 tokens) closes its 40-token thought
    _, doc, recs = run(sim, tmp_path / "c", "--lengths", "30", "--prompts-per-length", "2",
                       "--skip", "sweep")  # fmt: skip
    assert doc["thinking"]["learned_from"] == "warmup-0"
    measured = [r for r in recs if r.phase == "single-30"]
    assert len(measured) == 2
    for r in measured:  # 30 of 40 thinking tokens, no </think>: all thinking, no answer yet
        assert r.finish_reason == "length" and r.ttft_answer is None
        assert r.reasoning_tokens == 30 and set(r.chunk_kinds) == {"r"}


def test_a_model_that_never_closes_its_thought_stays_none(sim_factory, tmp_path):
    sim = sim_factory(*FAST, "--thinking-tokens", "500", "--fault",
                      "inline-think:opened=1,count=0")  # fmt: skip
    stdout, doc, recs = run(sim, tmp_path / "n", "--warmup-tokens", "16", "--lengths", "30",
                            "--prompts-per-length", "2", "--concurrency", "2",
                            "--shape", "burst", "--sweep-tokens", "30")  # fmt: skip
    assert doc["thinking"] == {"dialect": NONE, "tags": ["<think>", CLOSE], "tokens_from": None}
    assert recs and all(r.finish_reason == "length" for r in recs)
    for r in recs:  # nothing invented: all of it answer, as it came
        assert r.reasoning_tokens is None and r.reasoning_source is None
        assert r.ttft_answer == r.ttft and "r" not in r.chunk_kinds
    assert LEARNED not in stdout


def test_think_dialect_says_what_no_reply_shows(sim_factory, tmp_path):
    """The same never-closing model, told by the user: check and run split it as
    template-opened thinking, though no reply ever shows </think>."""
    sim = sim_factory(*FAST, "--thinking-tokens", "500", "--fault",
                      "inline-think:opened=1,count=0")  # fmt: skip
    p = genbench("check", "--url", sim.url, "--think-dialect", "inline-opened")
    assert p.returncode == 0, p.stderr
    assert "16 thinking" in p.stdout
    assert "opened by the chat template and ended by </think>" in p.stdout
    assert "(set by --think-dialect)" in p.stdout
    stdout, doc, recs = run(sim, tmp_path / "f", "--think-dialect", "inline-opened",
                            "--warmup-tokens", "16", "--lengths", "30",
                            "--prompts-per-length", "2", "--skip", "sweep")  # fmt: skip
    assert doc["thinking"]["dialect"] == INLINE_OPENED and not doc["thinking"].get("learned")
    measured = [r for r in recs if r.phase == "single-30"]
    assert len(measured) == 2
    for r in measured:
        assert r.reasoning_tokens == 30 and set(r.chunk_kinds) == {"r"}


def test_think_dialect_none_learns_nothing(sim_factory, tmp_path):
    sim = sim_factory(*FAST, *LONG)  # the warm-up closes its thought: auto would learn
    _, doc, recs = run(sim, tmp_path / "n", "--think-dialect", "none", "--lengths", "30",
                       "--prompts-per-length", "2", "--skip", "sweep")  # fmt: skip
    assert doc["thinking"]["dialect"] == NONE and not doc["thinking"].get("learned")
    assert recs and all("r" not in r.chunk_kinds for r in recs)


def test_a_bad_think_dialect_is_a_one_line_usage_error(sim_factory):
    sim = sim_factory(*FAST)
    p = genbench("check", "--url", sim.url, "--think-dialect", "inline-closed")
    assert p.returncode == 2 and "--think-dialect 'inline-closed'" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_generate_writes_the_thinking_apart_in_every_row(sim_factory, tmp_path, fmt):
    sim = sim_factory(*FAST, *LONG, "--output-len", "uniform:60:80")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "messages": [{"role": "user",
                   "content": f"question {i}"}]}) + "\n" for i in range(12)))  # fmt: skip
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(src), "-o", str(out), "--url", sim.url, "--format", fmt,
                 "--keep-raw", "--concurrency", "4")  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    if fmt == "jsonl":
        rows = [json.loads(x) for f in out.glob("data*.jsonl") for x in f.open()]
    else:
        import pyarrow.parquet as pq

        rows = [r for f in out.glob("data*.parquet") for r in pq.read_table(f).to_pylist()]
    assert len(rows) == 12
    for row in rows:  # every reply showed </think>: each row is split, learned or read again
        turn = row["conversations"][-1]
        assert turn["reasoning_content"] and turn["content"] and CLOSE not in turn["content"]
        assert turn["raw"] == turn["reasoning_content"] + CLOSE + turn["content"]
        assert abs(row["meta"]["reasoning_tokens"] - 40) <= 1
    assert "opened by the chat template" in p.stdout and LEARNED in p.stdout


def test_a_plan_pilot_learns_it_too(sim_factory, tmp_path):
    sim = sim_factory(*FAST, *LONG, "--output-len", "uniform:60:80")
    tok = plan_tokens(sim.url, tmp_path)
    # 40 of 60-80 tokens are thinking: check said none, the pilot's replies showed it
    assert 0.45 < tok["thinking"] / tok["output"] < 0.7, tok
