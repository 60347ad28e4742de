"""Client ceiling: how many streamed chunks genbench ingests per second and per CPU-second.

A benchmark client that saturates reports its own limit as the server's. This measures
the limit of genbench's load engine (`genbench.load.run_phase`, as `genbench run` uses
it) with each transport, side by side in one run with the peers' clients
(benchmarks/peer_clients.py: `vllm bench serve`'s and a urllib + threads script), against
servers that are not the bottleneck:

  bulk    nginx serving a pre-rendered SSE response from a file (the server is free; reads
          are large, many messages each: the per-message cost of the client is exposed)
  tokens  benchmarks/stamp_server.py: a continuous-batching decode loop that writes one
          chunk per stream per step, each its own write, and stamps each write; every
          client's chunk arrival times are compared with those stamps (timing error)

Steps (`--only`): bulk and tokens sweeps over concurrency (and offered chunk rate);
scaling (genbench in N processes, records merged by timestamp); hold (4,096 streams at
once: memory per in-flight stream); split (the sim's `split` fault: failed requests and
characters lost at random read boundaries, per client).

Each client runs in its own process(es); CPU is that process's user+sys time during the
measured phase only (getrusage), so "chunks per CPU-second" does not depend on what else
the machine runs. Wall-clock rates do, and are reported with the load average.

    .venv/bin/python benchmarks/client_ceiling.py            # full run (~22 min on 2 cores)
    .venv/bin/python benchmarks/client_ceiling.py --quick    # fewer, shorter points
    .venv/bin/python benchmarks/client_ceiling.py --only bulk --concurrency 1,256

Results: a Markdown report on stdout and JSON in benchmarks/results/. See
benchmarks/README.md ("Client ceiling") for recorded runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from peer_clients import Phase, wait_for_go  # noqa: E402
from stamp_server import Render  # noqa: E402

VLLM_PY = Path(os.environ.get("GENBENCH_VLLM_VENV", REPO / ".cache/vllm-venv")) / "bin/python"
# "+asyncio": the same client on asyncio's own event loop instead of uvloop
GENBENCH_CLIENTS = (
    "genbench-fast",
    "genbench-aiohttp",
    "genbench-fast+asyncio",
    "genbench-aiohttp+asyncio",
)
PEERS = ("vllm", "vllm-cli", "urllib")
MODEL = "stamp"


# -- the genbench worker (a child process) -------------------------------------------------


async def run_genbench(a: argparse.Namespace) -> dict[str, Any]:
    from genbench.client import ChatRequest, Client, Timeouts, make_session
    from genbench.endpoint import Endpoint
    from genbench.fastclient import FastClient
    from genbench.load import run_phase
    from genbench.selfcheck import LoopMonitor

    t = Timeouts(connect=30, read=600)
    ep = Endpoint.parse(a.url)
    session = None
    if a.client.startswith("genbench-fast"):
        client: Client = FastClient(ep, MODEL, timeouts=t)
    else:  # as genbench run builds it
        session = make_session(t)
        client = Client(ep, MODEL, timeouts=t, session=session)

    def mk(key: str) -> ChatRequest:
        return ChatRequest(
            key, [{"role": "user", "content": key}], a.max_tokens, {"ignore_eos": True}
        )

    warm = await client.chat(mk("warmup"))
    if not warm.ok:
        print(f"{a.client}: warm-up request failed: {warm.error_message}", file=sys.stderr)
    keys = [f"{a.prefix}-{i}" for i in range(a.requests)]
    wait_for_go()
    mon = LoopMonitor()
    with Phase() as ph:
        mon.start()
        run = await run_phase(
            client, map(mk, keys), concurrency=a.concurrency, phase="bench", max_requests=len(keys)
        )
        ok = [r for r in run.records if r.ok]
        chunks = sum(len(r.chunk_offsets) for r in ok)
        sc = await mon.stop(chunks)
    await client.close()
    if session is not None:
        await session.close()
    res = ph.result()
    bad = [r for r in run.records if not r.ok]
    res.update(
        requests=len(run.records),
        ok=len(ok),
        failed=len(bad),
        errors=[f"{r.error_kind}: {r.error_message}" for r in bad[:5]],
        chunks=chunks,
        output_tokens=sum(r.completion_tokens or 0 for r in ok),
        chars=sum(r.answer_chars for r in ok),
        chars_by_key={r.id: r.answer_chars for r in ok},
        loop_lag_p99_s=sc.loop_lag_p99_s,
    )
    if a.arrivals:
        with open(a.arrivals, "w") as f:
            json.dump({r.id: [r.t_send + o for o in r.chunk_offsets] for r in ok}, f)
    if a.records:  # for the multi-process merge
        with open(a.records, "wb") as f:
            for r in sorted(run.records, key=lambda r: r.t_send):
                f.write(r.to_json() + b"\n")
    return res


def worker_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="client_ceiling.py worker")
    p.add_argument("--client", choices=GENBENCH_CLIENTS, required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--prefix", default="r")
    p.add_argument("--arrivals")
    p.add_argument("--records")
    a = p.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    if a.client.endswith("+asyncio"):
        res = asyncio.run(run_genbench(a))
    else:
        import uvloop  # as `genbench run` (genbench.commands.common.run_async)

        res = uvloop.run(run_genbench(a))
    res.update(client=a.client, concurrency=a.concurrency, procs=1)
    print(json.dumps(res), flush=True)


# -- servers ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def nginx(max_tokens: int) -> Iterator[str]:
    """nginx on 127.0.0.1 serving one pre-rendered response to POST /v1/chat/completions.

    A static file goes out with Content-Length, through sendfile, as fast as the socket
    takes it: a client reads many SSE messages per read. (One message per write would
    need a paced server: that is the `tokens` mode.) POST to a static file is answered
    405 by nginx; `error_page 405 =200 $uri` serves the file instead."""
    exe = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(exe):
        raise SystemExit("nginx not found: apt-get install -y nginx-light (or --only tokens)")
    tmp = Path(tempfile.mkdtemp(prefix="gb-nginx-"))
    www = tmp / "www/v1/chat"
    www.mkdir(parents=True)
    (www / "completions").write_bytes(b"".join(Render(MODEL, 0).messages(max_tokens, True)))
    port = free_port()
    conf = f"""
