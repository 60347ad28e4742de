"""`genbench generate` against real servers on 127.0.0.1: the sim, and vLLM when available.

What must hold, whatever happens to the client or the servers: every input id ends up
exactly once in the data files (or in the errors file, with its kind), and no data file
has a line a JSON reader would choke on.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import genbench
from tests_helpers import closed_port_url

from genbench.errors import ErrorKind
from genbench.generate.eta import UNSEEN
from genbench.generate.input.params import job_params, merge
from genbench.generate.input.reader import Row, ShardSpec, derive_id, scan
from genbench.generate.job import Job
from genbench.generate.jobconfig import JobConfig
from genbench.generate.outcome import Listener
from genbench.generate.pipeline import Retries, row_load
from genbench.generate.progress import Progress, ServerState
from genbench.generate.recipe import Recipe
from genbench.generate.servers import ServerSpec
from genbench.generate.store.readback import scan_jsonl_part
from genbench.generate.store.runlog import read_runs
from genbench.generate.store.writer import Existing, Store
from genbench.load import Slot
from genbench.plan.document import new_plan_doc, save_plan
from genbench.records import RequestRecord, read_records
from genbench.rows import DataRow, RowMeta
from genbench.sim.process import SimProcess
from genbench.transport.client import ChatRequest
from genbench.transport.endpoint import Endpoint

SIM = ("--tps", "1000", "--per-seq-ms", "0.2", "--ttft-ms", "5", "--output-len", "uniform:20:60")
FAST = ("--retry-backoff", "0.05", "--progress-every", "1")


# -- helpers --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim() -> Any:
    """A healthy sim shared by the tests that do not kill it or inject faults."""
    with SimProcess(*SIM, "--thinking-tokens", "5") as p:
        yield p


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in this process: for failures that happen before any request."""
    from genbench.cli import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    cap = capsys.readouterr()
    return int(e.value.code or 0), cap.out, cap.err


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def prompts(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": f"r{i}", "messages": [{"role": "user", "content": f"question number {i}"}]}
        for i in range(start, start + n)
    ]


def data_rows(out: Path) -> list[dict[str, Any]]:
    """Every row of every data file; fails on any line that is not complete JSON."""
    rows: list[dict[str, Any]] = []
    for p in sorted(out.glob("data*.jsonl")):
        raw = p.read_bytes()
        assert not raw or raw.endswith(b"\n"), f"{p.name} ends with a torn line"
        rows += [orjson.loads(line) for line in raw.splitlines()]
    for p in sorted(out.glob("data*.parquet")):
        import pyarrow.parquet as pq

        rows += pq.read_table(p).to_pylist()
    return rows


def error_rows(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in out.iterdir():
        if "error" in p.name and p.is_file():
            rows += [orjson.loads(line) for line in p.read_bytes().splitlines()]
    return rows


def assert_exactly_once(out: Path, ids: list[str]) -> list[dict[str, Any]]:
    rows = data_rows(out)
    counts = Counter(r["id"] for r in rows)
    dups = {k: v for k, v in counts.items() if v > 1}
    assert not dups, f"duplicate ids: {dups}"
    assert sorted(counts) == sorted(ids)
    return rows


def request_log(out: Path) -> list[RequestRecord]:
    return read_records(out / ".genbench" / "requests.jsonl")


def assert_log_holds_every_attempt(out: Path, ids: list[str]) -> list[RequestRecord]:
    """The request log: every failed attempt with its kind and what became of its row,
    and each row's final attempt, answered and written (`done`); the failed ones."""
    recs = request_log(out)
    failed = [r for r in recs if not r.ok]
    assert all(r.error_kind and r.extra["outcome"] in ("retry", "requeued") for r in failed)
    last = {r.id: r for r in recs}  # the log is in the order attempts ended
    assert sorted(last) == sorted(ids)
    assert all(r.ok and r.extra["outcome"] == "done" for r in last.values())
    assert sum(r.ok for r in recs) == len(ids)  # single-turn rows: one answer each
    return failed


def line_count(out: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in out.glob("data*.jsonl")) if out.exists() else 0


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def popen(tmp: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "genbench", "generate", *args],
        stdout=open(tmp / "stdout.txt", "wb"),  # noqa: SIM115 - the child owns it
        stderr=open(tmp / "stderr.txt", "wb"),  # noqa: SIM115
        env=env,
    )


