"""How fast `genbench inspect` streams a big generate output, on one core, and in how much memory.

    .venv/bin/python benchmarks/inspect_speed.py --rows 1000000      # ~9.5 GB in /tmp
    .venv/bin/python benchmarks/inspect_speed.py --rows 100000 --minhash

Synthesises a generate output directory (256 MB JSONL shards, generate's row format and
`meta`) of N rows of about 2,000 output tokens each (thinking 1,000-2,000 words, answer
200-800, from a 2,000-word made-up vocabulary, ~4.6 bytes per token), with 1% of rows made
defective (loops, empty answers, duplicates), under /tmp (never the repository), then runs
the real command, `python -m genbench inspect DIR`, as a child process and reports its wall
time, CPU seconds (user + system, from wait4) and peak RSS. One process: inspect uses one
core.

`--minhash` also times what a MinHash signature (128 permutations over word 5-gram
shingles, numpy-vectorised) would cost per answer, the measurement behind inspect's
decision to use exact and normalised hashes for duplicates (docs/inspect.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARD_BYTES = 256 << 20
META = (
    b'"meta":{"server":"http://gpu%d:8000/v1","model":"target","prompt_tokens":%d,'
    b'"completion_tokens":%d,"reasoning_tokens":%d,"answer_tokens":%d,'
    b'"tokens_estimated":false,"finish_reason":"%s","truncated":%s,"turns":1,"attempts":1,'
    b'"ttft_s":0.1,"latency_s":30.0,"sent_at":1767225600.0,"finished_at":1767225630.0}}\n'
)


def corpus(words: int, seed: int = 0) -> tuple[bytes, np.ndarray]:
    """A long text of made-up words (Zipf-like frequencies) and where each word starts."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", dtype=np.uint8)
    vocab = []
    for _ in range(2000):
        n = int(rng.integers(1, 7))  # 3.5 letters and a space: ~4.5 bytes a token
        vocab.append(b" " + bytes(letters[rng.zipf(1.6, n).clip(1, 26) - 1]))
    ranks = (rng.zipf(1.3, words).clip(1, 2000) - 1).astype(np.int64)
    pieces = [vocab[i] for i in ranks]
    lens = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=words)
    starts = np.concatenate([[0], np.cumsum(lens)])
    return b"".join(pieces), starts


def synthesise(out: Path, rows: int, seed: int = 0) -> int:
    """Write the output directory; return its bytes."""
    out.mkdir(parents=True)
    text, starts = corpus(4_000_000, seed)
    total_words = len(starts) - 1
    rng = np.random.default_rng(seed + 1)
    thinking = rng.integers(1000, 2001, rows)
    answer = rng.integers(200, 801, rows)
    where = rng.integers(0, total_words - 3000, rows)
    kind = rng.random(rows)
    shard, size, written = 0, 0, 0
    f = open(out / f"data-{shard:05d}.jsonl", "wb")  # noqa: SIM115
    buf: list[bytes] = []
    dup_answer = None
    for i in range(rows):
        a, t, w = int(answer[i]), int(thinking[i]), int(where[i])
        think = text[starts[w] : starts[w + t]]
        ans = text[starts[w + t] : starts[w + t + a]]
        finish, truncated = b"stop", b"false"
        k = kind[i]
        if k < 0.003:  # a loop until max_tokens
            unit = text[starts[w] : starts[w + 9]]
            ans = ans[: len(ans) // 3] + unit * (2 * len(ans) // (3 * len(unit)) + 1)
            finish, truncated = b"length", b"true"
        elif k < 0.006:  # empty answer
            ans = b""
        elif k < 0.01:  # the same answer again
            if dup_answer is None:
                dup_answer = ans
            ans = dup_answer
        line = (
            b'{"id":"r%08d","conversations":[{"role":"user","content":"question %d"},'
            b'{"role":"assistant","content":"%s","reasoning_content":"%s"}],'
            % (i, i, ans, think)
            + META % (i % 4, 40 + i % 200, t + a, t, a, finish, truncated)
        )
        buf.append(line)
        size += len(line)
        written += len(line)
        if len(buf) >= 2000:
            f.write(b"".join(buf))
            buf.clear()
        if size >= SHARD_BYTES:
            f.write(b"".join(buf))
            buf.clear()
            f.close()
            shard, size = shard + 1, 0
            f = open(out / f"data-{shard:05d}.jsonl", "wb")  # noqa: SIM115
    f.write(b"".join(buf))
    f.close()
    return written


def run_inspect(out: Path) -> dict[str, float]:
    """The real command in a child; its wall, CPU and peak RSS from wait4."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "genbench", "inspect", str(out), "--save",
           str(out.parent / "inspect.json")]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"inspect failed with {os.waitstatus_to_exitcode(status)}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024}


def minhash_cost(samples: int = 2000, perms: int = 128) -> float:
    """Microseconds per 500-word answer for a numpy MinHash signature (the cheapest way to
    do it in Python short of a compiled library)."""
    text, starts = corpus(600_000, 3)
    rng = np.random.default_rng(4)
    a = rng.integers(1, (1 << 61) - 1, perms, dtype=np.uint64)
    b = rng.integers(0, (1 << 61) - 1, perms, dtype=np.uint64)
    answers = []
    for _ in range(samples):
        w = int(rng.integers(0, 590_000))
        answers.append(text[starts[w] : starts[w + 500]].decode())
    t0 = time.perf_counter()
    for ans in answers:
        words = ans.split()
        shingles = np.fromiter(
            (hash(" ".join(words[j : j + 5])) for j in range(len(words) - 4)), dtype=np.int64
        ).view(np.uint64)
        sig = ((shingles[:, None] * a[None, :] + b[None, :]) >> np.uint64(3)).min(axis=0)
        assert sig.size == perms
    return (time.perf_counter() - t0) / samples * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/genbench-inspect-speed"))
    ap.add_argument("--keep", action="store_true", help="keep the synthesised files")
    ap.add_argument("--minhash", action="store_true", help="also time a MinHash signature")
    ap.add_argument("--synthesise-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = args.dir / "out"
    if args.synthesise_only:
        print(synthesise(out, args.rows))
        return
    if args.dir.exists():
        shutil.rmtree(args.dir)
    t0 = time.perf_counter()
    # in a child, so that this process stays small: a child's peak RSS counts what it
    # inherited before exec
    cmd = [sys.executable, __file__, "--synthesise-only", "--rows", str(args.rows),
           "--dir", str(args.dir)]  # fmt: skip
    size = int(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    print(
        f"synthesised {args.rows:,} rows, {size / 1e9:.2f} GB in {time.perf_counter() - t0:.0f} s"
    )
    load_before = os.getloadavg()
    r = run_inspect(out)
    load_after = os.getloadavg()
    print(
        f"inspect: {args.rows:,} rows in {r['wall_s']:.1f} s wall ({args.rows / r['wall_s']:,.0f} "
        f"rows/s, {size / 1e6 / r['wall_s']:,.0f} MB/s), {r['cpu_s']:.1f} CPU s "
        f"({args.rows / r['cpu_s']:,.0f} rows per CPU-s), peak RSS {r['peak_rss_mb']:,.0f} MB; "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    per_million = 1e6 / args.rows * r["cpu_s"]
    print(f"  -> {per_million:.0f} CPU s per million such rows")
    if args.minhash:
        us = minhash_cost()
        print(
            f"minhash (128 permutations, word 5-grams, 500-word answer): {us:,.0f} us per row "
            f"= {us:.0f} CPU s per million rows on top"
        )
    if not args.keep:
        shutil.rmtree(args.dir)


if __name__ == "__main__":
    main()
