"""compare under drift: does `compare` of two sides × N repeats tell a drift from a difference?

Three sims started together with the same `--drift` (default ±5% over 20 s) and the same
seed, so their speeds wander together, as servers on one host do. Each trial runs
`genbench run --url A --versus B --repeat N` (A B A B ..., one short sustained phase per
repeat) and takes compare's verdict on sustained tok/s. The scenarios alternate trial by
trial, so changes in the host's load hit both alike:

* same:  B has A's settings                        -> compare must say ≈
* apart: B is 10% faster (--tps and --per-seq-ms)  -> compare must name B

Each trial also judges the first repeat of each side alone, as compare does with one
run per side: with the default allowance, and with the runs' own error alone
(`--allowance 0`, the rule before repeats).

    .venv/bin/python benchmarks/compare_drift.py [--trials 20] [--repeats 5] [--drift 5:20]
        [--independent]    # B's drift in another phase (--seed 1): drifts that do not cancel

A trial in which the sims fell behind their schedule (`sim:decode_resync_seconds_total`:
the host starved them) measured the host, not the drift: it is run again, up to
`--redo-starved` times (2), and the redone ones are listed apart. Writes
benchmarks/results/compare_drift-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from genbench.compare.rule import compare  # noqa: E402
from genbench.compare.runs import load_sides  # noqa: E402
from genbench.sim.process import SimProcess, start_all  # noqa: E402

KEY = "sustained.c{c}.steady_tps"


def sim_args(tps: float, per_seq_ms: float, a: argparse.Namespace, seed: int) -> list[str]:
    return [
        "--tps", str(tps), "--per-seq-ms", str(per_seq_ms), "--ttft-ms", "5",
        "--drift", a.drift, "--seed", str(seed),
    ]  # fmt: skip


def run_args(a: argparse.Namespace) -> list[str]:
    return [
        "--skip", "warmup,single", "--shape", "sustained", "--concurrency", str(a.concurrency),
        "--sweep-tokens", str(a.tokens), "--requests-per-slot", str(a.per_slot),
    ]  # fmt: skip


def verdict(sides: list[str], key: str, allowance: float | None = None) -> dict:
    kw = {} if allowance is None else {"allowance": allowance}
    doc = compare(load_sides(sides), **kw).to_dict()
    row = next(r for r in doc["rows"] if r["key"] == key)
    return {
        "verdict": row["verdicts"][1],
        "ratio": row["ratios"][1],
        "interval": row["intervals"][1],
        "spread": row["spread"],
        "repeats": row["repeats"],
        "repeats_needed": row["repeats_needed"][1],
    }


def resyncs(sims: list[SimProcess]) -> float:
    """Seconds the sims' decode schedules lost to a starved host (docs/sim.md)."""
    total = 0.0
    for sim in sims:
        with urllib.request.urlopen(sim.root + "/metrics", timeout=10) as resp:
            m = re.search(r"^sim:decode_resync_seconds_total (\S+)", resp.read().decode(), re.M)
        total += float(m[1]) if m else 0.0
    return total


def client_bound(side: Path) -> int:
    """Phases whose client self-check found the client starved (docs/results.md)."""
    n = 0
    for res in side.glob("repeat-*/result.json"):
        doc = json.loads(res.read_text())
        n += sum(bool((p.get("client") or {}).get("client_bound")) for p in doc["phases"])
    return n


def trial(a: argparse.Namespace, sim_a: SimProcess, sim_b: SimProcess, work: Path) -> dict:
    url_a, url_b = sim_a.url, sim_b.url
    out = work / "ab"
    lost = resyncs([sim_a, sim_b])
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "genbench", "run", "--url", url_a, "--versus", url_b,
         "--repeat", str(a.repeats), *run_args(a), "--out", str(out)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    if p.returncode != 0:
        raise SystemExit(f"genbench run failed:\n{p.stderr[-3000:]}")
    wall = time.monotonic() - t0
    key = KEY.format(c=a.concurrency)
    res = verdict([str(out / "a"), str(out / "b")], key)
    firsts = [str(out / "a" / "repeat-1"), str(out / "b" / "repeat-1")]
    res["single"] = verdict(firsts, key)["verdict"]
    res["single_within_only"] = verdict(firsts, key, allowance=0.0)["verdict"]
    res["wall_s"] = round(wall, 1)
    res["load"] = os.getloadavg()[0]
    # a trial on a starved host tests the host, not the drift: the sims fell behind their
    # schedule (more than a step can catch up); the client's self-check says how often its
    # event loop lagged 10 ms or more (p99) in a phase
    res["sim_lost_s"] = round(resyncs([sim_a, sim_b]) - lost, 3)
    res["client_bound_phases"] = client_bound(out / "a") + client_bound(out / "b")
    res["starved"] = res["sim_lost_s"] > 0
    return res


