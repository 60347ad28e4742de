"""Does genbench's own client make a job slower than its pilot? (#48: the client's overhead
at the job's concurrency.)

The same rows on one warm server, alternating between the two ways genbench sends them:

* `genbench generate` (the job: the store, its syncer, the progress ticker and live ETA);
* `genbench plan --pilot N` for all N rows (the pilot's path: generate's pipeline without
  the store's work);

each a fresh process, as a user runs them, the order reversed every other round
(`--pilot-rows K`: the pilot's path sends only K of them, as a pilot of K does, and a third
way, `generate` of a file of K rows, tells a short run's part from the path's; the order
rotates). For each:
the wall time (first send to last end), the decode rate in the steady part (the 32nd send to
the last send, each request's tokens spread evenly between its first token and its end, as
both records allow), and the process's own CPU share (generate's `client`, the pilot's
`inputs.pilot_client`).

    GENBENCH_VLLM_VENV=.cache/vllm-venv GENBENCH_VLLM_MODEL=.cache/vllm-model \\
        .venv/bin/python benchmarks/pilot_vs_job.py --rounds 3

Runs alone: the vLLM CPU server shares the host's cores with genbench, and anything else
running moves its speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from forecast_accuracy import SCRIPT, Target, lengths_for, prompt_set

REPO = Path(__file__).resolve().parent.parent
Span = tuple[float, float, float, int]  # sent, first token, end (epoch seconds), tokens


def steady_rate(items: list[Span], c: int) -> float:
    """Output tokens per second from the C-th send to the last send."""
    sends = sorted(s for s, _, _, _ in items)
    a, b = sends[min(c - 1, len(sends) - 1)], sends[-1]
    tokens = 0.0
    for _, first, end, k in items:
        if end > first and k > 0:
            tokens += k * max(0.0, min(end, b) - max(first, a)) / (end - first)
    return tokens / (b - a) if b > a else float("nan")


def job_spans(out: Path) -> list[Span]:
    spans = []
    for f in sorted(out.glob("data-*.jsonl")):
        for line in f.read_bytes().splitlines():
            m = orjson.loads(line)["meta"]
            spans.append((m["sent_at"], m["sent_at"] + m["ttft_s"], m["finished_at"],
                          m["completion_tokens"]))  # fmt: skip
    return spans


def pilot_spans(out: Path) -> list[Span]:
    spans = []
    for line in (out / "requests.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        if r["phase"] == "pilot" and r.get("ttft"):
            s = r["sent_at"]
            spans.append((s, s + r["ttft"], s + r["t_end"] - r["t_send"], r["completion_tokens"]))
    return spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1200)
    ap.add_argument("--pilot-rows", type=int, default=0,
                    help="the pilot's path sends this many of them, as a real pilot does "
                    "(default: all, the same rows as the job)")  # fmt: skip
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--median", type=float, default=40.0, help="median output tokens (forced)")
    ap.add_argument("--sigma", type=float, default=0.75)
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--warmup", type=float, default=20.0, help="seconds, once, before round 1")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pilot-vs-job-"))
    name, port = f"pvj-{int(time.time())}", 18700 + int(time.time()) % 200
    subprocess.run([str(SCRIPT), "setup"], check=True, capture_output=True)
    base = subprocess.run([str(SCRIPT), "start", name, str(port)], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    url, c = base + "/v1", str(a.concurrency)
    t = Target(url, "tiny-llama", True, lengths_for(a.rows, [a.seed], a.median, a.sigma, 1500))
    prompts = work / "prompts.jsonl"
    t.write_prompts(prompts, prompt_set(a.rows, a.seed))
    py = [sys.executable, "-m", "genbench"]
    common = ["--url", url, "--model", "tiny-llama", "--concurrency", c, "--temperature", "0"]
    plan = [*py, "plan", "--prompts", str(prompts), "--samples", str(a.rows), *common, "--json"]
    kinds = ["generate", "pilot"]
    if a.pilot_rows:  # a job as short as the pilot: the length's part apart from the path's
        short = work / "prompts-short.jsonl"
        short.write_bytes(b"".join(prompts.read_bytes().splitlines(True)[: a.pilot_rows]))
        kinds.append("generate-short")
    seen: dict[str, list[tuple[float, float, float]]] = {k: [] for k in kinds}
    try:
        subprocess.run([*plan, "--pilot", str(4 * a.concurrency), "--warmup-time",
                        f"{a.warmup:g}", "--out", str(work / "warm")],
                       check=True, capture_output=True)  # fmt: skip
        for i in range(a.rounds):
            for kind in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
                out = work / f"{kind}-{i}"
                if kind.startswith("generate"):
                    src = short if kind == "generate-short" else prompts
                    p = subprocess.run([*py, "generate", "--input", str(src), "--out",
                                        str(out), "--json", *common],
                                       capture_output=True, text=True, check=True)  # fmt: skip
                    spans, cpu = job_spans(out), json.loads(p.stdout)["client"]["cpu_fraction"]
                else:
                    k = str(a.pilot_rows or a.rows)
                    p = subprocess.run([*plan, "--pilot", k, "--warmup-time", "0",
                                        "--out", str(out)],
                                       capture_output=True, text=True, check=True)  # fmt: skip
                    doc = json.loads(p.stdout)
                    spans, cpu = pilot_spans(out), doc["inputs"]["pilot_client"]["cpu_fraction"]
                rate = steady_rate(spans, a.concurrency)
                wall = max(e for _, _, e, _ in spans) - min(s for s, _, _, _ in spans)
                seen[kind].append((rate, wall, cpu))
                print(f"round {i + 1} {kind:14s} {len(spans)} rows: steady {rate:.0f} tok/s, "
                      f"wall {wall:.1f} s, client {cpu:.1%} of a core, "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    finally:
        subprocess.run([str(SCRIPT), "stop", name], check=False)
    for kind, v in seen.items():
        print(f"{kind:14s} median: steady {statistics.median(x[0] for x in v):.0f} tok/s, "
              f"wall {statistics.median(x[1] for x in v):.1f} s, "
              f"client {statistics.median(x[2] for x in v):.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
