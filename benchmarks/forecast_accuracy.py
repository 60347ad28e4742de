"""Forecast accuracy: `genbench plan` against the `genbench generate` job it forecast.

Each run does what a user does, with the real commands as subprocesses (run as
`python -m genbench` with this interpreter, so `taskset` pinning of the benchmark is
inherited), on one server:

1. writes the job's prompt file: N rows (`--samples`), each with an `id` and `messages`,
   whose output lengths are skewed (lognormal, mean ≈ 1.33 × median at sigma 0.75). On
   the sim the length is the sim's own `--output-len` draw per prompt (no per-row
   params). On vLLM (random weights, so no meaningful end of sequence) each row carries
   `"params": {"max_tokens": n, "min_tokens": n, "ignore_eos": true, "temperature": 0}`
   with its own n, and the forecaster only sees what the pilot generated. Both commands
   also get `--temperature 0`;
2. the field's method, in-process: three prompts single-stream for the tokens per
   sample, a burst of 32 equal-length requests at that length for the rate,
   N × tokens / rate;
3. ours: `genbench plan --prompts FILE --samples N --url URL --concurrency C --warmup-time W
   --seed S --out DIR --json`, with `--target-error E --pilot-max-time T` (open-ended
   pilot, `--pilot auto`) or `--pilot K`. The forecast for N, its bar and the naive pilot
   (pilot wall × N / K) are read from its JSON; the pilot's records (DIR/requests.jsonl)
   are fitted again in-process (`PilotModel.from_records`) for the columns below. K is
   the number of pilot requests, known only after plan ran;
4. the job: W seconds of load at C (in-process, discarded: a job of hours runs warm,
   and this one starts after plan's pause), then `genbench generate --input FILE
   --out JOBDIR --url URL --concurrency C`. Its wall time is max(meta.finished_at) −
   min(meta.sent_at) over the rows it wrote (rows in errors.jsonl count as failed).
   Between the warm-up and the job's first request the server idles while generate
   starts and checks it (about a second).

N is fixed before the pilot, so N ≥ 20 × K (the issue's ratio) can only be checked
after it: `--samples` defaults to `--ratio` × K for `--pilot K`, and to `--ratio` ×
`--pilot-max` for `--pilot auto` (plan has no cap on K other than its time limit and the
file's size; `--pilot-max` is what the prompt file is sized for, and a run whose pilot
went past it is flagged). The N/K column shows the ratio each run had; runs under 20
are flagged.

Errors are forecast / actual − 1. The columns that take ours apart:

* length err: the pilot's mean output length over the job's, the part no model can
  remove (it shrinks as 1/√K); model err: ours with it divided out;
* speed err: the pilot's fitted server model (calibrated to the pilot) simulating the
  job with the job's own lengths and TTFTs: what the pilot's speed estimate alone gets
  wrong (drift of the server between pilot and job shows here);
* oracle err: the model fitted on the job itself, simulating the job, without
  calibration: the simulation's own error when it knows the lengths and the speed.
  generate writes no per-request records, only each row's `meta` (sent_at, ttft_s,
  latency_s, token counts; times in ms), so the job's step time is fitted on chunks
  spread evenly between each row's first token and its end: a constant decode rate per
  request. That is exact while C requests decode and blurs the tail, a start-up
  request's decoding between the others' prefills, and steps that emit several tokens.
  Its effect is measured on each pilot: the pilot's own model refitted from its records
  reduced to what generate writes, simulating the job, against the model from the real
  records (`oracle_approx_err` in the details; a run where it exceeds 1% says so).

On the sim, the seconds the sim fell behind its own schedule (a starved host) are
taken out of the job's wall time and reported. `--keep DIR` keeps each run's directory
(prompt file, plan's directory, generate's output, both commands' logs) under DIR; a
run whose command failed keeps its directory and names it.

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
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from genbench.load import run_phase
from genbench.plan import Draws, PilotModel, StepModel, decode_rows, fit_step, simulate_job
from genbench.records import RequestRecord, read_records
from genbench.run.result import REQUESTS_FILE
from genbench.sim.process import SimProcess
from genbench.transport.client import ChatRequest, Client, Timeouts
from genbench.transport.endpoint import Endpoint

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "vllm-test-server.sh"
GENBENCH = [sys.executable, "-m", "genbench"]  # this interpreter: its venv, its CPU affinity
FIELD_C = 32
MIN_RATIO = 20  # the issue: the job is at least 20 × the pilot
STARVED = 0.02  # the sim fell behind its schedule by more than this share of a phase
APPROX_WARN = 0.01  # the oracle's approximation moved the pilot's own forecast by more
MAX_CHUNKS = 64  # evenly spread chunks per job row for the oracle's step fit
TOPICS = ("a haiku", "a proof", "a recipe", "a limerick", "an essay", "a summary", "a letter")


@dataclass(frozen=True)
class Prompt:
    """One row of the job's prompt file: its messages, line and id."""

    messages: list[dict[str, Any]]
    line: int
    id: str


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

    def params(self, p: Prompt) -> dict[str, Any]:
        """A prompt's own sampling fields: its forced length on vLLM, none on the sim."""
        if not self.forced:  # the sim draws its natural length per prompt
            return {"temperature": 0.0}
        n = self.lengths[p.id or ""]
        return {"max_tokens": n, "min_tokens": n, "ignore_eos": True, "temperature": 0.0}

    def request(self, rid: str, p: Prompt) -> ChatRequest:
        params = self.params(p)
        return ChatRequest(rid, p.messages, params.pop("max_tokens", None), params)

    def fixed(self, rid: str, p: Prompt, n: int) -> ChatRequest:
        params: dict[str, Any] = {"temperature": 0.0, "ignore_eos": True}
        if self.forced:
            params["min_tokens"] = n
        return ChatRequest(rid, p.messages, n, params)

    def write_prompts(self, path: Path, prompts: list[Prompt]) -> None:
        """The job's input file, as a user writes it: one row per prompt, `params` per row
        where the lengths are forced."""
        with open(path, "wb") as f:
            for p in prompts:
                row: dict[str, Any] = {"id": p.id, "messages": p.messages}
                if self.forced:
                    row["params"] = self.params(p)
                f.write(orjson.dumps(row) + b"\n")


