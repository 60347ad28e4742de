"""Client ceiling: how many streamed chunks genbench ingests per second and per CPU-second.

A benchmark client that saturates reports its own limit as the server's. This measures
the limit of genbench's load engine (`genbench.load.run_phase`, as `genbench run` uses
it), side by side in one run with the peers' clients (benchmarks/peer_clients.py:
`vllm bench serve`'s and a urllib + threads script) and, with `--baseline-rev REV`, with
genbench as it was at an older revision (its client `genbench@REV`, run from a copy of
that revision by its own worker, alternately with this one: same server, same load),
against servers that are not the bottleneck:

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
    .venv/bin/python benchmarks/client_ceiling.py --only bulk,tokens --quick \
        --clients genbench --baseline-rev c38f4aa --rounds 3

Results: a Markdown report on stdout and JSON in benchmarks/results/. See
benchmarks/README.md ("Client ceiling") for recorded runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from ceiling_report import (  # noqa: E402
    loadavg,
    log,
    machine_state,
    merge_records,
    merge_results,
    report,
    row,
    timing_error,
)
from ceiling_servers import MODEL, StampServer, nginx  # noqa: E402
from peer_clients import Phase, wait_for_go  # noqa: E402

VLLM_PY = Path(os.environ.get("GENBENCH_VLLM_VENV", REPO / ".cache/vllm-venv")) / "bin/python"
# "+asyncio": the same client on asyncio's own event loop instead of uvloop; "+ids": asking
# for vLLM's token ids and keeping them (against a server that sends them: stamp_server.py)
GENBENCH_CLIENTS = ("genbench", "genbench+asyncio", "genbench+ids")
PEERS = ("vllm", "vllm-cli", "urllib")
BASELINES: dict[str, tuple[Path, str]] = {}  # "genbench@REV" -> (its tree, its client's name)


# -- the genbench worker (a child process) -------------------------------------------------


async def run_genbench(a: argparse.Namespace) -> dict[str, Any]:
    from genbench.load import run_phase
    from genbench.selfcheck import LoopMonitor
    from genbench.transport.client import ChatRequest, Client, Timeouts
    from genbench.transport.endpoint import Endpoint

    ids = "vllm" if a.client == "genbench+ids" else None
    client = Client(
        Endpoint.parse(a.url), MODEL, timeouts=Timeouts(connect=30, read=600), token_ids=ids
    )

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
        ids_kept=sum(len(getattr(r, "token_ids", None) or ()) for r in ok),
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
    # the event loop may leave stdout non-blocking: a long result line was then cut short
    os.set_blocking(sys.stdout.fileno(), True)
    print(json.dumps(res), flush=True)


# -- one measurement ---------------------------------------------------------------------------


def is_genbench(client: str) -> bool:
    return client in GENBENCH_CLIENTS or client in BASELINES


def worker_cmd(client: str) -> tuple[list[str], dict[str, str] | None]:
    """The command that runs `client`'s worker, and its environment if not this one's."""
    if client in GENBENCH_CLIENTS:
        return [sys.executable, str(Path(__file__).resolve()), "worker", "--client", client], None
    if client in BASELINES:  # the older revision's own worker, on its own source tree
        tree, name = BASELINES[client]
        cmd = [sys.executable, str(tree / "benchmarks/client_ceiling.py"), "worker"]
        return cmd + ["--client", name], {**os.environ, "PYTHONPATH": str(tree / "src")}
    py = str(VLLM_PY) if client.startswith("vllm") else sys.executable
    cmd = [py, str(HERE / "peer_clients.py"), "--client", client]
    if client == "vllm-cli":
        cmd += ["--tokenizer", str(REPO / ".cache/vllm-model")]
    return cmd, None


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
    files = [(tmp / f"arr{j}.json", tmp / f"rec{j}.jsonl") for j in range(procs)]
    records = records and is_genbench(client)
    try:
        for j, (arr, rec) in enumerate(files):
            c = concurrency // procs + (j < concurrency % procs)
            n = requests // procs + (j < requests % procs)
            cmd, env = worker_cmd(client)
            cmd += [
                "--url", url, "--concurrency", str(c), "--requests", str(n),
                "--max-tokens", str(max_tokens), "--prefix", f"{tag}-p{j}",
            ]  # fmt: skip
            cmd += ["--arrivals", str(arr)] if arrivals else []
            cmd += ["--records", str(rec)] if records else []
            pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
            kids.append(subprocess.Popen(cmd, env=env, **pipes))
        load = loadavg()
        merged = merge_results(run_workers(client, kids, timeout))
        merged.update(client=client, loadavg=load)  # a baseline's worker says its own name
        if arrivals:
            merged["_arrivals"] = {}
            for arr, _ in files:
                if arr.exists():
                    merged["_arrivals"].update(json.loads(arr.read_text()))
        if records and procs > 1:
            merged["merge"] = merge_records([rec for _, rec in files])
        return merged
    finally:
        for k in kids:
            if k.poll() is None:
                k.kill()
                k.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def run_workers(
    client: str, kids: list[subprocess.Popen[bytes]], timeout: float
) -> list[dict[str, Any]]:
    """Wait until every worker is ready, start them together, collect their results."""
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
            raise RuntimeError(f"{client} worker failed ({k.returncode}): {err.decode()[-2000:]}")
        try:
            results.append(json.loads(lines[-1]))
        except json.JSONDecodeError:
            raise Unreadable(f"{client} worker's result is cut ({len(out)} bytes)") from None
    return results


class Unreadable(RuntimeError):
    """A worker's result line came back cut short (seen once, on a host at load 14)."""