def gen(inp: Path, out: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return genbench("generate", "-i", str(inp), "-o", str(out), *FAST, *args, timeout=timeout)


# -- the happy path and the output format ---------------------------------------------------


def test_formats_turns_and_metadata(sim, tmp_path):
    inp = tmp_path / "in.jsonl"
    rows = [
        {  # SpecForge conversations: the old answer is dropped and regenerated
            "id": "conv",
            "conversations": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "OLD ANSWER"},
            ],
        },
        {  # ShareGPT, two user turns: both answers regenerated, in order
            "id": 7,
            "conversations": [
                {"from": "human", "value": "first question"},
                {"from": "gpt", "value": "OLD 1"},
                {"from": "human", "value": "second question"},
                {"from": "gpt", "value": "OLD 2"},
            ],
        },
        {"prompt": "no id here", "system": "sys"},  # id derived from the content
        {"id": "p", "prompt": "per-row params", "params": {"max_tokens": 3}},
    ]
    write_rows(inp, rows)
    out = tmp_path / "out"
    p = gen(inp, out, "--url", sim.url, "-c", "4")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "derived a stable one" in p.stdout
    derived = derive_id(
        [{"role": "system", "content": "sys"}, {"role": "user", "content": "no id here"}], {}
    )
    rows_out = data_rows(out)
    assert sorted(map(str, (r["id"] for r in rows_out))) == sorted(["conv", "7", derived, "p"])
    got = {r["id"]: r for r in rows_out}
    assert 7 in got  # an integer id stays an integer

    conv = got["conv"]["conversations"]
    assert [t["role"] for t in conv] == ["system", "user", "assistant"]
    assert conv[0]["content"] == "be brief" and "OLD" not in conv[2]["content"]
    assert conv[2]["content"] and conv[2]["reasoning_content"]

    multi = got[7]["conversations"]
    assert [t["role"] for t in multi] == ["user", "assistant", "user", "assistant"]
    assert all("OLD" not in t["content"] for t in multi)
    assert got[7]["meta"]["turns"] == 2

    meta = got["p"]["meta"]
    assert meta["finish_reason"] == "length" and meta["truncated"] is True
    assert meta["completion_tokens"] == 3
    for key in ("server", "model", "prompt_tokens", "reasoning_tokens", "latency_s", "attempts"):
        assert key in meta
    assert meta["server"] == sim.url and meta["model"] == "genbench-sim"

    # the same command again: nothing to do, nothing written, quickly
    p2 = gen(inp, out, "--url", sim.url)
    assert p2.returncode == 0 and "nothing to do" in p2.stdout
    assert len(data_rows(out)) == 4


def test_truncated_rows_can_go_to_the_errors_file(sim, tmp_path):
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(6))
    out = tmp_path / "out"
    p = gen(inp, out, "--url", sim.url, "--max-tokens", "2", "--truncated", "error")
    assert p.returncode == 11, p.stderr  # every row failed: truncated's exit code
    assert "every row failed (6 rows, none done)" in p.stdout
    assert data_rows(out) == []
    errs = error_rows(out)
    assert sorted(e["id"] for e in errs) == [f"r{i}" for i in range(6)]
    assert {e["error_kind"] for e in errs} == {"truncated"}
    assert all(e["conversations"][-1]["role"] == "assistant" for e in errs)


def test_parquet_output_sharded_by_size(sim, tmp_path):
    import pyarrow  # noqa: F401 - part of the test extras: fail, don't skip, when missing

    inp = tmp_path / "in.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = prompts(40)
    pq.write_table(pa.Table.from_pylist(rows), inp)
    out = tmp_path / "out"
    p = gen(inp, out, "--url", sim.url, "--format", "parquet", "--part-size", "4KB", "-c", "8")
    assert p.returncode == 0, p.stderr + p.stdout
    assert list(out.glob("data*.jsonl")) == []
    files = sorted(out.glob("data-*.parquet"))
    assert len(files) > 1
    got = assert_exactly_once(out, [r["id"] for r in rows])
    assert got[0]["conversations"][-1]["role"] == "assistant"
    assert got[0]["meta"]["completion_tokens"] > 0


def test_shards_split_the_ids_between_client_hosts(sim, tmp_path):
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(30))
    out = tmp_path / "out"  # a shared directory: file names carry the shard
    for s in ("1/2", "2/2"):
        p = gen(inp, out, "--url", sim.url, "--shard", s)
        assert p.returncode == 0, p.stderr
    assert {p.name for p in out.glob("data*")} == {
        "data-1of2-00000.jsonl",
        "data-2of2-00000.jsonl",
    }
    assert_exactly_once(out, [f"r{i}" for i in range(30)])


def test_settings_change_is_refused_and_api_key_never_written(tmp_path):
    key = "sk-test-SECRET-4242"
    sim = SimProcess(*SIM, "--api-key-env", "GB_SIM_KEY", env={**os.environ, "GB_SIM_KEY": key})
    with sim:
        inp = tmp_path / "in.jsonl"
        write_rows(inp, prompts(5))
        out = tmp_path / "out"
        env = {"OPENAI_API_KEY": key}
        args = ("generate", "-i", str(inp), "-o", str(out), "--url", sim.url, *FAST)
        p = genbench(*args, "--temperature", "0.5", env=env)
        assert p.returncode == 0, p.stderr
        write_rows(inp, prompts(8))
        p2 = genbench(*args, "--temperature", "0.7", env=env)
        assert p2.returncode == 2
        assert "different settings" in p2.stderr and "temperature" in p2.stderr
        p3 = genbench(*args, "--temperature", "0.7", "--force", env=env)
        assert p3.returncode == 0, p3.stderr
        assert_exactly_once(out, [f"r{i}" for i in range(8)])
        for f in [*out.rglob("*")]:
            if f.is_file():
                assert key.encode() not in f.read_bytes(), f
        for proc in (p, p2, p3):
            assert key not in proc.stdout + proc.stderr


# -- bad input ------------------------------------------------------------------------------

