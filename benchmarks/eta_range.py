"""The live ETA's range, replayed over whole jobs: does [elapsed + low, elapsed + high] hold
the job's final duration, how wide is it, and does "outside the plan" fire on jobs that
ended inside their plan's bar?

Each job is a sequence of requests (when sent, when ended, on which server), simulated
here or read from a generate output directory's request log (--logs). The replay feeds
them, in the order they ended, to generate's own `Progress` on a clock it moves itself,
and at each progress point from 10% done on reads the snapshot the panel and /metrics
read (`eta_s`, `eta_lo_s`, `eta_hi_s`) and the plan's verdict (`JobForecast.course`,
through `JobConsole`'s path) for a plan whose bar holds the job (a plan off by up to
±7%, its bar ±10%) and, apart, for one that does not (off by 40%).

Simulated jobs (a family of 24, seeded): servers of C streams decode rows whose output
lengths are lognormal (continuous batching: completions spread out) or all one length
(every stream ends together: waves of C, as the sim's default lengths and a real
server's batches); some at a speed that drifts (−25% to +30% over the job) or wanders
(an AR(1) factor), some with a server down for a while (its in-flight rows sent again
when it is back); from a minute to three hours.

Run:  .venv/bin/python benchmarks/eta_range.py [--jobs 24] [--short 32] [--swing 24]
          [--no-ages] [--no-plan-drift] [--no-seen] [--sim DIR] [--logs OUT_DIR ...]
          [--lines STDERR_FILE ...]
(--swing: short jobs on a server whose speed swings ±60% as a sine, as `sim --drift
60:PERIOD`; --no-seen: the plan's verdict on the ETA's range alone, not on the speeds the
job has shown, generate.eta.seen, as it was before.)
(--no-ages: the replay passes no requests in flight, the ETA as it was before #48's tail
model, generate/tail.py. --no-plan-drift: the plans' bars without plan's default
allowance for speed the pilot could not see, as plans were before it.)
(--sim DIR records three generate jobs on the sim there, once, about a minute each:
waves of 32, lognormal lengths, a sim killed for 10 s; --logs replays other generate
output directories; --lines reads what a job's own progress lines said, with the
estimator it ran.)
Bars (issue #37): coverage >= 90% of progress points from 10% done, median width <= 30%
of the final duration, 90th percentile <= 60%, false "outside" <= 5% on jobs inside
their bar.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from genbench.generate.eta import Eta
from genbench.generate.prior import PlanPrior
from genbench.generate.progress import Progress, ServerState
from genbench.generate.wander import unseen_drift
from genbench.plan.document import JobForecast
from genbench.records import RequestRecord, read_records


@dataclass
class Job:
    name: str
    ends: list[tuple[float, float, str]]  # (t_end, t_send, server), every row once
    servers: list[str]
    down: list[tuple[str, float, float]] = field(default_factory=list)  # (server, from, to)
    c: int = 0  # each server's concurrency (0: not known, a request log's)

    @property
    def final_s(self) -> float:
        return max(e for e, _, _ in self.ends)


def speed_at(kind: str, t: float, horizon: float, rnd: random.Random, state: dict) -> float:
    """The seconds-per-token factor at t (1: as planned; 1.3: 30% slower)."""
    if kind == "slower":
        return 1 + 0.3 * min(t / horizon, 1)
    if kind == "faster":
        return 1 - 0.25 * min(t / horizon, 1)
    if kind == "wander":  # AR(1) in steps of 2% of the job, stationary sd 12%
        step = int(t / (0.02 * horizon))
        while state.setdefault("k", 0) < step:
            state["x"] = 0.8 * state.get("x", 0.0) + rnd.gauss(0, 0.12 * math.sqrt(1 - 0.64))
            state["k"] += 1
        return math.exp(state.get("x", 0.0))
    if kind.startswith("swing"):  # as `sim --drift 60:PERIOD`: speed × 1 + 0.6 sin(2πt/P + φ)
        period = float(kind.split(":")[1]) * horizon
        phase = state.setdefault("phase", rnd.uniform(0, 2 * math.pi))
        return 1 / (1 + SWING * math.sin(2 * math.pi * t / period + phase))
    return 1.0


def simulate(name: str, seed: int, rows: int, c: int, n_servers: int, per_token: float,
             lengths: str, speed: str, down: tuple[float, float] | None) -> Job:  # fmt: skip
    """C workers per server; a worker sends the next row when its last ends. Waves: every
    row one length, so a server's C streams end together. `down` (fractions of the
    planned duration): server 0 stops; its in-flight rows are sent again when back."""
    rnd = random.Random(seed)
    servers = [f"s{i}" for i in range(n_servers)]
    mean_len = 200.0
    planned = rows / (n_servers * c) * mean_len * per_token
    state: dict = {}

    def length() -> float:
        if lengths == "waves":
            return mean_len
        if lengths == "bimodal":  # short answers and long ones: 80% of 100, 20% of 600
            return rnd.gauss(100, 10) if rnd.random() < 0.8 else rnd.gauss(600, 60)
        if lengths == "heavy":  # lognormal, sigma 1: a few rows ten times the median
            return rnd.lognormvariate(math.log(mean_len) - 0.5, 1.0)
        return rnd.lognormvariate(math.log(mean_len) - 0.18, 0.6)

    todo = rows
    heap: list[tuple[float, float, str, int]] = []  # (t_end, t_send, server, worker)
    for s in servers:
        for w in range(c):
            if todo:
                todo -= 1
                d = length() * per_token * speed_at(speed, 0.0, planned, rnd, state)
                heapq.heappush(heap, (d + rnd.uniform(0, 0.002), 0.0, s, w))
    ends = []
    d_from, d_to = (down[0] * planned, down[1] * planned) if down else (math.inf, math.inf)
    while heap:
        t_end, t_send, s, w = heapq.heappop(heap)
        if s == servers[0] and t_send < d_to and t_end > d_from:  # lost: sent again when up
            start = d_to
        else:
            ends.append((t_end, t_send, s))
            if not todo:
                continue
            todo -= 1
            start = t_end + rnd.uniform(0, 0.01)
            if s == servers[0] and d_from <= start < d_to:
                start = d_to
        d = length() * per_token * speed_at(speed, start, planned, rnd, state)
        heapq.heappush(heap, (start + d + rnd.uniform(0, 0.002), start, s, w))
    gone = [(servers[0], d_from, d_to)] if down else []
    return Job(name, ends, servers, gone, c)


def family(count: int) -> list[Job]:
    """`count` jobs cycling through the shapes; lengths from a minute to hours."""
    shapes = [  # (lengths, speed, servers, down)
        ("lognormal", "steady", 1, None), ("waves", "steady", 1, None),
        ("lognormal", "slower", 1, None), ("waves", "faster", 1, None),
        ("lognormal", "wander", 2, None), ("waves", "wander", 1, None),
        ("lognormal", "steady", 4, (0.4, 0.6)), ("waves", "steady", 1, (0.5, 0.6)),
        ("lognormal", "steady", 1, (0.3, 0.35)), ("waves", "slower", 2, None),
        ("lognormal", "faster", 2, (0.6, 0.7)), ("lognormal", "steady", 2, None),
    ]  # fmt: skip
    jobs = []
    for i in range(count):
        lengths, speed, servers, down = shapes[i % len(shapes)]
        rnd = random.Random(1000 + i)
        rows = rnd.choice([600, 2000, 6000])
        c = max(c for c in (4, 8, 16, 32, 64) if rows / (servers * c) >= 15 or c == 4)
        target = rnd.choice([60.0, 180.0, 900.0, 3600.0, 10800.0])  # seconds, as planned
        per_token = target / (rows / (servers * c) * 200.0)
        name = f"{i:02d} {lengths} {speed} x{servers}" + (f" down {down}" if down else "")
        jobs.append(simulate(name, i, rows, c, servers, per_token, lengths, speed, down))
    return jobs


def short(count: int) -> list[Job]:
    """`count` short jobs like the issue's (#48): a few hundred rows at C = 32 on one
    server, fixed, lognormal, bimodal or heavy-tailed lengths, half of them on a server
    whose speed wanders; requests of a few seconds, jobs of half a minute to two."""
    kinds = ["waves", "lognormal", "bimodal", "heavy"]
    jobs = []
    for i in range(count):
        lengths, speed = kinds[i % 4], ("steady", "wander")[(i // 4) % 2]
        rnd = random.Random(5000 + i)
        rows = rnd.choice([200, 300, 500, 800])
        per_token = rnd.uniform(0.01, 0.03)
        name = f"short {i:02d} {lengths} {speed} {rows}"
        jobs.append(simulate(name, 5000 + i, rows, 32, 1, per_token, lengths, speed, None))
    return jobs


SWING = 0.6  # the swinging server's amplitude (--swing: the sim's --drift 60:PERIOD)


def swing(count: int) -> list[Job]:
    """`count` short jobs on a server whose speed swings ±60% as a sine, its period from a
    quarter of the planned job to the whole of it (a new-user trial's `sim --drift 60:100`
    under a 3,000-row job of 3 min at C = 32 was said "outside the plan" mid-job and
    ended inside): lognormal or heavy-tailed lengths, 300 to 3,000 rows, one server."""
    jobs = []
    for i in range(count):
        rnd = random.Random(7000 + i)
        lengths = ("lognormal", "heavy", "waves")[i % 3]
        rows = rnd.choice([300, 800, 3000])
        period = rnd.choice([0.25, 0.5, 1.0])
        per_token = rnd.uniform(0.01, 0.03)
        name = f"swing {i:02d} {lengths} P={period} {rows}"
        jobs.append(simulate(name, 7000 + i, rows, 32, 1, per_token, lengths,
                             f"swing:{period}", None))  # fmt: skip
    return jobs


SIM = ("--tps", "150", "--per-seq-ms", "0.4", "--ttft-ms", "20")
SIM_JOBS = (  # name, rows, --output-len, seconds into the job the sim is killed (10 s down)
    ("waves", 800, "fixed:128", None),
    ("lognormal", 2000, "lognormal:40:0.6", None),
    ("down", 1200, "lognormal:40:0.6", 20.0),
)


def start_sim(port: int, length: str) -> subprocess.Popen:
    """`genbench sim` on 127.0.0.1:port, once it answers."""
    sim = subprocess.Popen([sys.executable, "-m", "genbench", "sim", "--port", str(port),
                            *SIM, "--output-len", length], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
            return sim
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def record(work: Path) -> list[Path]:
    """SIM_JOBS run by `genbench generate` (C = 32, a progress line a second on stderr,
    kept in work/NAME.err) against the sim, each once (kept in work/NAME: a rerun reads
    them again); the one with a kill time loses its server for 10 s."""
    outs = []
    for name, rows, length, kill in SIM_JOBS:
        out = work / name
        outs.append(out)
        if (out / ".genbench" / "requests.jsonl").exists():
            continue
        work.mkdir(parents=True, exist_ok=True)
        prompts = work / f"prompts-{rows}.jsonl"
        prompts.write_text("".join(json.dumps({"id": f"q{i}", "messages": [
            {"role": "user", "content": f"Write item {i}."}]}) + "\n" for i in range(rows)))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        sim = start_sim(port, length)
        with open(work / f"{name}.err", "w") as err:
            gen = subprocess.Popen([sys.executable, "-m", "genbench", "generate", "--input",
                                    str(prompts), "--out", str(out), "--url",
                                    f"http://127.0.0.1:{port}/v1", "--concurrency", "32",
                                    "--progress-every", "1"], stdout=subprocess.DEVNULL,
                                   stderr=err)  # fmt: skip
            if kill is not None:
                time.sleep(kill)
                sim.kill()
                sim.wait()
                time.sleep(10)
                sim = start_sim(port, length)
            gen.wait()
        sim.kill()
        sim.wait()
        print(f"recorded {name}: generate exit {gen.returncode}", flush=True)
    return outs


def lines(err: Path) -> Points:
    """What a job's own progress lines said (generate's stderr off a terminal): each
    line's range against the job's final duration, its last line's elapsed time."""
    snaps = [json.loads(x) for x in err.read_text().splitlines() if x.startswith('{"event"')]
    final = snaps[-1]["elapsed_s"]
    out = Points()
    for s in snaps:
        if s["done"] < 0.1 * s["total"] or s["remaining"] == 0:
            continue
        lo, hi, el = s["eta_lo_s"], s["eta_hi_s"], s["elapsed_s"]
        ok = lo is not None and hi is not None
        out.covered.append(ok and el + lo <= final <= el + hi)
        out.width.append((hi - lo) / final if ok else math.inf)
    return out


