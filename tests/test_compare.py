"""`genbench compare` on real runs of the sim, whose true rates are known (docs/sim.md).

A decode step takes a + b·n seconds for n decoding streams (b = per_seq_ms/1000,
a = 1/tps - b), so a single stream decodes at tps and C streams always in
flight at C / (a + b·C). Two sims that differ only in --tps therefore give a
known ratio for every throughput number compare prints.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import genbench
from tests_helpers import sim_rate_of_phase

from genbench.sim.process import SimProcess, start_all

PER_SEQ_MS = 0.2
SLOW, FAST = 200.0, 400.0
LENGTH = 128
RUN_ARGS = (
    "--skip",
    "warmup",
    "--lengths",
    str(LENGTH),
    "--concurrency",
    "1,4",
    "--sweep-tokens",
    str(LENGTH),
    "--requests-per-slot",
    "3",
)


def sim_args(tps: float) -> tuple[str, ...]:
    # a short prefill: the sustained rate counts the gap between a slot's requests too
    return ("--tps", str(tps), "--per-seq-ms", str(PER_SEQ_MS), "--ttft-ms", "1")


def true_rate(tps: float, c: int) -> float:
    b = PER_SEQ_MS / 1000
    a = 1 / tps - b
    return c / (a + b * c)


def bench(url: str, out: Path, *extra: str) -> Path:
    p = genbench("run", "--url", url, *RUN_ARGS, *extra, "--out", str(out), timeout=180)
    assert p.returncode == 0, p.stderr + p.stdout
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A slow and a fast run of the same workload, and one of another workload."""
    base = tmp_path_factory.mktemp("runs")
    sims = [SimProcess(*sim_args(SLOW)), SimProcess(*sim_args(FAST))]
    start_all(sims)
    try:
        slow = bench(sims[0].url, base / "slow")
        fast = bench(sims[1].url, base / "fast")
        other = genbench(
            "run",
            "--url",
            sims[1].url,
            "--skip",
            "warmup,sweep",
            "--lengths",
            "32",
            "--sweep-tokens",
            str(LENGTH),
            "--out",
            str(base / "other"),
        )
        assert other.returncode == 0, other.stderr
    finally:
        for s in sims:
            s.close()
    return {"slow": slow, "fast": fast, "other": base / "other"}


