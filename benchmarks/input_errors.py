"""How long a bad input file takes to be reported whole (issue #37, item 7).

Writes a 900K-row JSONL input (rows of ~250 bytes: an id, a system and a user turn),
then times `input.scan`, the pass `genbench generate` makes before any request, in one
process, side by side:

  1. the file clean (the pass every job makes);
  2. the file with a broken line 57 and a duplicate id at line 121 (both reported);
  3. the file with a bad line every 1,000 rows (900 reported: the first 20 shown).

The ratio of 2 and 3 to 1 is the cost of reporting every bad line instead of the first
(the first-line lookup of the duplicates shown is one more pass). Load average beside.

Run:  .venv/bin/python benchmarks/input_errors.py [--rows 900000] [--work /tmp/genbench-input]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import orjson

from genbench.errors import UsageError
from genbench.generate.input.reader import scan

SYSTEM = "You are a careful assistant. Answer the question in a few sentences."


def row(i: int) -> bytes:
    msgs = [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Question {i}: explain why the sky looks blue at noon."}]
    return orjson.dumps({"id": f"q-{i}", "messages": msgs})  # fmt: skip


def write(path: Path, rows: int, bad: dict[int, bytes]) -> Path:
    with open(path, "wb") as f:
        for k in range(1, rows + 1):
            f.write(bad.get(k) or row(k))
            f.write(b"\n")
    return path


def timed(path: Path, tries: int = 2) -> tuple[float, str]:
    """The fastest of `tries` passes (a shared machine's noise is one-sided), and what the
    pass said."""
    best, said = float("inf"), ""
    for _ in range(tries):
        t0 = time.perf_counter()
        try:
            res = scan(path)
            said = f"{res.rows:,} rows, none bad"
        except UsageError as e:
            said = str(e).splitlines()[-1].split(": ", 1)[-1][:36]
        best = min(best, time.perf_counter() - t0)
    return best, said


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=900_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/genbench-input"))
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    files = {
        "clean": write(a.work / "clean.jsonl", a.rows, {}),
        "line 57 + dup at 121": write(a.work / "two.jsonl", a.rows,
                                      {57: b'{"id": "q-57", "messages": [', 121: row(3)}),
        "every 1,000th bad": write(a.work / "many.jsonl", a.rows,
                                   {k: b"{broken" for k in range(1000, a.rows + 1, 1000)}),
    }  # fmt: skip
    size = files["clean"].stat().st_size / 1e6
    print(f"{a.rows:,} rows, {size:.0f} MB; load average {os.getloadavg()[0]:.2f}")
    base = None
    for name, path in files.items():
        s, said = timed(path)
        base = base or s
        print(f"  {name:22s} {s:6.2f} s  x{s / base:.2f}   ({said})")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
