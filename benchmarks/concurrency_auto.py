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

Writes benchmarks/results/concurrency_auto-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from genbench.sim.process import SimProcess  # noqa: E402

SIM = ["--tps", "13", "--per-seq-ms", "0.2", "--ttft-ms", "20", "--kv-tokens", "16384",
       "--max-batch", "4096", "--output-len", "lognormal:96:0.5", "--thinking-tokens",
       "60", "--max-model-len", "4096"]  # fmt: skip
MAX_TOKENS = 320


def metric(root: str, name: str) -> float:
    text = urllib.request.urlopen(root + "/sim/metrics", timeout=10).read().decode()
    m = re.search(rf"^sim:{name} (\S+)", text, re.M)
    return float(m[1]) if m else 0.0


def write_input(path: Path, rows: int, drift: bool) -> None:
    with path.open("w") as f:
        for i in range(rows):
            words = 200 if drift and i >= rows // 2 else 32
            text = " ".join([f"w{i}"] + ["word"] * (words - 1))
            f.write(json.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": text}]}))
            f.write("\n")


def one(inp: Path, c: str, tmp: Path) -> dict:
    out = tmp / f"out-{c}"
    with SimProcess(*SIM) as sim:
        load = os.getloadavg()[0]
        args = [sys.executable, "-m", "genbench", "generate", "-i", str(inp), "-o", str(out),
                "--url", sim.url, "--max-tokens", str(MAX_TOKENS), "-c", c, "--json"]  # fmt: skip
        p = subprocess.run(args, capture_output=True, text=True, timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"-c {c}: exit {p.returncode}: {p.stderr[-2000:]}")
        res = json.loads(p.stdout)
        got = {
            "c": c, "rows": res["done"], "sending_s": round(res["sending_s"], 2),
            "busy_s": round(metric(sim.root, "decode_busy_seconds_total"), 2),
            "preemptions": metric(sim.root, "num_preemptions_total"),
            "load": round((load + os.getloadavg()[0]) / 2, 1),
            "changes": [(x["at_s"], x["new"], x["why"]) for x in res.get("concurrency", [])],
        }  # fmt: skip
    print(json.dumps({k: v for k, v in got.items() if k != "changes"}), flush=True)
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=600)
    ap.add_argument("--c", default="32,64,128,256")
    ap.add_argument("--drift", action="store_true", help="long prompts in the second half")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        inp = tmp / "in.jsonl"
        write_input(inp, a.rows, a.drift)
        runs = [one(inp, c, tmp) for c in ["auto", *a.c.split(",")]]
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
    auto = runs[0]
    for at, new, why in auto["changes"]:
        print(f"  auto at {at} s: {new} ({why})")
    res = REPO / "benchmarks" / "results"
    res.mkdir(exist_ok=True)
    name = res / f"concurrency_auto-{time.strftime('%Y%m%d-%H%M%S')}.json"
    name.write_text(json.dumps({"args": vars(a), "sim": SIM, "runs": runs}, indent=1))
    print(f"results: {name}")


if __name__ == "__main__":
    main()
