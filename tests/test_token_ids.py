"""Token ids end to end against the sim, in each engine's dialect: `generate` keeps, per
generated turn, exactly the ids the server sent, through every path a row takes (resume,
client shards, size shards and Parquet, `--retry-errors`, `inspect --drop`'s clean copy),
and a server without ids still completes the job with its rows marked.

The sim's ids are deterministic (genbench.sim.ids): a generated token's id is its word's,
a prompt's ids follow from the messages sent. So each turn's ids are checked against its
own text and the conversation before it, which the ids path never touches: a lost chunk,
a turn's ids on another turn, a prompt from the wrong request, all fail here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import genbench

from genbench.rows import turn_ids
from genbench.sim.ids import prompt_ids, word_id

SIM = ("--tps", "1000", "--per-seq-ms", "0.2", "--ttft-ms", "5", "--output-len", "uniform:8:40",
       "--thinking-tokens", "5")  # fmt: skip
FAST = ("--retry-backoff", "0.05", "--progress-every", "1")


def rows_in(n: int, turns: int = 2, tag: str = "") -> list[dict[str, Any]]:
    """Multi-turn rows (`--turns all` answers every user turn) with a system turn."""
    out = []
    for i in range(n):
        conv: list[dict[str, Any]] = [{"role": "system", "content": "be brief"}]
        for t in range(turns):
            conv += [{"role": "user", "content": f"{tag} question {i} part {t}"},
                     {"role": "assistant", "content": "an old answer"}]  # fmt: skip
        out.append({"id": f"r{i}", "conversations": conv})
    return out


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def gen(inp: Path, out: Path, url: str, *args: str) -> Any:
    p = genbench("generate", "-i", str(inp), "-o", str(out), "--url", url, *FAST, *args,
                 timeout=120)  # fmt: skip
    return p


def data_rows(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in sorted(out.glob("data*.jsonl")):
        rows += [orjson.loads(line) for line in p.read_bytes().splitlines()]
    for p in sorted(out.glob("data*.parquet")):
        import pyarrow.parquet as pq

        rows += pq.read_table(p).to_pylist()
    return rows


def assert_token_exact(row: dict[str, Any], turns: int) -> None:
    """Every generated turn's ids are the sim's for its text and for the prompt it was sent."""
    assert row["meta"]["token_ids"] == "exact", row["meta"]
    got = turn_ids(row)
    assert len(got) == turns
    conv = row["conversations"]
    for t in got:
        turn = conv[t.turn]
        text = (turn.get("reasoning_content") or "") + (turn.get("content") or "")
        assert t.generated == [word_id(w) for w in text.split()], row["id"]
        sent = [{"role": m["role"], "content": m["content"]} for m in conv[: t.turn]]
        assert t.prompt == prompt_ids(sent), row["id"]
        assert t.exact and t.finish_reason in ("stop", "length")
    assert sum(len(t.generated or ()) for t in got) == row["meta"]["completion_tokens"]


@pytest.mark.parametrize(
    ("dialect", "fmt"),
    [("vllm", "jsonl"), ("sglang", "parquet")],
)
def test_every_turn_keeps_the_ids_the_server_sent(sim_factory, tmp_path, dialect, fmt):
    pytest.importorskip("pyarrow")
    # vLLM's chunks carry several ids each under speculative decoding (--spec-k)
    extra = ("--dialect", "sglang") if dialect == "sglang" else ("--spec-k", "3")
    # LOOP rows take the sim's slow path (a fault script), the others its pre-encoded one
    sim = sim_factory(*SIM, "--token-ids", dialect, *extra, "--fault", "loop:at=3,match=LOOP")
    rows = rows_in(12) + rows_in(3, tag="LOOP")[:3]
    for i, r in enumerate(rows):
        r["id"] = f"r{i}"
    inp = write(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out"
    p = gen(inp, out, sim.url, "-c", "6", "--format", fmt, "--max-tokens", "30")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "token ids yes" in p.stdout + p.stderr
    got = data_rows(out)
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in rows)
    for r in got:
        assert_token_exact(r, 2)
    log = (out / ".genbench" / "requests.jsonl").read_bytes()
    assert b"token_ids" not in log  # the ids live in the rows, not the request log


def test_a_server_without_ids_completes_the_job_and_says_so(sim_factory, tmp_path):
    sim = sim_factory(*SIM)  # --token-ids none: llama.cpp's chat endpoint
    inp = write(tmp_path / "in.jsonl", rows_in(6))
    out = tmp_path / "out"
    p = gen(inp, out, sim.url)
    assert p.returncode == 0, p.stderr
    assert "token ids none" in p.stdout + p.stderr and "not token-exact" in p.stdout + p.stderr
    got = data_rows(out)
    assert len(got) == 6
    for r in got:
        assert r["meta"]["token_ids"] == "none"
        assert all(t.prompt is None and t.generated is None for t in turn_ids(r))
        assert len(turn_ids(r)) == 2  # still one sample per generated turn, marked
    # --token-ids on refuses it, in one line, before any request, nothing written
    p = gen(inp, tmp_path / "refused", sim.url, "--token-ids", "on")
    assert p.returncode == 10, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "--token-ids on" in lines[0] and "gives no token ids" in lines[0]
    assert not list((tmp_path / "refused").glob("data*"))


def test_off_asks_for_none(sim_factory, tmp_path):
    sim = sim_factory(*SIM, "--token-ids", "vllm")
    inp = write(tmp_path / "in.jsonl", rows_in(3, turns=1))
    p = gen(inp, tmp_path / "out", sim.url, "--token-ids", "off")
    assert p.returncode == 0, p.stderr
    for r in data_rows(tmp_path / "out"):
        assert r["meta"]["token_ids"] == "none" and "token_ids" not in r["conversations"][-1]


def test_resume_shards_and_retry_errors_keep_the_ids(sim_factory, tmp_path):
    sim = sim_factory(*SIM, "--token-ids", "vllm")
    rows = rows_in(30)
    rows[7]["conversations"][1]["content"] += " FAILME"
    inp = write(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out"  # shared by two client shards, each in two runs
    failing = sim_factory(*SIM, "--token-ids", "vllm", "--fault",
                          "http:status=400,match=FAILME")  # fmt: skip
    for shard in ("1/2", "2/2"):
        p = gen(inp, out, failing.url, "--shard", shard, "--limit", "6", "--part-size", "4KB")
        assert p.returncode == 0, p.stderr
    first = {r["id"]: r for r in data_rows(out)}
    tried = any(b'"r7"' in e.read_bytes() for e in out.glob("errors-*.jsonl"))
    assert len(first) == 12 - tried  # r7 fails, when among its shard's first 6
    for shard in ("1/2", "2/2"):  # resumed: the rest, the failed row left in errors
        p = gen(inp, out, failing.url, "--shard", shard, "--part-size", "4KB")
        assert p.returncode == 0, p.stderr
    assert len(list(out.glob("data-*.jsonl"))) > 2  # size shards of both client shards
    (errors,) = [e for e in out.glob("errors-*.jsonl") if b'"r7"' in e.read_bytes()]
    shard = errors.stem.removeprefix("errors-").replace("of", "/")
    # --retry-errors on a server that answers it now: the row comes with its ids
    args = ("--shard", shard)
    p = gen(inp, out, sim.url, *args, "--retry-errors", "--part-size", "4KB")
    assert p.returncode == 0, p.stderr
    got = {r["id"]: r for r in data_rows(out)}
    assert sorted(got) == sorted(r["id"] for r in rows)
    for rid, r in got.items():
        assert_token_exact(r, 2)
        if rid in first:
            assert r == first[rid]  # resumed: the first run's rows untouched


def test_the_clean_copy_keeps_the_ids(sim_factory, tmp_path):
    sim = sim_factory(*SIM, "--token-ids", "vllm", "--fault", "loop:at=2,period=2,match=LOOP")
    rows = rows_in(8, turns=1) + rows_in(3, turns=1, tag="LOOP")
    for i, r in enumerate(rows):
        r["id"] = f"r{i}"
    inp = write(tmp_path / "in.jsonl", rows)
    out, clean = tmp_path / "out", tmp_path / "clean"
    p = gen(inp, out, sim.url, "--max-tokens", "200", "--param", "ignore_eos=true")
    assert p.returncode == 0, p.stderr
    p = genbench("inspect", str(out), "--drop", "loops", "--out", str(clean), "--json",
                 timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    before = {r["id"]: r for r in data_rows(out)}
    kept = data_rows(clean)
    assert 0 < len(kept) < len(before)
    for r in kept:
        assert r == before[r["id"]]
        assert_token_exact(r, 1)


def test_plans_storage_forecast_counts_the_ids(sim_factory, tmp_path):
    """The pilot keeps ids as the job will: its bytes per sample are the job's, within 5%;
    and inspect's count of the job is its files' size, ids and all."""
    sim = sim_factory(*SIM, "--token-ids", "vllm")
    n = 120
    inp = write(tmp_path / "in.jsonl", rows_in(n))
    p = genbench("plan", "--prompts", str(inp), "--url", sim.url, "--concurrency", "8",
                 "--pilot", "60", "--samples", str(n), "--out", str(tmp_path / "plan"),
                 "--warmup-time", "1",
                 "--bootstrap", "50", "--json", timeout=180)  # fmt: skip
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert "token ids included" in plan["model"]["storage_basis"]
    forecast = plan["rows"][0]["storage"]["jsonl_bytes_per_sample"]
    out = tmp_path / "out"
    p = gen(inp, out, sim.url, "-c", "8")
    assert p.returncode == 0, p.stderr
    size = sum(f.stat().st_size for f in out.glob("data-*.jsonl"))
    rows = data_rows(out)
    assert all(r["meta"]["token_ids"] == "exact" for r in rows)
    ids_bytes = sum(len(orjson.dumps(t.prompt)) + len(orjson.dumps(t.generated))
                    for r in rows for t in turn_ids(r))  # fmt: skip
    assert ids_bytes > 0.2 * size  # far more than 5%: a forecast without them would fail
    assert forecast == pytest.approx(size / n, rel=0.05)
    p = genbench("inspect", str(out), "--json", "--save", str(tmp_path / "i.json"), timeout=120)
    assert p.returncode == 0, p.stderr
    st = json.loads(p.stdout)["storage"]
    assert st["jsonl_bytes"] == pytest.approx(size)
    assert "token ids" in st["basis"]


@pytest.mark.parametrize(
    ("flags", "want"),
    [(("--token-ids", "vllm"), "vllm"), (("--token-ids", "sglang", "--dialect", "sglang"),
     "sglang"), ((), None)],
    ids=["vllm", "sglang", "none"],
)
def test_check_says_whether_and_how_the_server_gives_ids(sim_factory, flags, want):
    sim = sim_factory(*SIM, *flags)
    p = genbench("check", "--url", sim.url, "--json", timeout=60)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["token_ids"] == want
    assert (doc["token_ids_note"] is None) == (want is not None)
    p = genbench("check", "--url", sim.url, timeout=60)
    line = next(x for x in p.stdout.splitlines() if "token ids" in x)
    assert ("yes" in line) == (want is not None) and ("not token-exact" in line) == (not want)
