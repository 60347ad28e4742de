"""Many servers: plain URLs (genbench balances and fails over) vs one router URL in front of
the same servers (the router does). docs/generate.md, "Many servers", records the numbers.

Two sims; `genbench generate` over N rows, the same total concurrency each way: `--url A
--url B -c C` and `--url ROUTER -c 2C` for sglang-router and vllm-router (the wheels from
scripts/routers.sh). With `--kill-after K` one sim is SIGKILLed once K rows are written.
Per case: wall time, rows/s, rows per server as genbench saw them, the failed attempts'
kinds from the request log, and whether every id is in the output exactly once.

    .venv/bin/python benchmarks/router_vs_urls.py --rows 1000 --concurrency 16
    .venv/bin/python benchmarks/router_vs_urls.py --rows 1000 --concurrency 16 --kill-after 200
    .venv/bin/python benchmarks/router_vs_urls.py --rows 1000 --concurrency 16 --policy round_robin
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from genbench.records import read_records
from genbench.sim.process import SimProcess, start_all, stop_all

REPO = Path(__file__).resolve().parents[1]
SIM = ("--tps", "1000", "--per-seq-ms", "0.2", "--ttft-ms", "5", "--output-len", "uniform:20:60")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_router(
    kind: str, workers: list[str], log: Path, policy: str | None
) -> tuple[subprocess.Popen, str]:
    subprocess.run(["bash", str(REPO / "scripts/routers.sh"), "setup"], check=True)
    bindir = Path(
        subprocess.run(["bash", str(REPO / "scripts/routers.sh"), "bin"], capture_output=True,
                       text=True, check=True).stdout.strip()
    )  # fmt: skip
    port, prom = free_port(), free_port()
    flags = ["--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1"]
    flags += ["--prometheus-port", str(prom), "--worker-urls", *workers]
    flags += ["--policy", policy] if policy else []
    exe = [str(bindir / "python"), "-m", "sglang_router.launch_router"]
    if kind == "vllm-router":
        exe = [str(bindir / "vllm-router")]
    proc = subprocess.Popen(exe + flags, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(root + "/readiness", timeout=2).status_code == 200:
                return proc, root + "/v1"
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{kind} did not start: see {log}")


def line_count(out: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in out.glob("data*.jsonl")) if out.exists() else 0


def generate(urls: list[str], c: int, rows: int, tmp: Path, sims: list[SimProcess],
             kill_after: int) -> dict:  # fmt: skip
    inp, out = tmp / "in.jsonl", tmp / "out"
    inp.write_text("".join(json.dumps({"id": f"r{i}", "messages": [
        {"role": "user", "content": f"question {i}"}]}) + "\n" for i in range(rows)))  # fmt: skip
    args = ["-i", str(inp), "-o", str(out), "-c", str(c), "--model", "genbench-sim"]
    args += [a for u in urls for a in ("--url", u)] + ["--retry-backoff", "0.05"]
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "genbench", "generate", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    killed_at = None
    if kill_after:
        while line_count(out) < kill_after and proc.poll() is None:
            time.sleep(0.02)
        # the busier worker (a cache-aware router may send everything to one)
        max(sims, key=lambda s: worker_count(s) or 0).kill()
        killed_at = time.monotonic() - t0
    _, err = proc.communicate(timeout=600)
    wall = time.monotonic() - t0
    data = [json.loads(x) for p in sorted(out.glob("data*.jsonl")) for x in p.open()]
    ids = Counter(r["id"] for r in data)
    failed = [r for r in read_records(out / ".genbench" / "requests.jsonl") if not r.ok]
    return {
        "rc": proc.returncode,
        "wall_s": round(wall, 2),
        "rows_per_s": round(len(data) / wall, 1),
        "killed_at_s": round(killed_at, 2) if killed_at else None,
        "exactly_once": sorted(ids) == sorted(f"r{i}" for i in range(rows))
        and max(ids.values()) == 1,
        "rows_by_server": dict(Counter(r["meta"]["server"] for r in data)),
        "failed_attempts": dict(Counter(f"{r.error_kind}/{r.http_status}" for r in failed)),
        "stderr": err.decode()[-300:] if proc.returncode else "",
    }


def worker_count(sim: SimProcess) -> int | None:
    """Requests the sim itself says it answered (None once killed)."""
    if sim.proc is None or sim.proc.poll() is not None:
        return None
    text = httpx.get(sim.root + "/metrics", timeout=5).text
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("sim:request_success_total")))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16, help="per server")
    ap.add_argument("--kill-after", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--policy", help="the routers' --policy (default: theirs, cache_aware)")
    a = ap.parse_args()
    os.environ.setdefault("NO_COLOR", "1")
    for case in ("urls", "sglang-router", "vllm-router") * a.repeats:
        sims = [SimProcess(*SIM), SimProcess(*SIM)]
        start_all(sims)
        router = None
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            try:
                if case == "urls":
                    urls, c = [s.url for s in sims], a.concurrency
                else:
                    router, url = start_router(
                        case, [s.root for s in sims], tmp / "router.log", a.policy
                    )
                    urls, c = [url], 2 * a.concurrency
                res = generate(urls, c, a.rows, tmp, sims, a.kill_after)
                res["answered_by_worker"] = [worker_count(s) for s in sims]
            finally:
                if router is not None:
                    router.send_signal(signal.SIGTERM)
                    router.wait(30)
                stop_all(sims)
        print(json.dumps({"case": case, **res}), flush=True)


if __name__ == "__main__":
    main()
