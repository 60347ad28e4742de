"""Thinking the server sends in its own field but leaves out of `usage`, as llama.cpp does.

The sim's `uncounted-think` fault sends the thinking in `reasoning_content` as usual and
leaves `reasoning_tokens` out of its usage (`completion_tokens` still counts it). Every
command must then estimate it, say so, and use it: `check`, `run` (console and
result.json), `generate` (its end and each row's meta), `inspect`, and `plan` (from a run
and from a pilot). The sim streams one token a chunk, so the chunk estimate is exact
here; with `--dialect sglang` its `/tokenize` (a word a token) counts the text exactly
and the counts say `tokenizer`. The same against llama.cpp itself:
tests/test_llamacpp_thinking.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import genbench
from sim_truth import FAST

from genbench.records import read_records

UNCOUNTED = ("--fault", "uncounted-think")


@pytest.mark.parametrize(
    ("dialect", "source", "said"),
    [
        ("sim", "estimate", "16 tokens, 4 thinking (estimated from the text: the server did not "
         "count them)"),
        ("sglang", "tokenizer", "16 tokens, 4 thinking (counted by the server's /tokenize: its "
         "usage did not)"),
    ],
)  # fmt: skip
def test_check_counts_thinking_the_usage_left_out(sim_factory, dialect, source, said):
    sim = sim_factory(*FAST, "--thinking-tokens", "4", "--dialect", dialect, *UNCOUNTED)
    doc = json.loads(genbench("check", "--url", sim.url, "--json").stdout)
    assert doc["thinking_dialect"] == "separate"
    assert (doc["completion_tokens"], doc["reasoning_tokens"]) == (16, 4)
    assert doc["reasoning_source"] == source
    p = genbench("check", "--url", sim.url)
    assert p.returncode == 0, p.stderr
    assert said in p.stdout, p.stdout
    assert "the whole short reply was thinking" not in p.stdout


def test_check_leaves_counted_thinking_to_the_server(sim_factory):
    sim = sim_factory(*FAST, "--thinking-tokens", "4")
    doc = json.loads(genbench("check", "--url", sim.url, "--json").stdout)
    assert (doc["reasoning_tokens"], doc["reasoning_source"]) == (4, None)
    assert "4 thinking, finish" in genbench("check", "--url", sim.url).stdout


def run_sim(sim, out: Path) -> tuple[str, dict, list]:
    p = genbench("run", "--url", sim.url, "--warmup", "1", "--warmup-tokens", "16", "--lengths",
                 "30", "--prompts-per-length", "3", "--concurrency", "4", "--sweep-tokens", "30",
                 "--requests-per-slot", "4", "--out", str(out), timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    doc = json.loads((out / "result.json").read_text())
    recs = [r for r in read_records(out / "requests.jsonl") if r.phase == "single-30"]
    return p.stdout, doc, recs


@pytest.mark.parametrize(
    ("dialect", "source", "said"),
    [
        ("sim", "estimate", "its tokens estimated by chunks, one chunk a token"),
        ("sglang", "tokenizer", "its tokens counted by the server's /tokenize"),
    ],
)
def test_run_shows_and_keeps_estimated_thinking(sim_factory, tmp_path, dialect, source, said):
    sim = sim_factory(*FAST, "--thinking-tokens", "10", "--dialect", dialect, *UNCOUNTED)
    stdout, doc, recs = run_sim(sim, tmp_path / "run")
    assert doc["thinking"] == {"dialect": "separate", "tags": ["<think>", "</think>"],
                               "tokens_from": source}  # fmt: skip
    assert len(recs) == 3
    for r in recs:
        assert (r.completion_tokens, r.reasoning_tokens) == (30, 10), r.id
        assert r.reasoning_source == source, r.id
        assert r.text is None and r.reasoning is None  # kept only to count, not written
    single = next(p for p in doc["phases"] if p["name"] == "single-30")["summary"]
    assert (single["thinking_tokens"], single["answer_tokens"]) == (30, 60)
    assert "thinking and answer" in stdout and said in stdout, stdout
    estimated = "thinking and answer (token counts estimated)" in stdout
    assert estimated is (source == "estimate"), stdout
    # plan --from the run: its thinking share is the estimated one, and says so
    p = genbench("plan", "--from", str(tmp_path / "run"), "--tokens-per-sample", "300",
                 "--samples", "1000", "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    model = json.loads(p.stdout)["model"]
    assert model["thinking_share"] == pytest.approx(1 / 3)
    how = "estimated by chunks" if source == "estimate" else "counted by the server's /tokenize"
    assert how in model["thinking_share_basis"], model["thinking_share_basis"]


def write_rows(path: Path, n: int) -> None:
    path.write_text("".join(
        json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"question {i}"}]})
        + "\n" for i in range(n)
    ))  # fmt: skip


def test_generate_and_inspect_mark_the_estimate(sim_factory, tmp_path):
    sim = sim_factory(*FAST, "--thinking-tokens", "8", "--output-len", "fixed:24", *UNCOUNTED)
    write_rows(tmp_path / "in.jsonl", 6)
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(tmp_path / "in.jsonl"), "-o", str(out), "--url", sim.url,
                 "--max-tokens", "64", "--progress-every", "1")  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    # 6 rows of 24 tokens, 8 of them thinking: the chunks say it, and the end says how
    assert "tokens: 144 (48 thinking, estimated on 6 rows)" in p.stdout, p.stdout
    assert "token counts estimated: the server sent thinking without counting it" in p.stdout
    rows = [json.loads(x) for f in sorted(out.glob("data*.jsonl")) for x in f.open()]
    assert len(rows) == 6
    for row in rows:
        m = row["meta"]
        assert (m["completion_tokens"], m["reasoning_tokens"], m["answer_tokens"]) == (24, 8, 16)
        assert (m["tokens_estimated"], m["reasoning_tokens_from"]) == (True, "chunks"), row["id"]
    p = genbench("inspect", str(out))
    assert p.returncode == 0, p.stderr
    assert "33% (est.)" in p.stdout, p.stdout  # thinking p50: 8 of 24
    assert "token counts estimated on 6 rows of 6 (meta.tokens_estimated)" in p.stdout
    doc = json.loads((out / "inspect.json").read_text())
    overall = doc["distributions"]["overall"]
    assert overall["estimated_rows"] == 6
    assert overall["thinking_share"]["p50"] == pytest.approx(1 / 3)


def test_generate_counts_with_the_servers_tokenize(sim_factory, tmp_path):
    sim = sim_factory(*FAST, "--thinking-tokens", "8", "--output-len", "fixed:24",
                      "--dialect", "sglang", *UNCOUNTED)  # fmt: skip
    write_rows(tmp_path / "in.jsonl", 6)
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(tmp_path / "in.jsonl"), "-o", str(out), "--url", sim.url,
                 "--max-tokens", "64", "--progress-every", "1")  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    assert "tokens: 144 (48 thinking, counted by the server's /tokenize on 6 rows)" in p.stdout
    rows = [json.loads(x) for f in sorted(out.glob("data*.jsonl")) for x in f.open()]
    for row in rows:  # a word a token: /tokenize is exact on the sim
        m = row["meta"]
        assert (m["reasoning_tokens"], m["reasoning_tokens_from"]) == (8, "tokenizer"), row["id"]
        assert m["tokens_estimated"] is False
    recs = read_records(out / ".genbench" / "requests.jsonl")
    assert {(r.reasoning_tokens, r.reasoning_source) for r in recs} == {(8, "tokenizer")}


def test_pilot_plan_uses_and_marks_estimated_thinking(sim_factory, tmp_path):
    sim = sim_factory(*FAST, "--thinking-tokens", "8", "--output-len", "fixed:24", *UNCOUNTED)
    write_rows(tmp_path / "in.jsonl", 40)
    p = genbench("plan", "--prompts", str(tmp_path / "in.jsonl"), "--url", sim.url,
                 "--concurrency", "4", "--pilot", "12", "--samples", "40", "--bootstrap", "50",
                 "--warmup-time", "0", "--max-tokens", "64", "--out", str(tmp_path / "plan"),
                 timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    assert "(thinking 8 of it, estimated by chunks on 12 requests)" in p.stdout, p.stdout
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert doc["model"]["thinking_estimated_requests"] == 12
    assert doc["model"]["thinking_tokens"]["mean"] == 8
    tok = doc["rows"][0]["tokens"]
    assert tok["thinking"] == pytest.approx(tok["output"] / 3)


def test_pilot_plan_says_its_thinking_was_counted_by_tokenize(sim_factory, tmp_path):
    """A server with /tokenize (the sim as SGLang): the pilot's thinking is counted, and
    the plan says so as run and generate do, not a bare "thinking 8 of it"."""
    sim = sim_factory(*FAST, "--thinking-tokens", "8", "--output-len", "fixed:24",
                      "--dialect", "sglang", *UNCOUNTED)  # fmt: skip
    write_rows(tmp_path / "in.jsonl", 20)
    p = genbench("plan", "--prompts", str(tmp_path / "in.jsonl"), "--url", sim.url,
                 "--concurrency", "4", "--pilot", "8", "--samples", "40", "--bootstrap", "20",
                 "--warmup-time", "0", "--max-tokens", "64", "--out", str(tmp_path / "plan"),
                 timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    assert "(thinking 8 of it, counted by the server's /tokenize on 8 requests)" in p.stdout, (
        p.stdout)  # fmt: skip
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert doc["model"]["thinking_counted_requests"] == 8
    assert doc["model"]["thinking_estimated_requests"] == 0
    from genbench.plan.summary import forecast

    detail = dict((k, d) for k, _, d in forecast(doc).figures)["output tokens per sample"]
    assert detail.endswith("thinking 8 of it, counted by the server's /tokenize on 8 requests")
