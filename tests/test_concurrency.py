"""The job finds the server's best concurrency and holds it (issue #47), against sims with a
KV cache whose best concurrency is known (docs/sim.md "KV cache"): C* = K / (P + L).

Each sim: P = 36 prompt tokens (32 words + 4), L = 16 output tokens, K = 19,968 tokens,
so C* = 384. A decode step costs 20 ms + 0.35 ms per stream, so throughput still rises
up to C* (192 streams make 2,200 tok/s, 384 make 2,490): at 384 streams a wave of 16
tokens takes 2.5 s and the client reads 2,500 chunks/s (a 2-core host keeps up). The
fixed part is small beside the streams' so that a few requests a step out of phase with
the rest (auto's first ones) cost little: this sim's requests end in waves. The
fixed and the auto job run at the same time on twin sims, so a busy host slows both
alike."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from html import escape
from pathlib import Path

import orjson
from conftest import genbench
from tests_helpers import sim_metric

from genbench.plan.document import plan_settings
from genbench.report.job_page import job_sections
from genbench.sim.process import SimProcess, start_all, stop_all

C_STAR, L = 384, 16
K = C_STAR * (36 + L)
SIM = ["--tps", "49.14", "--per-seq-ms", "0.35", "--ttft-ms", "20", "--kv-tokens", str(K),
       "--max-batch", "4096", "--output-len", f"fixed:{L}"]  # fmt: skip


def _input(path: Path, rows: int) -> Path:
    with path.open("w") as f:
        for i in range(rows):
            words = " ".join([f"w{i}"] + ["word"] * 31)  # 32 words: 36 prompt tokens
            f.write(json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": words}]}))
            f.write("\n")
    return path


def _generate(inp: Path, out: Path, url: str, c: str) -> subprocess.Popen[str]:
    args = ["generate", "-i", str(inp), "-o", str(out), "--url", url, "--max-tokens", str(L),
            "-c", c, "--json"]  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "genbench", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def _result(p: subprocess.Popen[str]) -> dict:
    stdout, stderr = p.communicate(timeout=180)
    assert p.returncode == 0, stderr[-3000:]
    return json.loads(stdout)


def _ids(out: Path) -> list[str]:
    lines = [x for f in out.glob("data*.jsonl") for x in f.read_bytes().split(b"\n") if x]
    return [orjson.loads(x)["id"] for x in lines]


def test_auto_ends_within_5_percent_of_the_best_fixed_concurrency(tmp_path: Path) -> None:
    sims = [SimProcess(*SIM), SimProcess(*SIM)]
    start_all(sims)
    try:
        inp = _input(tmp_path / "in.jsonl", 4 * C_STAR)
        fixed = _generate(inp, tmp_path / "fixed", sims[0].url, str(C_STAR))
        auto = _generate(inp, tmp_path / "auto", sims[1].url, "auto")
        got_fixed, got_auto = _result(fixed), _result(auto)
        preempted = [sim_metric(s.root, "num_preemptions_total") for s in sims]
        busy = [sim_metric(s.root, "decode_busy_seconds_total") for s in sims]
    finally:
        stop_all(sims)
    assert got_auto["done"] == 4 * C_STAR
    assert sorted(_ids(tmp_path / "auto")) == sorted(f"r{i}" for i in range(4 * C_STAR))
    changes = got_auto["concurrency"]
    assert changes and "KV cache holds" in changes[0]["why"]  # from its first requests
    assert changes[-1]["new"] == C_STAR  # found, and held: never past the knee
    assert all(c["new"] <= C_STAR for c in changes)
    assert preempted == [0.0, 0.0]
    # the job's time on the server's clock (its decode steps), the host's lag taken out:
    # within 5%; and the wall clock, on a host as busy as it may be, not far off
    assert busy[1] <= 1.05 * busy[0], busy
    assert got_auto["sending_s"] <= 1.25 * got_fixed["sending_s"]


def test_auto_steps_back_when_the_capacity_halves_and_preempts_less(tmp_path: Path) -> None:
    sims = [SimProcess(*SIM), SimProcess(*SIM)]
    start_all(sims)
    rows = 3 * C_STAR
    try:
        inp = _input(tmp_path / "in.jsonl", rows)
        started = time.monotonic()
        fixed = _generate(inp, tmp_path / "fixed", sims[0].url, str(C_STAR))
        auto = _generate(inp, tmp_path / "auto", sims[1].url, "auto")
        # an event, not a clock: both sims are past their first wave at C*, then both halve
        for s in sims:
            while sim_metric(s.root, "generation_tokens_total") <= C_STAR * L + L:
                time.sleep(0.05)
        halved_at = time.monotonic() - started  # at most this far into the auto job
        for s in sims:
            req = urllib.request.Request(s.root + "/sim/kv", data=json.dumps(
                {"kv_tokens": K // 2}).encode(), method="POST")  # fmt: skip
            urllib.request.urlopen(req, timeout=10).close()
        got_fixed, got_auto = _result(fixed), _result(auto)
        preempted = [sim_metric(s.root, "num_preemptions_total") for s in sims]
    finally:
        stop_all(sims)
    assert got_fixed["done"] == got_auto["done"] == rows
    assert sorted(_ids(tmp_path / "auto")) == sorted(f"r{i}" for i in range(rows))
    back = [c for c in got_auto["concurrency"] if c["new"] < c["old"]]
    assert back and "preempted" in back[0]["why"]
    assert got_auto["concurrency"][-1]["new"] <= C_STAR // 2  # it holds what fits now
    assert preempted[1] < preempted[0], preempted
    assert back[0]["at_s"] - halved_at < 60  # within a minute (of the job's clock)
    # the job's report holds the step back and its reason (read from .genbench/runs.jsonl)
    page = "".join(html for _, html, _ in job_sections(tmp_path / "auto", lambda f: ""))
    assert f"{back[0]['old']:,} → {back[0]['new']:,}" in page and escape(back[0]["why"]) in page


# plan's pilot: the same sim scaled down to a knee of 16 (16 × (36 + 16) tokens), a step of
# 5 ms + 0.35 ms per stream, so that a level (4 request lives) takes under a second
PLAN_SIM = ["--tps", "200", "--per-seq-ms", "0.35", "--ttft-ms", "20", "--kv-tokens",
            str(16 * (36 + L)), "--max-batch", "4096", "--output-len", f"fixed:{L}"]  # fmt: skip


def test_plan_auto_climbs_the_pilot_to_the_knee_and_the_plan_carries_it(tmp_path: Path) -> None:
    inp = _input(tmp_path / "in.jsonl", 200)
    with SimProcess(*PLAN_SIM) as sim:
        p = genbench("plan", "--prompts", str(inp), "--url", sim.url, "-c", "auto",
                     "--max-tokens", str(L), "--pilot", "64", "--samples", "1000",
                     "-o", str(tmp_path / "plan"))  # fmt: skip
        # a climb out of time stops below the knee and says so: one level (8 requests of
        # 20 ms + 16 steps of >= 5 ms, one at a time: 0.8 s on the sim's clock) and the
        # next (twice as many) do not fit in half of 3 s
        short = genbench("plan", "--prompts", str(inp), "--url", sim.url, "-c", "auto",
                         "--max-tokens", str(L), "--pilot-max-time", "3", "--samples",
                         "1000", "-o", str(tmp_path / "short"))  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads((tmp_path / "plan" / "plan.json").read_text())
    climb = doc["climb"]
    assert climb["knee"] == 16 and climb["chosen"] == 16, climb
    assert [lv["concurrency"] for lv in climb["levels"]][:5] == [1, 2, 4, 8, 16]
    assert climb["reason"] in ("overloaded", "full"), climb  # the server said so
    assert doc["inputs"]["concurrency"] == 16 and doc["model"]["concurrency"] == 16
    assert plan_settings(doc).concurrency == 16  # generate --plan runs it
    assert "C=16 chosen: the pilot's climb found its knee" in p.stdout
    assert short.returncode == 0, short.stdout + short.stderr
    cut = json.loads((tmp_path / "short" / "plan.json").read_text())["climb"]
    assert cut["knee"] is None and cut["reason"] == "budget" and cut["chosen"] == 1, cut
    assert "stopped below the knee" in short.stdout
