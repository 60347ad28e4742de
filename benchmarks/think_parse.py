"""The stream parser's cost per chunk and memory per stream, by how thinking is read.

Feeds the same SSE body (one content token per chunk, as a server without a reasoning
parser streams it) to `StreamParser` in each mode, in one process, alternating the modes
round by round so host drift falls on all of them alike:

- `plain`: nothing split, no text kept (run against a server that splits thinking itself);
- `kept`: nothing split, the text kept (generate);
- `inline-opened`: split in-stream, text kept (a known dialect);
- `watch`: check saw `none`: the reply is watched for `</think>` (text kept), and never
  shows it (a model with no thinking);
- `watch-learn`: watched, and `</think>` arrives at the middle of the reply: the first
  half is read again.

Reports the median µs per chunk over the rounds and, with tracemalloc, the bytes one
finished stream holds per chunk (the record, the kept text, the parser's own state).

    python benchmarks/think_parse.py --chunks 2000 --rounds 7
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
import tracemalloc

import orjson

from genbench.records import RequestRecord
from genbench.transport.stream import StreamParser
from genbench.transport.thinking import INLINE_OPENED, Splitter, ThinkMode

WORDS = ["alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta ", "eta ", "theta "]


def body(chunks: int, close_at: int | None) -> list[bytes]:
    lines = []
    for i in range(chunks):
        text = "</think>" if i == close_at else WORDS[i % len(WORDS)]
        obj = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        lines.append(b"data: " + orjson.dumps(obj) + b"\n\n")
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": chunks}}  # fmt: skip
    lines.append(b"data: " + orjson.dumps(end) + b"\n\ndata: [DONE]\n\n")
    return lines


def parser(mode: str, rec: RequestRecord) -> StreamParser:
    if mode == "plain":
        return StreamParser(rec, 0.0, keep_text=False)
    if mode == "kept":
        return StreamParser(rec, 0.0, keep_text=True)
    if mode == "inline-opened":
        return StreamParser(rec, 0.0, True, ThinkMode(INLINE_OPENED).splitter())
    return StreamParser(rec, 0.0, True, Splitter(watch=lambda _dialect: None))


def one(mode: str, lines: list[bytes]) -> tuple[RequestRecord, StreamParser]:
    rec = RequestRecord(id="r", phase="p")
    p = parser(mode, rec)
    for i, line in enumerate(lines):
        p.feed(line, 0.001 * i)
    assert p.finish() is None
    return rec, p


MODES = ("plain", "kept", "inline-opened", "watch", "watch-learn")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--streams", type=int, default=20, help="streams per mode per round")
    a = ap.parse_args()
    bodies = {m: body(a.chunks, a.chunks // 2 if m == "watch-learn" else None) for m in MODES}
    times: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(a.rounds):
        for m in MODES:
            gc.collect()
            t0 = time.perf_counter()
            for _ in range(a.streams):
                one(m, bodies[m])
            times[m].append((time.perf_counter() - t0) / (a.streams * a.chunks) * 1e6)
    print(f"load average {os.getloadavg()[0]:.2f}; {a.chunks} chunks a stream, "
          f"{a.rounds} rounds x {a.streams} streams")  # fmt: skip
    base = statistics.median(times["plain"])
    print(f"{'mode':<14} {'us/chunk':>9} {'vs plain':>9} {'bytes/chunk held':>17}")
    for m in MODES:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = one(m, bodies[m])  # what a finished stream still holds, parser included
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        del kept
        med = statistics.median(times[m])
        print(f"{m:<14} {med:9.2f} {med / base:9.2f} {held / a.chunks:17.1f}")


if __name__ == "__main__":
    main()
