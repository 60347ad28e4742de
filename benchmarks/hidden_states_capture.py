"""What capturing hidden states costs a generate job on vLLM CPU (issue #44).

Two engines of the tests' model (scripts/vllm-test-server.sh's command), both started by
genbench's engine code: one plain, one with capture (`engines.hs_flags.with_capture`,
layers 1,2,3,4, genbench's CPU connector). The same job, alternating (plain, capture,
plain, capture, ...) so that the machine's load hits both: R rows of T forced tokens
(`--param ignore_eos=true`) at concurrency C, `--temperature 0`; its tokens/s from
generate's own end line, its wall time, genbench's CPU seconds, and the load average
beside each. At temperature 0 the answers of the two engines are compared row by row
(capture runs vLLM's `extract_hidden_states` speculative method, one draft token a step).

    .venv/bin/python benchmarks/hidden_states_capture.py --rows 32 --tokens 64 -c 8 --repeats 3

Needs GENBENCH_VLLM_VENV / GENBENCH_VLLM_MODEL as the tests do.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

from genbench.engines.command import parse_command  # noqa: E402
from genbench.engines.hs_flags import with_capture  # noqa: E402
from genbench.engines.start import start_engines, stop_all  # noqa: E402
from genbench.transport.eventloop import run_async  # noqa: E402

ENV = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "PYTHONPATH": str(REPO / "src")}


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def job(url: str, inp: Path, out: Path, tokens: int, c: int, capture: bool) -> dict:
    args = [sys.executable, "-m", "genbench", "generate", "-i", str(inp), "-o", str(out),
            "--url", url, "-c", str(c), "--max-tokens", str(tokens), "--temperature", "0",
            "--param", "ignore_eos=true", "--json"]  # fmt: skip
    if capture:
        args += ["--hidden-states", "--layers", ",".join(map(str, LAYERS))]
    load, cpu0, t0 = os.getloadavg()[0], cpu_children(), time.perf_counter()
    p = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=1800)
    wall, cpu = time.perf_counter() - t0, cpu_children() - cpu0
    if p.returncode != 0:
        raise SystemExit(f"generate failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    doc = json.loads(p.stdout)
    rows = [orjson.loads(x) for f in sorted(out.glob("data-*.jsonl"))
            for x in f.read_bytes().splitlines()]  # fmt: skip
    answers = {r["id"]: r["conversations"][-1].get("token_ids") for r in rows}
    states = sum(f.stat().st_size for f in out.glob("hidden_states/*/*.safetensors"))
    tok_s = doc["tokens"] / doc["sending_s"] if doc.get("sending_s") else doc["tokens"] / wall
    return {"tok_s": tok_s, "wall_s": wall,
            "cpu_s": cpu, "load": load, "answers": answers, "states_bytes": states}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("-c", "--concurrency", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="hs-bench-"))
    inp = where / "in.jsonl"
    rows = [{"id": f"r{i}", "messages": [{"role": "user", "content": f"tell me {i} " * 8}]}
            for i in range(a.rows)]  # fmt: skip
    inp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    plain = parse_command(serve_text())
    capture = with_capture(parse_command(serve_text()), LAYERS, where / "incoming", "genbench")
    t0 = time.perf_counter()
    engines = run_async(start_engines([plain, capture], where / "logs", 900))
    print(f"engines up in {time.perf_counter() - t0:.0f} s", flush=True)
    got: dict[str, list[dict]] = {"plain": [], "capture": []}
    try:
        for rep in range(a.repeats):
            order = ["plain", "capture"] if rep % 2 == 0 else ["capture", "plain"]
            for kind in order:
                url = (plain if kind == "plain" else capture).url
                r = job(url, inp, where / f"{kind}-{rep}", a.tokens, a.concurrency,
                        kind == "capture")  # fmt: skip
                got[kind].append(r)
                print(
                    f"repeat {rep + 1} {kind:7s} {r['tok_s']:8.1f} tok/s  wall {r['wall_s']:6.1f}"
                    f" s  genbench CPU {r['cpu_s']:5.2f} s  load {r['load']:.1f}",
                    flush=True,
                )
    finally:
        stop_all(engines)
    med = {k: statistics.median(x["tok_s"] for x in v) for k, v in got.items()}
    same = sum(got["plain"][0]["answers"][k] == got["capture"][0]["answers"][k]
               for k in got["plain"][0]["answers"])  # fmt: skip
    states = got["capture"][0]["states_bytes"]
    print(
        f"median tok/s: plain {med['plain']:.1f}, capture {med['capture']:.1f} "
        f"(capture/plain {med['capture'] / med['plain']:.3f})"
    )
    print(f"temperature 0: {same} of {a.rows} answers the same ids with capture as without")
    print(f"states kept: {states:,} bytes for {a.rows} rows")


if __name__ == "__main__":
    main()
