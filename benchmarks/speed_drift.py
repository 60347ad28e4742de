"""Speed drift: how well does a pilot's speed predict a job's, on one server, over time?

Puts a constant load on a server (C workers, lognormal output lengths forced per
request with `max_tokens`/`min_tokens`/`ignore_eos`, as the vLLM forecast benchmark
does) for `--seconds`, keeping every request's record, then replays plan's situation
on the trace: for every start time, a pilot window of P seconds, a gap, and a job window
of R × P seconds. For each it reports

* the error a perfect model would make by taking the pilot's mean speed for the job's
  (job tok/s over pilot tok/s − 1: the forecast's error from speed alone);
* the speed part of plan's bar for that pilot (`series_halfwidth` of 10 equal-time
  stretches: Student t, AR(1) inflation) and how often it covered that error.

Speed here is output tokens per second at constant C and a fixed length distribution,
with each request's tokens spread over its decode time, in 1 s bins; the first 30 s
(start-up) and the last 5 s are dropped.

    .venv/bin/python benchmarks/speed_drift.py --url http://127.0.0.1:18600/v1 \
        --seconds 2400 --records /tmp/trace.jsonl
    .venv/bin/python benchmarks/speed_drift.py --analyse /tmp/trace.jsonl   # again, no load
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import sys
import urllib.request
from pathlib import Path

import numpy as np
import orjson

from genbench.client import ChatRequest, Client, Timeouts
from genbench.endpoint import Endpoint
from genbench.load import run_phase
from genbench.plan import series_halfwidth
from genbench.records import RequestRecord

GAP_S = 30  # the pilot's forecast and the job's start-up


async def load(url: str, model: str, seconds: float, c: int, median: float, out: Path) -> None:
    rng = np.random.default_rng(7)
    lengths = [
        int(min(1500, max(1, round(x)))) for x in rng.lognormal(math.log(median), 0.75, 20000)
    ]
    reqs = [
        ChatRequest(
            f"r{i}",
            [{"role": "user", "content": f"[7] Write an essay about item {i}."}],
            n,
            {"temperature": 0.0, "ignore_eos": True, "min_tokens": n},
        )
        for i, n in enumerate(lengths)
    ]
    client = Client(Endpoint.parse(url), model, timeouts=Timeouts(connect=10, read=600))
    with out.open("wb") as f:

        def record(r: RequestRecord) -> None:
            f.write(r.to_json() + b"\n")

        try:
            await run_phase(
                client, itertools.cycle(reqs), concurrency=c, phase="load", duration=seconds,
                on_record=record,
            )  # fmt: skip
        finally:
            await client.close()


def tokens_per_second(path: Path) -> np.ndarray:
    recs = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    recs = [r for r in recs if r.get("error_kind") is None and r.get("t_end")]
    t0 = min(r["t_send"] for r in recs)
    tok = np.zeros(int(max(r["t_end"] for r in recs) - t0) + 2)
    for r in recs:
        a, b = r["t_send"] + (r.get("ttft") or 0.0) - t0, r["t_end"] - t0
        n = float(r["completion_tokens"] or 0)
        ia, ib = int(a), int(b)
        if ia == ib or b - a < 1e-6:
            tok[ib] += n
            continue
        rate = n / (b - a)
        tok[ia] += rate * (ia + 1 - a)
        tok[ib] += rate * (b - ib)
        tok[ia + 1 : ib] += rate
    return tok[30:-5]


def analyse(tok: np.ndarray) -> None:
    print(f"trace: {len(tok)} s at {tok.mean():.0f} tok/s on average")
    minutes = tok[: len(tok) // 60 * 60].reshape(-1, 60).mean(1)
    print("tok/s per minute: " + " ".join(f"{x:.0f}" for x in minutes))
    print(
        "| pilot s | job s | windows | median abs err | p90 | max | within 5% | "
        "speed bar (median) | bar covered |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for p in (40, 60, 90, 120, 180, 300):
        for r in (5, 10, 20):
            j = r * p
            errs, bars = [], []
            for s in range(0, len(tok) - (p + GAP_S + j), 10):
                pilot, job = tok[s : s + p], tok[s + p + GAP_S : s + p + GAP_S + j]
                stretches = pilot[: p // 10 * 10].reshape(10, -1).mean(1)
                errs.append(job.mean() / pilot.mean() - 1)
                bars.append(series_halfwidth(list(stretches / stretches.mean())))
            if len(errs) < 3:
                continue
            e, h = np.abs(errs), np.array(bars)
            print(
                f"| {p} | {j} | {len(e)} | {np.median(e):.1%} | {np.percentile(e, 90):.1%} | "
                f"{e.max():.1%} | {np.mean(e <= 0.05):.0%} | ±{np.median(h):.1%} | "
                f"{np.mean(e <= h):.0%} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:18600/v1")
    ap.add_argument("--model", default=None)
    ap.add_argument("--seconds", type=float, default=2400.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--median", type=float, default=40.0, help="median output tokens")
    ap.add_argument("--records", type=Path, default=Path("speed-drift.jsonl"))
    ap.add_argument("--analyse", type=Path, default=None, help="only analyse this trace")
    args = ap.parse_args()
    if args.analyse is None:
        if not args.url:
            ap.error("--url (to load a server) or --analyse TRACE")
        model = args.model
        if not model:
            with urllib.request.urlopen(args.url.rstrip("/") + "/models", timeout=10) as r:
                model = orjson.loads(r.read())["data"][0]["id"]
        asyncio.run(
            load(args.url, model, args.seconds, args.concurrency, args.median, args.records)
        )
    analyse(tokens_per_second(args.analyse or args.records))


if __name__ == "__main__":
    sys.exit(main())
