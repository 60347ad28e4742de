"""`genbench generate` throughput against `genbench run`'s sustained rate, and its memory.

Issue #6 asks that generating a data set cost the client nothing measurable: at the same
concurrency on the same server, generate's throughput must be >= 97% of `run`'s
sustained rate. Both commands run as a user runs them, against one sim, alternating
(run, generate, run, generate, ...) so that drift in the machine's load hits both:

  run       --shape sustained --skip warmup,single: K*C requests of T forced tokens;
            its steady-window tokens/s from result.json.
  generate  K*C distinct prompts, --max-tokens T --param ignore_eos=true (the same forced
            length); tokens/s over the same kind of window, from each row's metadata:
            from the C-th completion (the ramp is over) to the completion at which the
            last row was sent (the tail begins).

CPU seconds (user+sys) of each command are reported too: on a loaded machine wall-clock
rates wander, CPU per token does not.

`--baseline-rev REV` runs an older revision's generate as well (checked out with `git
worktree add` into a temporary directory, run from its own src/), in each repeat right
before or after this one's (the order alternates), on the same prompts and sim: before
and after, side by side under the same load.

Memory: a long job of short rows (many rows per second, so per-row leaks would show),
with the generate process's resident memory sampled every 0.25 s against rows done
(for the baseline too, when given).

    .venv/bin/python benchmarks/generate_throughput.py
    .venv/bin/python benchmarks/generate_throughput.py --concurrency 128 --repeats 5
    .venv/bin/python benchmarks/generate_throughput.py --baseline-rev c38f4aa --repeats 5
    .venv/bin/python benchmarks/generate_throughput.py --memory-rows 50000 --skip-throughput
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

from genbench.sim.process import SimProcess

GB = [sys.executable, "-m", "genbench"]
ENV = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
REPO = Path(__file__).resolve().parent.parent
# label -> environment: this checkout, and the baseline's when given
REVS: dict[str, dict[str, str]] = {"this": {**ENV, "PYTHONPATH": str(REPO / "src")}}


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_cmd(cmd: list[str], rev: str = "this") -> tuple[float, float]:
    """(wall s, CPU s) of one command; exits on failure."""
    c0, t0 = cpu_children(), time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=REVS[rev])
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}{p.stdout[-2000:]}")
    return time.perf_counter() - t0, cpu_children() - c0


def write_input(path: Path, n: int, tag: str) -> None:
    with open(path, "wb") as f:
        for i in range(n):
            msg = [{"role": "user", "content": f"Prompt {tag}-{i}: write about topic {i}."}]
            f.write(orjson.dumps({"id": f"{tag}-{i}", "messages": msg}) + b"\n")


def generate_rate(out: Path, c: int) -> tuple[float, int, float]:
    """Tokens/s in the steady window, as `run` defines it, from each row's completion time:
    the first C completions are the ramp; the last row is sent at the (N-C)-th completion,
    after which fewer than C rows are in flight (the tail). Tokens of the rows completing
    in (C-th, (N-C)-th] over that time. Also the median row latency."""
    rows = []
    for p in out.glob("data-*.jsonl"):
        for line in p.read_bytes().splitlines():
            m = orjson.loads(line)["meta"]
            rows.append((m["finished_at"], m["completion_tokens"], m["latency_s"]))
    rows.sort()
    n = len(rows)
    t_start, t_end = rows[c - 1][0], rows[n - c - 1][0]
    inside = rows[c : n - c]
    e2e = statistics.median(r[2] for r in rows)
    return sum(r[1] for r in inside) / (t_end - t_start), n, e2e


def run_sustained(a: argparse.Namespace, sim: SimProcess, rdir: Path) -> tuple[float, float]:
    """`run --shape sustained`: its steady-window tok/s and its CPU seconds."""
    c, k, t = a.concurrency, a.rows_per_slot, a.tokens
    cmd = [*GB, "run", "--url", sim.url, "--skip", "warmup,single", "--concurrency", str(c)]
    cmd += ["--shape", "sustained", "--sweep-tokens", str(t), "--requests-per-slot", str(k)]
    _, cpu = run_cmd([*cmd, "--out", str(rdir)])
    doc = json.loads((rdir / "result.json").read_text())
    phase = next(p for p in doc["phases"] if p["kind"] == "sustained")
    return phase["summary"]["steady_tps"], cpu


def gen_cmd(sim: SimProcess, inp: Path, out: Path, c: int, tokens: int) -> list[str]:
    return [*GB, "generate", "-i", str(inp), "-o", str(out), "--url", sim.url, "-c", str(c),
            "--max-tokens", str(tokens), "--param", "ignore_eos=true"]  # fmt: skip


def throughput(a: argparse.Namespace, sim: SimProcess, work: Path) -> None:
    c, k, t = a.concurrency, a.rows_per_slot, a.tokens
    revs = list(REVS)
    runs: list[float] = []
    gens: dict[str, list[float]] = {r: [] for r in revs}
    cpus: dict[str, list[float]] = {r: [] for r in ["run", *revs]}
    print(f"sim: {' '.join(a.sim)}; C={c}, {k * c} requests of {t} tokens per measurement\n")
    head = " | ".join(f"generate {r} tok/s | {r} CPU s" for r in revs)
    print(f"| repeat | run sustained tok/s | run CPU s | {head} | ratios | load |")
    print("|---|---|---|" + "---|---|" * len(revs) + "---|---|")
    for i in range(a.repeats):
        run_tps, cpu_r = run_sustained(a, sim, work / f"run-{i}")
        runs.append(run_tps)
        cpus["run"].append(cpu_r)
        cells = {}
        # the same prompts for each revision, one after the other, in turns first
        for rev in revs if i % 2 == 0 else revs[::-1]:
            inp, out = work / f"in-{i}.jsonl", work / f"gen-{i}-{rev}"
            write_input(inp, k * c, f"r{i}")
            _, cpu_g = run_cmd(gen_cmd(sim, inp, out, c, t), rev)
            gen_tps, n, _ = generate_rate(out, c)
            assert n == k * c, n
            gens[rev].append(gen_tps)
            cpus[rev].append(cpu_g)
            cells[rev] = f"{gen_tps:,.0f} | {cpu_g:.2f}"
        ratios = ", ".join(f"{gens[r][-1] / run_tps:.3f}" for r in revs)
        row = " | ".join(cells[r] for r in revs)
        print(f"| {i + 1} | {run_tps:,.0f} | {cpu_r:.2f} | {row} | {ratios} | "
              f"{os.getloadavg()[0]:.1f} |")  # fmt: skip
    med = statistics.median
    cells = [f"{med(gens[r]):,.0f} | {med(cpus[r]):.2f}" for r in revs]
    ratios = ", ".join(f"{med(gens[r]) / med(runs):.3f}" for r in revs)
    print(f"| median | {med(runs):,.0f} | {med(cpus['run']):.2f} | {' | '.join(cells)} | "
          f"{ratios} | |")  # fmt: skip
    inp, out = work / f"in-{a.repeats - 1}.jsonl", work / f"gen-{a.repeats - 1}-this"
    # the fixed cost of a generate command (interpreter, imports, input scan), measured by
    # rerunning the last one: nothing is left to do, so nothing is sent
    _, cpu_base = run_cmd([*GB, "generate", "-i", str(inp), "-o", str(out), "--url", sim.url])
    for rev in revs:
        per_tok = (med(cpus[rev]) - cpu_base) / (k * c * t) * 1e6
        ratios_r = [g / r for g, r in zip(gens[rev], runs, strict=True)]
        print(
            f"\ngenerate ({rev}) CPU per streamed token: {per_tok:.1f} us (median CPU minus "
            f"{cpu_base:.2f} s of fixed cost, over {k * c * t:,} tokens); generate / run: "
            f"median {med(ratios_r):.3f}, min {min(ratios_r):.3f}, max {max(ratios_r):.3f}"
        )
    if len(revs) > 1:
        pairs = [n / b for n, b in zip(gens["this"], gens[revs[1]], strict=True)]
        cpu = [n / b for n, b in zip(cpus["this"], cpus[revs[1]], strict=True)]
        print(
            f"this / {revs[1]}: tok/s median {med(pairs):.3f} (min {min(pairs):.3f}, max "
            f"{max(pairs):.3f}); CPU s median {med(cpu):.3f}"
        )
    print(
        f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs\n"
    )


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def lines(out: Path) -> int:
    if not out.exists():
        return 0
    return sum(p.stat().st_size for p in out.glob("data-*.jsonl"))  # bytes as a cheap proxy


def memory(a: argparse.Namespace, sim: SimProcess, work: Path, rev: str = "this") -> None:
    n = a.memory_rows
    inp, out = work / "mem.jsonl", work / f"mem-out-{rev}"
    write_input(inp, n, "m")
    cmd = [
        *GB,
        "generate",
        "-i",
        str(inp),
        "-o",
        str(out),
        "--url",
        sim.url,
        "-c",
        str(a.concurrency),
        "--max-tokens",
        "32",
        "--param",
        "ignore_eos=true",
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=REVS[rev])
    samples: list[tuple[float, int, float]] = []  # t, bytes written, rss
    t0 = time.perf_counter()
    while p.poll() is None:
        rss = rss_mb(p.pid)
        if rss is not None:
            samples.append((time.perf_counter() - t0, lines(out), rss))
        time.sleep(0.25)
    if p.returncode != 0:
        sys.exit(f"memory run failed ({p.returncode})")
    total = lines(out)
    print(
        f"memory ({rev}): {n:,} rows of 32 tokens at C={a.concurrency}, "
        f"{time.perf_counter() - t0:.0f} s; resident memory of the generate process:"
    )
    print("| rows done | RSS MB |")
    print("|---|---|")
    for frac in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        s = min(samples, key=lambda x: abs(x[1] - frac * total))
        print(f"| {frac:.0%} | {s[2]:.0f} |")
    working = [s[2] for s in samples if 0.1 * total <= s[1] <= 0.95 * total]
    if working:
        print(
            f"\nfrom 10% to 95% of the job: min {min(working):.0f} MB, max {max(working):.0f} MB,"
            f" growth {max(working) - min(working):.0f} MB;"
            f" peak {max(s[2] for s in samples):.0f} MB"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rows-per-slot", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-rows", type=int, default=20000)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--baseline-rev", help="also run this git revision's generate (e.g. c38f4aa)")
    ap.add_argument(
        "--sim",
        nargs="*",
        default=["--tps", "100", "--per-seq-ms", "0.05", "--ttft-ms", "20", "--max-batch", "4096"],
        help="flags of the sim (default: about 4,900 tok/s at C=64)",
    )
    a = ap.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="genbench-gen-bench-") as tmp,
        SimProcess(*a.sim) as sim,
        baseline(a.baseline_rev, Path(tmp) / "baseline"),
    ):
        work = Path(tmp)
        if not a.skip_throughput:
            throughput(a, sim, work)
        for rev in REVS if a.memory_rows else ():
            memory(a, sim, work, rev)


@contextlib.contextmanager
def baseline(rev: str | None, into: Path) -> Iterator[None]:
    """Check `rev` out into `into` (a git worktree) and add it to REVS, for the duration."""
    if rev is None:
        yield
        return
    git = ["git", "-C", str(REPO)]
    p = subprocess.run([*git, "worktree", "add", "--detach", str(into), rev], capture_output=True)
    if p.returncode != 0:
        sys.exit(f"--baseline-rev {rev}: {p.stderr.decode().strip()}")
    REVS[rev] = {**ENV, "PYTHONPATH": str(into / "src")}
    try:
        yield
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(into)], capture_output=True)


if __name__ == "__main__":
    main()
