"""OpenAI Batch API files as a job's input, and its answers in the Batch output shape.

What must hold: a Batch request file runs as any input does (its `custom_id` the row's
id, its `body` the request), survives an interrupt like every job, and its output in
Batch shape holds every `custom_id` exactly once; a bad line is named by file, line and
field in the Batch line's own terms.
"""

from __future__ import annotations

import json
import shlex
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import genbench
from test_generate import SIM, cli, data_rows, gen, line_count, popen, wait_for

from genbench.generate.input.batch import batch_row, field_name
from genbench.generate.input.linekey import fast_id
from genbench.generate.input.reader import scan
from genbench.generate.store.layout import BATCH_OUTPUT
from genbench.sim.process import SimProcess

FAST = ("--retry-backoff", "0.05", "--progress-every", "1")


@pytest.fixture(scope="module")
def sim() -> Any:
    with SimProcess(*SIM, "--thinking-tokens", "5") as p:
        yield p


def batch_lines(n: int, **body: Any) -> list[dict[str, Any]]:
    return [
        {"custom_id": f"task-{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": "gpt-4o-mini", "messages": [
             {"role": "system", "content": "You are terse."},
             {"role": "user", "content": f"question number {i}"}], **body}}
        for i in range(n)
    ]  # fmt: skip