async def phase(
    t: Target, reqs: list[ChatRequest], c: int, name: str, duration: float | None = None
) -> list[RequestRecord]:
    """One phase on the transport `run`, `generate` and plan's pilot use; with `duration`,
    the requests are cycled for that long (a warm-up)."""
    client = Client(Endpoint.parse(t.url), t.model, timeouts=Timeouts(connect=10, read=600))
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


def genbench(args: list[str], log: Path) -> str:
    """Run `genbench ARGS` as a user would; its stderr and stdout go to `log`, and its
    stdout is returned. A non-zero exit stops the benchmark with the log's tail."""
    cmd = [*GENBENCH, *args]
    with open(log, "wb") as f:
        f.write(f"$ {shlex.join(cmd)}\n".encode())
        f.flush()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, check=False)
        f.write(b"--- stdout ---\n" + proc.stdout)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise SystemExit(f"genbench {args[0]} exited with {proc.returncode} (log: {log}):\n{tail}")
    return proc.stdout.decode()


def read_job(job_dir: Path) -> tuple[list[tuple[str, dict[str, Any]]], int]:
    """generate's output: (id, meta) of every data row, and the rows that failed."""
    rows: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(job_dir.glob("data-*.jsonl")):
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    row = orjson.loads(line)
                    rows.append((str(row["id"]), row["meta"]))
    errors = job_dir / "errors.jsonl"
    failed = 0
    if errors.exists():
        with open(errors, "rb") as f:
            failed = sum(1 for line in f if line.strip())
    return rows, failed


def as_meta(r: RequestRecord) -> dict[str, Any]:
    """What generate's row meta says about a request (its times rounded as generate
    rounds them), from a full record: to measure what the oracle's reduction costs."""
    return {
        "sent_at": round(r.t_send, 3),
        "finished_at": round(r.t_end or r.t_send, 3),
        "ttft_s": None if r.ttft is None else round(r.ttft, 4),
        "latency_s": round(r.e2e or 0.0, 4),
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "reasoning_tokens": r.reasoning_tokens,
    }


