"""`genbench export` and inspect's token fidelity on a real job against two sims, one that
gives token ids the vLLM way and one that gives none (llama.cpp's chat endpoint): the job
completes with `--token-ids auto`, inspect says how many rows are not token-exact, and the
token formats write exactly the turns served with ids, the sim's own ids, id for id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import genbench

from genbench.rows import turn_ids
from genbench.sim.process import SimProcess, start_all, stop_all

N = 40
FAST = (
    "--tps",
    "2000",
    "--per-seq-ms",
    "0.05",
    "--ttft-ms",
    "1",
    "--thinking-tokens",
    "12",
    "--output-len",
    "uniform:4:60",
)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("export-sim")
    sims = [SimProcess(*FAST, "--token-ids", "vllm"), SimProcess(*FAST, "--token-ids", "none")]
    start_all(sims)
    try:
        inp = d / "prompts.jsonl"
        rows = [
            {"id": f"r{i:02d}", "conversations": [{"role": "user", "content": f"q {i}"}]}
            for i in range(N)
        ]
        inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out = d / "regen"
        p = genbench(
            "generate",
            "-i",
            str(inp),
            "-o",
            str(out),
            "--url",
            sims[0].url,
            "--url",
            sims[1].url,
            "-c",
            "4",
            "--max-tokens",
            "40",
            "--token-ids",
            "auto",
            timeout=180,
        )
        assert p.returncode == 0, p.stdout + p.stderr
    finally:
        stop_all(sims)
    got = [
        orjson.loads(x)
        for f in sorted(out.glob("data-*.jsonl"))
        for x in f.read_bytes().splitlines()
    ]
    assert len(got) == N
    with_ids = [r for r in got if r["meta"]["server"] == sims[0].url]
    assert with_ids and len(with_ids) < N  # both servers served rows
    return {"dir": d, "out": out, "rows": got, "with_ids": with_ids}


def run(*args: str) -> dict[str, Any]:
    p = genbench(*args, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def test_inspect_counts_the_rows_that_are_not_token_exact(job) -> None:
    doc = run("inspect", str(job["out"]), "--save", str(job["dir"] / "inspect.json"))
    f = doc["fidelity"]
    n_ids = len(job["with_ids"])
    assert (f["rows"], f["rows_token_exact"], f["rows_not_token_exact"]) == (N, n_ids, N - n_ids)
    assert f["rows_by_token_ids"] == {"exact": n_ids, "none": N - n_ids}
    assert (f["turns_token_exact"], f["turns_without_ids"]) == (n_ids, N - n_ids)
    assert f["drift"] is None  # no --url: not measured


def test_token_export_writes_the_turns_served_with_ids_id_for_id(job) -> None:
    target = job["dir"] / "train.jsonl"
    doc = run("export", str(job["out"]), "-o", str(target), "--keep-cut", "--min-turn-tokens", "0")
    n_ids = len(job["with_ids"])
    assert doc["counted"]["no_ids"] == doc["left_out"]["no_ids"] == N - n_ids
    lines = [orjson.loads(x) for x in target.read_bytes().splitlines()]
    want = {f"{r['id']}#{t.turn}": t for r in job["with_ids"] for t in turn_ids(r)}
    assert len(lines) == doc["written"] == n_ids == len(want)
    for line in lines:
        t = want[line["id"]]
        assert line["input_ids"] == t.prompt + t.generated
        assert line["loss_mask"] == [0] * len(t.prompt) + [1] * len(t.generated)


def test_the_text_export_keeps_every_row_ids_or_not(job) -> None:
    target = job["dir"] / "conv.jsonl"
    doc = run(
        "export",
        str(job["out"]),
        "--format",
        "specforge",
        "-o",
        str(target),
        "--keep-cut",
        "--min-turn-tokens",
        "0",
    )
    assert doc["written"] == N and doc["left_out"]["no_ids"] == 0
    assert len(Path(target).read_bytes().splitlines()) == N


def test_bad_input_is_one_line_and_no_file_is_left(job, tmp_path) -> None:
    bad = tmp_path / "data-00000.jsonl"
    bad.write_text('{"id": "x", "conversations": [], "meta": {}}\n')
    p = genbench("export", str(tmp_path), "-o", str(tmp_path / "t.jsonl"))
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "data-00000.jsonl, line 1" in p.stderr
    assert not (tmp_path / "t.jsonl").exists() and not list(tmp_path.glob("*.tmp"))
    p = genbench("export", str(job["out"]), "--format", "sharegpt")
    assert (
        p.returncode == 2 and "expected one of specforge-tokens, specforge, speculators" in p.stderr
    )


def test_a_server_without_a_detokenizer_leaves_the_drift_unmeasured_in_one_line(
    job, sim_factory
) -> None:
    sim = sim_factory(*FAST)  # the sim tokenizes (SGLang's /tokenize) but has no /detokenize
    p = genbench("inspect", str(job["out"]), "--url", sim.url, "--save", str(job["dir"] / "i.json"))
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(x for x in p.stdout.splitlines() if x.startswith("retokenization drift"))
    assert "not measured" in line and "/detokenize" in line and "404" in line
    d = json.loads((job["dir"] / "i.json").read_text())["fidelity"]["drift"]
    assert d["checked"] == 0 and "/detokenize" in d["error"]


def test_the_report_shows_the_token_exact_rows(job) -> None:
    run("inspect", str(job["out"]))  # inspect.json in the directory, for the report
    html = job["dir"] / "r.html"
    p = genbench("report", str(job["out"]), "-o", str(html))
    assert p.returncode == 0, p.stdout + p.stderr
    n = len(job["with_ids"])
    tile = '<div class="k">token-exact rows</div><div class="v">' + f"{n:,} of {N:,}</div>"
    assert tile in html.read_text()


def test_a_server_without_usage_gives_unchecked_rows_with_their_prompt_count(
    tmp_path, sim_factory
) -> None:
    """No usage (vLLM's ids all the same): the rows are unchecked, counted apart from the
    token-exact ones, and their prompt count is the prompt ids' length, not 0."""
    sim = sim_factory(*FAST, "--token-ids", "vllm", "--fault", "no-usage")
    inp, out = tmp_path / "p.jsonl", tmp_path / "out"
    inp.write_text(
        "".join(
            json.dumps({"id": f"u{i}", "conversations": [{"role": "user", "content": f"q {i}"}]})
            + "\n"
            for i in range(6)
        )
    )
    p = genbench("generate", "-i", str(inp), "-o", str(out), "--url", sim.url, "--max-tokens",
                 "40", timeout=180)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [orjson.loads(x) for f in sorted(out.glob("data-*.jsonl")) for x in f.read_bytes().splitlines()]  # noqa: E501
    assert len(rows) == 6
    for r in rows:
        (t,) = turn_ids(r)
        assert r["meta"]["token_ids"] == "unchecked" and r["meta"]["tokens_estimated"]
        assert r["meta"]["prompt_tokens"] == len(t.prompt) > 0
    doc = run("inspect", str(out), "--save", str(tmp_path / "i.json"))
    f = doc["fidelity"]
    assert (f["rows_token_exact"], f["rows_unchecked"], f["turns_unchecked"]) == (0, 6, 6)
    assert f["turns_token_exact"] == 0 and doc["storage"]["tokens"]["prompt"] > 0
    p = genbench("inspect", str(out), "--save", str(tmp_path / "j.json"))
    line = next(x for x in p.stdout.splitlines() if x.startswith("token ids"))
    assert line.startswith("token ids: 0 of 6 rows token-exact, 6 unchecked")
    target = tmp_path / "t.jsonl"
    p = genbench("export", str(out), "-o", str(target), "--keep-cut", "--min-turn-tokens", "0")
    assert p.returncode == 0, p.stderr
    assert "6 samples written with ids no usage checked" in p.stdout
    doc = json.loads((tmp_path / "t.jsonl.export.json").read_text())
    assert doc["ids"]["unchecked_samples"] == doc["written"] == 6
    run("inspect", str(out))  # inspect.json in the directory, for the report
    html = tmp_path / "r.html"
    p = genbench("report", str(out), "-o", str(html))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "unchecked (no usage) 6" in html.read_text()