def write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def batch_output(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    assert not raw or raw.endswith(b"\n"), f"{path.name} ends with a torn line"
    return [orjson.loads(line) for line in raw.splitlines()]


def assert_batch_shape(lines: list[dict[str, Any]], ids: list[str]) -> None:
    counts = Counter(x["custom_id"] for x in lines)
    assert {k: v for k, v in counts.items() if v > 1} == {}, "a custom_id written twice"
    assert sorted(counts) == sorted(ids)
    for x in lines:
        assert set(x) == {"id", "custom_id", "response", "error"}
        assert x["error"] is None and x["response"]["status_code"] == 200
        body = x["response"]["body"]
        assert body["object"] == "chat.completion"
        msg = body["choices"][0]["message"]
        assert msg["role"] == "assistant" and msg["content"]
        assert body["usage"]["completion_tokens"] > 0
        assert body["usage"]["total_tokens"] == (
            body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
        )


def test_a_batch_file_killed_then_resumed_holds_every_custom_id_once(sim, tmp_path):
    inp, out = tmp_path / "batch.jsonl", tmp_path / "out"
    n = 1000
    write_lines(inp, batch_lines(n, temperature=0.7))
    args = ("-i", str(inp), "-o", str(out), "--url", sim.url, "-c", "8", "--answers", "batch")
    proc = popen(tmp_path, *args, *FAST)
    try:
        wait_for(lambda: line_count(out) >= 100, 60, "100 rows written")
    finally:
        proc.kill()
        proc.wait()
    assert line_count(out) < n, "the job finished before it could be killed"
    p = gen(inp, out, "--url", sim.url, "-c", "8", "--answers", "batch", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "resuming" in p.stdout
    lines = data_rows(out)  # the data files themselves are in Batch shape
    assert_batch_shape(lines, [f"task-{i}" for i in range(n)])
    # more lines, answered in conversations: refused, a data file holds one shape
    write_lines(inp, batch_lines(n + 1, temperature=0.7))
    p = gen(inp, out, "--url", sim.url, "--answers", "conversations")
    assert p.returncode != 0
    assert "different settings (--answers was batch, now conversations)" in p.stderr


def test_both_an_interrupted_run_writes_what_is_done_and_the_rerun_the_rest(sim, tmp_path):
    inp, out = tmp_path / "batch.jsonl", tmp_path / "out"
    n = 1000
    write_lines(inp, batch_lines(n))
    args = ("-i", str(inp), "-o", str(out), "--url", sim.url, "-c", "4", "--answers", "both")
    proc = popen(tmp_path, *args, *FAST)
    wait_for(lambda: line_count(out) >= 100, 60, "100 rows written")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 130
    done = [r["id"] for r in data_rows(out)]
    assert 100 <= len(done) < n
    first = batch_output(out / BATCH_OUTPUT)  # written at the end of the interrupted run
    assert sorted(x["custom_id"] for x in first) == sorted(done)
    p = gen(inp, out, "--url", sim.url, "-c", "8", "--answers", "both", timeout=120)
    assert p.returncode == 0, p.stderr
    rows = data_rows(out)
    assert all("conversations" in r for r in rows)  # beside, not instead
    assert_batch_shape(batch_output(out / BATCH_OUTPUT), [f"task-{i}" for i in range(n)])
    turn = rows[0]["conversations"]
    assert [t["role"] for t in turn] == ["system", "user", "assistant"]


def test_a_library_caller_of_the_job_gets_its_batch_output(sim, tmp_path):
    """The Batch output is the job's to leave, not the command line's: a program that runs
    `Job` itself finds it, and hears it named."""
    import asyncio

    from test_generate import prompts, write_rows

    from genbench.generate.job import Job
    from genbench.generate.jobconfig import JobConfig
    from genbench.generate.outcome import Listener
    from genbench.generate.servers import ServerSpec

    notes: list[str] = []

    class Notes(Listener):
        def note(self, text: str, style: str = "") -> None:
            notes.append(text)

    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(6))
    cfg = JobConfig(inp, out, [ServerSpec(sim.url, 4)], retry_backoff=0.05, answers="both")
    result = asyncio.run(Job(cfg, Notes()).run(handle_signals=False))
    assert result.status == "complete", result
    assert len(batch_output(out / BATCH_OUTPUT)) == 6
    assert f"batch output: {out / BATCH_OUTPUT} (6 lines)" in notes, notes


def test_the_body_is_the_request_its_max_tokens_included(sim, tmp_path):
    inp, out = tmp_path / "batch.jsonl", tmp_path / "out"
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    write_lines(inp, batch_lines(5, max_tokens=7, tools=tools, tool_choice="none"))
    p = gen(inp, out, "--url", sim.url, "--answers", "both")
    assert p.returncode == 0, p.stderr
    for x in batch_output(out / BATCH_OUTPUT):
        body = x["response"]["body"]
        assert body["usage"]["completion_tokens"] <= 7
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["model"] == "genbench-sim"  # the job's model, not the body's


@pytest.mark.parametrize(
    "line, expect",
    [
        ({"custom_id": 7, "body": {"messages": []}},
         "line 2: field 'custom_id': expected non-empty text"),
        ({"custom_id": "a", "url": "/v1/embeddings", "body": {}},
         "line 2: field 'url': genbench sends chat completions"),
        ({"custom_id": "a", "method": "GET", "body": {}}, "line 2: field 'method': expected POST"),
        ({"custom_id": "a"}, "line 2: field 'body': expected the request object, got nothing"),
        ({"custom_id": "a", "body": {"messages": [{"role": "robot", "content": "x"}]}},
         "line 2: field 'body.messages[0].role': role 'robot'"),
        ({"custom_id": "a", "body": {"messages": [{"role": "user", "content": "x"}],
                                     "temperature": -1}},
         "line 2: field 'body.temperature': expected a number >= 0"),
        ({"custom_id": "a", "body": {"messages": [{"role": "user", "content": "x"}], "n": 3}},
         "line 2: field 'body.n': one answer per line"),
        ({"custom_id": "task-0", "body": {"messages": [{"role": "user", "content": "x"}]}},
         "line 2: field 'custom_id': duplicate id 'task-0' as line 1"),
    ],
)  # fmt: skip
def test_a_bad_batch_line_is_named_by_file_line_and_field(capsys, tmp_path, line, expect):
    inp = tmp_path / "batch.jsonl"
    write_lines(inp, [*batch_lines(1), line])
    code, _, err = cli(capsys, "generate", "-i", str(inp), "-o", str(tmp_path / "o"), "--url",
                       "http://127.0.0.1:9/v1")  # fmt: skip
    assert code == 2, err
    assert f"{inp}, {expect}" in err, err
    assert "Traceback" not in err


def test_body_fields_become_the_rows_params_and_the_fast_path_knows_custom_ids(tmp_path):
    line = batch_lines(1, temperature=0.2, tools=[{"type": "function", "function": {
        "name": "f", "parameters": {}}}], tool_choice="auto", stream=True)[0]  # fmt: skip
    row = batch_row(line)
    assert row["id"] == "task-0"
    assert row["params"] == {"temperature": 0.2, "tools": line["body"]["tools"],
                             "tool_choice": "auto"}  # fmt: skip
    assert field_name("messages[1].content") == "body.messages[1].content"
    assert field_name("params.top_p") == "body.top_p" and field_name("id") == "custom_id"
    assert fast_id(orjson.dumps(line)) == "task-0"
    inp = tmp_path / "b.jsonl"
    write_lines(inp, batch_lines(3))
    res = scan(inp, done={"task-1"})
    assert res.rows == 3 and res.done == 1 and res.todo == {"task-0", "task-2"}


def test_failed_lines_come_back_in_batch_shape_too(sim, tmp_path):
    inp = tmp_path / "batch.jsonl"
    lines = batch_lines(4)
    for x in lines[2:]:
        x["body"]["max_tokens"] = 10**6  # past the sim's context: a 400, not worth a retry
    write_lines(inp, lines)
    for answers in ("batch", "both"):
        out = tmp_path / answers
        p = gen(inp, out, "--url", sim.url, "--answers", answers)
        assert p.returncode == 0, p.stderr
        name = "batch_errors.jsonl" if answers == "batch" else BATCH_OUTPUT
        got = {x["custom_id"]: x for x in batch_output(out / name)}
        failed = {k: v for k, v in got.items() if v["error"] is not None}
        assert sorted(failed) == ["task-2", "task-3"]
        for x in failed.values():
            assert x["response"]["status_code"] == 400 and x["response"]["body"] is None
            assert x["error"]["code"] == "http_status" and x["error"]["message"]
        answered = sorted(x["custom_id"] for x in data_rows(out)) if answers == "batch" else \
            sorted(k for k, v in got.items() if v["error"] is None)  # fmt: skip
        assert answered == ["task-0", "task-1"]


def test_the_merge_names_a_command_that_finishes_a_batch_job(sim, tmp_path):
    """`--answers batch` over shards, one never run: the merge's command, run as it reads,
    finishes the job (it had named --format batch and --token-ids off, which the job sets
    itself and generate refuses as flags)."""
    inp, out = tmp_path / "batch.jsonl", tmp_path / "out"
    write_lines(inp, batch_lines(12))
    assert gen(inp, out, "--url", sim.url, "--answers", "batch", "--shard", "1/2").returncode == 0
    p = genbench("merge", str(out))
    assert p.returncode == 1, p.stdout + p.stderr
    named = p.stdout.split("finish them: genbench generate ", 1)[1].split(";", 1)[0]
    assert "--answers batch" in named and "--format" not in named, named
    assert named.endswith("--shard 2/2"), named
    cmd = shlex.split(named.replace("--url URL", f"--url {sim.url}"))
    assert genbench("generate", *cmd, *FAST).returncode == 0
    p = genbench("merge", str(out))
    assert p.returncode == 0 and "every input id exactly once: 12 of 12" in p.stdout, p.stdout
