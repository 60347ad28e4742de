"""generate -c auto against every fixed C (issue #47): on a sim with a KV cache and
lognormal reasoning-length outputs, one job per setting, each on a fresh sim, in turn.

The sim: a decode step of 76.7 ms + 0.2 ms per stream (throughput still rises to several
hundred streams), 60 thinking tokens before the answer, natural lengths lognormal
(median 96 tokens, sigma 0.5: mean 109) under --max-tokens 320, a KV cache of 16,384
tokens.
Prompts: 32 words (36 tokens); with --drift, the second half of the rows has 200-word
prompts (204 tokens): lengths that drift mid-job, the cache then holds fewer.

For each setting: the job's wall time (`sending_s`), its time on the sim's own clock
(`sim:decode_busy_seconds_total`: a busy host's lag taken out), the sim's preemptions,
the load average beside it; then each setting's time over the best fixed C's (the ratio
the issue's goal is on: auto >= 95% of the best fixed C's throughput).

    .venv/bin/python benchmarks/concurrency_auto.py [--rows 600] [--c 32,64,128,256]
        [--drift]

`--target vllm`: the same on vLLM CPU (the tests' tiny model, GENBENCH_VLLM_VENV /
GENBENCH_VLLM_MODEL), its KV cache cut to VLLM_BLOCKS blocks of 32 tokens (2,816 tokens:
about 8 requests of a 24-word prompt and 320 output tokens) by
`--num-gpu-blocks-override`, prefix caching off. Outputs are exactly as long as each row's
own `max_tokens` (`ignore_eos`: a random-weight model's own ends say nothing), drawn
lognormal (median 160, sigma 0.5, within 16..320) under `--max-tokens 320`. One server for
every job (a warm-up job first), the jobs in turn; preemptions are the difference of
`vllm:num_preemptions_total` over each job. There is no sim clock: wall time only, with
the load average beside it.

    .venv/bin/python benchmarks/concurrency_auto.py --target vllm [--rows 384]
        [--c 2,4,8,16,32]

A list that names auto runs as given: `--c 16,auto,16,auto` alternates the two, so that a
shared host's load, which moves vLLM CPU's wall time, falls on both alike.

Writes benchmarks/results/concurrency_auto-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

sys.path.insert(0, str(REPO / "tests"))

from fixtures_hs import serve_text  # noqa: E402

from genbench.engines.command import parse_command  # noqa: E402
from genbench.engines.start import start_engines, stop_all  # noqa: E402
from genbench.sim.process import SimProcess  # noqa: E402
from genbench.transport.eventloop import run_async  # noqa: E402

SIM = ["--tps", "13", "--per-seq-ms", "0.2", "--ttft-ms", "20", "--kv-tokens", "16384",
       "--max-batch", "4096", "--output-len", "lognormal:96:0.5", "--thinking-tokens",
       "60", "--max-model-len", "4096"]  # fmt: skip
MAX_TOKENS = 320
VLLM_BLOCKS = 88  # of 32 tokens: 2,816, about 8 requests of a 30-token prompt + 320 tokens
VLLM_ARGS = (f" --max-model-len 512 --block-size 32 --num-gpu-blocks-override {VLLM_BLOCKS}"
             " --no-enable-prefix-caching")  # fmt: skip


def metric(root: str, name: str) -> float:
    text = urllib.request.urlopen(root + "/sim/metrics", timeout=10).read().decode()
    m = re.search(rf"^sim:{name} (\S+)", text, re.M)
    return float(m[1]) if m else 0.0


def write_input(path: Path, rows: int, drift: bool, vllm: bool = False) -> None:
    rng = random.Random(47)
    with path.open("w") as f:
        for i in range(rows):
            words = 200 if drift and i >= rows // 2 else (24 if vllm else 32)
            text = " ".join([f"w{i}"] + ["word"] * (words - 1))
            row: dict = {"id": f"r{i}", "messages": [{"role": "user", "content": text}]}
            if vllm:  # the sim draws its own lengths; vLLM's are each row's max_tokens
                n = round(rng.lognormvariate(math.log(160), 0.5))
                row["params"] = {"max_tokens": max(16, min(MAX_TOKENS, n)), "ignore_eos": True}
            f.write(json.dumps(row) + "\n")


def generate(inp: Path, out: Path, url: str, c: str) -> dict:
    args = [sys.executable, "-m", "genbench", "generate", "-i", str(inp), "-o", str(out),
            "--url", url, "--max-tokens", str(MAX_TOKENS), "-c", c, "--json"]  # fmt: skip
    p = subprocess.run(args, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"-c {c}: exit {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def one(inp: Path, c: str, tmp: Path) -> dict:
    out = tmp / f"out-{c}"
    tmp.mkdir(exist_ok=True)
    with SimProcess(*SIM) as sim:
        load = os.getloadavg()[0]
        res = generate(inp, out, sim.url, c)
        got = {
            "c": c, "rows": res["done"], "sending_s": round(res["sending_s"], 2),
            "busy_s": round(metric(sim.root, "decode_busy_seconds_total"), 2),
            "preemptions": metric(sim.root, "num_preemptions_total"),
            "load": round((load + os.getloadavg()[0]) / 2, 1),
            "changes": [(x["at_s"], x["new"], x["why"]) for x in res.get("concurrency", [])],
        }  # fmt: skip
    print(json.dumps({k: v for k, v in got.items() if k != "changes"}), flush=True)
    return got


def vllm_metric(url: str, name: str) -> float:
    root = url.removesuffix("/v1")
    text = urllib.request.urlopen(root + "/metrics", timeout=10).read().decode()
    return sum(float(m[1]) for m in re.finditer(rf"^vllm:{name}{{[^}}]*}} (\S+)", text, re.M))


def one_vllm(inp: Path, c: str, tmp: Path, url: str) -> dict:
    """One job on the shared server: its preemptions are the counter's rise over it."""
    tmp.mkdir(exist_ok=True)
    before = vllm_metric(url, "num_preemptions_total")
    load = os.getloadavg()[0]
    res = generate(inp, tmp / f"out-{c}", url, c)
    got = {
        "c": c, "rows": res["done"], "sending_s": round(res["sending_s"], 2),
        "tok_s": round(res["tokens"] / res["sending_s"], 1),
        "preemptions": vllm_metric(url, "num_preemptions_total") - before,
        "load": round((load + os.getloadavg()[0]) / 2, 1),
        "changes": [(x["at_s"], x["new"], x["why"]) for x in res.get("concurrency", [])],
    }  # fmt: skip
    print(json.dumps({k: v for k, v in got.items() if k != "changes"}), flush=True)
    return got


