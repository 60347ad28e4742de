"""The real consumer: SpecForge's own data pipeline reads what `genbench export` made of a
real vLLM job, and the server itself says the ids are the ones it sees and generates.

A job on the vLLM (CPU) test server with thinking on, single- and multi-turn rows, one
with a system turn, sampled with a fixed seed and one request at a time (so that the
server, asked again, generates the same ids). Then:

* SpecForge 0.2.0 (the PyPI wheel, in its own venv on the vLLM venv's torch:
  scripts/trainers.sh) reads the token-exact export on its pre-tokenized path: every
  sample is accepted (its DFlash filter included), rows in = rows out, and the ids it
  supervises are the ids vLLM generated, id for id;
* vLLM, asked directly, renders each turn's conversation to the prompt ids kept, and
  generates from them the ids kept;
* SpecForge's conversations entry point opens the text export as it is, and adds no
  system prompt of its own;
* speculators 0.9.0's `speculators prepare-data` data path passes the speculators export through,
  every sample, ids unchanged;
* inspect's retokenization drift, measured with the server's tokenizer, is the drift the
  tokenizer library itself finds.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from conftest import REPO, genbench

from genbench.export.samples import samples

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

MODEL_DIR = Path(os.environ.get("GENBENCH_VLLM_MODEL", REPO / ".cache" / "vllm-model"))
CONSUMER = Path(__file__).with_name("trainer_consumer.py")
SYSTEM = "You answer in one short sentence."
MAX_TOKENS = 48
# The random-weight model never emits its end-of-sequence id by itself: a turn stops when
# it samples one of these (as a trained model stops on EOS), so the job has turns that stop
# long, stop short and are cut. Each row samples with its own seed: the server, asked
# again, samples the same ids.
STOP_IDS = list(range(3000, 3120))


def _prompts() -> list[dict[str, Any]]:
    def row(rid: str, seed: int, *msgs: tuple[str, str]) -> dict[str, Any]:
        conv = [{"role": r, "content": c} for r, c in msgs]
        return {"id": rid, "conversations": conv, "params": {"seed": seed}}

    rows = [row(f"s{i}", i, ("user", f"Tell me about rivers, {i}.")) for i in range(8)]
    rows.append(row("sys", 8, ("system", SYSTEM), ("user", "What is a lake?")))
    for i in range(3):
        rows.append(row(f"m{i}", 9 + i, ("user", f"Name a mountain, {i}."),
                        ("assistant", "An old answer, regenerated."),
                        ("user", f"And how high is it, {i}?")))  # fmt: skip
    return rows


SEEDS = {r["id"]: r["params"]["seed"] for r in _prompts()}
ROWS, TURNS = 12, 15


@pytest.fixture(scope="module")
def job(vllm_server, tmp_path_factory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("export-vllm")
    inp = d / "prompts.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in _prompts()))
    out = d / "regen"
    p = genbench("generate", "-i", str(inp), "-o", str(out), "--url", vllm_server.url,
                 "--model", vllm_server.model, "-c", "1", "--temperature", "1",
                 "--max-tokens", str(MAX_TOKENS), "--thinking", "--turns", "all",
                 "--param", f"stop_token_ids={json.dumps(STOP_IDS)}", timeout=600)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    files = sorted(out.glob("data-*.jsonl"))
    rows = [orjson.loads(x) for f in files for x in f.read_bytes().splitlines()]
    assert len(rows) == ROWS
    turns = {s.id: (r, s) for r in rows for s in samples(r)}
    assert len(turns) == TURNS and all(s.exact for _, s in turns.values())
    return {"dir": d, "out": out, "rows": rows, "turns": turns, "server": vllm_server}


@pytest.fixture(scope="module")
def trainers_python(job) -> str:
    """The trainers' venv (SpecForge, speculators), set up (cached) after the vLLM venv it
    builds on."""
    log = job["dir"] / "trainers-setup.log"
    with log.open("w") as f:
        rc = subprocess.run(
            ["bash", str(REPO / "scripts" / "trainers.sh"), "setup"],
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=900,
        ).returncode
    if rc != 0:
        pytest.fail(f"scripts/trainers.sh setup failed ({rc}):\n{log.read_text()[-3000:]}")
    py = subprocess.run(
        ["bash", str(REPO / "scripts" / "trainers.sh"), "python"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return py


def consume(py: str, *args: str) -> dict[str, Any]:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    p = subprocess.run(
        [py, str(CONSUMER), *args], capture_output=True, text=True, timeout=600, env=env
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def export(job: dict[str, Any], *args: str) -> tuple[Path, dict[str, Any]]:
    name = "-".join(a.strip("-") for a in args) or "default"
    target = job["dir"] / f"{name}.jsonl"
    p = genbench("export", str(job["out"]), "-o", str(target), "--json", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    return target, json.loads(p.stdout)


def test_specforge_reads_every_token_sample_and_supervises_vllms_ids(job, trainers_python) -> None:
    path, doc = export(job, "--keep-cut", "--min-turn-tokens", "0")
    assert doc["written"] == doc["turns"] == TURNS
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    got = consume(trainers_python, "tokens", str(path))
    # EAGLE-3 takes every sample; DFlash's own filter every one with two supervised ids or
    # more (a turn that stopped at once has one): the order kept, nothing changed
    one = [x["id"] for x in lines if sum(x["loss_mask"]) < 2]
    assert one, "the job has a turn that stopped at its first id"
    for algo, want in (("eagle3", lines), ("dflash", [x for x in lines if x["id"] not in one])):
        assert [(p["input_ids"], p["loss_mask"]) for p in got[algo]] == [
            (x["input_ids"], x["loss_mask"]) for x in want
        ], algo
    for line, payload in zip(lines, got["eagle3"], strict=True):
        _, s = job["turns"][line["id"]]
        ids, mask = payload["input_ids"], payload["loss_mask"]
        assert [i for i, m in zip(ids, mask, strict=True) if m] == s.generated
        assert [i for i, m in zip(ids, mask, strict=True) if not m] == s.prompt


def _messages(row: dict[str, Any], turn: int) -> list[dict[str, Any]]:
    """What generate sent for the turn: the conversation before it, as text."""
    return [{"role": m["role"], "content": m["content"]} for m in row["conversations"][:turn]]


def test_vllm_itself_renders_the_prompt_ids_and_generates_the_ids(job) -> None:
    srv = job["server"]
    with httpx.Client(timeout=120) as c:
        for sid, (row, s) in job["turns"].items():
            r = c.post(
                f"{srv.root}/tokenize",
                json={
                    "model": srv.model,
                    "messages": _messages(row, s.turn),
                    "add_generation_prompt": True,
                    "chat_template_kwargs": {"enable_thinking": True},
                },
            )
            assert r.status_code == 200, r.text
            assert r.json()["tokens"] == s.prompt, sid
            r = c.post(
                f"{srv.url}/completions",
                json={
                    "model": srv.model,
                    "prompt": s.prompt,
                    "max_tokens": MAX_TOKENS,
                    "temperature": 1,
                    "seed": SEEDS[row["id"]],
                    "stop_token_ids": STOP_IDS,
                    "return_token_ids": True,
                },
            )
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["token_ids"] == s.generated, sid


def test_specforge_opens_the_conversations_and_adds_no_system_prompt(job, trainers_python) -> None:
    path, doc = export(job, "--format", "specforge", "--keep-cut", "--min-turn-tokens", "0")
    assert doc["written"] == ROWS and doc["system"] == {"sent": 1, "empty": ROWS - 1, "none": 0}
    got = consume(trainers_python, "text", str(path), str(MODEL_DIR), "qwen")["samples"]
    assert len(got) == ROWS  # rows in = rows out (SpecForge shuffles them)
    texts = [g["text"] for g in got]
    assert not any("You are a helpful assistant" in t for t in texts)
    assert sum(SYSTEM in t for t in texts) == 1
    assert all(sum(g["loss_mask"]) > 0 for g in got)
    for row in job["rows"]:
        user = row["conversations"][-2]["content"]
        assert sum(user in t for t in texts) == 1, user


def test_default_rules_leave_cut_and_short_turns_out_and_count_them(job, trainers_python) -> None:
    path, doc = export(job)
    turns = [s for _, s in job["turns"].values()]
    cut = [s for s in turns if s.finish_reason == "length"]
    short = [s for s in turns if len(s.generated) < 16]
    kept = [s for s in turns if s not in cut and s not in short]
    assert cut and short and kept and len(cut) + len(kept) < TURNS  # the job has every kind
    assert doc["counted"]["cut"] == len(cut) and doc["counted"]["short"] == len(short)
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert [x["id"] for x in lines] == [s.id for s in kept]
    assert doc["written"] == len(kept) and json.loads(Path(doc["summary"]).read_text()) == doc
    got = consume(trainers_python, "tokens", str(path))
    assert len(got["dflash"]) == len(kept)  # DFlash's own filter takes every one


def test_inspect_reports_fidelity_and_the_drift_the_tokenizer_finds(job, trainers_python) -> None:
    srv = job["server"]
    p = genbench(
        "inspect",
        str(job["out"]),
        "--url",
        srv.root,
        "--json",
        "--save",
        str(job["dir"] / "inspect.json"),
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    f = json.loads(p.stdout)["fidelity"]
    assert (f["rows"], f["rows_token_exact"]) == (ROWS, ROWS)
    assert (f["turns"], f["turns_token_exact"]) == (TURNS, TURNS)
    assert f["turns_cut"] == sum(s.cut for _, s in job["turns"].values())
    d = f["drift"]
    assert d["checked"] == TURNS and d["text_not_in_ids"] == 0, d
    ids = {sid: s.generated for sid, (_, s) in job["turns"].items()}
    (job["dir"] / "ids.json").write_text(json.dumps(ids))
    again = consume(trainers_python, "roundtrip", str(job["dir"] / "ids.json"), str(MODEL_DIR))
    assert d["drifted"] == sum(again["drifted"].values()), (d, again)


def test_speculators_prepare_data_passes_every_sample_through(job, trainers_python) -> None:
    path, doc = export(job, "--format", "speculators", "--keep-cut", "--min-turn-tokens", "0")
    assert doc["written"] == TURNS
    lines = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    freq = str(job["dir"] / "token_freq.pt")
    got = consume(trainers_python, "speculators", str(path), str(MODEL_DIR), freq)["samples"]
    key = lambda x: (x["input_ids"], x["loss_mask"])  # noqa: E731 - it shuffles: compare sorted
    assert sorted(map(key, got)) == sorted(map(key, lines))
    for x in lines:
        _, s = job["turns"][x["id"]]
        assert x["primary_id"] == str(s.row_id) and x["metadata"]["turn"] == s.turn