def measure_again(client: str, *args: Any, **kw: Any) -> dict[str, Any]:
    """`measure`, once more if the worker's result came back unreadable."""
    try:
        return measure(client, *args, **kw)
    except Unreadable as e:
        print(f"  {e}: measuring again", file=sys.stderr, flush=True)
        return measure(client, *args, **kw)


def extract_baseline(rev: str, into: Path) -> str:
    """A copy of genbench at revision `rev` (git archive) in `into`; its client joins the
    run as `genbench@REV`, driven by that revision's own worker."""
    tree = into / rev
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src", "benchmarks"], capture_output=True
    )
    if archive.returncode != 0:
        raise SystemExit(f"--baseline-rev {rev}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    # the fastest client that revision had: before the one transport, the protocol one
    old = "genbench-fast" if (tree / "src/genbench/fastclient.py").exists() else "genbench"
    name = f"genbench@{rev}"
    BASELINES[name] = (tree, old)
    return name


def bulk_sweep(a: argparse.Namespace, clients: list[str]) -> list[dict[str, Any]]:
    rows = []
    with nginx(a.tokens) as url:
        for c in a.concurrency:
            n = max(c, a.bulk_chunks // a.tokens)
            n = max(n, 2 * c) if c <= 64 else n
            for client in clients * a.rounds:
                if client == "urllib" and c > a.urllib_max_c:
                    continue
                r = row(measure_again(client, url, c, n, a.tokens))
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
                for client in clients * a.rounds:
                    if (client == "urllib" and c > a.urllib_max_c) or client == "vllm-cli":
                        continue  # vllm-cli: its random prompts cannot be matched to stamps
                    s0, t0 = srv.cpu_s(), time.perf_counter()
                    raw = measure_again(client, srv.url, c, n, m, arrivals=True)
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
            r = row(measure("genbench", url, c, n, a.tokens, procs=procs, records=True))
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


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer points, shorter runs")
    p.add_argument("--only", default="bulk,tokens,scaling,hold,split")
    p.add_argument("--clients", default="genbench,vllm,vllm-cli,urllib")
    p.add_argument(
        "--baseline-rev",
        default="",
        help="git revisions (comma-separated) whose genbench client runs beside this one, "
        "as genbench@REV, each from a copy of that revision",
    )
    p.add_argument(
        "--rounds", type=int, default=1, help="bulk and tokens: every client N times, in turn"
    )
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
    return a


def main(argv: list[str]) -> None:
    if argv[:1] == ["worker"]:
        worker_main(argv[1:])
        return
    a = parse_args(argv)
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    clients = a.clients.split(",")
    if not VLLM_PY.exists():
        print(f"no vLLM venv at {VLLM_PY.parent.parent}: skipping the vllm clients "
              "(scripts/vllm-test-server.sh setup)", file=sys.stderr)  # fmt: skip
        clients = [c for c in clients if not c.startswith("vllm")]
    trees = Path(tempfile.mkdtemp(prefix="gb-baseline-"))
    for rev in filter(None, a.baseline_rev.split(",")):
        clients.insert(1, extract_baseline(rev, trees))
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
    try:
        for name, step in steps:
            if name in a.only.split(","):
                print(f"{name} …", file=sys.stderr, flush=True)
                res["rows"] += step()
    finally:
        shutil.rmtree(trees, ignore_errors=True)
    res["machine_end"] = machine_state()
    out = a.out or HERE / "results" / f"client_ceiling-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(report(res))
    print(f"\n(JSON: {out})", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
