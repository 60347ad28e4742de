"""How a `genbench generate` job ends: every row that is not an answer is named (a tool call
with no result left, a row without token ids), `--token-ids on` stops where the server
gives none, the preflight retries what a request would retry, a lost job.json is said.
Real processes against the sim on 127.0.0.1 (its faults: docs/sim.md)."""

from __future__ import annotations

import json

import orjson
from conftest import genbench
from test_generate_job_end import SIM, agentic_row, data, gen, job_json, plain_rows, write

from genbench.sim.process import SimProcess


def test_rows_that_end_on_a_call_with_no_result_left_are_named_not_all_done(tmp_path):
    """The sim calls twice; rows whose input holds one result run out after the first."""
    rows = [agentic_row(i, 1 if i < 3 else 2) for i in range(5)]
    with SimProcess(*SIM, "--tool-calls", "2") as sim:
        inp = write(tmp_path / "in.jsonl", rows)
        p = gen(inp, tmp_path / "out", sim.url)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "all rows done" not in text, text
    assert ("done, some rows without an answer: 3 rows of this run end on a tool call without "
            "an answer (3 with no result left in the input: --tool-policy replay, the results "
            "ran out)"
            "; 2 answered") in text  # fmt: skip
    ran_out = {r["id"] for r in data(tmp_path / "out") if r["meta"]["tool_results_ran_out"]}
    assert ran_out == {"a0", "a1", "a2"}


def test_json_end_counts_the_unanswered_rows(tmp_path):
    with SimProcess(*SIM, "--tool-calls", "2") as sim:
        inp = write(tmp_path / "in.jsonl", [agentic_row(i, 1) for i in range(2)])
        p = gen(inp, tmp_path / "out", sim.url, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout[p.stdout.index("{") :])
    assert doc["status"] == "unanswered" and doc["exit_code"] == 0
    assert doc["unanswered"]["results_ran_out"] == 2


def test_token_ids_on_stops_when_the_server_comes_back_without_them(tmp_path):
    """The preflight's test request (the sim's first chat request) gets ids, the job's
    requests from the fourth on get none: `on` stops, keeps only rows with ids, exit 10;
    a resume against a server that gives ids again makes the rest."""
    inp = write(tmp_path / "in.jsonl", plain_rows(20))
    out = tmp_path / "out"
    with SimProcess(*SIM, "--token-ids", "vllm", "--fault", "no-ids:after=3") as sim:
        p = gen(inp, out, sim.url, "--token-ids", "on", "-c", "1")
    text = p.stdout + p.stderr
    assert p.returncode == 10, text
    assert "stopped: " in text and "answered without token ids and --token-ids on needs" in text
    assert "all rows done" not in text and "Traceback" not in text
    kept = data(out)
    assert len(kept) == 2 and {r["meta"]["token_ids"] for r in kept} == {"exact"}, kept
    with SimProcess(*SIM, "--token-ids", "vllm") as sim:
        p = gen(inp, out, sim.url, "--token-ids", "on")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = data(out)
    assert sorted(r["id"] for r in rows) == sorted(f"r{i}" for i in range(20))
    assert {r["meta"]["token_ids"] for r in rows} == {"exact"}


def test_token_ids_auto_names_the_rows_without_ids_at_the_end(tmp_path):
    inp = write(tmp_path / "in.jsonl", plain_rows(6))
    with SimProcess(*SIM, "--token-ids", "vllm", "--fault", "no-ids:after=3") as sim:
        p = gen(inp, tmp_path / "out", sim.url, "-c", "1")
        url = sim.url
    assert p.returncode == 0, p.stderr
    none = sum(r["meta"]["token_ids"] == "none" for r in data(tmp_path / "out"))
    assert none == 4
    said = f"token ids: 4 rows of this run without token ids (of 6 written; {url}: 4)"
    assert said in p.stdout, p.stdout


def test_one_500_on_the_preflight_is_retried_as_a_request_would_be(tmp_path):
    """`until=1`: only the sim's first chat request, the preflight's test request, fails."""
    inp = write(tmp_path / "in.jsonl", plain_rows(3))
    with SimProcess(*SIM, "--fault", "http:status=500,until=1") as sim:
        p = gen(inp, tmp_path / "out", sim.url)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "test request: " in text and "trying again in 0.05 s (1 of 1 retries" in text, text
    assert "complete: all rows done" in text
    assert len(data(tmp_path / "out")) == 3