BAD_LINES = [
    (b'{"id": "x", "messages": [{"role": "user", "content": "hi"}]\n', "not valid JSON"),
    (b'{"id": "x", "text": "no prompt field"}\n', "no prompt"),
    (b'{"id": "r0", "prompt": "again"}\n', "duplicate id 'r0' as line 1"),
    (b'{"id": "x", "prompt": "caf\xe9"}\n', "not UTF-8"),
    (b'{"id": "x", "messages": [{"role": "robot", "content": "hi"}]}\n', "messages[0].role"),
]


@pytest.mark.parametrize(("bad", "expect"), BAD_LINES)
def test_bad_input_names_file_and_line(capsys, tmp_path, bad, expect):
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(2))
    with open(inp, "ab") as f:
        f.write(b"\n" + bad)  # a blank line 3 is fine; the bad one is line 4
    out = tmp_path / "out"
    args = ("generate", "-i", str(inp), "-o", str(out), "--url", closed_port_url())
    code, _, err = cli(capsys, *args)
    assert code == 2, err
    assert f"{inp}, line 4" in err and expect in err, err
    assert not out.exists()


def test_bad_input_after_a_finished_job_loses_nothing_and_skip_invalid(sim, tmp_path):
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(5))
    out = tmp_path / "out"
    assert gen(inp, out, "--url", sim.url).returncode == 0
    before = data_rows(out)
    with open(inp, "ab") as f:
        for bad, _ in BAD_LINES:
            f.write(bad)
        f.write(b'{"id": "new", "prompt": "a good row after the bad ones"}\n')
    p = gen(inp, out, "--url", sim.url)
    assert p.returncode == 2 and "line 6" in p.stderr
    assert data_rows(out) == before

    p = gen(inp, out, "--url", sim.url, "--skip-invalid")
    assert p.returncode == 0, p.stderr
    assert_exactly_once(out, [f"r{i}" for i in range(5)] + ["new"])
    errs = error_rows(out)
    assert sorted(e["line"] for e in errs) == [6, 7, 8, 9, 10]
    assert {e["error_kind"] for e in errs} == {"invalid_input"}
    # rerunning does not report them twice
    assert gen(inp, out, "--url", sim.url, "--skip-invalid").returncode == 0
    assert len(error_rows(out)) == 5


def test_skip_invalid_generates_the_first_copy_of_a_doubled_id(sim, tmp_path):
    """The second copy of an id is the bad row, kept in the errors file by its line: the
    first copy is generated (it was dropped: the copy's entry carried the id, which made the
    row failed, on this run and every rerun)."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, [*prompts(2), {"id": "r0", "prompt": "the same id again"}])
    p = gen(inp, out, "--url", sim.url, "--skip-invalid")
    assert p.returncode == 0, p.stderr
    assert_exactly_once(out, ["r0", "r1"])
    assert [(e["id"], e["line"]) for e in error_rows(out)] == [(None, 3)]
    assert "duplicate id 'r0'" in error_rows(out)[0]["error"]
    p = gen(inp, out, "--url", sim.url, "--skip-invalid")  # nothing to do, nothing said twice
    assert p.returncode == 0 and len(error_rows(out)) == 1, p.stderr
    assert_exactly_once(out, ["r0", "r1"])


def test_a_doubled_id_kept_by_its_id_by_an_earlier_genbench_is_done_on_resume(sim, tmp_path):
    """A directory an earlier genbench wrote: r0's second copy in the errors file under the
    id r0, and r0 itself never generated. The resume reads that entry as the line's: r0 is
    done now, and the line is not reported again (it had counted r0 failed, re-reported the
    line and ended 'every row failed', exit 2)."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(1, start=1))
    assert gen(inp, out, "--url", sim.url).returncode == 0
    old = {
        "id": "r0", "line": 3, "error_kind": "invalid_input", "field": "id",
        "error": "field 'id': duplicate id 'r0' as an earlier line", "failed_at": 1.0,
    }  # fmt: skip
    (out / "errors.jsonl").write_bytes(orjson.dumps(old) + b"\n")
    write_rows(inp, [*prompts(2), {"id": "r0", "prompt": "the same id again"}])
    p = gen(inp, out, "--url", sim.url, "--skip-invalid")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "complete: all rows done" in p.stdout, p.stdout
    assert_exactly_once(out, ["r0", "r1"])
    assert error_rows(out) == [old]


# -- failures: retries, non-retryable errors -------------------------------------------------


def test_retries_on_503_and_context_too_long_goes_straight_to_errors(sim_factory, tmp_path):
    sim = sim_factory(*SIM, "--max-model-len", "60", "--fault", "http:status=503,rate=0.3,after=1")
    inp = tmp_path / "in.jsonl"
    rows = prompts(30) + [{"id": "long", "prompt": "word " * 100}]
    write_rows(inp, rows)
    out = tmp_path / "out"
    # -c 64: every row in the first wave, so which request draws a 503 is the same each run
    p = gen(inp, out, "--url", sim.url, "--retries", "8", "--max-tokens", "20", "-c", "64")
    assert p.returncode == 0, p.stderr
    got = assert_exactly_once(out, [f"r{i}" for i in range(30)])
    assert max(r["meta"]["attempts"] for r in got) > 1
    (err,) = error_rows(out)
    assert err["id"] == "long" and err["http_status"] == 400 and err["attempts"] == 1
    assert "context length" in err["error"]
    # failures are data: each retried 503 is in the request log, charged, then answered
    recs = request_log(out)
    retried = [r for r in recs if r.http_status == 503 and r.id != "long"]
    assert retried and all(r.extra["outcome"] == "retry" for r in retried)
    assert len(retried) == sum(r["meta"]["attempts"] - 1 for r in got)
    long = [r for r in recs if r.id == "long"][-1]
    assert long.http_status == 400 and long.extra["outcome"] == "failed"