def from_log(out: Path) -> Job:
    """A generate job's request log: the records that ended a row."""
    recs = read_records(out / ".genbench" / "requests.jsonl")
    ended = [r for r in recs if (r.extra or {}).get("outcome") in ("done", "failed")]
    t0 = min(r.t_send for r in recs if r.t_send)
    ends = [((r.t_end or r.t_send) - t0, r.t_send - t0, r.server) for r in ended]
    return Job(f"log {out.name}", ends, sorted({r.server for r in recs}))


@dataclass
class Points:
    covered: list[bool] = field(default_factory=list)
    width: list[float] = field(default_factory=list)  # (high - low) / final
    outside: list[bool] = field(default_factory=list)  # the verdict, plan inside its bar
    caught: list[bool] = field(default_factory=list)  # the verdict, plan off by 40%
    late: list[bool] = field(default_factory=list)  # the job ended after the range's high end
    share: list[float] = field(default_factory=list)  # done / rows at the point
    prior: Points | None = None  # the same points, the ETA shown with the good plan (--plan)
    prior_bad: Points | None = None  # ... and with the plan off by 40% (its bar missing)


T0 = 1000.0  # the replay's clock at the job's start
AGES = True  # --no-ages: the replay passes no requests in flight (the estimator before #48's tail)
PLAN_DRIFT = True  # --no-plan-drift: the plans carry no allowance for unseen speed (before)
SEEN = True  # --no-seen: the verdict on the ETA's range alone (before the speeds seen)
PILOT_SHARE = 0.1  # the plans' pilots: a tenth of the job's time


