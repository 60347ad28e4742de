"""genbench run vs `vllm bench serve`: the same workload, the same server, one run.

Both tools send genbench's built-in prompts (vLLM through its `custom` dataset with
`--skip-chat-template`, so the server applies the chat template for both), the same output
length with `ignore_eos`, the same concurrency and request count, thinking off. The order
alternates between repeats so neither tool always meets a warmer server.

Compared: vLLM's "output token throughput" (total output tokens / benchmark duration) and
genbench's sustained phase `output_tps` — the same definition (tokens / wall) — with
genbench's steady-window rate beside it.

    .venv/bin/python benchmarks/vs_vllm_bench.py [--url URL] [--concurrency 16]
        [--requests 64] [--tokens 256] [--repeats 3]

Without --url it starts the plain vLLM test server (scripts/vllm-test-server.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from genbench.run.workload import BUILTIN_PROMPTS  # noqa: E402

VENV = Path(os.environ.get("GENBENCH_VLLM_VENV", REPO / ".cache/vllm-venv"))
MODEL_DIR = Path(os.environ.get("GENBENCH_VLLM_MODEL", REPO / ".cache/vllm-model"))
SCRIPT = REPO / "scripts/vllm-test-server.sh"
EXTRA = {"chat_template_kwargs": {"enable_thinking": False}}


def vllm_bench(url: str, model: str, a: argparse.Namespace, work: Path, i: int) -> float:
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": t}) + "\n" for _, t in BUILTIN_PROMPTS))
    root = url.rstrip("/").rsplit("/v1", 1)[0]
    argv = [
        "--backend", "openai-chat", "--base-url", root, "--endpoint", "/v1/chat/completions",
        "--model", model, "--tokenizer", str(MODEL_DIR), "--dataset-name", "custom",
        "--dataset-path", str(prompts), "--custom-output-len", str(a.tokens),
        "--skip-chat-template", "--num-prompts", str(a.requests),
        "--max-concurrency", str(a.concurrency), "--request-rate", "inf", "--ignore-eos",
        "--temperature", "0", "--extra-body", json.dumps(EXTRA), "--disable-tqdm",
        "--save-result", "--result-dir", str(work), "--result-filename", f"vllm-{i}.json",
    ]  # fmt: skip
    # vLLM's custom dataset reads JSONL through pandas, which its CPU venv lacks: the same
    # records, read with json, are handed to the unchanged sampling code
    runner = (
        "import sys, json, random\n"
        "from vllm.benchmarks.datasets import datasets as d\n"
        "def load_data(self):\n"
        "    self.data = [json.loads(x) for x in open(self.dataset_path) if x.strip()]\n"
        "    random.seed(self.random_seed)\n"
        "    if not getattr(self, 'disable_shuffle', False): random.shuffle(self.data)\n"
        "d.CustomDataset.load_data = load_data\n"
        "import vllm.benchmarks.serve as serve\n"
        "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "p = FlexibleArgumentParser(); serve.add_cli_args(p)\n"
        "serve.main(p.parse_args(sys.argv[1:]))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    p = subprocess.run(
        [str(VENV / "bin/python"), "-c", runner, *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{p.stderr[-3000:]}")
    res = json.loads((work / f"vllm-{i}.json").read_text())
    if res.get("failed"):
        print(f"  vllm bench serve: {res['failed']} failed requests", file=sys.stderr)
    return float(res["output_throughput"])


def genbench_run(url: str, a: argparse.Namespace, work: Path, i: int) -> tuple[float, float]:
    out = work / f"genbench-{i}"
    cmd = [
        sys.executable, "-m", "genbench", "run", "--url", url, "--skip", "warmup,single",
        "--shape", "sustained", "--concurrency", str(a.concurrency),
        "--sweep-tokens", str(a.tokens),
        "--requests-per-slot", str(max(1, a.requests // a.concurrency)),
        "--temperature", "0", "--extra-body", json.dumps(EXTRA), "--out", str(out),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    doc = json.loads((out / "result.json").read_text())
    s = doc["phases"][-1]["summary"]
    if s["failed"]:
        print(f"  genbench: {s['failed']} failed requests", file=sys.stderr)
    return float(s["output_tps"]), float(s["steady_tps"] or 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running vLLM server (base URL with /v1)")
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    started = None
    url = a.url
    if not url:
        subprocess.run(["bash", str(SCRIPT), "setup"], check=True)
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        started = "vsbench"
        root = (
            subprocess.run(
                ["bash", str(SCRIPT), "start", started, str(port)],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        url = root + "/v1"
    print(
        f"server {url}, C={a.concurrency}, {a.requests} requests × {a.tokens} tokens, "
        f"{len(BUILTIN_PROMPTS)} built-in prompts, thinking off"
    )
    print(f"{'repeat':>6} {'vllm bench':>11} {'genbench':>9} {'ratio':>6} {'gb steady':>10}")
    ratios = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            # one discarded pair: the first requests meet a cold server (and vLLM's prefix
            # cache), which would favour whichever tool runs second
            vllm_bench(url, a.model, a, work, -1)
            genbench_run(url, a, work, -1)
            for i in range(a.repeats):
                if i % 2 == 0:
                    v = vllm_bench(url, a.model, a, work, i)
                    g, st = genbench_run(url, a, work, i)
                else:
                    g, st = genbench_run(url, a, work, i)
                    v = vllm_bench(url, a.model, a, work, i)
                ratios.append(g / v)
                print(f"{i:>6} {v:>11.1f} {g:>9.1f} {g / v:>6.3f} {st:>10.1f}", flush=True)
    finally:
        if started:
            subprocess.run(["bash", str(SCRIPT), "stop", started], check=False)
    mean = sum(ratios) / len(ratios)
    print(
        f"genbench / vllm bench serve output tok/s: mean {mean:.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