def meta_records(metas: list[dict[str, Any]]) -> list[RequestRecord]:
    """RequestRecords from generate's row meta, as far as `Draws.from_records` and
    `decode_rows` need them: the successful attempt's send and end (finished_at −
    latency_s, finished_at; epoch seconds, one clock), its TTFT, token counts, and
    chunks spread evenly from the first token to the end (generate keeps no chunk
    times: this assumes a constant decode rate per request)."""
    out = []
    for i, m in enumerate(metas):
        tokens, ttft, lat = m.get("completion_tokens") or 0, m.get("ttft_s"), m["latency_s"]
        end = float(m["finished_at"])
        chunks = min(tokens, MAX_CHUNKS)
        offsets = (
            np.linspace(ttft, lat, chunks).tolist()
            if ttft is not None and chunks >= 2 and lat > ttft
            else ([ttft] if ttft is not None else [])
        )
        out.append(
            RequestRecord(
                id=f"job-{i}",
                phase="job",
                sent_at=float(m["sent_at"]),
                t_send=end - lat,
                t_end=end,
                ttft=ttft,
                chunk_offsets=offsets,
                prompt_tokens=m.get("prompt_tokens"),
                completion_tokens=tokens,
                reasoning_tokens=m.get("reasoning_tokens"),
            )
        )
    return out


def fitted(records: list[RequestRecord], c: int) -> tuple[Draws, StepModel]:
    """What the oracle uses of `PilotModel.from_records`: the pool and the step fit."""
    return Draws.from_records(records, c), fit_step(decode_rows(records, c))


def sim_mean(n: int, c: int, pool: Draws, step: StepModel, rng: np.random.Generator) -> float:
    return float(np.mean([simulate_job(n, c, pool, step, rng).wall_s for _ in range(5)]))


def describe_step(step: StepModel, pool: Draws, c: int) -> dict[str, Any]:
    """As `PilotModel.describe()["step_model"]`."""
    return {
        **asdict(step),
        "formula": "seconds per decode step = a + b·n_decoding + c·context_tokens",
        "decode_tps_at_c": step.rate(c, c * float(np.mean(pool.prompt) + np.mean(pool.output) / 2)),
    }


def forced_share(t: Target, rows: list[tuple[str, int | None]]) -> float | None:
    """On vLLM: the share of (prompt id, completion tokens) that got their forced length."""
    known = [(rid, n) for rid, n in rows if rid in t.lengths]
    if not t.forced or not known:
        return None
    return sum(n == t.lengths[rid] for rid, n in known) / len(known)