def compare_json(*args: str) -> dict:
    p = genbench("compare", *args, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def row(doc: dict, key: str) -> dict:
    return next(r for r in doc["rows"] if r["key"] == key)


def test_ratios_match_the_sims_known_speeds(runs):
    doc = compare_json(str(runs["slow"]), str(runs["fast"] / "result.json"))
    assert doc["baseline"] == "slow" and [r["label"] for r in doc["runs"]] == ["slow", "fast"]
    single = row(doc, f"single.{LENGTH}.decode_tps")
    assert single["ratios"][1] == pytest.approx(FAST / SLOW, rel=0.02), single
    assert single["verdicts"][1] == "better"
    for c in (1, 4):
        sustained = row(doc, f"sustained.c{c}.steady_tps")
        # each run's rate from the step model over the streams it kept decoding: between a
        # slot's requests nothing decodes for a few ms, more on a busy host (test_run.py)
        fast, _ = sim_rate_of_phase(runs["fast"], f"sustained-c{c}", FAST, PER_SEQ_MS)
        slow, _ = sim_rate_of_phase(runs["slow"], f"sustained-c{c}", SLOW, PER_SEQ_MS)
        want = fast / slow
        assert want == pytest.approx(true_rate(FAST, c) / true_rate(SLOW, c), rel=0.15)
        assert sustained["ratios"][1] == pytest.approx(want, rel=0.02), sustained
        assert sustained["verdicts"][1] == "better"
        assert row(doc, f"burst.c{c}.output_tps")["ratios"][1] > 1.3
    # faster decoding: shorter gaps between chunks
    itl = row(doc, "latency.c4.itl_p50")
    assert itl["unit"] == "ms" and itl["ratios"][1] < 0.75
    assert itl["verdicts"][1] == "better"
    for r in doc["runs"]:
        assert r["failures"]["failed"] == 0 and r["failures"]["requests"] == 3 + 1 + 3 + 4 + 12


def test_terminal_table_shows_ratios_and_noise_legend(runs):
    p = genbench("compare", str(runs["slow"]), str(runs["fast"]))
    assert p.returncode == 0, p.stderr
    text = p.stdout
    for needle in (
        "single stream",
        f"decode tok/s, {LENGTH} tokens",
        "sustained tok/s, C=4",
        "burst tok/s, C=1",
        "TTFT p99, C=4",
        "ITL p50, C=4",
        "TPOT p50",
        "failures",
        "÷ slow",
        "within the runs' own noise",
    ):
        assert needle in text, needle
    ratio = f"{true_rate(FAST, 4) / true_rate(SLOW, 4):.2f}×"[:-2]  # e.g. "1.8"
    assert ratio in text


def test_a_run_against_itself_is_all_inside_the_noise(runs):
    doc = compare_json(str(runs["fast"]), str(runs["fast"]))
    assert [r["label"] for r in doc["runs"]] == ["fast", "fast#2"]
    for r in doc["rows"]:
        if r["ratios"][1] is not None:
            assert r["ratios"][1] == pytest.approx(1.0)
            assert r["verdicts"][1] == "same", r["key"]


def test_acceptance_length_rows_when_the_server_speculates(sim_factory, tmp_path):
    sims = [
        sim_factory(*sim_args(FAST), "--spec-k", "4", "--spec-accept", accept)
        for accept in ("0.3", "0.9")
    ]
    outs = []
    for i, sim in enumerate(sims):
        out = tmp_path / f"spec{i}"
        p = genbench(
            "run",
            "--url",
            sim.url,
            "--skip",
            "warmup,sweep",
            "--lengths",
            "200",
            "--prompts-per-length",
            "4",
            "--out",
            str(out),
        )
        assert p.returncode == 0, p.stderr
        outs.append(str(out))
    doc = compare_json(*outs, "--force")  # --force: nothing differs, and it changes nothing
    acc = row(doc, "spec.single-200.acceptance_length")
    low, high = acc["values"]
    # 1 + Binomial(K-1, P) tokens per chunk: 1 + 3·P on average
    assert low == pytest.approx(1 + 3 * 0.3, rel=0.1)
    assert high == pytest.approx(1 + 3 * 0.9, rel=0.1)
    assert acc["verdicts"][1] == "better" and acc["rel_noise"][0] is not None


def test_different_workloads_are_refused_unless_forced(runs):
    p = genbench("compare", str(runs["fast"]), str(runs["other"]))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert "different workloads" in lines[0]
    assert "config.lengths [128] in fast vs [32] in other" in lines[0]
    assert "--force" in lines[0]
    forced = genbench("compare", str(runs["fast"]), str(runs["other"]), "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    doc = json.loads(forced.stdout)
    assert doc["forced"] and any("config.lengths" in d for d in doc["workload_differences"])
    text = genbench("compare", str(runs["fast"]), str(runs["other"]), "--force").stdout
    assert "workloads differ" in text


def _one_line_error(p, needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("genbench: error:") and needle in lines[0], lines[0]


def test_bad_inputs_are_one_line_errors(runs, tmp_path):
    good = str(runs["fast"])
    _one_line_error(
        genbench("compare", good, str(tmp_path / "nowhere")), "no such file or run directory"
    )
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    _one_line_error(genbench("compare", good, str(empty_dir)), "an empty directory, not a run")
    other_json = tmp_path / "package.json"
    other_json.write_text('{"name": "left-pad"}')
    _one_line_error(genbench("compare", good, str(other_json)), "not a genbench result")
    not_json = tmp_path / "notes.txt"
    not_json.write_text("hello")
    _one_line_error(genbench("compare", good, str(not_json)), "not a genbench result")
    newer = tmp_path / "newer"
    shutil.copytree(runs["fast"], newer)
    doc = json.loads((newer / "result.json").read_text())
    doc["schema_version"] = 99
    (newer / "result.json").write_text(json.dumps(doc))
    _one_line_error(genbench("compare", good, str(newer)), "schema version 99 is newer")
    torn = tmp_path / "torn"
    shutil.copytree(runs["fast"], torn)
    (torn / "requests.jsonl").write_text("this is not json\n")
    _one_line_error(genbench("compare", good, str(torn)), "not a genbench requests file")
    _one_line_error(genbench("compare", good), "at least two runs")


def test_a_result_without_its_requests_file_still_compares(runs, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(runs["slow"] / "result.json", bare / "result.json")
    doc = compare_json(str(bare), str(runs["fast"]))
    sustained = row(doc, "sustained.c4.steady_tps")
    assert sustained["verdicts"][1] == "better"  # halves are in result.json
    single = row(doc, f"single.{LENGTH}.decode_tps")
    assert single["rel_noise"][0] is None and single["verdicts"][1] == "unknown"
    assert not doc["runs"][0]["has_requests"]
    p = genbench("compare", str(bare), str(runs["fast"]))
    assert "no requests.jsonl for bare" in p.stdout
