"""Speed drift: does plan's range for the server's speed hold over a real server's trace?

Puts a constant load on a server (C workers, lognormal output lengths forced per
request with `max_tokens`/`min_tokens`/`ignore_eos`, as the vLLM forecast benchmark
does) for `--seconds`, keeping every request's record, then replays plan's situation
on the trace: for every start time (every `--step` s), a pilot window of P seconds, a
gap, and a job window of R × P seconds. The pilot is the records sent in its window,
and plan's own code reads them: the step-time fit, the speed stretches, and the speed
part of the range (`SpeedWander`, carried over the job's length). For each pair it
reports

* the error a perfect model would make by taking the pilot's mean speed for the job's
  (job tok/s over pilot tok/s − 1: the forecast's error from speed alone);
* the speed part of plan's range before issue #15 (`series_halfwidth` of the
  stretches: Student t, AR(1) inflation: a confidence interval for the pilot's mean)
  and after it (a prediction interval for the job's mean speed), also with plan's
  `--speed-drift` (`--speed-drift` here, default 20), how often each covered that
  error, and their median widths.

Speed here is output tokens per second at constant C and a fixed length distribution,
with each request's tokens spread over its decode time, in 1 s bins; the first 30 s
(start-up) and the last 5 s are dropped.

    .venv/bin/python benchmarks/speed_drift.py --url http://127.0.0.1:18600/v1 \
        --seconds 2700 --concurrency 16 --records /tmp/trace.jsonl
    .venv/bin/python benchmarks/speed_drift.py --analyse /tmp/trace.jsonl --concurrency 16  # again
    .venv/bin/python benchmarks/speed_drift.py --analyse /tmp/trace.jsonl --concurrency 16 \
        --speed-drift 20 --summary out.json
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

from genbench.errors import UsageError
from genbench.load import run_phase
from genbench.plan import (
    WANDER_EXPONENT,
    WANDER_HORIZON,
    SpeedWander,
    decode_rows,
    fit_step,
    series_halfwidth,
    speed_stretches,
    stretch_seconds,
)
from genbench.records import RequestRecord, read_records
from genbench.transport.client import ChatRequest, Client, Timeouts
from genbench.transport.endpoint import Endpoint


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


SKIP_S = 30  # start-up of the trace, left out
PILOTS_S = (30, 45, 60, 90, 120, 180, 300)
RATIOS = (5, 10, 20)


def tokens_per_second(recs: list[RequestRecord], t0: float) -> np.ndarray:
    """Output tok/s in 1 s bins from t0, each request's tokens spread over its decoding."""
    ok = [r for r in recs if r.ok and r.t_end]
    tok = np.zeros(int(max(r.t_end for r in ok) - t0) + 2)
    for r in ok:
        a, b = r.t_send + (r.ttft or 0.0) - t0, r.t_end - t0
        n = float(r.completion_tokens or 0)
        ia, ib = int(a), int(b)
        if ia == ib or b - a < 1e-6:
            tok[ib] += n
            continue
        rate = n / (b - a)
        tok[ia] += rate * (ia + 1 - a)
        tok[ib] += rate * (b - ib)
        tok[ia + 1 : ib] += rate
    return tok[:-5]


def pilot_speed(recs: list[RequestRecord], c: int) -> tuple[list[float], float] | None:
    """plan's speed stretches of a pilot made of these records (None: too few)."""
    try:
        rows = decode_rows(recs, c)
        stretches = speed_stretches(rows, fit_step(rows))
        return stretches, stretch_seconds(rows, len(stretches))
    except UsageError:
        return None


def replay(
    recs: list[RequestRecord], c: int, step: int, gap: int, drift: float
) -> tuple[np.ndarray, list[dict]]:
    """Every (pilot, job) window pair of the trace: the speed error and both ranges."""
    recs = sorted((r for r in recs if r.t_send), key=lambda r: r.t_send)
    t0 = recs[0].t_send
    tok = tokens_per_second(recs, t0)
    sends = np.array([r.t_send - t0 for r in recs])
    pairs = []
    for p in PILOTS_S:
        for s in range(SKIP_S, len(tok) - p - gap - min(RATIOS) * p, step):
            lo, hi = np.searchsorted(sends, [s, s + p])
            got = pilot_speed(recs[lo:hi], c)
            if got is None or len(got[0]) < 3:
                continue
            stretches, stretch_s = got
            before = series_halfwidth(stretches)
            wander = SpeedWander.fit([1 / x for x in stretches], stretch_s)
            pilot_tps = tok[s : s + p].mean()
            for r in RATIOS:
                j0 = s + p + gap
                if j0 + r * p > len(tok):
                    continue
                pairs.append(
                    {
                        "pilot_s": p,
                        "ratio": r,
                        "start_s": s,
                        "error": float(tok[j0 : j0 + r * p].mean() / pilot_tps - 1),
                        "before": before,
                        "after": wander.job(r * p, gap_s=gap).halfwidth,
                        "drift": wander.job(r * p, drift, gap).halfwidth,
                        "lag1": wander.lag1,
                    }
                )
    return tok[SKIP_S:], pairs


