"""What a sealed part's checksum costs (#45): sealing a GB, and verifying a 1 GB output.

Every data part is sealed once (genbench.generate.store.seal: its size and CRC-32, read
back from the file when it is written for good), and `merge`, `inspect` and every resume
verify every sealed part. Goal: verification at >= 1 GB/s on one core.

  1. each candidate checksum over 256 MB in memory, one core (why CRC-32);
  2. `seal()` of a 256 MB part in the page cache: the cost per GB a job pays;
  3. `verify()` of a 1 GB output directory (4 parts of 256 MB, rows as generate writes
     them): wall and CPU seconds, warm page cache (the parts were just written, as after
     a job; a cold read is the disk's speed, not the checksum's).

Run:  .venv/bin/python benchmarks/checksum.py [--gb 1] [--work /tmp/genbench-checksum]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import orjson

from genbench.generate.store import seal as sealed
from genbench.generate.store.layout import STATE_DIR, Layout

PART = 256 << 20


def rate(f: Callable[[bytes], object], data: bytes, repeats: int = 3) -> float:
    """GB/s, best of `repeats` (CPU time: the box is shared)."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        f(data)
        best = min(best, time.process_time() - t)
    return len(data) / best / 1e9


def candidates() -> None:
    data = os.urandom(PART)
    print("checksum over 256 MB in memory, one core, GB/s (CPU time, best of 3):")
    for name, f in [
        ("crc32 (zlib)", zlib.crc32),
        ("adler32 (zlib)", zlib.adler32),
        ("blake2b-64", lambda d: hashlib.blake2b(d, digest_size=8).digest()),
        ("sha1", lambda d: hashlib.sha1(d).digest()),
        ("sha256", lambda d: hashlib.sha256(d).digest()),
    ]:
        print(f"  {name:15} {rate(f, data):5.2f}")


def build(work: Path, gb: float) -> list[Path]:
    """An output directory of `gb` GB: 256 MB parts of rows as generate writes them."""
    shutil.rmtree(work, ignore_errors=True)
    (work / STATE_DIR).mkdir(parents=True)
    answer = "The answer is a paragraph of ordinary length, " * 40
    parts: list[Path] = []
    total, i = int(gb * (1 << 30)), 0
    lay = Layout(work)
    while total > 0:
        part = lay.part(len(parts))
        with open(part, "wb") as f:
            size = 0
            while size < min(PART, total):
                line = orjson.dumps({"id": f"row-{i:08d}", "conversations": [
                    {"role": "user", "content": f"Question {i}"},
                    {"role": "assistant", "content": answer, "finish_reason": "stop"}],
                    "meta": {"completion_tokens": 480}}) + b"\n"  # fmt: skip
                f.write(line)
                size += len(line)
                i += 1
        total -= size
        parts.append(part)
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--work", type=Path, default=Path("/tmp/genbench-checksum"))
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    candidates()
    parts = build(a.work, a.gb)
    size = sum(p.stat().st_size for p in parts)
    w, c = time.perf_counter(), time.process_time()
    sealed.seal(parts[0])
    w, c = time.perf_counter() - w, time.process_time() - c
    gb = parts[0].stat().st_size / 1e9
    print(f"seal() of a {gb * 1000:.0f} MB part: {w:.3f} s wall, {c:.3f} s CPU: "
          f"{c / gb:.2f} s CPU a GB ({gb / c:.2f} GB/s)")  # fmt: skip
    for p in parts[1:]:
        sealed.seal(p)
    for n in range(3):
        w, c = time.perf_counter(), time.process_time()
        checks = sealed.verify(parts)
        w, c = time.perf_counter() - w, time.process_time() - c
        assert all(x.state == sealed.VERIFIED for x in checks)
        print(f"verify() of {size / 1e9:.2f} GB in {len(parts)} parts, run {n + 1}: "
              f"{w:.3f} s wall, {c:.3f} s CPU: {size / 1e9 / w:.2f} GB/s wall, "
              f"{size / 1e9 / c:.2f} GB/s CPU")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f} after")
    shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
