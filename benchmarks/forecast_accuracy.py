"""Forecast accuracy: genbench plan's pilot forecast against the job it forecast, run for real.

Per run, on one server:

1. a prompt set of N = ratio × K prompts, each with its own output length drawn from a
   skewed distribution (lognormal, mean ≈ 1.33 × median at sigma 0.75). On the sim the
   length is the sim's own `--output-len` draw per prompt; on vLLM (random weights, so no
   meaningful end of sequence) each prompt carries `max_tokens` = its length and
   `ignore_eos`, and the forecaster only sees what the pilot generated;
2. the field's method: three prompts single-stream for the tokens per sample, a burst of
   32 equal-length requests at that length for the rate, N × tokens / rate;
3. the naive pilot: K prompts at C, pilot wall × N / K;
4. ours: the same pilot, after plan's warm-up (`--warmup`, 20 s of load, discarded), fed
   to `genbench.plan` (simulated job, bootstrap 95% interval);
5. the job: all N prompts at C on the load engine `generate` uses (`run_phase`).

Errors are forecast / actual − 1. The columns that take ours apart:

* length err: the pilot's mean output length over the job's, the part no model can
  remove (it shrinks as 1/√K); model err: ours with it divided out;
* speed err: the pilot's fitted server model (calibrated to the pilot) simulating the
  job with the job's own lengths and TTFTs: what the pilot's speed estimate alone gets
  wrong (drift of the server between pilot and job shows here);
* oracle err: the model fitted on the job's own records, simulating the job, without
  calibration: the simulation's own error when it knows the lengths and the speed.

On the sim, the seconds the sim fell behind its own schedule (a starved host) are
taken out of the job's wall time and reported. `--keep DIR` keeps the pilot's and the
job's records for a closer look.

    .venv/bin/python benchmarks/forecast_accuracy.py --target sim --runs 3
    .venv/bin/python benchmarks/forecast_accuracy.py --target vllm --runs 3   # needs setup
    .venv/bin/python benchmarks/forecast_accuracy.py --target http://host:8000/v1 ...
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from genbench.client import ChatRequest, Timeouts
from genbench.endpoint import Endpoint
from genbench.fastclient import FastClient
from genbench.load import run_phase
from genbench.plan import PilotModel, PilotStop, forecast, run_pilot, simulate_job
from genbench.prompts import Prompt
from genbench.records import RequestRecord
from genbench.sim.process import SimProcess

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm-test-server.sh"
FIELD_C = 32
STARVED = 0.02  # the sim fell behind its schedule by more than this share of a phase
TOPICS = ("a haiku", "a proof", "a recipe", "a limerick", "an essay", "a summary", "a letter")


def prompt_set(n: int, seed: int) -> list[Prompt]:
    return [
        Prompt(
            [
                {
                    "role": "user",
                    "content": f"[{seed}] Write {TOPICS[i % len(TOPICS)]} about item {i}.",
                }
            ],
            i + 1,
            f"r{seed}-{i}",
        )
        for i in range(n)
    ]


class Target:
    """How requests are built for one kind of server."""

    def __init__(self, url: str, model: str, forced: bool, lengths: dict[str, int]) -> None:
        self.url, self.model, self.forced, self.lengths = url, model, forced, lengths

    def request(self, rid: str, p: Prompt) -> ChatRequest:
        if not self.forced:  # the sim draws its natural length per prompt
            return ChatRequest(rid, p.messages, None, {"temperature": 0.0})
        n = self.lengths[p.id or ""]
        return ChatRequest(
            rid, p.messages, n, {"temperature": 0.0, "ignore_eos": True, "min_tokens": n}
        )

    def fixed(self, rid: str, p: Prompt, n: int) -> ChatRequest:
        params: dict[str, Any] = {"temperature": 0.0, "ignore_eos": True}
        if self.forced:
            params["min_tokens"] = n
        return ChatRequest(rid, p.messages, n, params)


async def phase(
    t: Target, reqs: list[ChatRequest], c: int, name: str, duration: float | None = None
) -> list[RequestRecord]:
    """One phase on the transport `run`, `generate` and plan's pilot use; with `duration`,
    the requests are cycled for that long (a warm-up)."""
    client = FastClient(Endpoint.parse(t.url), t.model, timeouts=Timeouts(connect=10, read=600))
    source = itertools.cycle(reqs) if duration else iter(reqs)
    try:
        run = await run_phase(client, source, concurrency=c, phase=name, duration=duration)
    finally:
        await client.close()
    return run.records


def wall(records: list[RequestRecord]) -> float:
    return max(r.t_end or r.t_send for r in records) - min(r.t_send for r in records)


def sim_behind(root: str) -> float:
    try:
        text = urllib.request.urlopen(root + "/metrics", timeout=10).read().decode()
    except OSError:
        return 0.0
    m = re.search(r"^sim:decode_resync_seconds_total (\S+)", text, re.M)
    return float(m[1]) if m else 0.0


async def one_run(
    t: Target,
    root: str,
    k: int,
    ratio: int,
    c: int,
    seed: int,
    sim: bool,
    keep: Path | None,
    warmup_s: float,
    stop: PilotStop | None,
    pool_n: int,
) -> dict[str, Any]:
    """With `stop`, the pilot is plan's open-ended one (until the bar reaches its target);
    it draws from a prompt set of `pool_n`, and the job is N = ratio × K of them, drawn at
    random after the pilot (K is known only then)."""
    prompts_all = prompt_set(pool_n, seed)
    n = k * ratio
    prompts = prompts_all[:n]
    rng = np.random.default_rng(seed)

    # the field: three hand-written prompts for the length, a burst at C=32 for the rate
    three = await phase(t, [t.request(f"f{i}", p) for i, p in enumerate(prompts[:3])], 1, "field")
    t_field = round(float(np.mean([r.completion_tokens or 0 for r in three])))
    burst = await phase(
        t, [t.fixed(f"b{i}", prompts[i], t_field) for i in range(FIELD_C)], FIELD_C, "burst"
    )
    burst_rate = sum(r.completion_tokens or 0 for r in burst if r.ok) / wall(burst)
    field_s = n * t_field / burst_rate

    # ours and the naive pilot: K prompts drawn at random from the job's
    src = prompts_all if stop is not None else prompts
    picks = rng.permutation(len(src)) if stop is not None else rng.choice(n, k, replace=False)
    items = [(src[i], t.request(f"pilot-{j}", src[i])) for j, i in enumerate(picks)]
    behind0 = sim_behind(root) if sim else 0.0
    warm = [t.request(f"warm-{j}", src[i]) for j, i in enumerate(rng.choice(len(src), 4 * c))]
    pilot = await run_pilot(
        Endpoint.parse(t.url), t.model, items, c, None, warmup=warm, warmup_s=warmup_s, stop=stop
    )
    behind_pilot = (sim_behind(root) - behind0) if sim else 0.0
    if stop is not None:  # the job: ratio × K prompts of the same set, at random
        k = len(pilot.records)
        n = k * ratio
        prompts = [prompts_all[i] for i in np.sort(rng.choice(len(prompts_all), n, replace=False))]
    model = PilotModel.from_records(pilot.records, c)
    t0 = time.perf_counter()
    fc = forecast(model, [(n, 1)], boot=200, seed=seed)[0]
    forecast_s = time.perf_counter() - t0
    naive_s = pilot.wall_s * n / k

    # the job, warmed up as plan's pilot was: a job of hours runs warm, and this one
    # starts after the forecast's pause (the server idles meanwhile)
    if warmup_s > 0:
        await phase(t, warm, c, "job-warmup", duration=warmup_s)
    behind1 = sim_behind(root) if sim else 0.0
    job = await phase(t, [t.request(f"job-{i}", p) for i, p in enumerate(prompts)], c, "job")
    behind_job = (sim_behind(root) - behind1) if sim else 0.0
    actual = wall(job) - behind_job
    ok = [r for r in job if r.ok]
    # the same model fitted on the job itself: does the simulation reproduce the job when
    # it knows the job's lengths and speed? (what is left is the simulation's own error)
    oracle = PilotModel.from_records(job, c)
    rng_o = np.random.default_rng(seed)
    oracle_s = float(
        np.mean([simulate_job(n, c, oracle.pool, oracle.step, rng_o).wall_s for _ in range(5)])
    )
    # the pilot's model with the job's lengths: what the speed estimate alone gets wrong
    speed_s = model.calibration * float(
        np.mean([simulate_job(n, c, oracle.pool, model.step, rng_o).wall_s for _ in range(5)])
    )
    if keep is not None:
        for name, recs in (("pilot", pilot.records), ("job", job)):
            with open(keep / f"{name}-{seed}.jsonl", "wb") as f:
                f.writelines(r.to_json() + b"\n" for r in recs)
    job_mean = float(np.mean([r.completion_tokens or 0 for r in ok]))
    pilot_mean = float(model.pool.output.mean())
    err = fc.seconds / actual - 1
    len_err = pilot_mean / job_mean - 1
    return {
        "seed": seed,
        "n": n,
        "pilot": k,
        "concurrency": c,
        "actual_s": actual,
        "job_failed": len(job) - len(ok),
        "job_mean_tokens": job_mean,
        "job_median_tokens": float(np.median([r.completion_tokens or 0 for r in ok])),
        "pilot_mean_tokens": pilot_mean,
        "ours_s": fc.seconds,
        "ours_lo_s": fc.lo_s,
        "ours_hi_s": fc.hi_s,
        "ours_err": err,
        "ours_halfwidth": fc.rel_halfwidth,
        "in_bar": fc.lo_s <= actual <= fc.hi_s,
        "length_err": len_err,
        "model_err": (1 + err) / (1 + len_err) - 1,
        "oracle_s": oracle_s,
        "oracle_err": oracle_s / actual - 1,
        "speed_err": speed_s / actual - 1,
        "job_step_model": oracle.describe()["step_model"],
        "naive_s": naive_s,
        "naive_err": naive_s / actual - 1,
        "field_tokens_per_sample": t_field,
        "field_burst_tps": burst_rate,
        "field_s": field_s,
        "field_err": field_s / actual - 1,
        "step_model": model.describe()["step_model"],
        "pilot_wall_s": pilot.wall_s,
        "pilot_stopped": pilot.stopped,
        "replay_err": model.replay_err,
        "calibration": model.calibration,
        "uncalibrated_err": fc.seconds / model.calibration / actual - 1,
        "length_halfwidth": fc.length_halfwidth,
        "forecast_compute_s": forecast_s,
        "sim_behind_pilot_s": behind_pilot,
        "sim_behind_job_s": behind_job,
        # the sim could not keep its own timing: the run measures the host, not the forecast
        "host_starved": behind_pilot > STARVED * pilot.wall_s or behind_job > STARVED * actual,
    }


def lengths_for(prompts_n: int, seeds: list[int], median: float, sigma: float, cap: int) -> dict:
    out: dict[str, int] = {}
    for seed in seeds:
        rng = np.random.default_rng(10_000 + seed)
        for i, n in enumerate(rng.lognormal(math.log(median), sigma, prompts_n)):
            out[f"r{seed}-{i}"] = int(min(cap, max(1, round(n))))
    return out


def row(r: dict[str, Any]) -> str:
    return (
        f"| {r['n']} | {r['pilot']} | {r['concurrency']} | {r['actual_s']:.1f} | "
        f"{r['ours_s']:.1f} [{r['ours_lo_s']:.1f}, {r['ours_hi_s']:.1f}] | "
        f"{r['ours_err']:+.1%} | {'yes' if r['in_bar'] else '**no**'} | "
        f"{r['length_err']:+.1%} | {r['model_err']:+.1%} | {r['speed_err']:+.1%} | "
        f"{r['oracle_err']:+.1%} | {r['naive_err']:+.1%} | {r['field_err']:+.1%} |"
        + (" host starved: sim fell behind |" if r.get("host_starved") else "")
    )


HEADER = (
    "| N | pilot K | C | actual s | ours s [95%] | ours err | in bar | length err | "
    "model err | speed err | oracle err | naive pilot err | field err |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--target", default="sim", help="sim, vllm, or a base URL")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pilot", default="100", help="pilot requests K, or auto (plan's default)")
    ap.add_argument("--target-error", type=float, default=5.0, help="--pilot auto: percent")
    ap.add_argument("--pilot-max", type=int, default=5000, help="--pilot auto: most requests")
    ap.add_argument("--pilot-max-time", type=float, default=600.0, help="--pilot auto: seconds")
    ap.add_argument("--ratio", type=int, default=20, help="job size N = ratio × K (≥ 20)")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--median", type=float, default=250.0, help="median output tokens")
    ap.add_argument("--sigma", type=float, default=0.75, help="lognormal sigma (0.75: mean≈1.33×)")
    ap.add_argument("--cap", type=int, default=1500, help="longest output (vLLM, URL)")
    ap.add_argument("--sim-args", default="--tps 150 --per-seq-ms 0.4 --ttft-ms 20")
    ap.add_argument("--model", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write results JSON here")
    ap.add_argument("--keep", type=Path, default=None, help="keep pilot and job records here")
    ap.add_argument("--warmup", type=float, default=20.0, help="pilot warm-up seconds (plan's)")
    args = ap.parse_args()
    seeds = [args.seed + i for i in range(args.runs)]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    auto = args.pilot == "auto"
    k0 = args.pilot_max if auto else int(args.pilot)
    n = k0 * args.ratio  # the prompt set (with auto, the job is ratio × the K the pilot took)
    stop: list[Any] = []
    sim = args.target == "sim"
    if sim:
        proc = SimProcess(
            *args.sim_args.split(),
            "--output-len",
            f"lognormal:{args.median:g}:{args.sigma:g}",
            "--max-batch",
            "1024",
        ).start()
        stop.append(proc.close)
        url, root, model = proc.url, proc.root, "genbench-sim"
        desc = f"genbench sim {args.sim_args}, output lognormal:{args.median:g}:{args.sigma:g}"
    elif args.target == "vllm":
        name = f"forecast-{int(time.time())}"
        port = 18700 + int(time.time()) % 200
        subprocess.run([str(SCRIPT), "setup"], check=True)
        base = subprocess.run(
            [str(SCRIPT), "start", name, str(port)], check=True, capture_output=True, text=True
        ).stdout.strip()
        stop.append(lambda: subprocess.run([str(SCRIPT), "stop", name], check=False))
        url, root, model = base + "/v1", base, "tiny-llama"
        desc = "vLLM CPU test server (scripts/vllm-test-server.sh), tiny random-weight Llama"
    else:
        ep = Endpoint.parse(args.target)
        url, root, model = ep.base_url, ep.root, args.model or ""
        desc = args.target
    if not model:
        with urllib.request.urlopen(url + "/models", timeout=10) as r:
            model = json.loads(r.read())["data"][0]["id"]
    lengths = {} if sim else lengths_for(n, seeds, args.median, args.sigma, args.cap)
    target = Target(url, model, forced=not sim, lengths=lengths)
    results = []
    try:
        print(
            f"target: {desc}; "
            + (
                f"pilot until ±{args.target_error:g}% (≤ {args.pilot_max}, "
                f"≤ {args.pilot_max_time:g} s), N = {args.ratio} × K"
                if auto
                else f"N = {n}, pilot K = {k0}"
            )
            + f", C = {args.concurrency}"
        )
        print(HEADER)
        for seed in seeds:
            r = asyncio.run(
                one_run(
                    target,
                    root,
                    k0,
                    args.ratio,
                    args.concurrency,
                    seed,
                    sim,
                    args.keep,
                    args.warmup,
                    PilotStop(
                        target=args.target_error / 100,
                        min_requests=max(200, 8 * args.concurrency),
                        max_s=args.pilot_max_time,
                        max_requests=args.pilot_max,
                    )
                    if auto
                    else None,
                    n,
                )
            )
            results.append(r)
            print(row(r), flush=True)
    finally:
        for f in stop:
            f()
    starved = [r for r in results if r["host_starved"]]
    results_all, results = results, [r for r in results if not r["host_starved"]]
    if starved:
        print(f"\n{len(starved)} run(s) left out: the host starved the sim (see the last column)")
    if not results:
        results = results_all
    errs = np.array([r["ours_err"] for r in results])
    inside = sum(r["in_bar"] for r in results)
    print(
        f"\nours: mean |error| {np.mean(np.abs(errs)):.1%}, in bar {inside}"
        f"/{len(results)}; field mean error {np.mean([r['field_err'] for r in results]):+.1%}; "
        f"naive pilot mean |error| {np.mean([abs(r['naive_err']) for r in results]):.1%}"
    )
    out = args.out or Path(tempfile.gettempdir()) / f"forecast-accuracy-{int(time.time())}.json"
    out.write_text(
        json.dumps(
            {
                "target": desc,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
                | {"out": str(out)},
                "runs": results_all,
            },
            indent=2,
        )
    )
    print(f"details: {out}")


if __name__ == "__main__":
    sys.exit(main())