def replay(job: Job, seed: int) -> Points:
    """The job through Progress at 200 progress points, from the first row ending. The
    requests in flight at each point (sent, not ended) reach it as the job's Load hands
    them on (`Progress.sending`: their send times)."""
    now = [0.0]
    rows = len(job.ends)
    # the job's clock starts at T0, not 0: a record sent at 0 reads as never sent (no duration)
    prog = Progress(rows, 0, 0, job.servers, clock=lambda: T0 + now[0])
    by_send = sorted(job.ends, key=lambda e: e[1])
    if AGES:
        prog.sending = lambda: [T0 + b for e, b, _ in by_send if b <= now[0] < e]
    final = job.final_s
    rnd = random.Random(seed)
    off = rnd.uniform(-0.07, 0.07)
    good = plan_of(rows, final * (1 + off), final)
    bad = plan_of(rows, final * 1.4, final)
    ends = sorted(job.ends)
    step = final / 200
    out = Points(prior=Points(), prior_bad=Points())
    i = done = 0
    for k in range(1, 201):
        now[0] = k * step
        while i < len(ends) and ends[i][0] <= now[0]:
            t_end, t_send, s = ends[i]
            rec = RequestRecord(f"r{i}", server=s, t_send=T0 + t_send, t_end=T0 + t_end,
                                completion_tokens=100, extra={"outcome": "done"})  # fmt: skip
            prog.on_record(rec)
            prog.on_durable("row", [(f"r{i}", None)])
            i += 1
            done += 1
        states = []
        for s in job.servers:
            d = [now[0] - a for srv, a, b in job.down if srv == s and a <= now[0] < b]
            busy = sum(1 for e, b, srv in ends[i:] if srv == s and b <= now[0])
            states.append(ServerState(s, "down" if d else "up", d[0] if d else None,
                                      in_flight=busy, concurrency=job.c))  # fmt: skip
        snap = prog.snapshot(states)
        if done < 0.1 * rows or done >= rows or snap.eta_note is not None:
            continue  # no server up: no ETA to score (nothing can run; the panel says so)
        e, lo, hi = snap.eta_s, snap.eta_lo_s, snap.eta_hi_s
        el = now[0]
        score(out, el, final, done / rows, lo, hi)
        seen = (snap.eta_slow_s, snap.eta_fast_s) if SEEN else (None, None)
        out.outside.append(good.course(el, e, lo, hi, *seen)["verdict"] == "outside")
        out.caught.append(bad.course(el, e, lo, hi, *seen)["verdict"] == "outside")
        # the ETA `generate --plan` shows with the good plan: the plan as its prior
        assert good.lo_s is not None and good.hi_s is not None
        shown = PlanPrior(*good.prior()).blend(None if e is None else Eta(e, lo, hi), el)
        score(out.prior, el, final, done / rows, shown.lo_s, shown.hi_s)
        assert bad.lo_s is not None and bad.hi_s is not None
        shown = PlanPrior(*bad.prior()).blend(None if e is None else Eta(e, lo, hi), el)
        score(out.prior_bad, el, final, done / rows, shown.lo_s, shown.hi_s)
    return out