def one_run(
    t: Target,
    root: str,
    n: int,
    c: int,
    seed: int,
    sim: bool,
    work: Path,
    warmup_s: float,
    pilot_args: list[str],
    pilot_max: int | None,
    min_ratio: int = MIN_RATIO,
) -> dict[str, Any]:
    prompts = prompt_set(n, seed)
    rng = np.random.default_rng(seed)
    prompts_file = work / "prompts.jsonl"
    t.write_prompts(prompts_file, prompts)
    common = ["--url", t.url, "--model", t.model, "--concurrency", str(c), "--temperature", "0"]

    # the field: three hand-written prompts for the length, a burst at C=32 for the rate
    three = asyncio.run(
        phase(t, [t.request(f"f{i}", p) for i, p in enumerate(prompts[:3])], 1, "field")
    )
    t_field = round(float(np.mean([r.completion_tokens or 0 for r in three])))
    burst = asyncio.run(
        phase(t, [t.fixed(f"b{i}", prompts[i], t_field) for i in range(FIELD_C)], FIELD_C, "burst")
    )
    burst_rate = sum(r.completion_tokens or 0 for r in burst if r.ok) / wall(burst)
    field_s = n * t_field / burst_rate

    # ours and the naive pilot: genbench plan, its own warm-up and pilot on the job's file
    plan_dir = work / "plan"
    behind0 = sim_behind(root) if sim else 0.0
    t0 = time.perf_counter()
    out = genbench(
        ["plan", "--prompts", str(prompts_file), "--samples", str(n), *common, *pilot_args]
        + ["--warmup-time", f"{warmup_s:g}", "--seed", str(seed), "--out", str(plan_dir), "--json"],
        work / "plan.log",
    )
    t_plan_end = time.perf_counter()
    behind_pilot = (sim_behind(root) - behind0) if sim else 0.0
    doc = json.loads(out)
    row_n = next(r for r in doc["rows"] if r["samples"] == n)
    ours, naive_s = row_n["ours"], row_n["naive_pilot"]["seconds"]
    records = read_records(plan_dir / REQUESTS_FILE)
    k = len(records)
    model = PilotModel.from_records(records, c)
    if abs(model.calibration / doc["model"]["replay"]["calibration"] - 1) > 1e-3:
        print(  # the refit should be plan's own model: its records, its code
            f"warning: seed {seed}: the pilot refitted here calibrates {model.calibration:.4f}, "
            f"plan's model {doc['model']['replay']['calibration']:.4f}",
            file=sys.stderr,
        )
    pilot_forced = forced_share(
        t,
        [
            (f"r{seed}-{int(m[1]) - 1}", r.completion_tokens)
            for r in records
            if r.ok and (m := re.search(r"line(\d+)$", r.id))
        ],
    )

    # the job, warmed up as plan's pilot was: a job of hours runs warm, and this one
    # starts after the forecast's pause (the server idles meanwhile)
    warm = [t.request(f"warm-{j}", prompts[i]) for j, i in enumerate(rng.choice(n, 4 * c))]
    if warmup_s > 0:
        asyncio.run(phase(t, warm, c, "job-warmup", duration=warmup_s))
    behind1 = sim_behind(root) if sim else 0.0
    t1 = time.perf_counter()
    gen = genbench(
        ["generate", "--input", str(prompts_file), "--out", str(work / "job"), *common]
        + ["--plan", str(plan_dir), "--json"],
        work / "generate.log",
    )
    job_cmd_s = time.perf_counter() - t1
    gen_plan = json.loads(gen).get("plan") or {}
    behind_job = (sim_behind(root) - behind1) if sim else 0.0
    rows, failed = read_job(work / "job")
    if not rows:
        raise SystemExit(f"genbench generate wrote no rows ({failed} failed): see {work}")
    metas = [m for _, m in rows]
    actual = max(m["finished_at"] for m in metas) - min(m["sent_at"] for m in metas) - behind_job
    job_tokens = [m.get("completion_tokens") or 0 for m in metas]
    job_forced = forced_share(t, [(rid, m.get("completion_tokens")) for rid, m in rows])

    # the same model fitted on the job itself: does the simulation reproduce the job when
    # it knows the job's lengths and speed? (what is left is the simulation's own error)
    o_pool, o_step = fitted(meta_records(metas), c)
    rng_o = np.random.default_rng(seed)
    oracle_s = sim_mean(n, c, o_pool, o_step, rng_o)
    # the pilot's model with the job's lengths: what the speed estimate alone gets wrong
    speed_s = model.calibration * sim_mean(n, c, o_pool, model.step, rng_o)
    # what reducing records to generate's meta does to a fit, measured on the pilot
    p_pool, p_step = fitted(meta_records([as_meta(r) for r in records if r.ok]), c)
    approx = sim_mean(n, c, p_pool, p_step, np.random.default_rng(seed)) / sim_mean(
        n, c, model.pool, model.step, np.random.default_rng(seed)
    )

    job_mean = float(np.mean(job_tokens))
    pilot_mean = float(model.pool.output.mean())
    fc_s, lo_s, hi_s = ours["seconds"], ours["lo_s"], ours["hi_s"]
    err = fc_s / actual - 1
    len_err = pilot_mean / job_mean - 1
    last_reply = max(r.t_end or r.t_send for r in records)
    return {
        "seed": seed,
        "n": n,
        "pilot": k,
        "ratio": n / k,
        "ratio_ok": n >= min_ratio * k,
        "min_ratio": min_ratio,
        "pilot_over_max": pilot_max is not None and k > pilot_max,
        "concurrency": c,
        "actual_s": actual,
        "job_failed": failed,
        "job_mean_tokens": job_mean,
        "job_median_tokens": float(np.median(job_tokens)),
        "pilot_mean_tokens": pilot_mean,
        "ours_s": fc_s,
        "ours_lo_s": lo_s,
        "ours_hi_s": hi_s,
        "ours_err": err,
        "ours_halfwidth": ours["rel_halfwidth"],
        "in_bar": lo_s <= actual <= hi_s,
        "speed_halfwidth": (ours.get("speed") or {}).get("halfwidth"),
        "speed": ours.get("speed"),
        "speed_model": doc["model"].get("speed"),
        # generate --plan's own verdict: its wall time (first send to last row) against the
        # plan's range, scaled to the rows it ran
        "generate_plan": gen_plan,
        # genbench's own process, pilot against job: CPU share of a core and the host's load
        # (a client busier in the job than in the pilot takes cores from an engine beside it)
        "pilot_client_cpu": (doc["inputs"].get("pilot_client") or {}).get("cpu_fraction"),
        "job_client_cpu": (json.loads(gen).get("client") or {}).get("cpu_fraction"),
        "job_host_load": (json.loads(gen).get("client") or {}).get("host_load"),
        "length_err": len_err,
        "model_err": (1 + err) / (1 + len_err) - 1,
        "oracle_s": oracle_s,
        "oracle_err": oracle_s / actual - 1,
        "oracle_approx_err": approx - 1,
        "speed_err": speed_s / actual - 1,
        "job_step_model": describe_step(o_step, o_pool, c),
        "naive_s": naive_s,
        "naive_err": naive_s / actual - 1,
        "field_tokens_per_sample": t_field,
        "field_burst_tps": burst_rate,
        "field_s": field_s,
        "field_err": field_s / actual - 1,
        "step_model": doc["model"]["step_model"],
        "pilot_wall_s": doc["model"]["pilot_wall_s"],
        "pilot_stopped": doc["inputs"]["pilot_stopped"],
        "plan_pilot": doc["inputs"]["pilot"],
        "replay_err": model.replay_err,
        "calibration": model.calibration,
        "plan_calibration": doc["model"]["replay"]["calibration"],
        "uncalibrated_err": fc_s / model.calibration / actual - 1,
        "length_halfwidth": ours["length_halfwidth"],
        # from the pilot's last reply to plan's exit: the forecast, storage, the document
        "forecast_compute_s": t_plan_end - last_reply,
        "plan_s": t_plan_end - t0,
        "generate_s": job_cmd_s,
        "pilot_lengths_forced": pilot_forced,
        "job_lengths_forced": job_forced,
        "sim_behind_pilot_s": behind_pilot,
        "sim_behind_job_s": behind_job,
        # the sim could not keep its own timing: the run measures the host, not the forecast
        "host_starved": behind_pilot > STARVED * model.pilot_wall_s
        or behind_job > STARVED * actual,
    }


