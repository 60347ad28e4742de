"""Agentic rows regenerated through `genbench generate` on the sim playing a tool-calling
server: 200 rows (system, tools, user, 1-3 calls each with its result, a final answer)
under both tool policies. Every row exactly once, every generated call kept with its
arguments and its thinking, the cached results spliced in order after the new calls,
and `inspect`'s counts equal to what the sim was set to produce (and says it produced).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import genbench

from genbench.generate.input.tool_probe import PROMPT as PROBE_PROMPT
from genbench.records import read_records
from genbench.sim.process import SimProcess

N = 200
SIM = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "2", "--output-len", "fixed:20")
TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"{name} a thing",
     "parameters": {"type": "object", "properties": {param: {"type": "string"}}}}}
    for name, param in (("get_weather", "city"), ("search", "query"), ("lookup", "key"))
]  # fmt: skip
FIRST_PARAM = {"get_weather": "city", "search": "query", "lookup": "key"}


def sim_metric(root: str, name: str) -> float:
    """One of the sim's own counters, from /sim/metrics (there whatever its dialect)."""
    text = httpx.get(root + "/sim/metrics", timeout=10).text
    m = re.search(rf"^sim:{name} (\S+)", text, re.M)
    assert m, f"the sim exports {name}"
    return float(m[1])


def job_calls(sim: SimProcess) -> float:
    """The calls the sim made for the job's rows: its count less the one its preflight's
    tool check got (the same request again, answered the same: the sim is seeded)."""
    made = sim_metric(sim.root, "tool_calls_total")
    body = {"messages": [{"role": "user", "content": PROBE_PROMPT}], "max_tokens": 16,
            "temperature": 0, "tools": TOOLS, "stream": False}  # fmt: skip
    assert httpx.post(sim.url + "/chat/completions", json=body, timeout=30).status_code == 200
    return 2 * made - sim_metric(sim.root, "tool_calls_total")


def calls_of(i: int) -> int:
    return 1 + i % 3


def agentic_row(i: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent. Use the tools."},
        {"role": "user", "content": f"task {i}: look these things up"},
    ]
    for k in range(calls_of(i)):
        cid = f"orig_{i}_{k}"
        fn = {"name": TOOLS[k % 3]["function"]["name"], "arguments": json.dumps({"n": k})}
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function", "function": fn}]})  # fmt: skip
        msgs.append({"role": "tool", "tool_call_id": cid, "content": f"result {i}.{k}"})
    msgs.append({"role": "assistant", "content": f"the answer to task {i}"})
    return {"id": f"a{i}", "messages": msgs, "tools": TOOLS}


@pytest.fixture(scope="module")
def agentic_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agentic") / "agentic.jsonl"
    path.write_bytes(b"".join(orjson.dumps(agentic_row(i)) + b"\n" for i in range(N)))
    return path


def generate(inp: Path, out: Path, url: str, *args: str) -> None:
    p = genbench("generate", "-i", str(inp), "--out", str(out), "--url", url, "-c", "16",
                 "--progress-every", "5", *args, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]


def rows_once(out: Path) -> dict[str, dict[str, Any]]:
    rows = [orjson.loads(line) for p in sorted(out.glob("data*.jsonl"))
            for line in p.read_bytes().splitlines()]  # fmt: skip
    ids = Counter(r["id"] for r in rows)
    assert sorted(ids) == sorted(f"a{i}" for i in range(N)) and set(ids.values()) == {1}
    return {r["id"]: r for r in rows}


