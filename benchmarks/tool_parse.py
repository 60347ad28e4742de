"""What reading `delta.tool_calls` costs the stream parser per chunk.

Feeds `StreamParser` (text kept, as generate runs it) three bodies, one chunk per token:

- `text`: content chunks as vLLM sends them (`{"content": "..."}`): the hot path, which
  now also asks each delta for `tool_calls`;
- `text-sglang`: content chunks as SGLang sends them, every field present and null where
  unused (`"tool_calls": null` in each);
- `call`: a tool call's argument fragments (`{"tool_calls": [{"index": 0, "function":
  {"arguments": "..."}}]}`), joined by `genbench.transport.tool_stream.ToolCalls`.

With `--baseline PATH` (a `stream.py` from before tool calls were read, e.g. a checkout of
an older commit), the text bodies are fed to that parser too, alternating round by round
in one process so host drift falls on both alike, and the ratio is printed.

    python benchmarks/tool_parse.py --chunks 2000 --rounds 9 --baseline /tmp/old/stream.py
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import time
from typing import Any

import orjson

from genbench.records import RequestRecord
from genbench.transport.stream import StreamParser

WORDS = ["alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta ", "eta ", "theta "]
NULLS = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}


def body(kind: str, chunks: int) -> list[bytes]:
    lines = []
    for i in range(chunks):
        w = WORDS[i % len(WORDS)]
        if kind == "text":
            delta: dict[str, Any] = {"content": w}
        elif kind == "text-sglang":
            delta = {**NULLS, "content": w}
        else:
            part: dict[str, Any] = {"index": 0, "function": {"arguments": w}}
            if i == 0:
                part = {"id": "call_1", "type": "function", "index": 0,
                        "function": {"name": "search"}}  # fmt: skip
            delta = {"tool_calls": [part]}
        obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        lines.append(b"data: " + orjson.dumps(obj) + b"\n\n")
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": chunks}}  # fmt: skip
    lines.append(b"data: " + orjson.dumps(end) + b"\n\ndata: [DONE]\n\n")
    return lines


def feed(parser_cls: Any, lines: list[bytes]) -> None:
    rec = RequestRecord(id="r", phase="p")
    p = parser_cls(rec, 0.0, keep_text=True)
    for i, line in enumerate(lines):
        p.feed(line, 0.001 * i)
    assert p.finish() is None


def load_baseline(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("baseline_stream", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.StreamParser


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chunks", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--streams", type=int, default=20, help="streams per case per round")
    ap.add_argument("--baseline", help="path of an older stream.py to compare against")
    a = ap.parse_args()
    bodies = {k: body(k, a.chunks) for k in ("text", "text-sglang", "call")}
    cases = [(k, StreamParser, k) for k in bodies]
    if a.baseline:
        old = load_baseline(a.baseline)
        cases += [(f"{k} (baseline)", old, k) for k in ("text", "text-sglang")]
    times: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(a.rounds):
        for name, cls, k in cases:
            gc.collect()
            t0 = time.perf_counter()
            for _ in range(a.streams):
                feed(cls, bodies[k])
            times[name].append((time.perf_counter() - t0) / (a.streams * a.chunks) * 1e6)
    print(f"load average {os.getloadavg()[0]:.2f}; {a.chunks} chunks a stream, "
          f"{a.rounds} rounds x {a.streams} streams")  # fmt: skip
    print(f"{'case':<24} {'us/chunk':>9} {'vs baseline':>12}")
    for name, _, k in cases:
        med = statistics.median(times[name])
        base = times.get(f"{k} (baseline)")
        ratio = f"{med / statistics.median(base):12.3f}" if base and "baseline" not in name else ""
        print(f"{name:<24} {med:9.2f} {ratio}")


if __name__ == "__main__":
    main()
