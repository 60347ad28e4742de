"""The plan's job files (plan/jobfiles.py): the task count and why, in words that count
right, and the flags each task's generate runs with: the ones the forecast was made at."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from genbench.plan.jobfiles import generate_flags, write_job_files

pytestmark = pytest.mark.core


def plan_doc(servers: int, samples: int, concurrency: list[int]) -> dict:
    row = {"samples": samples, "servers_needed": {"servers": servers}}
    configs = [{"concurrency": c, "rows": [row]} for c in concurrency]
    return {"decision": {"deadline": {"text": "1h"}, "configurations": configs}}


def args(**kw: object) -> SimpleNamespace:
    base = {"max_tokens": None, "temperature": None, "top_p": None, "top_k": None,
            "concurrency": None, "turns": "all", "param": None, "prompts": None}  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_a_pilot_plans_concurrency_goes_to_every_task():
    """A pilot forecasts at C=32 while generate's default is 64: the tasks get -c 32."""
    assert generate_flags(args(), plan_doc(2, 1000, [32])) == ["--concurrency", "32"]
    assert generate_flags(args(concurrency=8), plan_doc(2, 1000, [32])) == ["--concurrency", "8"]
    assert generate_flags(args(), plan_doc(2, 1000, [32, 64])) == []  # which one: not named
    assert generate_flags(args(), {}) == []  # --rate: the rate was measured at the user's C


def test_one_task_is_counted_in_words(tmp_path: Path):
    paths, why = write_job_files(tmp_path, plan_doc(1, 1, [32]), args(), 1)
    assert why == "1 task (1 server: what the deadline 1h needs for 1 sample)"
    script = paths[0].read_text()
    assert "# 1 task = 1 server" in script and "--shard auto/1 " in script
    assert "FLAGS=(--concurrency 32)" in script
    manifest = paths[1].read_text()
    assert "# `genbench plan --job-files` (docs/cluster.md). 1 completion = " in manifest


def test_the_script_refuses_to_start_with_a_fill_in_left(tmp_path: Path):
    """Without GENBENCH_OUT a task would write FILL_IN_SHARED_DIR/ under its own working
    directory: on a cluster, one directory per node, each thinking it is the job."""
    paths, _ = write_job_files(tmp_path, plan_doc(2, 10, [8]), args(prompts="in.jsonl"), 2)
    env = {**os.environ, "GENBENCH": "false", "GENBENCH_URL_FILE": "u.txt"}
    env.pop("GENBENCH_OUT", None)
    p = subprocess.run(["bash", str(paths[0])], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=30)  # fmt: skip
    assert p.returncode == 2 and "set GENBENCH_INPUT and GENBENCH_OUT" in p.stderr, p.stderr
    assert not (tmp_path / "FILL_IN_SHARED_DIR").exists()
    env["GENBENCH_OUT"] = str(tmp_path / "out")
    p = subprocess.run(["bash", str(paths[0])], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=30)  # fmt: skip
    assert p.returncode == 1 and p.stderr == ""  # reached genbench (here `false`)


def test_the_script_starts_its_engine_with_serve_unless_given_urls(tmp_path: Path):
    """The engine line: GENBENCH_SERVE is passed to `generate --serve` as one word (its
    {port} kept for genbench); with the model path still FILL_IN and no URL file the script
    refuses to start; a URL file is used instead of an engine."""
    paths, _ = write_job_files(tmp_path, plan_doc(2, 10, [8]), args(prompts="in.jsonl"), 2)
    echo = tmp_path / "echo-args"
    echo.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    echo.chmod(0o755)
    env = {**os.environ, "GENBENCH": str(echo), "GENBENCH_OUT": str(tmp_path / "out")}
    for var in ("GENBENCH_SERVE", "GENBENCH_URL_FILE"):
        env.pop(var, None)

    def task(**more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(paths[0])], env={**env, **more}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=30)  # fmt: skip

    p = task()
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert "set GENBENCH_SERVE (the engine's command, with {port}) or GENBENCH_URL_FILE" in p.stderr
    p = task(GENBENCH_SERVE="vllm serve /m --port {port} --max-model-len 4096")
    assert p.returncode == 0, p.stderr
    words = p.stdout.splitlines()
    assert words[words.index("--serve") + 1] == "vllm serve /m --port {port} --max-model-len 4096"
    assert words[words.index("--shard") + 1] == "auto/2"
    p = task(GENBENCH_URL_FILE="urls.txt")
    words = p.stdout.splitlines()
    assert p.returncode == 0 and "--serve" not in words
    assert words[words.index("--url-file") + 1] == "urls.txt"


def test_several_configurations_the_fastest_one_runs(tmp_path: Path):
    """--from two runs: the plan's tables use the fastest; the job files run its servers
    and its concurrency, not the slower one's larger server count."""
    doc = plan_doc(1, 1000, [32, 64])
    a, b = doc["decision"]["configurations"]
    a["name"], b["name"] = "slow", "fast"
    a["rows"] = [{"samples": 1000, "servers_needed": {"servers": 6}}]
    b["rows"] = [{"samples": 1000, "servers_needed": {"servers": 2}}]
    doc["decision"]["best"] = [{"samples": 1000, "fastest": "fast"}]
    paths, why = write_job_files(tmp_path, doc, args(), 1)
    assert why.startswith("2 tasks (2 servers: ")
    assert "#SBATCH --array=0-1" in paths[0].read_text()
    assert generate_flags(args(), doc) == ["--concurrency", "64"]


def test_plans_next_line_asks_for_the_servers_generate_will_hold_it_to():
    """`plan --servers 4 --deadline 5d` that needs 2: generate --plan refuses one URL with
    "the plan decided 2", so the printed next line must say 2, not 4."""
    from genbench.plan.render import next_line

    doc = {**plan_doc(2, 900, [32]), "mode": "pilot", "inputs": {"servers": 4},
           "source": {"url": "http://127.0.0.1:8000/v1", "prompts": "p.jsonl"}}  # fmt: skip
    line = next_line(doc, Path("plans/job/plan.json"))
    assert "# the plan is for 2 servers: a --url for each" in line
    doc["mode"] = "result"
    assert next_line(doc, Path("plans/job/plan.json")).count("--url URL") == 2
