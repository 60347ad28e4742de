"""The capture pass's prefill rate, and genbench's own CPU per state file (issue #44).

Two engines of the tests' model (scripts/vllm-test-server.sh's command), started by
genbench's engine code: one plain, one with capture (layers 1,2,3,4, genbench's CPU
connector), both without prefix caching (each pass must prefill, not find the blocks
of the set's own generation or of the previous repeat). A set of R rows with prompts of
about P tokens is generated once on the plain engine (2 tokens each, token ids kept).
Then, alternating (plain, capture, capture, plain, ...), the same prefills of each turn's
exact ids (`max_tokens` 1, C in flight):

* plain: sent to the plain engine by genbench's own connection pool (no file);
* capture: `genbench hidden-states`' own code (`export.afterwards.capture_afterwards`,
  in this process) against the capture engine on a fresh copy of the set: the prefill,
  the engine's file, genbench's check of it (whole, the ids, finite) and its move.

For each: prompt tokens/s over the wall time, this process's CPU seconds (all its threads:
genbench's side only, the engines are other processes) and the load average beside it.
genbench's CPU per state file is the capture run's CPU less the plain run's (the same
requests sent), per file; its share of a core is that times the files per second the
engine wrote.

    .venv/bin/python benchmarks/hidden_states_prefill.py --rows 48 --prompt-tokens 900 -c 8

Needs GENBENCH_VLLM_VENV / GENBENCH_VLLM_MODEL as the tests do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fixtures_hs import LAYERS, serve_text  # noqa: E402
from fixtures_vllm import SERVED_MODEL_NAME  # noqa: E402

from genbench.engines.command import parse_command  # noqa: E402
from genbench.engines.hs_flags import with_capture  # noqa: E402
from genbench.engines.start import start_engines, stop_all  # noqa: E402
from genbench.export.afterwards import _turns, capture_afterwards  # noqa: E402
from genbench.generate.store.layout import Layout  # noqa: E402
from genbench.transport.client import ConnectionPool  # noqa: E402
from genbench.transport.eventloop import run_async  # noqa: E402

NO_CACHE = " --no-enable-prefix-caching"  # every pass a real prefill, the set's and a repeat's
ENV = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "PYTHONPATH": str(REPO / "src")}


def make_set(url: str, where: Path, rows: int, words: int) -> Path:
    inp, out = where / "in.jsonl", where / "set"
    lines = [{"id": f"p{i}", "messages": [{"role": "user", "content": " ".join(
        f"w{(i * 7 + k) % 97}" for k in range(words))}]} for i in range(rows)]  # fmt: skip
    inp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))
    p = subprocess.run([sys.executable, "-m", "genbench", "generate", "-i", str(inp), "-o",
                        str(out), "--url", url, "-c", "8", "--max-tokens", "2",
                        "--temperature", "0", "--json"],
                       capture_output=True, text=True, env=ENV, timeout=1800)  # fmt: skip
    if p.returncode != 0:
        raise SystemExit(f"generate failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return out


def fresh_copy(src: Path, dst: Path) -> Path:
    (dst / ".genbench").mkdir(parents=True)
    for f in src.glob("data-*.jsonl"):
        shutil.copy(f, dst / f.name)
    return dst


async def plain(url: str, todo: list[list[int]], c: int) -> None:
    pool, gate = ConnectionPool(url), asyncio.Semaphore(c)

    async def one(ids: list[int]) -> None:
        async with gate:
            body = {"model": SERVED_MODEL_NAME, "prompt": ids, "max_tokens": 1, "stream": False}
            status, _, _ = await pool.get(url + "/completions", 600, json=body)
            assert status == 200, status

    try:
        await asyncio.gather(*(one(ids) for ids in todo))
    finally:
        await pool.close()


def timed(fn) -> tuple[float, float, float]:
    load, cpu0, t0 = os.getloadavg()[0], time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - cpu0, load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--prompt-tokens", type=int, default=900)
    ap.add_argument("-c", "--concurrency", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    c = a.concurrency
    where = Path(tempfile.mkdtemp(prefix="hs-prefill-"))
    text = serve_text() + NO_CACHE
    p_cmd = parse_command(text)
    c_cmd = with_capture(parse_command(text), LAYERS, where / "incoming", "genbench")
    t0 = time.perf_counter()
    engines = run_async(start_engines([p_cmd, c_cmd], where / "logs", 900))
    print(f"engines up in {time.perf_counter() - t0:.0f} s", flush=True)
    got: dict[str, list[dict]] = {"plain": [], "capture": []}
    try:
        src = make_set(p_cmd.url, where, a.rows, a.prompt_tokens // 2)  # ~2 tokens a word
        todo = [ids for _, _, ids in _turns(src, Layout(src))[0]]
        tokens = sum(map(len, todo))
        print(f"{len(todo)} prefills, {tokens:,} prompt tokens", flush=True)
        for rep in range(a.repeats):
            order = ["plain", "capture"] if rep % 2 == 0 else ["capture", "plain"]
            for kind in order:
                if kind == "plain":
                    wall, cpu, load = timed(lambda: run_async(plain(p_cmd.url, todo,
                                                                    a.concurrency)))  # fmt: skip
                    files = 0
                else:
                    dst = fresh_copy(src, where / f"capture-{rep}")
                    doc: dict = {}

                    def capture(d: Path = dst, doc: dict = doc) -> None:
                        doc.update(run_async(capture_afterwards(d, c_cmd.url, LAYERS,
                                                                concurrency=c)))  # fmt: skip

                    wall, cpu, load = timed(capture)
                    files = doc["captured"]
                    assert not doc["failed"], doc["failed"][:3]
                r = {"tok_s": tokens / wall, "wall_s": wall, "cpu_s": cpu, "load": load,
                     "files": files}  # fmt: skip
                got[kind].append(r)
                print(f"repeat {rep + 1} {kind:7s} {r['tok_s']:8.0f} prompt tok/s  wall "
                      f"{wall:6.2f} s  genbench CPU {cpu:5.2f} s  files {files}  load "
                      f"{load:.1f}", flush=True)  # fmt: skip
    finally:
        stop_all(engines)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("tok_s", "cpu_s", "wall_s")}
           for k, v in got.items()}  # fmt: skip
    n = len(todo)
    per_file = (med["capture"]["cpu_s"] - med["plain"]["cpu_s"]) / n
    rate = n / med["capture"]["wall_s"]
    print(json.dumps({"prefills": n, "prompt_tokens": tokens, "median": med,
                      "capture_over_plain": med["capture"]["tok_s"] / med["plain"]["tok_s"],
                      "genbench_cpu_per_file_s": per_file, "files_per_s": rate,
                      "core_share": per_file * rate}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
