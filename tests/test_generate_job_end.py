"""`genbench generate` saying what it did: a resume that changes a setting the data set
depends on, a tool call cut by max_tokens, a job whose rows failed, a server that
refuses tools, a --limit run. Real processes against the sim on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import genbench

from genbench.sim.process import SimProcess

SIM = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "2", "--output-len", "fixed:12")
FAST = ("--retry-backoff", "0.05", "--retries", "1", "--progress-every", "1", "-c", "8")
CITY = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = [{"type": "function",
          "function": {"name": "get_weather", "description": "weather", "parameters": CITY}}]


def agentic_row(i: int, calls: int = 2) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"task {i}: the weather"}]
    for k in range(calls):
        cid = f"orig_{i}_{k}"
        fn = {"name": "get_weather", "arguments": json.dumps({"city": f"c{k}"})}
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function", "function": fn}]})  # fmt: skip
        msgs.append({"role": "tool", "tool_call_id": cid, "content": f"sunny {i}.{k}"})
    msgs.append({"role": "assistant", "content": f"the answer to task {i}"})
    return {"id": f"a{i}", "messages": msgs, "tools": TOOLS}


def plain_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"r{i}", "messages": [{"role": "user", "content": f"question {i}"}]}
            for i in range(start, start + n)]  # fmt: skip


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def gen(inp: Path, out: Path, url: str, *args: str) -> Any:
    return genbench("generate", "-i", str(inp), "-o", str(out), "--url", url, *FAST, *args,
                    timeout=180)  # fmt: skip


def data(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for p in sorted(out.glob("data*.jsonl"))
            for line in p.read_bytes().splitlines()]  # fmt: skip


def job_json(out: Path) -> dict[str, Any]:
    return orjson.loads((out / ".genbench" / "job.json").read_bytes())


# -- a resume that changes what the data set holds -----------------------------------------


def test_a_resume_with_another_tool_policy_is_refused_and_an_old_job_meant_replay(tmp_path):
    with SimProcess(*SIM, "--tool-calls", "1") as sim:
        inp = write(tmp_path / "in.jsonl", [agentic_row(i, 1) for i in range(4)])
        out = tmp_path / "out"
        assert gen(inp, out, sim.url).returncode == 0
        write(inp, [agentic_row(i, 1) for i in range(6)])
        p = gen(inp, out, sim.url, "--tool-policy", "keep")
        assert p.returncode == 2, p.stderr
        assert "--tool-policy was replay, now keep" in p.stderr
        # a job.json of before the key: replay, refused like the rest
        doc = job_json(out)
        doc.pop("tool_policy", None)
        (out / ".genbench" / "job.json").write_bytes(orjson.dumps(doc))
        p = gen(inp, out, sim.url, "--tool-policy", "keep")
        assert p.returncode == 2 and "--tool-policy was replay, now keep" in p.stderr
        p = gen(inp, out, sim.url)
        assert p.returncode == 0, p.stderr
        assert sorted(r["id"] for r in data(out)) == [f"a{i}" for i in range(6)]


def test_token_ids_are_kept_in_job_json_and_turning_them_off_is_refused(tmp_path):
    with SimProcess(*SIM, "--token-ids", "vllm") as sim:
        inp = write(tmp_path / "in.jsonl", plain_rows(3))
        out = tmp_path / "out"
        assert gen(inp, out, sim.url).returncode == 0
        assert job_json(out)["token_ids"] == "auto"
        write(inp, plain_rows(6))
        p = gen(inp, out, sim.url, "--token-ids", "off")
        assert p.returncode == 2, p.stderr
        assert "--token-ids was auto, now off" in p.stderr and "--force" in p.stderr
        assert len(data(out)) == 3  # nothing sent, nothing lost
        p = gen(inp, out, sim.url, "--token-ids", "on")  # ids kept as before: a note only
        assert p.returncode == 0, p.stderr
        assert "--token-ids was auto, now on" in p.stdout
        write(inp, plain_rows(8))
        p = gen(inp, out, sim.url, "--token-ids", "off", "--force")
        assert p.returncode == 0, p.stderr
        assert "--token-ids was on, now off (--force)" in p.stdout
        ids = {r["id"]: r["meta"]["token_ids"] for r in data(out)}
        assert {ids[f"r{i}"] for i in range(6)} == {"exact"}  # rows made before keep theirs
        assert ids["r6"] == ids["r7"] == "none"


def test_a_resume_with_other_answers_names_answers(tmp_path):
    with SimProcess(*SIM) as sim:
        inp = write(tmp_path / "in.jsonl", plain_rows(3))
        out = tmp_path / "out"
        assert gen(inp, out, sim.url, "--answers", "batch").returncode == 0
        write(inp, plain_rows(5))
        p = gen(inp, out, sim.url, "--answers", "both")
        assert p.returncode == 2, p.stderr
        assert "--answers was batch, now both" in p.stderr and "format" not in p.stderr


# -- a tool call cut by max_tokens -----------------------------------------------------------


def test_under_replay_a_call_cut_by_max_tokens_ends_the_row_unanswered(tmp_path):
    """A call is 9 tokens in the sim: max_tokens 5 cuts every one (finish length)."""
    with SimProcess(*SIM, "--tool-calls", "2", "--thinking-tokens", "0") as sim:
        inp = write(tmp_path / "in.jsonl", [agentic_row(i) for i in range(5)])
        out = tmp_path / "out"
        p = gen(inp, out, sim.url, "--max-tokens", "5")
        assert p.returncode == 0, p.stderr
        rows = data(out)
        assert len(rows) == 5
        for r in rows:
            turns = r["conversations"]
            assert turns[-1]["role"] == "assistant" and turns[-1]["tool_calls"], turns
            assert turns[-1]["finish_reason"] == "length"
            assert not any(t["role"] == "tool" for t in turns)  # no result fed to a cut call
            assert r["meta"]["tool_call_cut"] is True and r["meta"]["tool_calls"] == 1
        p = genbench("inspect", str(out), "--json", timeout=120)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout[p.stdout.index("{") :])
        assert doc["tools"]["call_cut"] == 5


# -- the end of a job whose rows failed ------------------------------------------------------


def test_a_job_whose_every_row_failed_says_why_and_exits_non_zero(tmp_path):
    fault = "http:status=400,message=no such adapter,match=question"  # not the preflight's
    with SimProcess(*SIM, "--fault", fault) as sim:
        inp = write(tmp_path / "in.jsonl", plain_rows(4))
        out = tmp_path / "out"
        p = gen(inp, out, sim.url)
    text = p.stdout + p.stderr
    assert p.returncode == 9, text  # http_status's code in the errors table
    assert "all rows done" not in text and "complete" not in text
    assert "every row failed (4 rows, none done)" in text
    assert text.count("no such adapter") == 1, text
    assert "most common failure: http_status (4 rows)" in text and "errors.jsonl" in text


def test_a_job_with_some_failed_rows_says_how_many_and_exits_zero(tmp_path):
    fault = "http:status=400,message=bad row,match=question 1"  # r1 and r10..r11
    with SimProcess(*SIM, "--fault", fault) as sim:
        inp = write(tmp_path / "in.jsonl", plain_rows(12))
        out = tmp_path / "out"
        p = gen(inp, out, sim.url)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "done, with failures: 3 rows failed, 9 done" in text
    assert "most common failure: http_status (3 rows): " in text and "all rows done" not in text


def test_a_server_that_refuses_tools_stops_the_job_before_it_starts(tmp_path):
    with SimProcess(*SIM, "--fault", "no-tools") as sim:
        rows = [*plain_rows(3), *(agentic_row(i) for i in range(3))]
        inp = write(tmp_path / "in.jsonl", rows)
        out = tmp_path / "out"
        p = gen(inp, out, sim.url)
    assert p.returncode == 9, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "refuses a request with the input's tools" in ln]
    assert len(lines) == 1 and '"auto" tool choice requires --enable-auto-tool-choice' in lines[0]
    assert not data(out) and not (out / "errors.jsonl").exists()
    assert "Traceback" not in p.stderr


def test_a_limit_run_says_how_much_it_left(tmp_path):
    with SimProcess(*SIM) as sim:
        inp = write(tmp_path / "in.jsonl", plain_rows(30))
        out = tmp_path / "out"
        p = gen(inp, out, sim.url, "--limit", "10")
        assert p.returncode == 0, p.stderr
        assert "input: 10 of 30 rows (--limit)" in p.stdout
        assert "done: the first 10 (--limit); 20 left" in p.stdout
        assert "all rows done" not in p.stdout
        runs = (out / ".genbench" / "runs.jsonl").read_bytes().splitlines()
        end = orjson.loads(runs[-1])
        assert end["event"] == "end" and end["status"] == "limit"
        p = gen(inp, out, sim.url)
        assert p.returncode == 0 and "complete: all rows done" in p.stdout, p.stdout
        assert len(data(out)) == 30


def test_one_row_is_one_row(tmp_path):
    with SimProcess(*SIM) as sim:
        inp = write(tmp_path / "in.jsonl", plain_rows(1))
        p = gen(inp, tmp_path / "out", sim.url)
    assert p.returncode == 0 and "input: 1 row\n" in p.stdout, p.stdout


def test_the_batch_shape_promises_no_token_ids_and_metrics_host_alone_is_ignored(tmp_path):
    with SimProcess(*SIM, "--token-ids", "vllm") as sim:
        inp = write(tmp_path / "in.jsonl", plain_rows(2))
        p = gen(inp, tmp_path / "b", sim.url, "--answers", "batch", "--token-ids", "on")
        assert p.returncode == 2 and "--answers both" in p.stderr, p.stderr
        p = gen(inp, tmp_path / "b", sim.url, "--answers", "batch",
                "--metrics-host", "0.0.0.0")  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert "token ids: not kept (the Batch shape" in p.stdout
        assert "rows keep the ids" not in p.stdout
        assert "--metrics-host 0.0.0.0 is ignored without --metrics-port" in p.stdout
        assert "batch errors" not in p.stdout  # nothing failed


def test_the_sims_start_line_shows_its_ids_and_calls():
    with SimProcess(*SIM, "--token-ids", "vllm", "--tool-calls", "1:3") as sim:
        assert "token-ids vllm," in sim.line and "tool-calls 1:3," in sim.line


@pytest.mark.vllm
def test_vllm_without_a_tool_parser_stops_an_agentic_job_before_it_starts(
    vllm_noparse_server, tmp_path
):
    """The parserless test server has no --enable-auto-tool-choice: vLLM's own refusal, once."""
    inp = write(tmp_path / "in.jsonl", [*plain_rows(2), agentic_row(0)])
    out = tmp_path / "out"
    p = gen(inp, out, vllm_noparse_server.url, "--max-tokens", "8")
    assert p.returncode == 9, p.stdout + p.stderr
    said = "refuses a request with the input's tools"
    (line,) = [ln for ln in p.stderr.splitlines() if said in ln]
    assert "HTTP 400" in line and "--enable-auto-tool-choice" in line, line
    assert not data(out) and "Traceback" not in p.stderr
