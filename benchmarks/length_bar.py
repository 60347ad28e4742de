"""How often the forecast bar's length part holds the job's mean output length: the
bootstrap-t interval of the pilot's mean length (plan/bar.py's `_studentized`, the code
`genbench plan` runs), over many pilots of K rows drawn from a known distribution.

The question (#48): when a forecast misses its bar because the pilot drew lengths far from
the job's, is the bar's length part too narrow for small K and heavy tails, or was that
pilot one of the 5% a 95% interval leaves out? Shapes: lognormal σ 0.75 (the benchmarks'
usual), bimodal (80% at 0.6 × the median, 20% at 3.6 ×, ±10%: forecast_accuracy.py's
`--family`), heavy (lognormal σ 1). In-process, no server; about a minute.

Run:  .venv/bin/python benchmarks/length_bar.py [--pilots 400] [--boot 200]
"""

from __future__ import annotations

import argparse
import math
import os
import time
from types import SimpleNamespace

import numpy as np

from genbench.plan.bar import _studentized

MEDIAN = 60.0


def draw(rng: np.random.Generator, shape: str, k: int) -> np.ndarray:
    if shape == "bimodal":
        long = rng.random(k) < 0.2
        return np.where(long, 3.6, 0.6) * MEDIAN * rng.normal(1, 0.1, k)
    return rng.lognormal(math.log(MEDIAN), 1.0 if shape == "heavy" else 0.75, k)


TRUE = {"lognormal": MEDIAN * math.exp(0.75**2 / 2), "bimodal": MEDIAN * 1.2,
        "heavy": MEDIAN * math.exp(0.5)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pilots", type=int, default=400)
    ap.add_argument("--boot", type=int, default=200)
    a = ap.parse_args()
    rng = np.random.default_rng(48)
    t = time.perf_counter()
    print(f"load average {os.getloadavg()[0]:.2f}; {a.pilots} pilots a cell, {a.boot} replicates")
    print("| lengths | K | holds the mean | half-width p50 |\n|---|---|---|---|")
    for shape in TRUE:
        for k in (60, 120, 300):
            held, widths = 0, []
            for _ in range(a.pilots):
                x = draw(rng, shape, k)
                mean, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(k))
                reps = [
                    _studentized(
                        SimpleNamespace(sample_output=x[rng.integers(0, k, k)]), mean, se, k
                    )
                    for _ in range(a.boot)
                ]
                lo, hi = np.percentile(reps, [2.5, 97.5])
                held += bool(lo <= TRUE[shape] <= hi)
                widths.append(max(hi / mean - 1, 1 - lo / mean))
            print(
                f"| {shape} | {k} | {held / a.pilots:.1%} | ±{np.median(widths):.1%} |", flush=True
            )
    print(f"({time.perf_counter() - t:.0f} s)")


if __name__ == "__main__":
    main()