def run_vllm(a: argparse.Namespace, tmp: Path) -> list[dict]:
    """Every job on one vLLM CPU server (KV cache of VLLM_BLOCKS blocks), after a warm-up."""
    inp = tmp / "in.jsonl"
    write_input(inp, a.rows, a.drift, vllm=True)
    warm = tmp / "warm.jsonl"
    write_input(warm, 16, False, vllm=True)
    # no reasoning parser: a random model's text is all answer, and no /tokenize pass counts it
    cmd = parse_command(serve_text().replace(" --reasoning-parser qwen3", "") + VLLM_ARGS)
    engines = run_async(start_engines([cmd], tmp / "logs", 900))
    try:
        generate(warm, tmp / "out-warm", cmd.url, "4")
        return [one_vllm(inp, c, tmp / str(i), cmd.url) for i, c in enumerate(settings(a.c))]
    finally:
        stop_all(engines)


def settings(given: str) -> list[str]:
    """auto first, then each fixed C; or, where the list names auto itself, the list as
    given (`16,auto,16,auto`: pairs in turn, so that a host's load moves both alike)."""
    cs = given.split(",")
    return cs if "auto" in cs else ["auto", *cs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", choices=("sim", "vllm"), default="sim")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--c")
    ap.add_argument("--drift", action="store_true", help="long prompts in the second half")
    a = ap.parse_args()
    vllm = a.target == "vllm"
    a.rows = a.rows or (384 if vllm else 600)
    a.c = a.c or ("2,4,8,16,32" if vllm else "32,64,128,256")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if vllm:
            runs = run_vllm(a, tmp)
        else:
            inp = tmp / "in.jsonl"
            write_input(inp, a.rows, a.drift)
            runs = [one(inp, c, tmp / str(i)) for i, c in enumerate(settings(a.c))]
    if vllm:
        report_vllm(a, runs)
        return
    fixed = [r for r in runs if r["c"] != "auto"]
    for key in ("sending_s", "busy_s"):
        best = min(r[key] for r in fixed)
        for r in runs:
            r[f"best_fixed_over_this_{key}"] = round(best / r[key], 3)
    print(f"{'C':>5} {'wall s':>8} {'sim s':>8} {'preempt':>8} {'load':>5} "
          f"{'best/this wall':>15} {'best/this sim':>14}")  # fmt: skip
    for r in runs:
        print(f"{r['c']:>5} {r['sending_s']:>8} {r['busy_s']:>8} {r['preemptions']:>8.0f} "
              f"{r['load']:>5} {r['best_fixed_over_this_sending_s']:>15} "
              f"{r['best_fixed_over_this_busy_s']:>14}")  # fmt: skip
    auto = next(r for r in runs if r["c"] == "auto")
    for at, new, why in auto["changes"]:
        print(f"  auto at {at} s: {new} ({why})")
    res = REPO / "benchmarks" / "results"
    res.mkdir(exist_ok=True)
    name = res / f"concurrency_auto-{time.strftime('%Y%m%d-%H%M%S')}.json"
    name.write_text(json.dumps({"args": vars(a), "sim": SIM, "runs": runs}, indent=1))
    print(f"results: {name}")


def report_vllm(a: argparse.Namespace, runs: list[dict]) -> None:
    best = max(r["tok_s"] for r in runs if r["c"] != "auto")
    print(f"{'C':>5} {'wall s':>8} {'tok/s':>8} {'preempt':>8} {'load':>5} {'this/best':>10}")
    for r in runs:
        r["this_over_best_fixed"] = round(r["tok_s"] / best, 3)
        print(f"{r['c']:>5} {r['sending_s']:>8} {r['tok_s']:>8} {r['preemptions']:>8.0f} "
              f"{r['load']:>5} {r['this_over_best_fixed']:>10}")  # fmt: skip
    for r in (r for r in runs if r["c"] == "auto"):
        for at, new, why in r["changes"]:
            print(f"  auto at {at} s: {new} ({why})")
    res = REPO / "benchmarks" / "results"
    res.mkdir(exist_ok=True)
    name = res / f"concurrency_auto-vllm-{time.strftime('%Y%m%d-%H%M%S')}.json"
    name.write_text(json.dumps({"args": vars(a), "vllm": VLLM_ARGS, "runs": runs}, indent=1))
    print(f"results: {name}")


if __name__ == "__main__":
    main()
