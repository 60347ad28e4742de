"""How long `genbench report OUT_DIR` takes on a week-long job's request log, and its memory.

Builds (once, cached in --work) generate output directories whose request logs hold N
compact records written through genbench's own RecordWriter, as the job writes them: a
week on four servers, one of which is down for an hour each day (its in-flight rows
requeued), failures of several kinds, a run restarted half way (a second `defaults`
line). Then runs the real command in a fresh process for each size, alternating sizes
(A/B/A/B), and records wall time and peak RSS. Memory flat means the peak RSS of the
largest log is that of the smallest, give or take the interpreter's noise.

Run:  .venv/bin/python benchmarks/job_report.py [--sizes 100000,1000000] [--rounds 2]
Requirement (issue #30): 1M records drawn in under 60 s, memory flat.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

from genbench.records import RecordWriter, RequestRecord

WEEK_S = 7 * 86400
SERVERS = [f"http://gpu{i}:8000/v1" for i in range(4)]
KINDS = ["read_timeout", "http_status", "inband_error", "disconnected"]


def build(out: Path, n: int, seed: int = 0) -> None:
    """A request log of `n` records spread over a week, as `generate` writes it."""
    state = out / ".genbench"
    state.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)
    clock = 1_790_000_000.0
    step = WEEK_S / n
    path = state / "requests.jsonl"
    defaults = {"phase": "generate", "server": SERVERS[0], "model": "big-moe", "http_status": 200,
                "finish_reason": "stop", "extra": {"outcome": "done", "turn": 0}, "clock": clock}
    w = RecordWriter(path, compact=True, defaults=defaults, buffered=True)
    for i in range(n):
        if i == n // 2:  # the job was restarted: a new run, its own defaults line
            w.close()
            w = RecordWriter(path, compact=True, defaults=defaults, buffered=True)
        t = i * step
        server = SERVERS[i % 4]
        day_s = t % 86400
        e2e = rnd.uniform(20, 200)
        if server == SERVERS[3] and 3600 <= day_s < 7200:
            continue  # nothing is sent to a server while it is down
        # in flight when it went down: the request breaks off then, its row requeued
        down = server == SERVERS[3] and day_s < 3600 < day_s + e2e
        if down:
            e2e = 3600 - day_s + rnd.uniform(0, 0.5)
        rec = RequestRecord(id=f"row-{i}", phase="generate", server=server, model="big-moe",
                            t_send=t, t_end=t + e2e, sent_at=t + clock, http_status=200,
                            ttft_answer=rnd.uniform(0.05, 2), completion_tokens=rnd.randint(200,
                            4000), reasoning_tokens=rnd.randint(0, 3000), finish_reason="stop",
                            prompt_tokens=rnd.randint(50, 800),
                            extra={"outcome": "done", "turn": 0})  # fmt: skip
        rec.chunks = {"n": rec.completion_tokens, "decode_s": e2e - 1, "itl_p99": 0.05}
        if down:
            rec.error_kind, rec.error_message = "disconnected", "the server closed the stream"
            rec.extra = {"outcome": "requeued", "turn": 0}
        elif rnd.random() < 0.01:
            rec.error_kind, rec.error_message = rnd.choice(KINDS), "failed"
            rec.http_status = 503 if rec.error_kind == "http_status" else 200
            rec.extra = {"outcome": "retry", "turn": 0, "attempt": 2}
        w.write(rec)
        if i % 10000 == 0:
            w.flush()
    w.close()


def measure(out: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of `genbench report OUT` in a fresh process."""
    code = ("import resource,sys,time;from genbench.cli import main;t=time.perf_counter()\n"
            "try:\n main(['report',sys.argv[1],'-o',sys.argv[2]])\nexcept SystemExit:\n pass\n"
            "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", code, str(out), str(out / "report.html")],
                       capture_output=True, text=True, check=True)  # fmt: skip
    wall, rss_kib = p.stdout.strip().splitlines()[-1].split()
    return float(wall), int(rss_kib) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/genbench-job-report-bench"))
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    for n in sizes:
        out = a.work / f"job-{n}"
        log = out / ".genbench" / "requests.jsonl"
        if not log.exists():
            t = time.perf_counter()
            build(out, n)
            print(f"built {n:,} records ({log.stat().st_size / 2**20:.0f} MiB) in "
                  f"{time.perf_counter() - t:.0f} s", flush=True)  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.2f}; "
          f"this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    for r in range(a.rounds):
        for n in sizes:  # alternating sizes: the machine's noise falls on both alike
            out = a.work / f"job-{n}"
            wall, rss = measure(out)
            load = os.getloadavg()[0]
            print(f"round {r + 1}: {n:>9,} records  {wall:6.1f} s  {n / wall:9,.0f} records/s  "
                  f"peak RSS {rss:6.0f} MiB  load {load:.2f}", flush=True)


if __name__ == "__main__":
    main()