def lengths_for(
    prompts_n: int,
    seeds: list[int],
    median: float,
    sigma: float,
    cap: int,
    shape: str = "lognormal",
) -> dict:
    """Each prompt's forced output length: lognormal (median, sigma), fixed (the median)
    or bimodal (80% short answers at 0.6 × the median, 20% long ones at 3.6 ×, ±10%)."""
    out: dict[str, int] = {}
    for seed in seeds:
        rng = np.random.default_rng(10_000 + seed)
        if shape == "fixed":
            draws = np.full(prompts_n, median)
        elif shape == "bimodal":
            long = rng.random(prompts_n) < 0.2
            draws = np.where(long, 3.6, 0.6) * median * rng.normal(1, 0.1, prompts_n)
        else:
            draws = rng.lognormal(math.log(median), sigma, prompts_n)
        for i, n in enumerate(draws):
            out[f"r{seed}-{i}"] = int(min(cap, max(1, round(n))))
    return out


# --family: the (#48) many short sim jobs: (lengths, drift, pilot K), cycled
FAMILY = [(shape, drift, k) for drift in ("", "12:45")
          for shape in ("lognormal", "fixed", "bimodal") for k in (60, 120, 300)]  # fmt: skip


def family(args: argparse.Namespace) -> list[dict[str, Any]]:
    """`--runs` short jobs on the sim, each its own sim (steady, or wandering ±12% over a
    45 s cycle: slower than a pilot of seconds can see), the lengths forced per row
    (`lengths_for`'s shapes), pilots of 60 to 300, N = max(--ratio × K, 600) capped
    at 1,500 so that each job stays at tens of seconds. Seeds from --seed; a row per run."""
    results = []
    print(HEADER.replace("| N |", "| shape | drift | N |").replace("|---|", "|---|---|---|", 1))
    for i in range(args.runs):
        seed = args.seed + i
        shape, drift, k = FAMILY[(i * 7) % len(FAMILY)]  # 7 ⊥ 18: every combination, mixed
        n = min(max(args.ratio * k, 600), 1500)
        extra = ["--drift", drift, "--seed", str(seed)] if drift else ["--seed", str(seed)]
        work = Path(tempfile.mkdtemp(prefix=f"forecast-{seed}-", dir=args.keep or None)).resolve()
        with SimProcess(*args.sim_args.split(), *extra, "--max-batch", "1024") as proc:
            lengths = lengths_for(n, [seed], args.median, args.sigma, args.cap, shape)
            t = Target(proc.url, "genbench-sim", forced=True, lengths=lengths)
            r = one_run(t, proc.root, n, args.concurrency, seed, True, work, args.warmup,
                        ["--pilot", str(k)], None, args.min_ratio)  # fmt: skip
        r |= {"shape": shape, "drift": drift or "steady", "load_avg": os.getloadavg()[0]}
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        results.append(r)
        print(f"| {shape} | {drift or 'steady'} " + row(r), flush=True)
    return results


