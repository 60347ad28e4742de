"""Does a pilot of the size a plan advises reach the plan's target? A small pilot's advice,
followed, on the sim.

For each output-length shape and sim seed: `genbench plan --pilot 64 --speed-drift 0` on a
fresh sim (`--tps 150 --output-len SHAPE --seed S`), the pilot size it advises for ±5%
(`pilot_size_for_target.requests`), then `genbench plan --pilot THAT` on the same sim, as a
user who follows the advice does (the first 64 rows of its pilot are the small pilot's), and
the bar that pilot reaches. A target met means the bar is at most ±5%; the advice is too
timid where the bar is wider, and wasteful where it is far narrower. The sim holds its
speed, so --speed-drift 0 leaves only the pilot's sample, the sim's speed noise and the
1% misfit floor in the bar.

Each command runs as a user runs it (`python -m genbench` with this interpreter, as a
subprocess); the sims listen on --port, --port + 1, ...; nothing is left in the repository.
`--src DIR` runs the plans on another revision (`git archive main src | tar -x -C DIR/..`),
the sims and this script on this one.

`--in-process`: the same question over hundreds of pilots a shape, no server: each pilot's
lengths drawn from the shape, the sample's part of its bar the bootstrap-t of the mean
length (`bar._studentized`, as `length_bar.py`: the sim's wall time goes as its tokens), a
1% misfit beside it, the advice `bar.pilot_reach` four ways (`WAYS`: all of the sample's
part as 1/√K; on `bar.spread_margin`'s one-sided 90% bound, as 1/√K; on its 90% or 97.5%
bound with the skew's share, `bar.skew_share`, as 1/K: the last this revision's), and a
fresh pilot of the advised size drawn and its bar made the same way (a pilot inside ±5%
already asks for none: its own bar); and how many pilots found no pilot shorter than a
100K-sample job reaching ±5%. K* is the size whose bar is ±5% for the shape's
typical pilot (the median bar of 30 pilots of 4,000, scaled as 1/√K).

    .venv/bin/python benchmarks/pilot_advice.py --seeds 1,2,3 \\
        --shapes uniform:20:60,lognormal:40:0.6,lognormal:40:0.8,lognormal:40:1.0
    .venv/bin/python benchmarks/pilot_advice.py --in-process --pilots 200
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from genbench.generate.wander import SpeedBar
from genbench.plan.bar import BarParts, _studentized, pilot_reach, skew_share, spread_margin
from genbench.sim.process import SimProcess

GENBENCH = [sys.executable, "-m", "genbench"]
TARGET = 0.05
# --in-process's ways to advise: (the spread margin's z, 0: none; the skew's share as 1/K)
WAYS = {"1/√K": (0.0, False), "margin 90%": (1.2816, False), "90%, skew": (1.2816, True),
        "97.5%, skew": (1.96, True)}  # fmt: skip


def plan(url: str, prompts: Path, k: int, out: Path, boot: int, src: str | None) -> dict:
    """`genbench plan --pilot K` as a user runs it (with `src` first on its PYTHONPATH: another
    revision's genbench); its JSON."""
    cmd = [*GENBENCH, "plan", "--prompts", str(prompts), "--url", url, "--pilot", str(k),
           "--speed-drift", "0", "--samples", "100K", "--bootstrap", str(boot),
           "--warmup-time", "1", "--out", str(out), "--json"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": src} if src else None
    p = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def bar(doc: dict) -> tuple[float, str, int | None, str]:
    """The plan's ±; its parts as shown (the sample's, and the speed's or the misfit's where
    one is ±2% or more); the pilot it advises for ±5% (None: inside, or none reaches it);
    and that advice as said."""
    ours = doc["rows"][0]["ours"]
    parts, tgt = ours["parts"], doc["pilot_size_for_target"]
    shown = [f"±{parts['sample']:.1%}"] + [
        f"{k} ±{parts[k]:.1%}" for k in ("speed", "misfit") if parts[k] >= 0.02
    ]
    if ours["rel_halfwidth"] <= TARGET:
        return ours["rel_halfwidth"], "; ".join(shown), None, "inside"
    need = tgt["requests"]
    said = f"{need:,}" if need else f"none reaches (±{tgt['floor']:.1%}, {tgt['floor_from']})"
    return ours["rel_halfwidth"], "; ".join(shown), need, said


def draw(rng: np.random.Generator, shape: str, k: int) -> np.ndarray:
    """K lengths of a sim --output-len shape (fixed:N, uniform:LO:HI, lognormal:MEDIAN:S),
    or gamma:MEAN:SHAPE."""
    kind, *p = shape.split(":")
    a, b = float(p[0]), float(p[1]) if len(p) > 1 else 0.0
    if kind == "lognormal":
        return rng.lognormal(math.log(a), b, k)
    if kind == "uniform":
        return rng.uniform(a, b, k)
    if kind == "gamma":
        return rng.gamma(b, a / b, k)
    return np.full(k, a)


def boot_bar(rng: np.random.Generator, x: np.ndarray, boot: int, misfit: float = 0.01) -> float:
    """The bar's sample part as plan makes it on the sim (the upper side of the bootstrap-t
    of the mean length, relative), and the bar with the misfit beside it."""
    k, mean = len(x), float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(k))
    reps = [_studentized(_Pool(x[rng.integers(0, k, k)]), mean, se, k) for _ in range(boot)]
    return float(np.percentile(reps, 97.5)) / mean - 1


class _Pool:
    def __init__(self, x: np.ndarray) -> None:
        self.sample_output = x


def in_process(shapes: list[str], pilots: int, k: int, boot: int, cap: int) -> None:
    rng = np.random.default_rng(48)
    misfit, speed = 0.01, SpeedBar(0.0, 0.0, 0.0, 0.0)
    print(f"load average {os.getloadavg()[0]:.2f}; {pilots} pilots of {k} a shape, {boot} "
          "replicates, misfit 1%, target ±5%")  # fmt: skip
    print("| lengths | K* | advice | K' p10 / p50 / p90 | K'/K* p50 | its bar p50 / p90 | "
          "over ±5% | over ±5.5% | none for 100K |\n|---|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        big = [boot_bar(rng, draw(rng, shape, 4000), boot) for _ in range(30)]
        room = math.sqrt(TARGET**2 - misfit**2)
        kstar = 4000 * (float(np.median(big)) / room) ** 2
        xs = [draw(rng, shape, k) for _ in range(pilots)]
        parts = [BarParts.of("above", boot_bar(rng, x, boot), 0.0, misfit, speed) for x in xs]
        for way, (z, skewed) in WAYS.items():
            asked, bars, none = [], [], 0
            for x, p in zip(xs, parts, strict=True):
                if p.total <= TARGET:  # inside already: no advice, its own bar
                    asked.append(k)
                    bars.append(p.total)
                    continue
                spread = spread_margin(x, z) if z else 1.0
                skew = skew_share(x, p.sample) if skewed else 0.0
                # a job of 100K samples: does any pilot shorter than it reach ±5%?
                none += pilot_reach(p, speed, k, 100_000, TARGET, spread=spread,
                                    skew=skew).requests is None  # fmt: skip
                need = pilot_reach(p, speed, k, 10**6, TARGET, spread=spread, skew=skew).requests
                if need is None:  # no pilot short of 10⁶ reaches it: a miss
                    asked.append(10**6)
                    bars.append(math.inf)
                    continue
                asked.append(need)
                n = min(need, cap)  # past the cap: its bar from one of the cap's, × √(cap/K')
                hw = boot_bar(rng, draw(rng, shape, n), boot) * math.sqrt(n / need)
                bars.append(math.hypot(hw, misfit))
            a, b = np.percentile(asked, [10, 50, 90]), np.asarray(bars)
            print(f"| {shape} | {kstar:,.0f} | {way} | {a[0]:,.0f} / {a[1]:,.0f} / {a[2]:,.0f} | "
                  f"{a[1] / kstar:.2f} | ±{np.median(b):.1%} / ±{np.percentile(b, 90):.1%} | "
                  f"{np.mean(b > TARGET):.0%} | {np.mean(b > 1.1 * TARGET):.0%} | {none} |",
                  flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="uniform:20:60,lognormal:40:0.6,lognormal:40:0.8,"
                    "lognormal:40:1.0")  # fmt: skip
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--pilot", type=int, default=64)
    ap.add_argument("--max-pilot", type=int, default=12_000,
                    help="advice above: not run (--in-process: its bar scaled from this size)")
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--port", type=int, default=8400)
    ap.add_argument("--src", help="another revision's src/ for the plans (git archive REV src)")
    ap.add_argument("--in-process", action="store_true", help="no server: many pilots")
    ap.add_argument("--pilots", type=int, default=200, help="--in-process: pilots a shape")
    a = ap.parse_args()
    if a.in_process:
        shapes = ["gamma:40:4", *a.shapes.split(",")]  # a light tail besides the sim's
        in_process(shapes, a.pilots, a.pilot, a.bootstrap, a.max_pilot)
        return
    shapes, seeds = a.shapes.split(","), [int(s) for s in a.seeds.split(",")]
    print(f"load average {os.getloadavg()[0]:.2f} at the start; pilot {a.pilot}, "
          f"--bootstrap {a.bootstrap}, target ±{TARGET:.0%}; genbench from "
          f"{a.src or 'this tree'}")  # fmt: skip
    print(f"| lengths | seed | K={a.pilot}: bar (sample) | advises | its bar (sample) | "
          "met | it advises | load |\n|---|---|---|---|---|---|---|---|")
    port = a.port
    with tempfile.TemporaryDirectory(prefix="pilot_advice-") as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        with open(prompts, "wb") as f:
            for i in range(a.max_pilot + a.pilot):
                f.write(orjson.dumps({"id": f"r{i}", "messages": [
                    {"role": "user", "content": f"question {i}"}]}) + b"\n")  # fmt: skip
        for shape in shapes:
            for seed in seeds:
                sim_args = ("--port", str(port), "--tps", "150", "--output-len", shape,
                            "--seed", str(seed))  # fmt: skip
                port += 1
                with SimProcess(*sim_args) as sim:
                    run = Path(tmp) / f"{shape.replace(':', '_')}-{seed}"
                    t0 = time.perf_counter()
                    hw0, s0, need, said = bar(
                        plan(sim.url, prompts, a.pilot, run / "small", a.bootstrap, a.src)
                    )
                    first = f"±{hw0:.1%} ({s0})"
                    if need is None:
                        row = [first, said, "", "", ""]
                    elif need > a.max_pilot:
                        row = [first, said, "not run", "", ""]
                    else:
                        hw1, s1, _, again = bar(
                            plan(sim.url, prompts, need, run / "big", a.bootstrap, a.src)
                        )
                        row = [first, said, f"±{hw1:.1%} ({s1})",
                               "yes" if hw1 <= TARGET else "no", again]  # fmt: skip
                load = os.getloadavg()[0]
                print(f"| {shape} | {seed} | " + " | ".join(row) + f" | {load:.1f} |",
                      flush=True)  # fmt: skip
                print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
