"""How long `genbench generate` takes to resume a job with 1M rows already done.

Builds (once, cached in --work) a 1M-row input and an output directory holding 1M done
rows written through genbench's own Store (the real shard, index and job files), then
times the real command, as a user would run it:

  1. every row done: the command must find that out and exit ("nothing to do");
  2. 1M done + --todo more rows: time until generation starts, and the whole run;
  3. worst case, the done index deleted: every shard is read line by line.

  4. every shard's mtime changed: the index's content checks are verified (hashing).

Run:  .venv/bin/python benchmarks/resume_1m.py [--rows 1000000] [--todo 1000]
Requirement (issue #6): resume with 1M done ids in under 10 s; issue #27: under 5 s with
the request fingerprints checked.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import orjson

from genbench.generate.input.reader import Row
from genbench.generate.recipe import Recipe
from genbench.generate.request_hash import job_salt, line_key, request_hash, to_hex
from genbench.generate.store.layout import STATE_DIR
from genbench.generate.store.writer import Store
from genbench.rows import DataRow, RowMeta
from genbench.sim.process import SimProcess

ANSWER = "The answer is a paragraph of ordinary length, " * 6
META = RowMeta(server="http://127.0.0.1:8000/v1", model="genbench-sim", completion_tokens=64)


def input_line(i: int) -> bytes:
    msgs = [{"role": "user", "content": f"Question {i}: explain X."}]
    return orjson.dumps({"id": f"row-{i:08d}", "messages": msgs})


def build_input(path: Path, rows: int, todo: int) -> None:
    with open(path, "wb") as f:
        for i in range(rows + todo):
            f.write(input_line(i) + b"\n")


async def build_output(out: Path, rows: int) -> None:
    """As a job writes them: each row with its request's fingerprint (in meta and the
    index) and its input line's key (in the index)."""
    store = Store(out, sync_rows=1 << 30)
    store.begin(
        store.load_existing(),
        {"model": "genbench-sim", "params": {}, "turns": "all", "format": "jsonl"},
    )
    salt = job_salt(Recipe())
    for i in range(rows):
        rid = f"row-{i:08d}"
        prompt = [{"role": "user", "content": f"Question {i}: explain X."}]
        conv = [*prompt, {"role": "assistant", "content": ANSWER, "reasoning_content": ""}]
        fp = request_hash(Row(rid, prompt, {}, i + 1), Recipe())
        line = DataRow(rid, conv, replace(META, request=to_hex(fp))).line()
        store.write_row(rid, line, None, (fp, line_key(salt, input_line(i))))
        if i % 20000 == 19999:
            await store.sync()  # a batch per sync, as a running job writes them
    await store.close()


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(
    cmd: list[str], marker: str | None = None, env: dict[str, str] | None = None
) -> tuple[float, float | None, str, float]:
    """Wall seconds of the whole command, seconds until `marker` appears on stdout, and the
    command's CPU seconds (user+sys): on a loaded machine wall time says more about the
    neighbours than about genbench, CPU time does not."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    c0 = cpu_children()
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    at = None
    out_lines = []
    assert p.stdout is not None
    for line in p.stdout:
        out_lines.append(line)
        if marker and at is None and marker in line:
            at = time.perf_counter() - t0
    p.wait()
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr.read()}")  # type: ignore[union-attr]
    return wall, at, "".join(out_lines), cpu_children() - c0


def ab(gb: list[str], src: Path, inp: Path, out: Path, url: str, rounds: int = 3) -> None:
    """Case 1 with this genbench (B) and the one in `src` (A), alternating: their ratio
    says more than either time on a loaded machine."""
    cmd = [*gb, "-i", str(inp), "-o", str(out), "--url", url]
    times: dict[str, list[float]] = {"A": [], "B": []}
    for _ in range(rounds):
        for name in ("A", "B"):
            env = {"PYTHONPATH": str(src)} if name == "A" else {}
            times[name].append(timed(cmd, env=env)[3])
    a, b = min(times["A"]), min(times["B"])
    print(
        f"1ab. nothing to do, CPU s (best of {rounds}): before {a:.2f}, now {b:.2f}: {b / a:.2f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--todo", type=int, default=1000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/genbench-resume-bench"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--ab",
        type=Path,
        metavar="SRC",
        help="also time case 1 with the genbench in SRC (a src/ directory, e.g. of the "
        "commit before), alternating, and print the ratio",
    )
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    inp_all, inp_done = a.work / "all.jsonl", a.work / "done.jsonl"
    out, base = a.work / "out", a.work / "out-base"
    marker = a.work / f"built-v3-{a.rows}-{a.todo}"  # v2: rows with request fingerprints
    if not marker.exists():
        t = time.perf_counter()
        build_input(inp_all, a.rows, a.todo)
        build_input(inp_done, a.rows, 0)
        shutil.rmtree(base, ignore_errors=True)
        asyncio.run(build_output(base, a.rows))
        marker.touch()
        print(f"built {a.rows:,} done rows in {time.perf_counter() - t:.0f} s")
    size = sum(p.stat().st_size for p in base.glob("data-*.jsonl"))
    print(
        f"output: {len(list(base.glob('data-*.jsonl')))} shards, {size / 1e6:,.0f} MB; "
        f"input {inp_all.stat().st_size / 1e6:,.0f} MB"
    )

    gb = [sys.executable, "-m", "genbench", "generate"]
    with SimProcess(
        "--tps", "2000", "--ttft-ms", "1", "--per-seq-ms", "0.01", "--output-len", "fixed:16"
    ) as sim:
        # 1. all done
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out)
        wall, _, text, cpu = timed([*gb, "-i", str(inp_done), "-o", str(out), "--url", sim.url])
        assert "nothing to do" in text, text
        print(
            f"1. {a.rows:,} done, nothing to do: whole command {wall:.2f} s wall, {cpu:.2f} s CPU"
        )

        if a.ab is not None:
            ab(gb, a.ab, inp_done, out, sim.url)

        # 2. all done + todo more
        cmd = [*gb, "-i", str(inp_all), "-o", str(out), "--url", sim.url, "-c", "64"]
        wall, at, text, cpu = timed(cmd, "resuming:")
        m = re.search(r"resuming: ([\d,]+) rows already done", text)
        assert m and int(m[1].replace(",", "")) == a.rows, text
        print(
            f"2. {a.rows:,} done + {a.todo:,} to do: resuming after {at:.2f} s wall; whole "
            f"command (generating the {a.todo:,}) {wall:.2f} s wall, {cpu:.2f} s CPU"
        )

        # 4. a data file's mtime changed (as after a crash between a write and its index
        # entry): its batches' bytes are hashed before the index is trusted
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out)
        for shard in out.glob("data-*.jsonl"):
            os.utime(shard)
        wall, _, text, cpu = timed([*gb, "-i", str(inp_done), "-o", str(out), "--url", sim.url])
        assert "nothing to do" in text, text
        print(
            f"4. {a.rows:,} done, every shard's mtime changed (bytes hashed): {wall:.2f} s "
            f"wall, {cpu:.2f} s CPU"
        )

        # 3. index deleted: every shard read line by line
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out)
        for idx in (out / STATE_DIR).glob("*.idx"):
            idx.unlink()
        wall, _, text, cpu = timed([*gb, "-i", str(inp_done), "-o", str(out), "--url", sim.url])
        assert "nothing to do" in text, text
        print(
            f"3. {a.rows:,} done, no index (every shard read): {wall:.2f} s wall, {cpu:.2f} s CPU"
        )
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of the largest child (a resume): {rss:,.0f} MB")
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"load average {load} on {os.cpu_count()} CPUs")
    if not a.keep:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