def report(r: dict, a: argparse.Namespace) -> None:
    lo, hi = r["interval"] or (float("nan"),) * 2
    print(
        f"{r['trial']:2d} {r['scenario']:5s} {r['verdict']:7s} ratio {r['ratio']:.3f} "
        f"[{lo:.3f}, {hi:.3f}] spread {r['spread'][0]:.1%}/{r['spread'][1]:.1%} "
        f"need {r['repeats_needed']}  one run: {r['single']}, within-run only: "
        f"{r['single_within_only']}  {r['wall_s']} s, load {r['load']:.1f}"
        + (f"  STARVED (sims {r['sim_lost_s']} s behind)" if r["starved"] else "")
        + f"  client-bound phases {r['client_bound_phases']}/{2 * a.repeats}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="per scenario")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--drift", default="5:20", help="the sims' --drift PCT:PERIOD")
    ap.add_argument("--tps", type=float, default=200.0)
    ap.add_argument("--faster", type=float, default=1.10, help="B's speed in 'apart'")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--per-slot", type=int, default=4)
    ap.add_argument("--independent", action="store_true", help="B's drift in another phase")
    ap.add_argument(
        "--redo-starved", type=int, default=2, metavar="K",
        help="run a trial again (up to K times) when the sims fell behind their schedule",
    )  # fmt: skip
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the sims on the way out
    seed_b = 1 if a.independent else 0
    per_seq = 0.05
    sims = {
        "a": SimProcess(*sim_args(a.tps, per_seq, a, 0)),
        "same": SimProcess(*sim_args(a.tps, per_seq, a, seed_b)),
        "apart": SimProcess(*sim_args(a.tps * a.faster, per_seq / a.faster, a, seed_b)),
    }
    start_all(list(sims.values()))
    results: list[dict] = []
    discarded: list[dict] = []
    want = {"same": "same", "apart": "better"}
    try:
        for i in range(a.trials):
            for scenario in ("same", "apart"):
                for attempt in range(a.redo_starved + 1):
                    with tempfile.TemporaryDirectory() as tmp:
                        r = trial(a, sims["a"], sims[scenario], Path(tmp))
                    r.update(trial=i + 1, scenario=scenario, ok=r["verdict"] == want[scenario])
                    report(r, a)
                    if not r["starved"] or attempt == a.redo_starved:
                        results.append(r)
                        break
                    discarded.append(r)  # the host's trial, not the drift's: run it again
    finally:
        for s in sims.values():
            s.close()
    print()
    print("| scenario | trials | right (repeats) | one run, allowance | one run, within-run only "
          "| median ratio | median 95% interval width | starved, counted (right) "
          "| starved, redone (right) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for scenario, good in want.items():
        rs = [r for r in results if r["scenario"] == scenario]
        ok = sum(r["ok"] for r in rs)
        single = sum(r["single"] == good for r in rs)
        within = sum(r["single_within_only"] == good for r in rs)
        ratios = sorted(r["ratio"] for r in rs)
        widths = sorted(r["interval"][1] / r["interval"][0] - 1 for r in rs if r["interval"])
        med = ratios[len(ratios) // 2]
        width = widths[len(widths) // 2] if widths else float("nan")
        starved = [r for r in rs if r["starved"]]
        redone = [r for r in discarded if r["scenario"] == scenario]
        summary[scenario] = {
            "trials": len(rs), "right": ok, "single": single, "within": within,
            "starved": len(starved), "starved_right": sum(r["ok"] for r in starved),
            "redone": len(redone), "redone_right": sum(r["ok"] for r in redone),
        }  # fmt: skip
        print(
            f"| {scenario} (want {'≈' if good == 'same' else 'B named'}) | {len(rs)} | **{ok}** | "
            f"{single} | {within} | {med:.3f} | {width:.1%} | "
            f"{len(starved)} ({sum(r['ok'] for r in starved)}) | "
            f"{len(redone)} ({sum(r['ok'] for r in redone)}) |"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = REPO / "benchmarks" / "results" / f"compare_drift-{stamp}.json"
    path.write_text(
        json.dumps(
            {"args": vars(a), "summary": summary, "trials": results, "redone": discarded},
            indent=1,
        )
        + "\n"
    )
    print(f"\n{path}")


if __name__ == "__main__":
    main()
