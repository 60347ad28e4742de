"""One client process, thousands of streams, many servers (issue #19).

`genbench generate` drives 16 sims (and, for comparison, one sim) with 512, 1,024 and
4,096 streams in flight in total, started from a shell whose soft open-file limit is
1,024; `genbench run` sweeps the same concurrencies against one sim (`run` measures one
server). Both are the real commands in a subprocess. For each point, over the steady
window (every stream in flight, the ramp and the tail left out):

  CPU per chunk   the client's user+sys CPU (from /proc) over the streamed chunks the
                  sims counted (`sim:generation_tokens_total`; one token per chunk)
  loop lag        how late a 20 ms timer in the client's event loop fires (the command
                  runs with a timer task added to its loop, nothing else changed)
  memory          the client's peak resident memory, and descriptors it held
  TTFT error      the client's TTFT minus the sims' configured prefill time (the sims
                  never queue here: --max-batch covers every stream), for rows sent in
                  the window, beside the sims' own count of how late they wrote first
                  tokens (`sim:first_token_lag_seconds_total`)
  GC              the garbage collector's full collections in the window, longest
  correctness     generate: 0 failed rows, every id exactly once; run: 0 failed requests

Every stream decodes at --tps chunks/s whatever the batch (--per-seq-ms 0), so the
offered chunk rate is streams x tps; row lengths are drawn uniformly in [T/2, 3T/2] so
that rows end, and new ones start, at all times rather than in waves.

The client runs in a session of its own: where the kernel shares CPU between sessions
first (autogroup), the sims, which stand in for servers on other hosts, would otherwise
share one slice with it. A small process, also in a session of its own, measures how late
the host wakes it from the same 20 ms sleep (host lag); and for the intervals in which the
client's loop was more than 50 ms late, the probe notes how much of them its thread spent
on a CPU: near 0 means it was waiting for a core, near 1 that the client was busy.

    bash -c 'ulimit -Sn 1024; .venv/bin/python benchmarks/scale.py'
    .venv/bin/python benchmarks/scale.py --streams 512 --sims 4 --skip-run   # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.sim.process import SimProcess, start_all, stop_all

HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")
LAG_PERIOD = 0.02


# -- the client under test: the real command with a timer task on its event loop ------------


def client_main(lag_file: str, argv: list[str]) -> None:
    """`scale.py _client LAGFILE genbench-args...`: run genbench with a loop-lag probe, and
    the garbage collector's pauses noted (a full collection walks every object of every
    stream in flight: a candidate for the loop's longest stalls)."""
    import gc

    from genbench import cli
    from genbench.commands import common

    samples: list[tuple[float, float, float]] = []  # when, how late, loop thread's CPU
    pauses: list[tuple[float, int, float]] = []  # end, generation, seconds
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            started[0] = now
        else:
            pauses.append((now, info["generation"], now - started[0]))

    gc.callbacks.append(on_gc)
    inner = common.run_async

    async def probe() -> None:
        due = time.perf_counter() + LAG_PERIOD
        while True:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            now = time.perf_counter()
            samples.append((now, now - due, time.thread_time()))
            due = now + LAG_PERIOD

    def run_async(coro: Any) -> Any:
        async def with_probe() -> Any:
            task = asyncio.ensure_future(probe())
            try:
                return await coro
            finally:
                task.cancel()
                Path(lag_file).write_bytes(orjson.dumps({"lag": samples, "gc": pauses}))

        return inner(with_probe())

    common.run_async = run_async
    sys.argv = ["genbench", *argv]
    cli.main(argv)


# -- what the parent samples -----------------------------------------------------------------


@dataclass
class Sample:
    t: float  # perf_counter (CLOCK_MONOTONIC, shared with the client)
    cpu: float  # client user+sys seconds
    rss_mb: float
    fds: int
    tokens: float  # sum over sims of generation_tokens_total
    running: float  # sum over sims of num_requests_running
    chats: float  # sum over sims of requests_total{endpoint="chat"}
    first_lag: float  # sum over sims of first_token_lag_seconds_total
    sims_cpu: float  # user+sys seconds of the sims together


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


_METRIC = re.compile(r"^sim:(\w+)(\{[^}]*\})? (\S+)$", re.M)