def flags(r: dict[str, Any]) -> list[str]:
    out = []
    if r.get("host_starved"):
        out.append("host starved: sim fell behind")
    if not r["ratio_ok"]:
        out.append(f"N < {r.get('min_ratio', MIN_RATIO)} K")
    if r.get("pilot_over_max"):
        out.append("K over --pilot-max")
    for what in ("pilot", "job"):
        share = r.get(f"{what}_lengths_forced")
        if share is not None and share < 0.9:
            out.append(f"{what}: {share:.0%} of lengths as forced")
    if abs(r["oracle_approx_err"]) > APPROX_WARN:
        out.append(f"oracle approx {r['oracle_approx_err']:+.1%}")
    return out


def _pct(x: float | None) -> str:
    return "—" if x is None else f"±{x:.1%}"


def identical_jobs(
    t: Target, n: int, c: int, seed: int, work: Path, warmup_s: float, count: int
) -> list[float]:
    """The same job (N rows, the same prompt file and lengths) run `count` times back to
    back, each after the same warm-up: how much a job's wall time moves with nothing
    changed but when it ran. No forecast can be expected to beat it."""
    prompts = prompt_set(n, seed)
    prompts_file = work / "prompts.jsonl"
    t.write_prompts(prompts_file, prompts)
    rng = np.random.default_rng(seed)
    walls = []
    for i in range(count):
        warm = [t.request(f"warm-{j}", prompts[k]) for j, k in enumerate(rng.choice(n, 4 * c))]
        if warmup_s > 0:
            asyncio.run(phase(t, warm, c, "job-warmup", duration=warmup_s))
        job = work / f"job{i}"
        genbench(
            ["generate", "--input", str(prompts_file), "--out", str(job), "--url", t.url]
            + ["--model", t.model, "--concurrency", str(c), "--temperature", "0"],
            work / f"generate{i}.log",
        )
        metas = [m for _, m in read_job(job)[0]]
        walls.append(max(m["finished_at"] for m in metas) - min(m["sent_at"] for m in metas))
        print(f"identical job {i + 1}/{count}: {n} rows in {walls[-1]:.1f} s", flush=True)
    return walls