def test_a_500_on_every_preflight_still_ends_a_one_server_job(tmp_path):
    inp = write(tmp_path / "in.jsonl", plain_rows(2))
    with SimProcess(*SIM, "--fault", "http:status=500") as sim:
        p = gen(inp, tmp_path / "out", sim.url)
    assert p.returncode == 9, p.stdout + p.stderr
    assert "1 of 1 retries" in p.stdout and "Traceback" not in p.stderr


def test_a_missing_job_json_is_said_and_a_changed_temperature_is_named(tmp_path):
    inp = write(tmp_path / "in.jsonl", plain_rows(4))
    out = tmp_path / "out"
    with SimProcess(*SIM) as sim:
        assert gen(inp, out, sim.url, "--temperature", "0.6").returncode == 0
        (out / ".genbench" / "job.json").unlink()
        p = gen(inp, out, sim.url, "--temperature", "0.7")
        assert p.returncode == 2, p.stdout + p.stderr
        assert ".genbench/job.json is missing" in p.stderr, p.stderr
        assert "--temperature was 0.6, now 0.7 (found from the rows' fingerprints)" in p.stderr
        assert "rerun with that setting as it was, or with --input-changed" in p.stderr
        assert not (out / ".genbench" / "job.json").exists()  # nothing rewritten
        write(inp, plain_rows(5))
        p = gen(inp, out, sim.url, "--temperature", "0.6")  # as made: goes on, and says so
        assert p.returncode == 0, p.stdout + p.stderr
        assert ".genbench/job.json is missing" in p.stdout
        assert job_json(out)["params"]["temperature"] == 0.6  # written again, said
        assert len(data(out)) == 5


def test_a_shards_missing_job_file_is_named_as_it_is(tmp_path):
    inp = write(tmp_path / "in.jsonl", plain_rows(4))
    out = tmp_path / "out"
    with SimProcess(*SIM) as sim:
        assert gen(inp, out, sim.url, "--shard", "1/2").returncode == 0
        (out / ".genbench" / "job-1of2.json").unlink()
        p = gen(inp, out, sim.url, "--shard", "1/2", "--temperature", "0.7")
    assert p.returncode == 2, p.stdout + p.stderr
    assert ".genbench/job-1of2.json is missing" in p.stdout, p.stdout
    assert ".genbench/job-1of2.json is missing: --temperature was not set" in p.stderr, p.stderr
    assert "job.json" not in p.stdout + p.stderr


def test_with_job_json_a_changed_temperature_is_named_by_its_flag(tmp_path):
    """The same change with job.json there reads as it does without: the flag, not the
    job's `params` JSON."""
    inp = write(tmp_path / "in.jsonl", plain_rows(2))
    out = tmp_path / "out"
    with SimProcess(*SIM) as sim:
        assert gen(inp, out, sim.url).returncode == 0
        p = gen(inp, out, sim.url, "--temperature", "0.7")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "(--temperature was not set, now 0.7)" in p.stderr, p.stderr
    assert "params was" not in p.stderr


def test_a_garbled_job_json_is_set_aside_and_said(tmp_path):
    inp = write(tmp_path / "in.jsonl", plain_rows(3))
    out = tmp_path / "out"
    with SimProcess(*SIM) as sim:
        assert gen(inp, out, sim.url).returncode == 0
        (out / ".genbench" / "job.json").write_bytes(b'{"model": "genb')
        write(inp, plain_rows(5))
        p = gen(inp, out, sim.url)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ".genbench/job.json is unreadable (not JSON" in p.stdout, p.stdout
    kept = out / ".genbench" / "job.json.unreadable"
    assert kept.read_bytes() == b'{"model": "genb'
    assert orjson.loads((out / ".genbench" / "job.json").read_bytes())["model"]
    assert len(data(out)) == 5


def test_the_plans_pilot_retries_its_preflight_too(tmp_path):
    inp = write(tmp_path / "in.jsonl", plain_rows(40))
    with SimProcess(*SIM, "--fault", "http:status=500,until=1") as sim:
        p = genbench("plan", "--prompts", str(inp), "--url", sim.url, "--pilot", "20",
                     "--samples", "100", "--warmup-time", "0", "--out", str(tmp_path / "p"),
                     "--json", timeout=180)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "p" / "plan.json").exists()