def plan_of(rows: int, seconds: float, final: float) -> JobForecast:
    """A pilot's plan as `genbench plan` writes it by default: ±10% from its sample and
    model, and in quadrature on each side the allowance for speed the pilot could not see
    (`unseen_drift`, the pilot a tenth of the job; PLAN_DRIFT False: none, the plans of
    before it). generate --plan blends its bar without the allowance (`JobForecast.prior`)
    and holds the job against the whole bar (`course`)."""
    d = unseen_drift(final, PILOT_SHARE * final) if PLAN_DRIFT else 0.0
    up, down = seconds / (1 - d) - seconds, seconds - seconds / (1 + d)
    return JobForecast("p", "pilot", rows, 1, seconds, seconds - math.hypot(0.1 * seconds, down),
                       seconds + math.hypot(0.1 * seconds, up), "b", None, drift=d)  # fmt: skip


def score(p: Points | None, el: float, final: float, share: float, lo: float | None,
          hi: float | None) -> None:  # fmt: skip
    """One progress point: does [el + lo, el + hi] hold the final duration, how wide."""
    assert p is not None
    p.share.append(share)
    if lo is None or hi is None:
        p.covered.append(False)
        p.late.append(False)
        p.width.append(math.inf)
    else:
        p.covered.append(el + lo <= final <= el + hi)
        p.late.append(final > el + hi)
        p.width.append((hi - lo) / final)