def inspect_tools(out: Path) -> dict[str, Any]:
    p = genbench("inspect", str(out), "--json", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "tool calls:" in p.stderr or "tool calls:" in p.stdout
    doc = json.loads(p.stdout[p.stdout.index("{") :])
    return doc["tools"]


def check_call(turn: dict[str, Any], prefix: str = "chatcmpl-tool-") -> None:
    """A generated call, kept as the sim sent it: an id, a declared function, arguments
    that are a JSON object keyed by its first parameter, the thinking beside it."""
    (c,) = turn["tool_calls"]
    assert c["id"].startswith(prefix) and c["type"] == "function"
    name = c["function"]["name"]
    args = json.loads(c["function"]["arguments"])
    assert list(args) == [FIRST_PARAM[name]] and len(args[FIRST_PARAM[name]].split()) == 6
    assert turn["reasoning_content"].strip() and turn["content"] == ""


@pytest.mark.parametrize(("dialect", "prefix"), [("sim", "chatcmpl-tool-"), ("sglang", "call_")])
def test_replay_regenerates_the_calls_and_splices_the_results_in_order(
    agentic_file, tmp_path, dialect, prefix
):
    """vLLM's chunk shapes (the sim's own dialect) and SGLang's (nulls in every field)."""
    out = tmp_path / "out"
    sim_args = (*SIM, "--tool-calls", "2", "--thinking-tokens", "3", "--dialect", dialect)
    with SimProcess(*sim_args) as sim:
        generate(agentic_file, out, sim.url)
        sim_calls = job_calls(sim)
    rows = rows_once(out)
    ran_out = 0
    for i in range(N):
        row = rows[f"a{i}"]
        conv, meta = row["conversations"], row["meta"]
        assert row["tools"] == TOOLS
        assert [t["role"] for t in conv[:2]] == ["system", "user"]
        gen = conv[2:]
        made = [t for t in gen if t["role"] == "assistant" and t.get("tool_calls")]
        assert len(made) == 2  # the sim calls twice in every conversation
        for t in made:
            check_call(t, prefix)
        results = [t for t in gen if t["role"] == "tool"]
        fed = min(2, calls_of(i))
        assert [t["content"] for t in results] == [f"result {i}.{k}" for k in range(fed)]
        for k, t in enumerate(gen):  # each result answers the new call just before it
            if t["role"] == "tool":
                assert t["tool_call_id"] == gen[k - 1]["tool_calls"][0]["id"]
        out_of_results = calls_of(i) == 1
        ran_out += out_of_results
        assert meta["tool_results_ran_out"] is out_of_results
        assert gen[-1].get("tool_calls") if out_of_results else gen[-1]["content"]
        assert meta["tool_calls"] == 2 and meta["turns"] == 2 + (not out_of_results)
        assert meta["tool_policy"] == "replay"
    # the request log: every request of every row, each answered once
    recs = read_records(out / ".genbench" / "requests.jsonl")
    assert all(r.ok for r in recs)
    assert len(recs) == sum(r["meta"]["turns"] for r in rows.values())
    assert sum(r.tool_call_count for r in recs) == 2 * N
    tools = inspect_tools(out)
    assert tools["calls"] == 2 * N == sim_calls
    assert tools["calls_per_row"] == {"2": N}
    assert tools["results_ran_out"] == ran_out == len(range(0, N, 3))
    assert tools["bad_arguments"] == 0 and tools["undeclared"] == 0


def test_keep_holds_the_original_calls_and_regenerates_the_answer(agentic_file, tmp_path):
    out = tmp_path / "out"
    with SimProcess(*SIM, "--tool-calls", "3") as sim:
        generate(agentic_file, out, sim.url, "--tool-policy", "keep", "--turns", "last")
        sim_calls = job_calls(sim)
    rows = rows_once(out)
    src = {f"a{i}": agentic_row(i)["messages"] for i in range(N)}
    calls = 0
    for rid, row in rows.items():
        conv = row["conversations"]
        assert conv[:-1] == src[rid][:-1]  # the original calls and results, as they were
        last = conv[-1]
        # the sim calls until it has seen 3 results: rows with fewer end in a new call
        if len([t for t in conv if t["role"] == "tool"]) < 3:
            check_call({**last, "reasoning_content": "-"})
            calls += 1
        else:
            assert last["content"] and not last.get("tool_calls")
        assert row["meta"]["turns"] == 1 and row["meta"]["tool_calls"] == len(
            last.get("tool_calls") or ()
        )
    tools = inspect_tools(out)
    assert tools["calls"] == calls == sim_calls == N - len(range(2, N, 3))
    assert tools["results_ran_out"] == 0


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_inspect_finds_undeclared_tools_and_arguments_cut_mid_call(tmp_path, fmt):
    rows = []
    for i in range(30):
        row = agentic_row(i)
        if i % 3 == 0:
            row["tool_choice"] = {"type": "function", "function": {"name": "ghost"}}
        elif i % 3 == 1:
            row["params"] = {"max_tokens": 4}  # the call is cut before its arguments close
        rows.append(row)
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "out"
    with SimProcess(*SIM, "--tool-calls", "1") as sim:
        generate(inp, out, sim.url, "--format", fmt)
    assert list(out.glob(f"data-*.{fmt}"))
    tools = inspect_tools(out)
    assert tools["undeclared"] == 10  # a forced call to a function the row does not declare
    assert tools["bad_arguments"] == 10
    assert {e["id"] for e in tools["examples"]["undeclared"]} <= {f"a{i}" for i in range(0, 30, 3)}


def test_a_malformed_tool_message_fails_in_one_line(agentic_file, tmp_path):
    bad = agentic_row(7)
    del bad["messages"][3]["tool_call_id"]
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(agentic_file.read_bytes() + orjson.dumps({**bad, "id": "bad"}) + b"\n")
    p = genbench("generate", "-i", str(inp), "--out", str(tmp_path / "o"),
                 "--url", "http://127.0.0.1:9/v1")  # fmt: skip
    assert p.returncode == 2
    line = p.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, p.stderr
    assert f"{inp}, line {N + 1}: field 'messages[3].tool_call_id'" in line


# -- run and plan on an agentic file --------------------------------------------------------


def test_run_measures_on_the_files_agentic_requests(agentic_file, tmp_path):
    from genbench.generate.input.tools import wire
    from genbench.sim.replies import count_prompt

    out, builtin = tmp_path / "run", tmp_path / "builtin"
    flags = ("--lengths", "32", "--prompts-per-length", "9", "--skip", "warmup,sweep")
    with SimProcess(*SIM, "--tool-calls", "1") as sim:
        p = genbench("run", "--url", sim.url, "--workload", str(agentic_file), *flags,
                     "--out", str(out), timeout=300)  # fmt: skip
        assert p.returncode == 0, p.stderr[-3000:]
        said = p.stdout + p.stderr  # the console names the workload, start and summary
        assert f"(workload {agentic_file})" in said, said[-3000:]
        assert f"workload {agentic_file}: {N} rows, {N} agentic" in said, said[-3000:]
        p = genbench("run", "--url", sim.url, *flags, "--out", str(builtin), timeout=300)
        assert "workload" not in p.stdout, p.stdout[-3000:]
        assert p.returncode == 0, p.stderr[-3000:]
    # a run on the file and one on the built-in prompts measured different workloads
    p = genbench("compare", str(builtin), str(out))
    assert p.returncode == 2 and "workload.prompts builtin" in p.stderr, p.stderr
    doc = json.loads((out / "result.json").read_text())
    wl = doc["workload"]
    assert (wl["prompts"], wl["rows"], wl["agentic_rows"]) == ("file", N, N)
    # one request per assistant turn of the original: its calls and its answer
    assert wl["requests"] == sum(calls_of(i) + 1 for i in range(N))
    recs = [r for r in read_records(out / "requests.jsonl") if r.phase == "single-32"]
    assert len(recs) == 9 and all(r.ok and r.completion_tokens == 32 for r in recs)
    # the k-th request is the k-th assistant turn's history, tools sent with it
    want = []
    for i in range(3):
        msgs = agentic_row(i)["messages"]
        want += [count_prompt([wire(m) for m in msgs[:j]]) for j, m in enumerate(msgs)
                 if m["role"] == "assistant"]  # fmt: skip
    assert [r.prompt_tokens for r in sorted(recs, key=lambda r: r.t_send)] == want[:9]


def test_plan_counts_the_requests_an_agentic_row_makes(agentic_file, tmp_path):
    out = tmp_path / "pilot"
    with SimProcess(*SIM, "--tool-calls", "2") as sim:
        p = genbench("plan", "--prompts", str(agentic_file), "--url", sim.url,
                     "--concurrency", "8", "--pilot", "60", "--samples", "1000", "--out",
                     str(out), "--bootstrap", "50", "--warmup-time", "0", "--json",
                     timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout[p.stdout.index("{") :])
    recs = read_records(out / "requests.jsonl")
    by_row = Counter(r.extra["row"] for r in recs)
    # a row with one result makes 2 requests (a call, a call the results cannot answer),
    # the others 3 (two calls, the answer): the last record of each row says how many
    last = {r.extra["row"]: r for r in sorted(recs, key=lambda r: r.extra["turn"])}
    assert all(last[k].extra["turns"] == n for k, n in by_row.items())
    assert set(by_row.values()) <= {2, 3} and len(set(by_row.values())) == 2
    per = len(recs) / len(by_row)
    assert any(f"a sample is {per:.2f} requests on average" in n for n in doc["notes"]), doc[
        "notes"
    ]


def test_a_seeded_number_of_calls_per_conversation_is_what_inspect_counts(agentic_file, tmp_path):
    """`--tool-calls 0:3`: each conversation's count drawn from its messages and the seed;
    the same again on a second sim with the same seed, row by row."""
    counts = []
    for run_ in ("a", "b"):
        out = tmp_path / run_
        with SimProcess(*SIM, "--tool-calls", "0:3", "--seed", "7") as sim:
            generate(agentic_file, out, sim.url)
            sim_calls = job_calls(sim)
        rows = rows_once(out)
        tools = inspect_tools(out)
        assert tools["calls"] == sim_calls == sum(r["meta"]["tool_calls"] for r in rows.values())
        assert len(tools["calls_per_row"]) >= 3  # 0, 1, 2, 3 calls (cut by the results)
        counts.append({k: r["meta"]["tool_calls"] for k, r in rows.items()})
    assert counts[0] == counts[1]


def test_a_job_killed_mid_conversation_resumes_each_row_exactly_once(agentic_file, tmp_path):
    """SIGKILL while rows are between their calls: the rerun regenerates the unfinished
    rows from their first request, and every row is written once, whole."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    args = [sys.executable, "-m", "genbench", "generate", "-i", str(agentic_file), "--out",
            str(out), "-c", "8", "--progress-every", "1"]  # fmt: skip
    with SimProcess("--tps", "200", "--per-seq-ms", "0.1", "--ttft-ms", "5", "--output-len",
                    "fixed:10", "--tool-calls", "2") as sim:  # fmt: skip
        env = {**os.environ, "NO_COLOR": "1"}
        proc = subprocess.Popen([*args, "--url", sim.url], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        deadline = time.monotonic() + 120
        data = out / "data-00000.jsonl"
        while not (data.exists() and data.read_bytes().count(b"\n") >= 20):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        done_before = data.read_bytes().count(b"\n")
        assert done_before < N
        generate(agentic_file, out, sim.url)
    rows = rows_once(out)
    for i in range(N):
        conv = rows[f"a{i}"]["conversations"]
        made = [t for t in conv if t.get("tool_calls")]
        assert len(made) == 2 and rows[f"a{i}"]["meta"]["tool_calls"] == 2


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_token_ids_attach_to_every_generated_turn_calls_included(agentic_file, tmp_path, dialect):
    """One training sample per generated turn: a call is one, its ids as served beside it."""
    from genbench.rows import turn_ids

    out = tmp_path / "out"
    served = ("--dialect", "sglang") if dialect == "sglang" else ()
    args = (*SIM, "--tool-calls", "2", "--thinking-tokens", "2", "--token-ids", dialect, *served)
    with SimProcess(*args) as sim:
        generate(agentic_file, out, sim.url, "--token-ids", "on")
    rows = rows_once(out)
    for row in rows.values():
        conv = row["conversations"]
        gen = [i for i, t in enumerate(conv) if t.get("finish_reason")]
        calls = [i for i in gen if conv[i].get("tool_calls")]
        assert len(calls) == 2 and row["meta"]["token_ids"] == "exact"
        samples = turn_ids(row)
        assert [s.turn for s in samples] == gen and all(s.exact for s in samples)
        for s in samples:  # a call's ids: 2 of thinking, its head, 8 argument fragments
            if s.turn in calls:
                assert len(s.generated) == 2 + 1 + 8 and s.generated[2] == 99


def test_export_keeps_the_calls_results_and_tools_for_the_trainer(agentic_file, tmp_path):
    out = tmp_path / "out"
    with SimProcess(*SIM, "--tool-calls", "2", "--token-ids", "vllm") as sim:
        generate(agentic_file, out, sim.url, "--token-ids", "on")
    rows = rows_once(out)
    text, tokens = tmp_path / "sf.jsonl", tmp_path / "tok.jsonl"
    for fmt, dest in (("specforge", text), ("specforge-tokens", tokens)):
        p = genbench("export", str(out), "--format", fmt, "-o", str(dest), "--min-tokens", "0")
        assert p.returncode == 0, p.stderr
    lines = {o["id"]: o for o in map(orjson.loads, text.read_bytes().splitlines())}
    for rid, row in rows.items():
        got = lines[rid]
        assert got["tools"] == TOOLS  # the chat template's `tools`
        want = [t for t in row["conversations"] if t["role"] in ("assistant", "tool")]
        have = [t for t in got["conversations"] if t["role"] in ("assistant", "tool")]
        assert [t.get("tool_calls") for t in have] == [t.get("tool_calls") for t in want]
        assert [t.get("tool_call_id") for t in have] == [t.get("tool_call_id") for t in want]
    # one token sample per generated turn: each call and each answer
    turns = sum(1 for r in rows.values() for t in r["conversations"] if t.get("finish_reason"))
    assert len(tokens.read_bytes().splitlines()) == turns


def test_an_edited_tool_result_is_a_changed_request_on_resume(tmp_path):
    """The results a row replays are part of what it asks: editing one is seen."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    rows = [agentic_row(i) for i in range(6)]
    inp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    with SimProcess(*SIM, "--tool-calls", "1") as sim:
        generate(inp, out, sim.url)
        rows[4]["messages"][3]["content"] = "an edited result"
        inp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
        p = genbench("generate", "-i", str(inp), "--out", str(out), "--url", sim.url)
        assert p.returncode != 0 and "a4" in p.stderr, p.stderr
        generate(inp, out, sim.url, "--input-changed", "regenerate")
    again = [orjson.loads(x) for f in sorted(out.glob("data*.jsonl")) for x in f.read_bytes().splitlines()]  # noqa: E501
    assert sorted(r["id"] for r in again) == [f"a{i}" for i in range(6)]  # each once
    (a4,) = [r for r in again if r["id"] == "a4"]
    results = [t["content"] for t in a4["conversations"] if t["role"] == "tool"]
    assert results == ["an edited result"]


@pytest.mark.parametrize("policy", ["replay", "keep"])
def test_export_keeps_calls_ids_and_tools_under_both_policies_sglang(tmp_path, policy):
    """SGLang's dialect and ids, either policy: every call, call id and the row's tools
    reach the conversations file; under `keep` the input's calls are history, and the
    note says --tool-policy keep kept them (the job ran with --turns all)."""
    inp, out, dest = tmp_path / "in.jsonl", tmp_path / "out", tmp_path / "sf.jsonl"
    inp.write_bytes(b"".join(orjson.dumps(agentic_row(i)) + b"\n" for i in range(12)))
    args = (*SIM, "--tool-calls", "2", "--dialect", "sglang", "--token-ids", "sglang")
    with SimProcess(*args) as sim:
        generate(inp, out, sim.url, "--tool-policy", policy, "--max-tokens", "64")
    rows = {r["id"]: r for f in sorted(out.glob("data*.jsonl")) for r in map(orjson.loads, f.read_bytes().splitlines())}  # noqa: E501
    p = genbench("export", str(out), "--format", "specforge", "-o", str(dest), "--keep-cut",
                 "--min-tokens", "0")  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = {o["id"]: o for o in map(orjson.loads, dest.read_bytes().splitlines())}
    assert sorted(lines) == sorted(rows)
    for rid, row in rows.items():
        got = lines[rid]
        assert got["tools"] == TOOLS
        want = [t for t in row["conversations"] if t["role"] in ("assistant", "tool")]
        have = [t for t in got["conversations"] if t["role"] in ("assistant", "tool")]
        assert [t.get("tool_calls") for t in have] == [t.get("tool_calls") for t in want]
        assert [t.get("tool_call_id") for t in have] == [t.get("tool_call_id") for t in want]
        calls = [c for t in have for c in t.get("tool_calls") or ()]
        assert calls and all(c["id"] for c in calls)
        if policy == "keep":  # the input's own calls, as history (and what the target made)
            orig = {f"orig_{rid[1:]}_{k}" for k in range(calls_of(int(rid[1:])))}
            assert orig <= {c["id"] for c in calls}
    history = [x for x in p.stdout.splitlines() if "came from the input" in x]
    if policy == "keep":
        (note,) = history
        n = sum(calls_of(i) for i in range(12))
        assert f"{n} original tool calls (--tool-policy keep)" in note
        assert "--turns last" not in note
    else:
        assert history == []