def row(r: dict[str, Any]) -> str:
    ratio = f"{r['ratio']:.1f}" if r["ratio_ok"] else f"**{r['ratio']:.1f}**"
    return (
        f"| {r['n']} | {r['pilot']} | {ratio} | {r['concurrency']} | {r['actual_s']:.1f} | "
        f"{r['ours_s']:.1f} [{r['ours_lo_s']:.1f}, {r['ours_hi_s']:.1f}] | "
        f"{r['ours_err']:+.1%} | {'yes' if r['in_bar'] else '**no**'} | "
        f"{_pct(r.get('speed_halfwidth'))} | {r['length_err']:+.1%} | {r['model_err']:+.1%} | "
        f"{r['speed_err']:+.1%} | "
        f"{r['oracle_err']:+.1%} | {r['naive_err']:+.1%} | {r['field_err']:+.1%} |"
        + "".join(f" {f} |" for f in flags(r))
    )


HEADER = (
    "| N | pilot K | N/K | C | actual s | ours s [95%] | ours err | in bar | speed ± | "
    "length err | model err | speed err | oracle err | naive pilot err | field err |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--target", default="sim", help="sim, vllm, or a base URL")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pilot", default="100", help="pilot requests K (plan --pilot K), or auto")
    ap.add_argument("--target-error", type=float, default=5.0, help="--pilot auto: percent")
    ap.add_argument(
        "--pilot-max",
        type=int,
        default=5000,
        help="--pilot auto: the K the job is sized for (default N = ratio × it); plan does\n"
        "not cap K, so a pilot past it is flagged",
    )
    ap.add_argument("--pilot-max-time", type=float, default=600.0, help="--pilot auto: seconds")
    ap.add_argument(
        "--pilot-min-time", type=float, default=0.0, help="--pilot auto: seconds (plan's)"
    )
    ap.add_argument("--samples", type=int, default=None, help="job size N (default: ratio × K)")
    ap.add_argument(
        "--ratio", type=int, default=MIN_RATIO, help=f"default N = ratio × K (≥ {MIN_RATIO})"
    )
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--median", type=float, default=250.0, help="median output tokens")
    ap.add_argument("--sigma", type=float, default=0.75, help="lognormal sigma (0.75: mean≈1.33×)")
    ap.add_argument("--cap", type=int, default=1500, help="longest output (vLLM, URL)")
    ap.add_argument("--sim-args", default="--tps 150 --per-seq-ms 0.4 --ttft-ms 20")
    ap.add_argument("--model", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write results JSON here")
    ap.add_argument(
        "--keep", type=Path, default=None, help="keep each run's files (plan, job, logs) here"
    )
    ap.add_argument("--warmup", type=float, default=20.0, help="warm-up seconds (plan's and job's)")
    ap.add_argument(
        "--min-ratio", type=int, default=MIN_RATIO, help="runs with N < this × K are flagged"
    )
    ap.add_argument(
        "--identical-jobs",
        type=int,
        default=0,
        help="then run the same job this many times back to back: the spread between them",
    )
    ap.add_argument(
        "--family",
        action="store_true",
        help="the issue's (#48) family on the sim: lengths fixed, lognormal or bimodal,\n"
        "steady or wandering, pilots of 60 to 300, a sim per run (see `family`)",
    )
    args = ap.parse_args()
    if args.family:
        return summary(args, family(args), [], "genbench sim per run, the #48 family")
    seeds = [args.seed + i for i in range(args.runs)]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    auto = args.pilot == "auto"
    k0 = args.pilot_max if auto else int(args.pilot)
    n = args.samples or k0 * args.ratio
    if n < args.min_ratio * k0:
        print(
            f"warning: N = {n} < {args.min_ratio} × {'--pilot-max' if auto else 'K'} = "
            f"{args.min_ratio * k0}; runs with N < {args.min_ratio} K are flagged",
            file=sys.stderr,
        )
    pilot_args = (
        ["--target-error", f"{args.target_error:g}", "--pilot-max-time", f"{args.pilot_max_time:g}"]
        + (["--pilot-min-time", f"{args.pilot_min_time:g}"] if args.pilot_min_time else [])
        if auto
        else ["--pilot", str(k0)]
    )
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
    results = []
    identical: list[float] = []
    try:
        if not model:
            with urllib.request.urlopen(url + "/models", timeout=10) as r:
                model = json.loads(r.read())["data"][0]["id"]
        lengths = {} if sim else lengths_for(n, seeds, args.median, args.sigma, args.cap)
        target = Target(url, model, forced=not sim, lengths=lengths)
        print(
            f"target: {desc}; N = {n}, "
            + (
                f"pilot until ±{args.target_error:g}% (≤ {args.pilot_max_time:g} s"
                + (f", ≥ {args.pilot_min_time:g} s" if args.pilot_min_time else "")
                + f"; N sized for K ≤ {args.pilot_max})"
                if auto
                else f"pilot K = {k0}"
            )
            + f", C = {args.concurrency}"
        )
        print(HEADER)
        for seed in seeds:
            work = Path(
                tempfile.mkdtemp(prefix=f"forecast-{seed}-", dir=args.keep or None)
            ).resolve()
            try:
                r = one_run(
                    target,
                    root,
                    n,
                    args.concurrency,
                    seed,
                    sim,
                    work,
                    args.warmup,
                    pilot_args,
                    args.pilot_max if auto else None,
                    args.min_ratio,
                )
            except BaseException:
                print(f"run {seed} failed; its files are in {work}", file=sys.stderr)
                raise
            if args.keep:
                r["files"] = str(work)
            else:
                shutil.rmtree(work, ignore_errors=True)
            results.append(r)
            print(row(r), flush=True)
        if args.identical_jobs:
            work = Path(tempfile.mkdtemp(prefix="identical-", dir=args.keep or None)).resolve()
            identical = identical_jobs(
                target, n, args.concurrency, seeds[-1], work, args.warmup, args.identical_jobs
            )
    finally:
        for f in stop:
            f()
    return summary(args, results, identical, desc)


def summary(
    args: argparse.Namespace, results: list[dict[str, Any]], identical: list[float], desc: str
) -> None:
    """The runs' summary (median signed error, share in the bar) and the details JSON."""
    n = args.samples or sorted({r["n"] for r in results})
    starved = [r for r in results if r["host_starved"]]
    results_all, results = results, [r for r in results if not r["host_starved"]]
    if starved:
        print(f"\n{len(starved)} run(s) left out: the host starved the sim (see the last column)")
    if not results:
        results = results_all
    errs = np.array([r["ours_err"] for r in results])
    inside = sum(r["in_bar"] for r in results)
    short = sum(not r["ratio_ok"] for r in results)
    print(
        f"\nours: median error {np.median(errs):+.1%}, mean |error| {np.mean(np.abs(errs)):.1%}, "
        f"in bar {inside}"
        f"/{len(results)}; field mean error {np.mean([r['field_err'] for r in results]):+.1%}; "
        f"naive pilot mean |error| {np.mean([abs(r['naive_err']) for r in results]):.1%}"
        + (f"; {short} run(s) with N < {args.min_ratio} K" if short else "")
    )
    spread = None
    if identical:
        spread = max(identical) / min(identical) - 1
        print(
            f"identical jobs back to back: {', '.join(f'{w:.1f}' for w in identical)} s; "
            f"spread (slowest / fastest − 1) {spread:.1%}; ours median |error| "
            f"{np.median(np.abs(errs)):.1%}"
        )
    out = args.out or Path(tempfile.gettempdir()) / f"forecast-accuracy-{int(time.time())}.json"
    out.write_text(
        json.dumps(
            {
                "target": desc,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
                | {"out": str(out), "samples": n},
                "runs": results_all,
                "identical_jobs_s": identical,
                "identical_spread": spread,
            },
            indent=2,
        )
    )
    print(f"details: {out}")


if __name__ == "__main__":
    sys.exit(main())