# -- crashes: client, server, one of two servers --------------------------------------------


def test_client_sigkill_then_rerun_finishes_exactly_once(sim, tmp_path):
    inp = tmp_path / "in.jsonl"
    n = 300
    write_rows(inp, prompts(n))
    out = tmp_path / "out"
    args = ("-i", str(inp), "-o", str(out), "--url", sim.url, "-c", "8", *FAST)
    proc = popen(tmp_path, *args)
    try:
        wait_for(lambda: line_count(out) >= 40, 60, "40 rows written")
    finally:
        proc.kill()
        proc.wait()
    assert line_count(out) < n, "the job finished before it could be killed"
    p = gen(inp, out, "--url", sim.url, "-c", "8")
    assert p.returncode == 0, p.stderr
    assert "resuming" in p.stdout
    assert_exactly_once(out, [f"r{i}" for i in range(n)])


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(sim, tmp_path):
    """A --format parquet job (the default's stop: test_stop_and_secrets.py): its open part
    stays JSONL at the stop, said with how to finish it, and the resume converts it."""
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(300))
    out = tmp_path / "out"
    fmt = ("--format", "parquet")
    proc = popen(tmp_path, "-i", str(inp), "-o", str(out), "--url", sim.url, "-c", "4", *fmt,
                 *FAST)  # fmt: skip
    wait_for(lambda: line_count(out) >= 30, 60, "30 rows written")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 130
    stdout = (tmp_path / "stdout.txt").read_text()
    assert "rerun the same command to resume" in stdout
    # each message says its cause once: the status, then the hint, once each
    assert "interrupted: stopped before every row was done" in stdout
    assert stdout.count("rerun the same command") == 1 and "interrupted: interrupted" not in stdout
    assert "data-00000.jsonl stays JSONL until the --format parquet job resumes" in stdout
    assert [p.name for p in out.glob("data*")] == ["data-00000.jsonl"]  # nothing converted
    done = len(data_rows(out))
    assert 30 <= done < 300
    # resumed with a plan for the 300 rows: judged whole (generate/resumed.py), every row's
    # tokens and both runs' time against the plan for all 300, never the rows left alone
    plan = new_plan_doc("pilot", {}, {"concurrency": 8, "servers": 1})
    plan["rows"] = [{"samples": 300, "ours": {"seconds": 10.0, "lo_s": 0.1, "hi_s": 600.0},
                     "tokens": {"output": 12_000, "output_lo": 1_000, "output_hi": 90_000}}]
    save_plan(plan, tmp_path)
    p = gen(inp, out, "--url", sim.url, "-c", "8", *fmt, "--plan", str(tmp_path), "--json")
    assert p.returncode == 0, p.stderr
    assert [p.name for p in out.glob("data*")] == ["data-00000.parquet"]
    assert "stays JSONL" not in p.stdout + p.stderr
    rows = assert_exactly_once(out, [f"r{i}" for i in range(300)])
    said, runs = json.loads(p.stdout)["plan"], read_runs(out)
    assert (said["rows"], said["earlier_rows"], said["tokens_rows"]) == (300, done, 300)
    assert said["actual_tokens"] == sum(r["meta"]["completion_tokens"] for r in rows)
    assert said["earlier_s"] == runs[1]["sending_s"] > 0  # the stopped run's span
    assert said["actual_s"] == pytest.approx(runs[1]["sending_s"] + runs[3]["sending_s"],
                                             abs=0.002)  # fmt: skip
    assert said["inside_bar"] is True and said["tokens_inside_bar"] is True
    assert "all 300 rows, this run's and the earlier ones': their" in p.stderr


def test_server_sigkill_and_restart_on_the_same_port(sim_factory, tmp_path):
    sim = sim_factory(*SIM)
    inp = tmp_path / "in.jsonl"
    n = 300
    write_rows(inp, prompts(n))
    out = tmp_path / "out"
    proc = popen(tmp_path, "-i", str(inp), "-o", str(out), "--url", sim.url, "-c", "8", *FAST)
    try:
        wait_for(lambda: line_count(out) >= 40, 60, "40 rows written")
        sim.kill()
        time.sleep(1.0)
        assert proc.poll() is None, "the job must wait for the server, not exit"
        sim_factory(*SIM, "--port", str(sim.port))
        assert proc.wait(90) == 0, (tmp_path / "stderr.txt").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    stdout = (tmp_path / "stdout.txt").read_text()
    assert "is down" in stdout and "is back" in stdout
    # one server: no "its rows go to the other servers", but that it waits and until when
    assert "it is the only one: waiting" in stdout and "other servers" not in stdout
    assert "gives up after 30.0 min" in stdout
    assert_exactly_once(out, [f"r{i}" for i in range(n)])
    assert error_rows(out) == []
    failed = assert_log_holds_every_attempt(out, [f"r{i}" for i in range(n)])
    kinds = {r.error_kind for r in failed}
    assert "connect_refused" in kinds or kinds & {"disconnected", "incomplete_stream"}, kinds
    assert all(r.extra["outcome"] == "requeued" for r in failed)  # uncharged: the server died