def tenths(p: Points) -> None:
    """Coverage and width by tenth of the job done, from 10% (the issue's table, #48)."""
    print(f"{'done':>9} {'points':>7} {'holds':>7} {'width p50':>9} {'p90':>7} {'late':>6}")
    for k in range(1, 10):
        idx = [j for j, f in enumerate(p.share) if k / 10 <= f < (k + 1) / 10]
        cov = [p.covered[j] for j in idx]
        wid = [p.width[j] for j in idx]
        late = [p.late[j] for j in idx if j < len(p.late)]
        print(f"{k * 10:>3}-{k * 10 + 10:>3}% {len(idx):7} {pct(cov):>7} "
              f"{quantile(wid, 0.5):9.2f} {quantile(wid, 0.9):7.2f} {pct(late):>6}")


def pct(xs: list[bool]) -> str:
    return f"{100 * sum(xs) / len(xs):5.1f}%" if xs else "   - "


def quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--short", type=int, default=0,
                    help="add this many short jobs like the issue's (#48); --jobs 0: only them")
    ap.add_argument("--swing", type=int, default=0,
                    help="add this many short jobs on a server whose speed swings ±60%%")
    ap.add_argument("--logs", type=Path, nargs="*", default=[],
                    help="generate output directories: their request logs replayed")
    ap.add_argument("--sim", type=Path, default=None,
                    help="record three generate jobs on the sim here (once), and replay them")
    ap.add_argument("--lines", type=Path, nargs="*", default=[],
                    help="generate's stderr: its JSON progress lines, as printed")  # fmt: skip
    ap.add_argument("--no-ages", action="store_true",
                    help="pass no requests in flight: the ETA without the tail model")
    ap.add_argument("--no-seen", action="store_true",
                    help="the plan's verdict on the ETA's range alone, not the speeds seen")
    ap.add_argument("--no-plan-drift", action="store_true",
                    help="plans without their default allowance for speed the pilot can't see")
    a = ap.parse_args()
    global AGES, PLAN_DRIFT, SEEN
    AGES = not a.no_ages
    SEEN = not a.no_seen
    PLAN_DRIFT = not a.no_plan_drift
    t = time.perf_counter()
    logs = list(a.logs)
    if a.sim is not None:
        logs += record(a.sim)
        a.lines = list(a.lines) + [a.sim / f"{name}.err" for name, *_ in SIM_JOBS]
    jobs = family(a.jobs) + short(a.short) + swing(a.swing) + [from_log(p) for p in logs]
    print(f"load average {os.getloadavg()[0]:.2f}; {len(jobs)} jobs")
    print(f"{'job':44} {'final':>9} {'covered':>8} {'width p50':>9} {'p90':>7} "
          f"{'false out':>9} {'caught':>7}")  # fmt: skip
    every, with_plan, wrong_plan = Points(), Points(), Points()
    alarmed = 0
    for n, job in enumerate(jobs):
        p = replay(job, n)
        every.covered += p.covered
        every.width += p.width
        every.outside += p.outside
        every.caught += p.caught
        every.share += p.share
        assert p.prior is not None and with_plan.prior is None
        with_plan.covered += p.prior.covered
        with_plan.width += p.prior.width
        with_plan.share += p.prior.share
        with_plan.late += p.prior.late
        assert p.prior_bad is not None
        for a_, b_ in ((wrong_plan, p.prior_bad),):
            a_.covered += b_.covered
            a_.width += b_.width
            a_.share += b_.share
            a_.late += b_.late
        every.late += p.late
        alarmed += any(p.outside)
        print(f"{job.name:44} {job.final_s:8.0f}s {pct(p.covered):>8} "
              f"{quantile(p.width, 0.5):9.2f} {quantile(p.width, 0.9):7.2f} "
              f"{pct(p.outside):>9} {pct(p.caught):>7}", flush=True)  # fmt: skip
    print(f"{'all':44} {'':9} {pct(every.covered):>8} {quantile(every.width, 0.5):9.3f} "
          f"{quantile(every.width, 0.9):7.3f} {pct(every.outside):>9} {pct(every.caught):>7}")
    print(f"({len(every.covered)} progress points; {time.perf_counter() - t:.1f} s)")
    print(f"jobs with any false 'outside': {alarmed} of {len(jobs)}; width p50 (p90) by share "
          "done: " + ", ".join(
              f"{a:.0%}-{b:.0%} {quantile(w, 0.5):.2f} ({quantile(w, 0.9):.2f})"
              for a, b in ((0.1, 0.4), (0.4, 0.7), (0.7, 1.0))
              for w in [[x for x, f in zip(every.width, every.share, strict=True)
                         if a <= f < b]]))  # fmt: skip
    tenths(every)
    print(f"{'all, with the plan as prior (--plan)':44} {'':9} {pct(with_plan.covered):>8} "
          f"{quantile(with_plan.width, 0.5):9.3f} {quantile(with_plan.width, 0.9):7.3f}")
    print("with the plan as prior (generate --plan's ETA):")
    tenths(with_plan)
    print(f"{'all, with a plan 40% off as prior':44} {'':9} {pct(wrong_plan.covered):>8} "
          f"{quantile(wrong_plan.width, 0.5):9.2f} {quantile(wrong_plan.width, 0.9):7.2f}")
    tenths(wrong_plan)
    for err in a.lines:
        p = lines(err)
        print(f"{'lines ' + err.name:44} {'':9} {pct(p.covered):>8} "
              f"{quantile(p.width, 0.5):9.2f} {quantile(p.width, 0.9):7.2f}  "
              f"({len(p.covered)} progress lines, as the job printed them)")  # fmt: skip


if __name__ == "__main__":
    main()
