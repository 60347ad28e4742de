"""How fast `genbench export` writes a big generate output with token ids, on one core, and
in how much memory; and what inspect's token fidelity pass costs on the same rows.

    .venv/bin/python benchmarks/export_speed.py --rows 20000
    .venv/bin/python benchmarks/export_speed.py --rows 20000 --inspect-against /path/to/other/src

Synthesises a generate output directory under /tmp (never the repository): N single-turn
rows in generate's format, each with its ids as generate keeps them (a 200-id prompt, 2,000
generated ids, numbers below 150,000 as a real vocabulary's are) and about as much text.
Then runs the real commands as child processes, `python -m genbench export DIR --format F
-o FILE` for each format, and reports wall time, CPU seconds (user + system, from wait4),
peak RSS, rows/s and input MB/s.

`--inspect-against SRC` also times `genbench inspect DIR` with this checkout's code and
with the code under SRC (another checkout's `src`, e.g. one without the fidelity pass),
alternating A/B three times, with the load average beside each pair: the ratio is the
fidelity pass's cost.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent


def synthesise(d: Path, rows: int, gen: int, prompt: int) -> int:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(2000)]
    d.mkdir(parents=True)
    path = d / "data-00000.jsonl"
    with open(path, "wb") as f:
        for i in range(rows):
            ids = [rng.randrange(150_000) for _ in range(gen)]
            text = " ".join(rng.choice(words) for _ in range(gen))
            conv = [
                {"role": "user", "content": f"question {i}"},
                {
                    "role": "assistant",
                    "content": text[: len(text) // 4],
                    "reasoning_content": text[len(text) // 4 :],
                    "finish_reason": "stop",
                    "prompt_token_ids": [rng.randrange(150_000) for _ in range(prompt)],
                    "token_ids": ids,
                },
            ]
            meta = {
                "server": "http://gpu1:8000/v1",
                "model": "target",
                "prompt_tokens": prompt,
                "completion_tokens": gen,
                "reasoning_tokens": gen * 3 // 4,
                "answer_tokens": gen // 4,
                "tokens_estimated": False,
                "finish_reason": "stop",
                "truncated": False,
                "turns": 1,
                "attempts": 1,
                "ttft_s": 0.1,
                "latency_s": 30.0,
                "sent_at": 1.0,
                "finished_at": 2.0,
                "token_ids": "exact",
            }
            f.write(orjson.dumps({"id": f"r{i}", "conversations": conv, "meta": meta}) + b"\n")
    return path.stat().st_size


def timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err[-2000:]}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--gen", type=int, default=2000)
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--inspect-against", type=Path, default=None)
    a = ap.parse_args()
    tmp = Path("/tmp/genbench-export-speed")
    shutil.rmtree(tmp, ignore_errors=True)
    size = synthesise(tmp / "regen", a.rows, a.gen, a.prompt)
    print(f"{a.rows:,} rows, {size / 1e6:,.0f} MB of JSONL ({a.prompt} + {a.gen} ids a row)")
    for fmt in ("specforge-tokens", "speculators", "specforge"):
        out = tmp / f"{fmt}.jsonl"
        r = timed(
            [
                sys.executable,
                "-m",
                "genbench",
                "export",
                str(tmp / "regen"),
                "--format",
                fmt,
                "-o",
                str(out),
            ]
        )
        print(
            f"export {fmt:<17} wall {r['wall_s']:6.1f} s  cpu {r['cpu_s']:6.1f} s  "
            f"rss {r['rss_mb']:5.0f} MB  {a.rows / r['cpu_s']:7,.0f} rows/cpu-s  "
            f"{size / 1e6 / r['cpu_s']:5.0f} MB/cpu-s  -> {out.stat().st_size / 1e6:,.0f} MB"
        )
    if a.inspect_against:
        cmd = [
            sys.executable,
            "-m",
            "genbench",
            "inspect",
            str(tmp / "regen"),
            "--save",
            str(tmp / "inspect.json"),
        ]
        other = {**os.environ, "PYTHONPATH": str(a.inspect_against)}
        for _ in range(3):
            load = os.getloadavg()[0]
            mine, theirs = timed(cmd), timed(cmd, other)
            print(
                f"inspect cpu: this {mine['cpu_s']:.1f} s, {a.inspect_against} "
                f"{theirs['cpu_s']:.1f} s, ratio {mine['cpu_s'] / theirs['cpu_s']:.2f} "
                f"(load {load:.1f})"
            )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