def test_two_servers_one_dies_the_other_finishes(sim_factory, tmp_path):
    dying = sim_factory(*SIM, "--fault", "die:after=40")
    healthy = sim_factory(*SIM)
    inp = tmp_path / "in.jsonl"
    n = 200
    write_rows(inp, prompts(n))
    out = tmp_path / "out"
    p = gen(inp, out, "--url", dying.url, "--url", healthy.url, "-c", "6", timeout=90)
    assert p.returncode == 0, p.stderr + p.stdout
    assert f"{dying.url} is down" in p.stdout
    rows = assert_exactly_once(out, [f"r{i}" for i in range(n)])
    servers = Counter(r["meta"]["server"] for r in rows)
    assert servers[dying.url] > 0 and servers[healthy.url] > servers[dying.url]
    assert error_rows(out) == []
    failed = assert_log_holds_every_attempt(out, [f"r{i}" for i in range(n)])
    assert failed and {r.server for r in failed} == {dying.url}


def test_all_servers_down_at_start_is_a_clear_error(capsys, tmp_path):
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(2))
    args = ("generate", "-i", str(inp), "-o", str(tmp_path / "out"), "--url", closed_port_url())
    code, _, err = cli(capsys, *args)
    assert code == 3 and "connection refused" in err, err


@pytest.mark.vllm
def test_vllm_regenerates_a_small_file(vllm_server, tmp_path):
    server = vllm_server
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(6))
    out = tmp_path / "out"
    p = gen(inp, out, "--url", server.url, "--max-tokens", "16", "-c", "3", timeout=300)
    assert p.returncode == 0, p.stderr + p.stdout
    rows = assert_exactly_once(out, [f"r{i}" for i in range(6)])
    assert all(r["meta"]["completion_tokens"] > 0 for r in rows)


# -- units: input, store repair, params, progress -------------------------------------------


def test_scan_reads_gzip_and_shards_partition_the_ids(tmp_path):
    inp = tmp_path / "in.jsonl.gz"
    with gzip.open(inp, "wb") as f:
        f.write(b"".join(orjson.dumps(r) + b"\n" for r in prompts(100)))
    whole = scan(inp)
    assert whole.rows == 100 and len(whole.todo) == 100
    parts = [scan(inp, shard=ShardSpec(i, 3)).todo for i in (1, 2, 3)]
    assert set().union(*parts) == whole.todo and sum(map(len, parts)) == 100
    assert scan(inp, {"r1", "r2"}, {"r3"}).done == 2
    with pytest.raises(Exception, match="i/N"):
        ShardSpec.parse("0/2")


def test_scan_finds_duplicates_among_done_rows_and_derived_ids(tmp_path):
    inp = tmp_path / "in.jsonl"
    rows = [*prompts(3), prompts(2)[1], {"prompt": "same"}, {"prompt": "same"}]
    rows.append({"id": 'we"ird', "prompt": "an id with a quote"})
    write_rows(inp, rows)
    with pytest.raises(Exception, match=r"line 4: field 'id': duplicate id 'r1' as line 2"):
        scan(inp, {"r1"})  # r1 is done: the fast path must still see its second line
    res = scan(inp, {"r1", 'we"ird'}, skip_invalid=True)
    same = derive_id([{"role": "user", "content": "same"}], {})
    assert res.rows == 5 and res.done == 2 and res.todo == {"r0", "r2", same}
    assert [(b.line, b.field) for b in res.bad] == [(4, "id"), (6, "id")]
    assert "same content" in res.bad[1].problem


@contextlib.contextmanager
def no_descriptors_left(free: int = 0) -> Iterator[None]:
    """This process at its limit of open files (but `free` of them), as a job of thousands
    of streams is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, hard))
    hog: list[int] = []
    try:
        with contextlib.suppress(OSError):
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        for _ in range(free):
            os.close(hog.pop())
        yield
    finally:
        for fd in hog:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_store_out_of_descriptors_keeps_its_rows_until_it_can_open_a_file(tmp_path):
    """At the descriptor limit a new shard still opens (descriptors held in reserve); when
    the reserve is spent too, the row waits in memory for the next sync, and the store
    says what is short, once."""
    store = Store(tmp_path / "out", part_bytes=4096)
    store.begin(Existing(), {"model": "m"})
    line = DataRow("x", [{"role": "user", "content": "y" * 3000}], RowMeta()).line()
    with no_descriptors_left():
        assert store.write_row("a", line) and store.write_row("b", line)  # shard 0
        assert store.reserve.used == 2 and "in reserve" in (store.take_shortage() or "")
        assert store.write_row("c", line)  # shard 1 needs two more: one is left
        short = store.take_shortage() or ""
        assert "cannot open a file" in short and "out of file descriptors: raise ulimit -n" in short
        assert store.take_shortage() is None
    asyncio.run(store.close())
    assert [r["id"] for r in data_rows(tmp_path / "out")] == ["x", "x", "x"]
    assert len(store.data_files()) == 2


def test_a_job_that_runs_out_of_descriptors_goes_on_with_fewer_streams(sim, tmp_path):
    """More streams than the process may open: the connects that find no descriptor are
    requeued (in the log as `local_limit`), the server keeps the streams it could open,
    the note says what to do, and every row is written once, new shards included."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(150))
    notes: list[str] = []

    class Notes(Listener):
        def note(self, text: str, style: str = "") -> None:
            notes.append(text)

    cfg = JobConfig(inp, out, [ServerSpec(sim.url, 64)], retry_backoff=0.05, part_bytes=8192)
    with no_descriptors_left(free=24):
        result = asyncio.run(Job(cfg, Notes()).run(handle_signals=False))
    assert result.status == "complete", (result, notes)
    assert_exactly_once(out, [f"r{i}" for i in range(150)])
    assert len(list(out.glob("data-*.jsonl"))) > 1
    short = [r for r in request_log(out) if not r.ok]
    assert short and {r.error_kind for r in short} == {"local_limit"}
    assert all(r.extra["outcome"] == "requeued" for r in short)
    assert any("out of file descriptors: raise ulimit -n" in n for n in notes), notes
    assert result.snapshot.servers[0].concurrency < 64, notes


