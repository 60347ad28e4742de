"""`run` without -c climbs (docs/results.md "The climb"): on a sim whose best concurrency is
384 (docs/sim.md "KV cache"), it names a knee within one doubling of it, with the
evidence, and `plan` rates the job at that knee."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import genbench

from genbench.sim.process import SimProcess

# run's built-in prompts average 36 tokens: 15,360 / (36 + 4) = 384; a decode step of
# 76.7 ms + 0.2 ms per stream: throughput still rises up to there
SIM = ["--tps", "13", "--per-seq-ms", "0.2", "--ttft-ms", "20", "--kv-tokens", "15360",
       "--max-batch", "4096"]  # fmt: skip


def test_run_without_c_names_a_knee_within_one_doubling_of_the_best(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with SimProcess(*SIM) as sim:
        p = genbench("run", "--url", sim.url, "--skip", "warmup,single", "--shape", "sustained",
                     "--sweep-tokens", "4", "--requests-per-slot", "2", "-o", str(out),
                     timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((out / "result.json").read_text())
    climb = doc["climb"]
    assert 192 <= climb["knee"] <= 768, climb
    assert [lv["concurrency"] for lv in climb["levels"]][:3] == [1, 2, 4]  # doubling from 1
    assert doc["sweep"]["sustained"]["knee"] == climb["knee"]  # one knee, not two readings
    assert f"climb: knee at C={climb['knee']}" in p.stdout
    plan = genbench("plan", "--from", str(out), "--samples", "1000", "--tokens-per-sample", "4",
                    "-o", str(tmp_path / "plan"))  # fmt: skip
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert f"C={climb['knee']} chosen: the run's climb found its knee" in plan.stdout