def sim_metrics(root: str) -> dict[str, float]:
    with urllib.request.urlopen(root + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for name, labels, value in _METRIC.findall(text):
        key = name if name != "requests_total" else "requests_" + labels.split('"')[1]
        out[key] = out.get(key, 0.0) + float(value)
    return out


def sims_total(sims: list[SimProcess]) -> dict[str, float]:
    total: dict[str, float] = {}
    for s in sims:
        for k, v in sim_metrics(s.root).items():
            total[k] = total.get(k, 0.0) + v
    return total


class Sampler(threading.Thread):
    """Every `every` s: the client's CPU, memory and descriptors, and the sims' counters."""

    def __init__(self, pid: int, sims: list[SimProcess], every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.pid, self.sims, self.every = pid, sims, every
        self.samples: list[Sample] = []
        self.limits = ""
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                t = time.perf_counter()
                cpu, rss = proc_cpu(self.pid), proc_rss_mb(self.pid)
                fds = len(os.listdir(f"/proc/{self.pid}/fd"))
                limits = Path(f"/proc/{self.pid}/limits").read_text()  # raised at its start
                m = sims_total(self.sims)
                sims_cpu = sum(proc_cpu(s.proc.pid) for s in self.sims if s.proc is not None)
            except (OSError, IndexError):
                break  # the client exited
            self.limits = limits
            self.samples.append(
                Sample(
                    t,
                    cpu,
                    rss,
                    fds,
                    m.get("generation_tokens_total", 0.0),
                    m.get("num_requests_running", 0.0),
                    m.get("requests_chat", 0.0),
                    m.get("first_token_lag_seconds_total", 0.0),
                    sims_cpu,
                )
            )
            self.done.wait(self.every)


_HOST_PROBE = f"""
import sys, time
out = open(sys.argv[1], "w", buffering=1)
while True:
    t = time.perf_counter()
    time.sleep({LAG_PERIOD})
    now = time.perf_counter()
    out.write(f"{{now}} {{now - t - {LAG_PERIOD}}}\\n")
"""


class HostProbe:
    """How late this host wakes a process from a 20 ms sleep (host lag): the part of the
    client's loop lag that is the host's (other processes on the same cores), not the
    client's. A process of its own, in a session of its own, as the client is."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOST_PROBE, str(path)], start_new_session=True
        )

    def stop(self) -> list[tuple[float, float]]:
        self.proc.kill()
        self.proc.wait()
        rows = (line.split() for line in self.path.read_text().splitlines())
        return [(float(r[0]), float(r[1])) for r in rows if len(r) == 2]


def open_file_limits(text: str) -> str:
    row = next((ln for ln in text.splitlines() if ln.startswith("Max open files")), "")
    return "/".join(row.split()[3:5])


# -- one measured point ------------------------------------------------------------------------


@dataclass
class Point:
    command: str
    servers: int
    streams: int
    chunks_per_s: float = 0.0
    window_s: float = 0.0
    cpu_us_per_chunk: float = 0.0
    cpu_share: float = 0.0  # of one core, in the window
    sims_cpu_share: float = 0.0  # the sims together, in the window
    in_flight: float = 0.0  # mean streams in flight in the window, by the sims' count
    lag_ms: dict[str, float] = field(default_factory=dict)
    host_lag_ms: dict[str, float] = field(default_factory=dict)
    gc_full: dict[str, float] = field(default_factory=dict)  # full collections in the window
    late_on_cpu: float | None = None  # share of loop lag > 50 ms its thread was on a CPU
    rss_peak_mb: float = 0.0
    fds_peak: int = 0
    client_nofile: str = ""  # soft/hard limit the client ran under, as /proc shows it
    ttft_err_ms: dict[str, float] = field(default_factory=dict)
    requests: int = 0
    failed: int = 0
    ids_exactly_once: bool | None = None
    sim_resyncs: float = 0.0
    load: list[float] = field(default_factory=list)
    wall_s: float = 0.0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def steady(samples: list[Sample], streams: int, t0: float, t1: float) -> tuple[int, int]:
    """The first and last sample in [t0, t1] with every stream in flight (98%: a slot is
    empty for the moment between one row and the next). Where the host never let that
    many be in flight at once (starved servers answer late), 95% of the most there were:
    the point's `in_flight` says how many."""
    span = [i for i, s in enumerate(samples) if t0 <= s.t <= t1]
    if not span:
        raise SystemExit(f"no samples at {streams} streams")
    top = max(samples[i].running for i in span)
    bar = 0.98 * streams if top >= 0.98 * streams else 0.95 * top
    idx = [i for i in span if samples[i].running >= bar]
    return idx[0], max(idx[-1], idx[0] + 1)


def window_stats(
    p: Point,
    samples: list[Sample],
    a: int,
    b: int,
    probe: dict[str, list[Any]],
    span: tuple[float, float],
    host: list[tuple[float, float]],
) -> None:
    """Rates, CPU and lag over samples a..b (every stream in flight); memory and
    descriptors at their peak over `span` (the whole point, ramp included)."""
    s0, s1 = samples[a], samples[b]
    chunks = s1.tokens - s0.tokens
    p.window_s = s1.t - s0.t
    p.chunks_per_s = chunks / p.window_s
    p.cpu_us_per_chunk = (s1.cpu - s0.cpu) / chunks * 1e6
    p.cpu_share = (s1.cpu - s0.cpu) / p.window_s
    p.sims_cpu_share = (s1.sims_cpu - s0.sims_cpu) / p.window_s
    p.in_flight = statistics.fmean(s.running for s in samples[a : b + 1])
    ticks = [x for x in probe["lag"] if s0.t <= x[0] <= s1.t]
    p.lag_ms = lag_stats([x for _, x, _ in ticks])
    # of the intervals that ended more than 50 ms late, the share the loop's thread spent
    # on a CPU:
    # the client's own work (near 1) or waiting for a core the host gave to others (near 0)
    late = [(b[0] - a[0], b[2] - a[2]) for a, b in itertools.pairwise(ticks) if b[1] > 0.05]
    p.late_on_cpu = sum(c for _, c in late) / sum(x for x, _ in late) if late else None
    full = [x for t, g, x in probe["gc"] if s0.t <= t <= s1.t and g == 2]
    p.gc_full = {"count": len(full), "max_ms": max(full, default=0.0) * 1e3}
    p.host_lag_ms = lag_stats([x for t, x in host if s0.t <= t <= s1.t])
    inside = [s for s in samples if span[0] <= s.t <= span[1]]
    p.rss_peak_mb = max(s.rss_mb for s in inside)
    p.fds_peak = max(s.fds for s in inside)


def lag_stats(lags: list[float]) -> dict[str, float]:
    return {
        "p50": pct(lags, 0.50) * 1e3,
        "p99": pct(lags, 0.99) * 1e3,
        "max": max(lags, default=float("nan")) * 1e3,
    }


def ttft_stats(ttfts: list[float], prefill_s: float, sim_late_s: float) -> dict[str, float]:
    """The client's TTFT minus the prefill time the sims were told to take: what the
    client, loopback and the sims' request handling added. `sim_late_mean`: how late the
    sims themselves wrote first tokens after their scheduled time (their own count)."""
    err = [t - prefill_s for t in ttfts]
    return {
        "p50": pct(err, 0.5) * 1e3,
        "p99": pct(err, 0.99) * 1e3,
        "mean": statistics.fmean(err) * 1e3 if err else float("nan"),
        "sim_late_mean": sim_late_s * 1e3,
        "rows": len(err),
    }


def client_cmd(lag_file: Path, args: list[str]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "_client", str(lag_file), *args]


def launch(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    """The client in a session of its own: where the kernel shares CPU between sessions
    first (autogroup, the default on desktop and many server kernels), the 16 sims would
    otherwise share one session's slice with the client they stand in for remote servers
    to, and starve it."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    with open(log, "wb") as f:
        return subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def follow(
    proc: subprocess.Popen[bytes], sims: list[SimProcess], log: Path
) -> tuple[Sampler, list[tuple[float, float]]]:
    sampler, host = Sampler(proc.pid, sims), HostProbe(log.with_suffix(".host"))
    sampler.start()
    try:
        rc = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: the client is in its own session
            proc.kill()
            proc.wait()
        sampler.done.set()
        sampler.join()
        host_lag = host.stop()
    if rc != 0:
        raise SystemExit(f"client failed ({rc}):\n{log.read_text()[-3000:]}")
    return sampler, host_lag


def write_input(path: Path, rows: int, tokens: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    ids = [f"s{seed}-{i}" for i in range(rows)]
    with open(path, "wb") as f:
        for i in ids:
            n = rnd.randint(tokens // 2, tokens * 3 // 2)
            row = {
                "id": i,
                "messages": [{"role": "user", "content": f"row {i}"}],
                "params": {"max_tokens": n, "ignore_eos": True},
            }
            f.write(orjson.dumps(row) + b"\n")
    return ids


def measure_generate(
    a: argparse.Namespace, sims: list[SimProcess], streams: int, work: Path
) -> Point:
    n = len(sims)
    p = Point("generate", n, streams)
    tag = f"gen-{n}x{streams}"
    rows = a.rows_per_stream * streams
    ids = write_input(work / f"{tag}.jsonl", rows, a.tokens, streams * 100 + n)
    urls = work / f"{tag}-urls.txt"
    urls.write_text("".join(f"{s.url} {streams // n}\n" for s in sims))
    out, lag_file, log = work / tag, work / f"{tag}-lag.json", work / f"{tag}.log"
    args = ["generate", "-i", str(work / f"{tag}.jsonl"), "-o", str(out)]
    args += ["--url-file", str(urls), "--progress-every", "3600"]
    before = sims_total(sims)
    t0 = time.perf_counter()
    proc = launch(client_cmd(lag_file, args), log)
    sampler, host = follow(proc, sims, log)
    p.wall_s = time.perf_counter() - t0
    p.load = list(os.getloadavg())
    samples = sampler.samples
    t1 = time.perf_counter()
    lo, hi = steady(samples, streams, t0, t1)
    probe = orjson.loads(lag_file.read_bytes())
    window_stats(p, samples, lo, hi, probe, (t0, t1), host)
    p.client_nofile = open_file_limits(sampler.limits)
    # every id exactly once, none failed
    got: list[str] = []
    ttfts: list[float] = []
    w0 = time.time() - time.perf_counter()  # wall = perf_counter + w0
    for f in sorted(out.glob("data-*.jsonl")):
        for line in f.read_bytes().splitlines():
            row = orjson.loads(line)
            got.append(row["id"])
            m = row["meta"]
            if samples[lo].t + w0 <= m["sent_at"] <= samples[hi].t + w0:
                ttfts.append(m["ttft_s"])
    errors = out / "errors.jsonl"
    p.failed = sum(1 for _ in errors.open()) if errors.exists() else 0
    p.requests = len(got)
    p.ids_exactly_once = len(got) == len(set(got)) == rows and set(got) == set(ids)
    late = (samples[hi].first_lag - samples[lo].first_lag) / max(
        1.0, samples[hi].chats - samples[lo].chats
    )
    p.ttft_err_ms = ttft_stats(ttfts, a.ttft_ms / 1000, late)
    p.sim_resyncs = sims_total(sims)["decode_resyncs_total"] - before["decode_resyncs_total"]
    return p


def measure_run(
    a: argparse.Namespace, sim: SimProcess, levels: list[int], work: Path
) -> list[Point]:
    out, lag_file, log = work / "run", work / "run-lag.json", work / "run.log"
    # --natural: each prompt's length is the sim's own draw (uniform, as generate's rows),
    # capped at --sweep-tokens; forced equal lengths would end and restart in waves
    args = ["run", "--url", sim.url, "--skip", "warmup,single", "--shape", "sustained"]
    args += ["--concurrency", ",".join(map(str, levels)), "--natural"]
    args += ["--sweep-tokens", str(a.tokens * 3 // 2)]
    args += ["--requests-per-slot", str(a.rows_per_stream), "--out", str(out)]
    before = sims_total([sim])
    proc = launch(client_cmd(lag_file, args), log)
    sampler, host = follow(proc, [sim], log)
    load = list(os.getloadavg())
    samples, probe = sampler.samples, orjson.loads(lag_file.read_bytes())
    by_phase: dict[str, list[dict[str, Any]]] = {}
    for line in (out / "requests.jsonl").read_bytes().splitlines():
        r = orjson.loads(line)
        by_phase.setdefault(r["phase"], []).append(r)
    points = []
    for c in levels:
        recs = by_phase[f"sustained-c{c}"]
        t0 = min(r["t_send"] for r in recs)
        t1 = max(r["t_end"] or r["t_send"] for r in recs)
        p = Point("run", 1, c, load=load)
        lo, hi = steady(samples, c, t0, t1)
        window_stats(p, samples, lo, hi, probe, (t0, t1), host)
        p.client_nofile = open_file_limits(sampler.limits)
        p.requests = len(recs)
        p.failed = sum(1 for r in recs if r["error_kind"])
        inside = [r["ttft"] for r in recs if samples[lo].t <= r["t_send"] <= samples[hi].t]
        late = (samples[hi].first_lag - samples[lo].first_lag) / max(
            1.0, samples[hi].chats - samples[lo].chats
        )
        p.ttft_err_ms = ttft_stats([x for x in inside if x is not None], a.ttft_ms / 1000, late)
        p.wall_s = t1 - t0
        points.append(p)
    resyncs = sims_total([sim])["decode_resyncs_total"] - before["decode_resyncs_total"]
    for p in points:
        p.sim_resyncs = resyncs  # for the whole sweep
    return points


# -- report ----------------------------------------------------------------------------------


def table(points: list[Point]) -> str:
    head = (
        "| command | sims | streams | in flight | chunks/s | client µs CPU/chunk "
        "| client, sims cores | loop lag p50 / p99 / max ms | host lag p99 ms | full GCs, max ms "
        "| TTFT − prefill p50 / p99 / mean ms "
        "| sims' first-token lateness ms | RSS MB | fds | rows | failed | ids once | load |"
    )
    rows = [head, "|" + "---|" * 18]
    for p in points:
        t, lg = p.ttft_err_ms, p.lag_ms
        on_cpu = "" if p.late_on_cpu is None else f" ({p.late_on_cpu:.0%} on CPU)"
        rows.append(
            f"| {p.command} | {p.servers} | {p.streams:,} | {p.in_flight:,.0f} | "
            f"{p.chunks_per_s:,.0f} | "
            f"{p.cpu_us_per_chunk:.1f} | {p.cpu_share:.2f}, {p.sims_cpu_share:.2f} | "
            f"{lg['p50']:.1f} / {lg['p99']:.1f} / {lg['max']:.0f}{on_cpu} | "
            f"{p.host_lag_ms['p99']:.1f} | "
            f"{p.gc_full['count']:.0f}, {p.gc_full['max_ms']:.0f} | "
            f"{t['p50']:.1f} / {t['p99']:.1f} / {t['mean']:.1f} | {t['sim_late_mean']:.1f} | "
            f"{p.rss_peak_mb:.0f} | {p.fds_peak:,} | {p.requests:,} | {p.failed} | "
            f"{'yes' if p.ids_exactly_once else ('—' if p.ids_exactly_once is None else 'NO')} | "
            f"{p.load[0]:.1f} |"
        )
    return "\n".join(rows)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_client":
        client_main(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=16)
    ap.add_argument("--streams", default="512,1024,4096", help="total streams in flight")
    ap.add_argument("--tps", type=float, default=4.0, help="chunks/s of each stream")
    ap.add_argument("--tokens", type=int, default=64, help="mean output tokens of a row")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--rows-per-stream", type=int, default=3)
    ap.add_argument("--skip-single", action="store_true", help="no one-sim generate points")
    ap.add_argument("--skip-run", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="JSON results file")
    ap.add_argument(
        "--keep", type=Path, default=None, help="keep inputs, outputs, logs and probes here"
    )
    a = ap.parse_args()
    levels = [int(x) for x in a.streams.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"this shell: open files soft {soft}, hard {hard}; {os.cpu_count()} CPUs")
    sim_args = ["--tps", str(a.tps), "--per-seq-ms", "0", "--ttft-ms", str(a.ttft_ms)]
    lens = f"uniform:{a.tokens // 2}:{a.tokens * 3 // 2}"  # run's lengths; generate's rows
    sim_args += ["--max-batch", str(max(levels)), "--output-len", lens]  # carry their own
    points: list[Point] = []
    with tempfile.TemporaryDirectory(prefix="genbench-scale-") as tmp:
        work = a.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        sims = [SimProcess(*sim_args, timeout=300) for _ in range(a.sims)]
        start_all(sims)
        try:
            for n_sims in [a.sims] if a.skip_single else [a.sims, 1]:
                for streams in levels:
                    p = measure_generate(a, sims[:n_sims], streams, work)
                    points.append(p)
                    print(table([p]).splitlines()[-1], flush=True)
            if not a.skip_run:
                for p in measure_run(a, sims[0], levels, work):
                    points.append(p)
                    print(table([p]).splitlines()[-1], flush=True)
        finally:
            stop_all(sims)
    print()
    print(table(points))
    doc = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "shell_nofile": [soft, hard],
        "cpus": os.cpu_count(),
        "args": {k: str(v) for k, v in vars(a).items()},
        "sim_args": sim_args,
        "points": [asdict(p) for p in points],
    }
    out = a.out or HERE / "results" / f"scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