def test_a_library_caller_of_the_job_gets_its_run_notes(sim, tmp_path):
    """The run's start and end (what the report draws) are the job's to write, not the
    command line's: a program that runs `Job` itself finds them too."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(6))
    cfg = JobConfig(inp, out, [ServerSpec(sim.url, 4)], retry_backoff=0.05)
    result = asyncio.run(Job(cfg).run(handle_signals=False))
    assert result.status == "complete", result
    runs = read_runs(out)
    assert [r["event"] for r in runs] == ["start", "end"], runs
    assert runs[0]["todo"] == 6


class InstantClient:
    """Answers at once; its first `short` connects fail as they do on a machine out of
    file descriptors."""

    def __init__(self, short: int) -> None:
        self.short, self.endpoint = short, Endpoint.parse("http://127.0.0.1:9/v1")

    def new_record(self, req: ChatRequest, phase: str = "") -> RequestRecord:
        return RequestRecord(req.id, phase=phase, server=self.endpoint.base_url)

    async def chat(self, req: ChatRequest, record: RequestRecord) -> RequestRecord:
        await asyncio.sleep(0.002)
        if self.short > 0:
            self.short -= 1
            record.error_kind, record.error_message = ErrorKind.LOCAL_LIMIT, "Too many open files"
        else:
            record.text, record.completion_tokens, record.finish_reason = "ok", 1, "stop"
        return record


def test_out_of_descriptors_at_connect_means_fewer_streams_not_a_failed_row():
    notes: list[str] = []
    done: list[str] = []

    class Sink:
        def finish(self, conv: Any) -> None:
            done.append(conv.row.id)

        def give_up(self, conv: Any, kind: Any, why: str) -> None:
            raise AssertionError(why)

        def note(self, text: str, style: str = "") -> None:
            notes.append(text)

    rows = [Row(f"r{i}", [{"role": "user", "content": "q"}], {}, i + 1) for i in range(40)]
    slot, recs = Slot(InstantClient(short=3), 8), []  # type: ignore[arg-type]
    load = row_load([slot], rows, Sink(), recipe=Recipe(), retries=Retries(retries=0),
                    on_record=recs.append)  # fmt: skip
    asyncio.run(load.run())
    assert sorted(done) == sorted(r.id for r in rows) and slot.streams == 8 - 3
    short = [r for r in recs if r.error_kind == "local_limit"]
    assert len(short) == 3 and all(r.extra["outcome"] == "requeued" for r in short)
    assert len(notes) == 1 and "out of file descriptors: raise ulimit -n" in notes[0]  # once


def test_torn_tail_and_stale_index_are_repaired(tmp_path):
    data, idx = tmp_path / "data-00000.jsonl", tmp_path / "data-00000.idx"
    lines = [orjson.dumps({"id": f"a{i}", "conversations": []}) + b"\n" for i in range(5)]
    data.write_bytes(b"".join(lines) + b'{"id": "a5", "conv')
    end2 = len(lines[0]) + len(lines[1])
    # the index covers two rows, then claims bytes the file does not have (power loss)
    idx.write_bytes(
        orjson.dumps({"end": end2, "ids": ["a0", "a1"]})
        + b"\n"
        + orjson.dumps({"end": 10**9, "ids": ["ghost"]})
        + b"\n"
    )
    s = scan_jsonl_part(data, idx)
    assert s.ids == [f"a{i}" for i in range(5)]
    assert data.read_bytes() == b"".join(lines)  # the torn line was cut
    assert s.notes and "incomplete last line" in s.notes[0]
    again = scan_jsonl_part(data, idx)  # the rewritten index is now complete
    assert again.ids == s.ids and not again.notes


def test_params_precedence_and_checks(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text("temperature = 0.2\nmax_tokens = 100\n[chat_template_kwargs]\nfoo = 1\n")
    p = job_params(config=cfg, temperature=0.6, thinking=False, extra=["top_k=20"])
    assert p == {
        "temperature": 0.6,
        "max_tokens": 100,
        "top_k": 20,
        "chat_template_kwargs": {"foo": 1, "enable_thinking": False},
    }
    row = merge(p, {"chat_template_kwargs": {"enable_thinking": True}})
    assert row["chat_template_kwargs"] == {"foo": 1, "enable_thinking": True}
    with pytest.raises(Exception, match="top-p"):
        job_params(top_p=2.0)


def test_url_file_and_sizes(tmp_path):
    from genbench.generate.flags import parse_size, read_url_file

    f = tmp_path / "servers.txt"
    f.write_text("# cluster a\nhttp://a:8000/v1 128\n\nhttp://b:8000/v1  # default C\n")
    specs = read_url_file(f, ServerSpec("", 64, auto=True))
    assert [(s.url, s.concurrency, s.auto) for s in specs] == [
        ("http://a:8000/v1", 128, False),  # a number on its line: exactly that
        ("http://b:8000/v1", 64, True),  # -c's: auto, from its start
    ]
    assert parse_size("256MB") == 256 << 20 and parse_size("1g") == 1 << 30
    with pytest.raises(Exception, match="part-size"):
        parse_size("lots")


def test_eta_and_error_bar_from_recent_windows():
    """Rates come from the request records (stats.RecentRates): rows/s counts the records
    that ended a row; the ETA's bar is that rate's spread over sub-windows."""
    now = [0.0]
    prog = Progress(1000, 0, 0, ["s"], clock=lambda: now[0])
    for t in range(1, 61):  # 5 rows/s, steady, each one request of 10 tokens
        now[0] = float(t)
        for k in range(5):
            end = {"outcome": "done"}
            prog.on_record(RequestRecord(f"x{t}-{k}", server="s", t_end=t - 0.1 * k,
                                         completion_tokens=10, extra=end))  # fmt: skip
        prog.on_durable("row", [(f"x{t}{k}", None) for k in range(5)])
    eta, err = prog.eta()
    assert eta == pytest.approx((1000 - 300) / 5.0, rel=0.02)
    # a steady rate: the range is the allowance for speed not yet seen (generate.eta.UNSEEN)
    assert err is not None and err < UNSEEN * eta
    snap = prog.snapshot([ServerState("s")])
    assert snap.tokens_per_s == pytest.approx(50, rel=0.05)
    assert snap.servers[0].rows_per_s == pytest.approx(5, rel=0.05)


def _job_at(rates: list[float]) -> tuple[Progress, list[float]]:
    """A job of 100,000 rows whose rows/s over its first len(rates) × 30 s were these, one
    30 s stretch each; the clock ends with the last."""
    now = [0.0]
    prog = Progress(100_000, 0, 0, ["s"], clock=lambda: now[0])
    n = 0
    for i, r in enumerate(rates):
        for t in range(30):
            now[0] = float(i * 30 + t + 1)
            for k in range(int(r)):
                end = {"outcome": "done"}
                prog.on_record(RequestRecord(f"x{n}", server="s", t_end=now[0] - 0.5 + k / 1e3,
                                             completion_tokens=10, extra=end))  # fmt: skip
                n += 1
            prog.on_durable("row", [(f"x{n}", None)] * int(r))
    return prog, now


def test_the_etas_range_is_the_plans_model_of_the_speed():
    """The ETA's rate is the last half of the job's history (rows between the ends of
    clusters of completions: here one cluster a second); its range the plan's model of
    the speed over its stretches, the trend of the whole history where it is clear, and
    the allowance for speed not yet seen. A steady rate gets that allowance alone; one
    that scattered a wider range; one that rose all along a range that reaches further
    towards faster (the trend) than the same rates shuffled."""
    wander = [16, 17, 18, 19, 20, 21, 22, 23, 24, 25]
    scatter = [20, 24, 17, 22, 19, 25, 16, 21, 23, 18]
    ranges, lows = {}, {}
    for name, rates in (("wander", wander), ("scatter", scatter), ("steady", [20] * 10)):
        prog, _ = _job_at(rates)
        e = prog.eta_range()
        assert e is not None and e.lo_s < e.seconds < e.hi_s
        # the clock stands 0.5 s after the last second's rows: that cluster may still be
        # forming and is left out (its rows are counted from the one before, at 298.5 s);
        # the last half of the history before it: the clusters from 150.5 s to 298.5 s
        half = rates[5] * 29 + sum(rates[6:]) * 30 - rates[9]  # the rows of seconds 152-299
        left = prog.remaining + rates[9]
        assert e.seconds == pytest.approx(left / (half / 148) - 1.5, rel=0.005)  # ±1 cluster
        ranges[name] = (e.hi_s - e.lo_s) / e.seconds
        lows[name] = e.lo_s / e.seconds
        snap = prog.snapshot([ServerState("s")])
        assert (snap.eta_lo_s, snap.eta_hi_s) == (round(e.lo_s), round(e.hi_s))
        assert snap.eta_err_s == round((e.hi_s - e.lo_s) / 2)
    h = UNSEEN * 4699.5 / (4699.5 + 299)  # steady: the allowance alone, ± a cluster's gap
    assert ranges["steady"] == pytest.approx((1 / (1 - h) - 1 / (1 + h)), abs=0.002)
    assert ranges["steady"] < ranges["scatter"]
    assert lows["wander"] < lows["scatter"] < lows["steady"]


def test_the_panel_says_when_the_jobs_speed_leaves_the_plans_range():
    """generate --plan: elapsed + the live ETA (with its range) against the plan's range;
    inside it nothing more is said, outside it the panel and the JSON line say so."""
    from rich.console import Console

    from genbench.generate.render import panel as render
    from genbench.plan.document import JobForecast

    f = JobForecast("p.json", "pilot", 100_000, 1, 5000.0, 4500.0, 5500.0, "b", None)
    inside = f.course(1000.0, 4100.0, 3900.0, 4300.0)
    assert inside["verdict"] == "inside" and inside["on_course_s"] == 5100.0
    assert inside["off"] == pytest.approx(0.02)
    slow = f.course(1000.0, 5000.0, 4800.0, 5200.0)  # 6000 s (5800–6200): past 5500 for sure
    assert slow["verdict"] == "unsure" and slow["on_course_lo_s"] == 5800.0  # one reading
    assert slow["missed_for_s"] == 0.0 and f.hold_s == 50.0  # 1% of the plan's 5000 s
    assert f.course(1049.0, 4950.0, 4750.0, 5150.0)["verdict"] == "unsure"
    assert f.course(1050.0, 4950.0, 4750.0, 5150.0)["verdict"] == "outside"  # for 50 s
    fast = f.course(1060.0, 2940.0, 2840.0, 3040.0)  # the miss goes on, on the other side
    assert fast["verdict"] == "outside"
    assert f.course(1061.0, 4700.0, 4300.0, 5100.0)["verdict"] == "unsure"  # 5700 (5300–6100)
    assert f.course(1062.0, 2940.0, 2840.0, 3040.0)["verdict"] == "unsure"  # it starts again
    assert f.course(10.0, None, None, None)["verdict"] is None  # no ETA yet
    no_range = JobForecast("p.json", "arithmetic", 10, 1, 50.0, None, None, "b", None)
    assert no_range.course(10.0, 50.0, 40.0, 60.0)["verdict"] is None

    prog, _ = _job_at([20] * 10)  # 6,000 rows in 300 s, 94,000 to go at 20/s: 4,700 s
    snap = prog.snapshot([ServerState("s", "up", None, in_flight=8, concurrency=8)])
    for plan, said in ((f, None), (JobForecast("p", "pilot", 100_000, 1, 3000.0, 2700.0,
                                               3300.0, "b", None), "slower")):  # fmt: skip
        for elapsed in (snap.elapsed_s - plan.hold_s, snap.elapsed_s):  # a miss that lasts
            snap = replace(snap, plan=plan.course(elapsed, snap.eta_s, snap.eta_lo_s,
                                                  snap.eta_hi_s))  # fmt: skip
        console = Console(width=200, record=True)
        console.print(render(snap))
        text = console.export_text()
        if said is None:
            assert snap.plan["verdict"] == "inside" and "plan's range" not in text
        else:
            assert snap.plan["verdict"] == "outside"
            assert f"the job's speed has left the plan's range: it runs {said}" in text
    # past the plan's range, the ETA's own range still reaching it: not said outside
    lo_on = snap.elapsed_s + snap.eta_lo_s
    for plan_lo, plan_hi, said in ((lo_on - 300, lo_on + 100, "no sign yet that the job left"),
                                   (lo_on - 400, lo_on - 100, "said outside once that lasts")):
        g = JobForecast("p", "pilot", 100_000, 1, plan_lo + 100, plan_lo, plan_hi, "b", None)
        snap = replace(snap, plan=g.course(snap.elapsed_s, snap.eta_s, snap.eta_lo_s,
                                           snap.eta_hi_s))  # fmt: skip
        console = Console(width=250, record=True)
        console.print(render(snap))
        text = console.export_text()
        assert snap.plan["verdict"] == "unsure" and said in text, text
        assert "outside the plan" not in text and "has left the plan's range" not in text


def test_with_every_server_down_there_is_no_eta_and_the_panel_says_so():
    """Nothing can finish while no server is up: a number would be a guess at when one
    comes back, so there is none, and the panel says why and until when (#45)."""
    from rich.console import Console

    from genbench.generate.render import panel as render

    now = [0.0]
    prog = Progress(1000, 0, 0, ["s"], clock=lambda: now[0])
    for t in range(1, 61):
        now[0] = float(t)
        for k in range(5):
            end = {"outcome": "done"}
            prog.on_record(RequestRecord(f"x{t}-{k}", server="s", t_end=t - 0.1 * k,
                                         completion_tokens=10, extra=end))  # fmt: skip
        prog.on_durable("row", [(f"x{t}{k}", None) for k in range(5)])
    up = ServerState("s", "up", None, in_flight=8, concurrency=8)
    before = prog.snapshot([up])
    assert before.all_down_s is None
    for down_s in (1.0, 38.0, 250.0):
        now[0] = 60.0 + down_s
        snap = prog.snapshot([replace(up, state="down", down_s=down_s, in_flight=0)])
        assert before.eta_s is not None and snap.eta_s is None and snap.all_down_s == down_s
        assert snap.eta_note == "no server"
    console = Console(width=150, record=True)
    console.print(render(snap, 1800.0))
    text = console.export_text()
    assert "all servers down for 4.2 min; waiting, gives up after 30.0 min" in text
    assert "ETA — (no server up: nothing can run)" in text and "finishes" not in text
    now[0] = 400.0  # back up: the ETA follows the rate again
    back = prog.snapshot([up])
    assert back.all_down_s is None and back.eta_s is not None and back.eta_note is None