def summarize(pairs: list[dict], keys: tuple[str, ...] = ("pilot_s", "ratio")) -> list[dict]:
    """Per group: windows, the error's size, and each range's coverage and median width."""
    groups: dict[tuple, list[dict]] = {}
    for q in pairs:
        groups.setdefault(tuple(q[k] for k in keys), []).append(q)
    out = []
    for key, qs in sorted(groups.items()):
        e = np.abs([q["error"] for q in qs])
        row = dict(zip(keys, key, strict=True))
        row.update(windows=len(qs), median_abs_err=float(np.median(e)))
        row["p90_abs_err"] = float(np.percentile(e, 90))
        for m in ("before", "after", "drift"):
            hw = np.array([q[m] for q in qs])
            row[f"{m}_covered"] = float(np.mean(e <= hw))
            row[f"{m}_median_width"] = float(np.median(hw))
        out.append(row)
    return out


def analyse(recs: list[RequestRecord], c: int, step: int, gap: int, drift: float) -> dict:
    tok, pairs = replay(recs, c, step, gap, drift)
    print(f"trace: {len(tok)} s at {tok.mean():.0f} tok/s on average")
    minutes = tok[: len(tok) // 60 * 60].reshape(-1, 60).mean(1)
    print("tok/s per minute: " + " ".join(f"{x:.0f}" for x in minutes))
    rows = summarize(pairs)
    print(
        "| pilot s | job s | windows | median abs err | p90 | before: covered | width | "
        f"after: covered | width | + {drift:.0%} drift: covered | width |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['pilot_s']} | {r['ratio'] * r['pilot_s']} | {r['windows']} | "
            f"{r['median_abs_err']:.1%} | {r['p90_abs_err']:.1%} | {r['before_covered']:.0%} | "
            f"±{r['before_median_width']:.1%} | {r['after_covered']:.0%} | "
            f"±{r['after_median_width']:.1%} | {r['drift_covered']:.0%} | "
            f"±{r['drift_median_width']:.1%} |"
        )
    every = summarize([{**q, "all": 0} for q in pairs], ("all",))[0]
    print(
        f"all {every['windows']} pairs: before covered {every['before_covered']:.0%} "
        f"(median ±{every['before_median_width']:.1%}), after {every['after_covered']:.0%} "
        f"(median ±{every['after_median_width']:.1%}), after with --speed-drift "
        f"{drift * 100:g} {every['drift_covered']:.0%} (median ±{every['drift_median_width']:.1%})"
    )
    return {
        "trace_s": len(tok),
        "mean_tps": float(tok.mean()),
        "tps_per_minute": [round(float(x)) for x in minutes],
        "concurrency": c,
        "step_s": step,
        "gap_s": gap,
        "model": {"exponent": WANDER_EXPONENT, "horizon_pilots": WANDER_HORIZON},
        "speed_drift": drift,
        "by_window": rows,
        "all": every,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", help="server base URL, e.g. http://127.0.0.1:18600/v1")
    ap.add_argument("--model", default=None)
    ap.add_argument("--seconds", type=float, default=2400.0)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--median", type=float, default=40.0, help="median output tokens")
    ap.add_argument("--records", type=Path, default=Path("speed-drift.jsonl"))
    ap.add_argument("--analyse", type=Path, default=None, help="only analyse this trace")
    ap.add_argument("--step", type=int, default=10, help="seconds between window starts")
    ap.add_argument(
        "--gap", type=int, default=30, help="seconds between pilot and job (plan, start-up)"
    )
    ap.add_argument("--summary", type=Path, default=None, help="write the analysis as JSON")
    ap.add_argument(
        "--speed-drift", type=float, default=20.0, help="percent: the range with plan's flag too"
    )
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
    summary = analyse(
        read_records(args.analyse or args.records),
        args.concurrency,
        args.step,
        args.gap,
        args.speed_drift / 100,
    )
    if args.summary:
        args.summary.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    sys.exit(main())