user root;
worker_processes 1;
worker_rlimit_nofile 20000;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 16000; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body;
  sendfile on; tcp_nodelay on;
  keepalive_requests 10000000; keepalive_timeout 300;
  types {{ }} default_type text/event-stream;
  server {{
    listen 127.0.0.1:{port} backlog=8192;
    root {tmp}/www;
    location /v1/chat/completions {{ error_page 405 =200 $uri; }}
  }}
}}
"""
    (tmp / "nginx.conf").write_text(conf)
    proc = subprocess.Popen([exe, "-c", str(tmp / "nginx.conf")], stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.send_signal(signal.SIGQUIT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


class StampServer:
    """benchmarks/stamp_server.py in its own process."""

    def __init__(self, *args: str) -> None:
        cmd = [sys.executable, str(HERE / "stamp_server.py"), "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "listening on" not in line:
            self.close()
            raise RuntimeError(f"stamp server did not start: {line!r}")
        self.url = line.split("listening on ")[1].strip()
        self.cpu0 = self.cpu_s()

    def cpu_s(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stamps(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(self.url.rsplit("/v1", 1)[0] + "/stamps", timeout=60) as r:
            return json.loads(r.read())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> StampServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- one measurement ---------------------------------------------------------------------------


def worker_cmd(client: str) -> list[str]:
    if client in GENBENCH_CLIENTS:
        return [sys.executable, str(Path(__file__).resolve()), "worker", "--client", client]
    py = str(VLLM_PY) if client.startswith("vllm") else sys.executable
    cmd = [py, str(HERE / "peer_clients.py"), "--client", client]
    if client == "vllm-cli":
        cmd += ["--tokenizer", str(REPO / ".cache/vllm-model")]
    return cmd


def measure(
    client: str,
    url: str,
    concurrency: int,
    requests: int,
    max_tokens: int,
    *,
    procs: int = 1,
    arrivals: bool = False,
    records: bool = False,
    timeout: float = 600.0,
    tag: str | None = None,
) -> dict[str, Any]:
    """Run `client` in `procs` processes (concurrency and requests split between them),
    started together; merge their results. CPU adds up; wall is first start to last end."""
    tmp = Path(tempfile.mkdtemp(prefix="gb-ceiling-"))
    tag = tag or f"{client}-c{concurrency}-{time.monotonic_ns()}"
    kids: list[subprocess.Popen[bytes]] = []
    files: list[tuple[Path, Path]] = []
    try:
        for j in range(procs):
            c = concurrency // procs + (j < concurrency % procs)
            n = requests // procs + (j < requests % procs)
            arr, rec = tmp / f"arr{j}.json", tmp / f"rec{j}.jsonl"
            files.append((arr, rec))
            cmd = worker_cmd(client) + [
                "--url", url, "--concurrency", str(c), "--requests", str(n),
                "--max-tokens", str(max_tokens), "--prefix", f"{tag}-p{j}",
            ]  # fmt: skip
            if arrivals:
                cmd += ["--arrivals", str(arr)]
            if records and client in GENBENCH_CLIENTS:
                cmd += ["--records", str(rec)]
            kids.append(
                subprocess.Popen(
                    cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
            )
        for k in kids:
            assert k.stdout is not None
            line = k.stdout.readline()
            if line.strip() != b"ready":
                err = k.stderr.read().decode()[-2000:] if k.stderr else ""
                raise RuntimeError(f"{client} worker did not start: {line!r} {err}")
        for k in kids:
            assert k.stdin is not None
            k.stdin.write(b"go\n")
            k.stdin.flush()
        results = []
        deadline = time.monotonic() + timeout
        for k in kids:
            out, err = k.communicate(timeout=max(1.0, deadline - time.monotonic()))
            lines = out.decode().strip().splitlines()
            if k.returncode != 0 or not lines:
                raise RuntimeError(
                    f"{client} worker failed ({k.returncode}): {err.decode()[-2000:]}"
                )
            results.append(json.loads(lines[-1]))
        merged = merge_results(results)
        if arrivals:
            merged["_arrivals"] = {}
            for arr, _ in files:
                if arr.exists():
                    merged["_arrivals"].update(json.loads(arr.read_text()))
        if records and client in GENBENCH_CLIENTS and procs > 1:
            merged["merge"] = merge_records([rec for _, rec in files])
        return merged
    finally:
        for k in kids:
            if k.poll() is None:
                k.kill()
                k.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def merge_results(rs: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rs[0])
    for key in (
        "cpu_s",
        "cpu_sys_s",
        "requests",
        "ok",
        "failed",
        "chunks",
        "output_tokens",
        "chars",
    ):
        out[key] = sum(r[key] for r in rs)
    for key in ("rss_base_bytes", "rss_peak_bytes"):
        out[key] = sum(r[key] for r in rs)
    out["errors"] = [e for r in rs for e in r["errors"]][:5]
    out["chars_by_key"] = {k: v for r in rs for k, v in r.get("chars_by_key", {}).items()}
    out["t_start"] = min(r["t_start"] for r in rs)
    out["t_end"] = max(r["t_end"] for r in rs)
    out["wall_s"] = out["t_end"] - out["t_start"]
    out["concurrency"] = sum(r["concurrency"] for r in rs)
    out["procs"] = len(rs)
    out["cpu_s_per_proc"] = [round(r["cpu_s"], 3) for r in rs]
    return out


def merge_records(paths: list[Path]) -> dict[str, Any]:
    """The multi-process prototype's merge: every worker's records file, already in t_send
    order, merged into one stream by t_send (CLOCK_MONOTONIC is shared by the processes)."""
    from genbench.records import RequestRecord

    def read(p: Path) -> Iterator[RequestRecord]:
        with open(p, "rb") as f:
            for line in f:
                yield RequestRecord.from_dict(json.loads(line))

    t0 = time.perf_counter()
    merged = list(heapq.merge(*(read(p) for p in paths), key=lambda r: r.t_send))
    ordered = all(a.t_send <= b.t_send for a, b in zip(merged, merged[1:], strict=False))
    return {"records": len(merged), "ordered": ordered, "merge_s": time.perf_counter() - t0}


def timing_error(
    arrivals: dict[str, list[float]], stamps: dict[str, Any], steady: bool = False
) -> dict[str, Any]:
    """Arrival time minus the server's write time of the same chunk, over all chunks; and
    the error of each inter-chunk gap (ITL) the client measured. With `steady`, only the
    chunks written while every stream was running (after the last stream's first chunk,
    before the first stream's last): the ramp of opening thousands of connections at
    once is left out."""
    import numpy as np

    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    mismatched = 0
    for key, arr in arrivals.items():
        st = stamps.get(key)
        if st is None or len(st["sends"]) != len(arr) or not arr:
            mismatched += 1
            continue
        pairs.append((np.asarray(st["sends"]), np.asarray(arr)))
    if not pairs:
        return {"matched": 0, "mismatched": mismatched}
    lo, hi = -np.inf, np.inf
    if steady:
        lo = max(s[0] for s, _ in pairs)
        hi = min(s[-1] for s, _ in pairs)
    errs, itl = [], []
    for s, a in pairs:
        keep = (s >= lo) & (s <= hi)
        e = (a - s)[keep]
        errs.append(e)
        itl.append(np.abs(np.diff(e)))
    e = np.concatenate(errs) * 1000
    d = np.concatenate(itl) * 1000
    if not len(e):
        return {"matched": len(pairs), "mismatched": mismatched}
    return {
        "matched": len(pairs),
        "mismatched": mismatched,
        "err_chunks": int(len(e)),
        "err_p50_ms": float(np.percentile(e, 50)),
        "err_p99_ms": float(np.percentile(e, 99)),
        "err_max_ms": float(e.max()),
        "itl_err_p99_ms": float(np.percentile(d, 99)) if len(d) else None,
    }


# -- the sweeps ----------------------------------------------------------------------------------


def machine_state() -> dict[str, Any]:
    """What else the machine was doing: load average and the busiest other processes."""
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    top = subprocess.run(
        ["ps", "-eo", "pcpu,rss,args", "--sort=-pcpu"], capture_output=True, text=True
    ).stdout.splitlines()[1:7]
    return {"loadavg": load, "cpus": os.cpu_count(), "top": [t.strip()[:140] for t in top]}


def row(r: dict[str, Any]) -> dict[str, Any]:
    chunks, cpu, wall = r["chunks"], r["cpu_s"], r["wall_s"]
    out = {
        "client": r["client"],
        "procs": r["procs"],
        "C": r["concurrency"],
        "chunks": chunks,
        "chunks_per_s": chunks / wall if wall else 0.0,
        "chunks_per_cpu_s": chunks / cpu if cpu else 0.0,
        "cpu_ms_per_1k_chunks": 1000 * cpu / chunks * 1000 if chunks else None,
        "cpu_util": cpu / wall if wall else 0.0,
        "sys_share": r["cpu_sys_s"] / cpu if cpu else 0.0,
        "failed": r["failed"],
        "requests": r["requests"],
        "errors": r["errors"],
        "rss_per_stream_kib": (r["rss_peak_bytes"] - r["rss_base_bytes"]) / r["concurrency"] / 1024,
        "rss_peak_mib": r["rss_peak_bytes"] / 2**20,
    }
    for k in ("loop_lag_p99_s", "merge", "cpu_s_per_proc", "server_cpu_util"):
        if k in r:
            out[k] = r[k]
    return out


def bulk_sweep(a: argparse.Namespace, clients: list[str]) -> list[dict[str, Any]]:
    rows = []
    with nginx(a.tokens) as url:
        for c in a.concurrency:
            n = max(c, a.bulk_chunks // a.tokens)
            n = max(n, 2 * c) if c <= 64 else n
            for client in clients:
                if client == "urllib" and c > a.urllib_max_c:
                    continue
                r = row(measure(client, url, c, n, a.tokens))
                r["mode"] = "bulk"
                rows.append(r)
                log(r)
    return rows


def token_sweep(a: argparse.Namespace, clients: list[str]) -> list[dict[str, Any]]:
    """For each concurrency, raise the offered chunk rate; every client at every point."""
    rows = []
    for c in a.token_concurrency:
        for rate in a.rates:
            tps = rate / c
            if tps > 2000:
                continue
            # streams of ~stream_seconds but at least 64 chunks (so that the per-request
            # cost does not swamp the per-chunk one); enough requests for ~token_seconds
            m = max(64, min(a.tokens, int(tps * a.stream_seconds)))
            n = max(c, int(rate * a.token_seconds / m))
            with StampServer("--mode", "tokens", "--tps", f"{tps:g}") as srv:
                for client in clients:
                    if (client == "urllib" and c > a.urllib_max_c) or client == "vllm-cli":
                        continue  # vllm-cli: its random prompts cannot be matched to stamps
                    s0, t0 = srv.cpu_s(), time.perf_counter()
                    raw = measure(client, srv.url, c, n, m, arrivals=True)
                    raw["server_cpu_util"] = (srv.cpu_s() - s0) / (time.perf_counter() - t0)
                    te = timing_error(raw.pop("_arrivals"), srv.stamps())
                    r = row(raw)
                    r.update(mode="tokens", offered_per_s=rate, tps=tps, tokens=m, **te)
                    rows.append(r)
                    log(r)
    return rows


def scaling(a: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    with nginx(a.tokens) as url:
        c = a.scale_concurrency
        n = max(4 * c, a.bulk_chunks // a.tokens)
        for procs in a.procs:
            r = row(measure("genbench-fast", url, c, n, a.tokens, procs=procs, records=True))
            r["mode"] = "scaling"
            rows.append(r)
            log(r)
    return rows


def hold(a: argparse.Namespace, clients: list[str]) -> list[dict[str, Any]]:
    """C streams open at once for ~10 s each: memory per in-flight stream."""
    rows = []
    c = a.hold
    tps = 5.0
    m = 50
    with StampServer("--mode", "tokens", "--tps", f"{tps:g}") as srv:
        for client in clients:
            if (client == "urllib" and c > a.urllib_max_c) or client == "vllm-cli":
                continue
            raw = measure(client, srv.url, c, c, m, arrivals=True)
            arr, stamps = raw.pop("_arrivals"), srv.stamps()
            r = row(raw)
            r.update(mode="hold", tps=tps, tokens=m, **timing_error(arr, stamps))
            r["steady"] = timing_error(arr, stamps, steady=True)
            rows.append(r)
            log(r)
    return rows


def split_check(a: argparse.Namespace, clients: list[str]) -> list[dict[str, Any]]:
    """Correct at any read boundary: every client against the sim with its `split` fault
    (the SSE byte stream cut at random positions, each piece its own write), compared
    with what a plain sim sends for the same prompts: failed requests, characters lost."""
    from genbench.sim.process import SimProcess

    fast = ["--model", MODEL, "--tps", "5000", "--per-seq-ms", "0", "--ttft-ms", "1"]
    fast += ["--max-batch", "4096"]
    rows = []
    cases = [("1-64", 64, a.split_requests, 256), ("1-1", 1, a.split_requests // 5, 64)]
    for label, hi, n, m in cases:
        with (
            SimProcess(*fast) as plain,
            SimProcess(*fast, "--fault", f"split:min=1,max={hi}") as sp,
        ):
            for client in clients:
                if client == "vllm-cli":
                    continue
                tag = f"split{label}"
                ref = measure_keys(client, plain.url, 32, n, m, tag)
                got = measure_keys(client, sp.url, 32, n, m, tag)
                want, have = ref["chars_by_key"], got["chars_by_key"]
                both = [k for k in have if k in want]
                r = row(got)
                r.update(
                    mode="split",
                    split=label,
                    tokens=m,
                    ref_failed=ref["failed"],
                    chars_expected=sum(want[k] for k in both),
                    chars=sum(have[k] for k in both),
                    requests_text_differs=sum(1 for k in both if have[k] != want[k]),
                )
                rows.append(r)
                log(r)
    return rows


def measure_keys(client: str, url: str, c: int, n: int, m: int, tag: str) -> dict[str, Any]:
    """`measure` with fixed request keys (so two servers get the same prompts)."""
    return measure(client, url, c, n, m, tag=tag)


def log(r: dict[str, Any]) -> None:
    keep = ("mode", "client", "procs", "C", "offered_per_s", "chunks_per_s", "chunks_per_cpu_s")
    keep += ("cpu_util", "failed", "err_p99_ms", "itl_err_p99_ms", "rss_per_stream_kib")
    parts = []
    for k in keep:
        if k in r:
            v = r[k]
            parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    print("  " + " ".join(parts), file=sys.stderr, flush=True)


# -- report ------------------------------------------------------------------------------------


def fmt(v: Any, spec: str = ".0f") -> str:
    if v is None:
        return "–"
    return format(v, spec) if isinstance(v, float | int) else str(v)


def report(res: dict[str, Any]) -> str:
    out = [f"## Client ceiling run {res['started']}", ""]
    ms = res["machine"]
    out.append(f"- machine: {ms['cpus']} CPUs, load average at start {' '.join(ms['loadavg'])}")
    end = res.get("machine_end")
    if end:
        out.append(f"- load average at end {' '.join(end['loadavg'])}")
    out.append(f"- command: `{res['command']}`")
    out.append("- busiest processes at start: " + "; ".join(f"`{t}`" for t in ms["top"][:4]))
    out.append("")
    bulk = [r for r in res["rows"] if r["mode"] == "bulk"]
    if bulk:
        out += ["### bulk: nginx, pre-rendered " + f"{res['args']['tokens']}-token streams", ""]
        out.append("| C | client | chunks/s | chunks/CPU-s | CPU ms/1K chunks | CPU | failed |")
        out.append("|---|---|---:|---:|---:|---:|---:|")
        for r in bulk:
            out.append(
                f"| {r['C']} | {r['client']} | {fmt(r['chunks_per_s'])} | "
                f"{fmt(r['chunks_per_cpu_s'])} | {fmt(r['cpu_ms_per_1k_chunks'], '.2f')} | "
                f"{r['cpu_util']:.0%} | {r['failed']}/{r['requests']} |"
            )
        out.append("")
        out += ratios(bulk, ("C",))
    tok = [r for r in res["rows"] if r["mode"] == "tokens"]
    if tok:
        out += ["### tokens: stamp server, one chunk per write, timing error vs its stamps", ""]
        out.append(
            "| C | offered/s | client | chunks/s | chunks/CPU-s | CPU | err p50 ms | "
            "err p99 ms | ITL err p99 ms | failed |"
        )
        out.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in tok:
            out.append(
                f"| {r['C']} | {r['offered_per_s']} | {r['client']} | {fmt(r['chunks_per_s'])} | "
                f"{fmt(r['chunks_per_cpu_s'])} | {r['cpu_util']:.0%} | "
                f"{fmt(r.get('err_p50_ms'), '.2f')} | {fmt(r.get('err_p99_ms'), '.2f')} | "
                f"{fmt(r.get('itl_err_p99_ms'), '.2f')} | {r['failed']}/{r['requests']} |"
            )
        out.append("")
        out += ratios(tok, ("C", "offered_per_s"))
        out.append("Highest rate ingested with timing error p99 < 1 ms:")
        for client in dict.fromkeys(r["client"] for r in tok):
            good = [r for r in tok if r["client"] == client and (r.get("err_p99_ms") or 1e9) < 1]
            best = max(good, key=lambda r: r["chunks_per_s"], default=None)
            out.append(
                f"- {client}: "
                + (f"{best['chunks_per_s']:.0f} chunks/s (C={best['C']})" if best else "none")
            )
        out.append("")
    sc = [r for r in res["rows"] if r["mode"] == "scaling"]
    if sc:
        base = sc[0]["chunks_per_s"] / sc[0]["procs"]
        out += ["### scaling: genbench-fast in N processes, bulk", ""]
        out.append("| procs | C | chunks/s | × one process | chunks/CPU-s | CPU per process |")
        out.append("|---:|---:|---:|---:|---:|---|")
        for r in sc:
            out.append(
                f"| {r['procs']} | {r['C']} | {fmt(r['chunks_per_s'])} | "
                f"{r['chunks_per_s'] / base:.2f} | {fmt(r['chunks_per_cpu_s'])} | "
                f"{r.get('cpu_s_per_proc')} |"
            )
        out.append("")
    hd = [r for r in res["rows"] if r["mode"] == "hold"]
    if hd:
        out += ["### hold: C streams in flight at once", ""]
        out.append(
            "| C | client | RSS peak MiB | KiB per stream | CPU | failed | err p99 ms (all) | "
            "err p50/p99 ms (all streams running) |"
        )
        out.append("|---:|---|---:|---:|---:|---:|---:|---:|")
        for r in hd:
            st = r.get("steady") or {}
            out.append(
                f"| {r['C']} | {r['client']} | {r['rss_peak_mib']:.0f} | "
                f"{r['rss_per_stream_kib']:.1f} | {r['cpu_util']:.0%} | "
                f"{r['failed']}/{r['requests']} | {fmt(r.get('err_p99_ms'), '.1f')} | "
                f"{fmt(st.get('err_p50_ms'), '.2f')} / {fmt(st.get('err_p99_ms'), '.2f')} |"
            )
        out.append("")
    sp = [r for r in res["rows"] if r["mode"] == "split"]
    if sp:
        out += ["### split: the sim cutting the byte stream at random positions", ""]
        out.append(
            "| piece bytes | tokens | client | failed | successful requests with text changed | "
            "characters lost (-) or added (+) in them |"
        )
        out.append("|---|---:|---|---:|---:|---:|")
        for r in sp:
            ok = r["requests"] - r["failed"]
            out.append(
                f"| {r['split']} | {r['tokens']} | {r['client']} | {r['failed']}/{r['requests']} "
                f"| {r['requests_text_differs']}/{ok} "
                f"| {r['chars'] - r['chars_expected']:+d} of {r['chars_expected']} |"
            )
        out.append("")
    return "\n".join(out)


def ratios(rows: list[dict[str, Any]], by: tuple[str, ...]) -> list[str]:
    """genbench-fast over each other client, per CPU-second, at each point."""
    out = []
    points = dict.fromkeys(tuple(r[k] for k in by) for r in rows)
    for pt in points:
        at = {r["client"]: r for r in rows if tuple(r[k] for k in by) == pt}
        g = at.get("genbench-fast")
        if not g:
            continue
        parts = [
            f"{g['chunks_per_cpu_s'] / r['chunks_per_cpu_s']:.2f}× {name}"
            for name, r in at.items()
            if name != "genbench-fast" and r["chunks_per_cpu_s"]
        ]
        label = ", ".join(f"{k}={v}" for k, v in zip(by, pt, strict=True))
        out.append(f"- {label}: genbench-fast per CPU-second = " + ", ".join(parts))
    return [*out, ""]


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def main(argv: list[str]) -> None:
    if argv[:1] == ["worker"]:
        worker_main(argv[1:])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer points, shorter runs")
    p.add_argument("--only", default="bulk,tokens,scaling,hold,split")
    p.add_argument("--clients", default="genbench-fast,genbench-aiohttp,vllm,vllm-cli,urllib")
    p.add_argument("--concurrency", type=ints, default=[1, 16, 256, 1024, 4096])
    p.add_argument("--token-concurrency", type=ints, default=[16, 256, 1024])
    p.add_argument("--rates", type=ints, default=[5000, 20000, 50000, 100000])
    p.add_argument("--tokens", type=int, default=1024, help="chunks per response (bulk)")
    p.add_argument("--bulk-chunks", type=int, default=1_000_000, help="chunks per bulk point")
    p.add_argument("--token-seconds", type=float, default=4.0)
    p.add_argument("--stream-seconds", type=float, default=2.0)
    p.add_argument("--procs", type=ints, default=[1, 2, 1, 2])
    p.add_argument("--scale-concurrency", type=int, default=64)
    p.add_argument("--hold", type=int, default=4096)
    p.add_argument("--urllib-max-c", type=int, default=1024)
    p.add_argument("--split-requests", type=int, default=500)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if a.quick:
        a.concurrency = [1, 64, 1024]
        a.token_concurrency = [64, 1024]
        a.rates = [10000, 40000]
        a.bulk_chunks = 600_000
        a.token_seconds = 3.0
        a.split_requests = 100
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    clients = a.clients.split(",")
    if not VLLM_PY.exists():
        print(f"no vLLM venv at {VLLM_PY.parent.parent}: skipping the vllm clients "
              "(scripts/vllm-test-server.sh setup)", file=sys.stderr)  # fmt: skip
        clients = [c for c in clients if not c.startswith("vllm")]
    only = set(a.only.split(","))
    res: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(["benchmarks/client_ceiling.py", *argv]),
        "args": {k: v for k, v in vars(a).items() if k != "out"},
        "machine": machine_state(),
        "rows": [],
    }
    steps = [
        ("bulk", lambda: bulk_sweep(a, clients)),
        ("tokens", lambda: token_sweep(a, clients)),
        ("scaling", lambda: scaling(a)),
        ("hold", lambda: hold(a, clients)),
        ("split", lambda: split_check(a, clients)),
    ]
    for name, step in steps:
        if name in only:
            print(f"{name} …", file=sys.stderr, flush=True)
            res["rows"] += step()
    res["machine_end"] = machine_state()
    out = a.out or HERE / "results" / f"client_ceiling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(report(res))
    print(f"\n(JSON: {out})", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
