"""Results of the client ceiling benchmark (benchmarks/client_ceiling.py): the workers'
results merged, timing error against the stamp server's stamps, rows, and the report."""

from __future__ import annotations

import heapq
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REFERENCE = "genbench"  # the client every other one is compared with


def merge_results(rs: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rs[0])
    for key in ("cpu_s", "cpu_sys_s", "requests", "ok", "failed", "chunks", "output_tokens"):
        out[key] = sum(r[key] for r in rs)
    for key in ("chars", "rss_base_bytes", "rss_peak_bytes"):
        out[key] = sum(r[key] for r in rs)
    out["errors"] = [e for r in rs for e in r["errors"]][:5]
    out["chars_by_key"] = {k: v for r in rs for k, v in r.get("chars_by_key", {}).items()}
    out["t_start"] = min(r["t_start"] for r in rs)
    out["t_end"] = max(r["t_end"] for r in rs)
    out["wall_s"] = out["t_end"] - out["t_start"]
    out["concurrency"] = sum(r["concurrency"] for r in rs)
    out["procs"] = len(rs)
    out["cpu_s_per_proc"] = [round(r["cpu_s"], 3) for r in rs]
    return out


def merge_records(paths: list[Path]) -> dict[str, Any]:
    """The multi-process prototype's merge: every worker's records file, already in t_send
    order, merged into one stream by t_send (CLOCK_MONOTONIC is shared by the processes)."""
    from genbench.records import RequestRecord

    def read(p: Path) -> Iterator[RequestRecord]:
        with open(p, "rb") as f:
            for line in f:
                yield RequestRecord.from_dict(json.loads(line))

    t0 = time.perf_counter()
    merged = list(heapq.merge(*(read(p) for p in paths), key=lambda r: r.t_send))
    ordered = all(a.t_send <= b.t_send for a, b in zip(merged, merged[1:], strict=False))
    return {"records": len(merged), "ordered": ordered, "merge_s": time.perf_counter() - t0}


def timing_error(
    arrivals: dict[str, list[float]], stamps: dict[str, Any], steady: bool = False
) -> dict[str, Any]:
    """Arrival time minus the server's write time of the same chunk, over all chunks; and
    the error of each inter-chunk gap (ITL) the client measured. With `steady`, only the
    chunks written while every stream was running (after the last stream's first chunk,
    before the first stream's last): the ramp of opening thousands of connections at
    once is left out."""
    import numpy as np

    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    mismatched = 0
    for key, arr in arrivals.items():
        st = stamps.get(key)
        if st is None or len(st["sends"]) != len(arr) or not arr:
            mismatched += 1
            continue
        pairs.append((np.asarray(st["sends"]), np.asarray(arr)))
    if not pairs:
        return {"matched": 0, "mismatched": mismatched}
    lo, hi = -np.inf, np.inf
    if steady:
        lo = max(s[0] for s, _ in pairs)
        hi = min(s[-1] for s, _ in pairs)
    errs, itl = [], []
    for s, a in pairs:
        keep = (s >= lo) & (s <= hi)
        e = (a - s)[keep]
        errs.append(e)
        itl.append(np.abs(np.diff(e)))
    e = np.concatenate(errs) * 1000
    d = np.concatenate(itl) * 1000
    if not len(e):
        return {"matched": len(pairs), "mismatched": mismatched}
    return {
        "matched": len(pairs),
        "mismatched": mismatched,
        "err_chunks": int(len(e)),
        "err_p50_ms": float(np.percentile(e, 50)),
        "err_p99_ms": float(np.percentile(e, 99)),
        "err_max_ms": float(e.max()),
        "itl_err_p99_ms": float(np.percentile(d, 99)) if len(d) else None,
    }


def loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def machine_state() -> dict[str, Any]:
    """What else the machine was doing: load average and the busiest other processes."""
    top = subprocess.run(
        ["ps", "-eo", "pcpu,rss,comm", "--sort=-pcpu"], capture_output=True, text=True
    ).stdout.splitlines()[1:7]
    return {"loadavg": loadavg(), "cpus": os.cpu_count(), "top": [t.strip()[:140] for t in top]}


def row(r: dict[str, Any]) -> dict[str, Any]:
    chunks, cpu, wall = r["chunks"], r["cpu_s"], r["wall_s"]
    out = {
        "client": r["client"],
        "procs": r["procs"],
        "C": r["concurrency"],
        "chunks": chunks,
        "chunks_per_s": chunks / wall if wall else 0.0,
        "chunks_per_cpu_s": chunks / cpu if cpu else 0.0,
        "cpu_ms_per_1k_chunks": 1000 * cpu / chunks * 1000 if chunks else None,
        "cpu_util": cpu / wall if wall else 0.0,
        "sys_share": r["cpu_sys_s"] / cpu if cpu else 0.0,
        "failed": r["failed"],
        "requests": r["requests"],
        "errors": r["errors"],
        "rss_per_stream_kib": (r["rss_peak_bytes"] - r["rss_base_bytes"]) / r["concurrency"] / 1024,
        "rss_peak_mib": r["rss_peak_bytes"] / 2**20,
    }
    for k in ("loop_lag_p99_s", "merge", "cpu_s_per_proc", "server_cpu_util", "loadavg"):
        if k in r:
            out[k] = r[k]
    return out


def log(r: dict[str, Any]) -> None:
    keep = ("mode", "client", "procs", "C", "offered_per_s", "chunks_per_s", "chunks_per_cpu_s")
    keep += ("cpu_util", "failed", "err_p99_ms", "itl_err_p99_ms", "rss_per_stream_kib")
    parts = []
    for k in keep:
        if k in r:
            v = r[k]
            parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    if "loadavg" in r:
        parts.append(f"load={r['loadavg'][0]}")
    print("  " + " ".join(parts), file=sys.stderr, flush=True)


# -- report ------------------------------------------------------------------------------------


def fmt(v: Any, spec: str = ".0f") -> str:
    if v is None:
        return "–"
    return format(v, spec) if isinstance(v, float | int) else str(v)


def report(res: dict[str, Any]) -> str:
    out = [f"## Client ceiling run {res['started']}", ""]
    ms = res["machine"]
    out.append(f"- machine: {ms['cpus']} CPUs, load average at start {' '.join(ms['loadavg'])}")
    end = res.get("machine_end")
    if end:
        out.append(f"- load average at end {' '.join(end['loadavg'])}")
    out.append(f"- command: `{res['command']}`")
    out.append("- busiest processes at start: " + "; ".join(f"`{t}`" for t in ms["top"][:4]))
    out.append("")
    rows = res["rows"]
    out += bulk_section(rows, res["args"]["tokens"]) + tokens_section(rows)
    out += baseline_section(rows) + scaling_section(rows) + hold_section(rows)
    out += split_section(rows)
    return "\n".join(out)


def bulk_section(rows: list[dict[str, Any]], tokens: int) -> list[str]:
    bulk = [r for r in rows if r["mode"] == "bulk"]
    if not bulk:
        return []
    out = [f"### bulk: nginx, pre-rendered {tokens}-token streams", ""]
    out.append("| C | client | chunks/s | chunks/CPU-s | CPU ms/1K chunks | CPU | failed | load |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in bulk:
        out.append(
            f"| {r['C']} | {r['client']} | {fmt(r['chunks_per_s'])} | "
            f"{fmt(r['chunks_per_cpu_s'])} | {fmt(r['cpu_ms_per_1k_chunks'], '.2f')} | "
            f"{r['cpu_util']:.0%} | {r['failed']}/{r['requests']} | {load(r)} |"
        )
    return [*out, "", *ratios(bulk, ("C",))]


def tokens_section(rows: list[dict[str, Any]]) -> list[str]:
    tok = [r for r in rows if r["mode"] == "tokens"]
    if not tok:
        return []
    out = ["### tokens: stamp server, one chunk per write, timing error vs its stamps", ""]
    out.append(
        "| C | offered/s | client | chunks/s | chunks/CPU-s | CPU | err p50 ms | "
        "err p99 ms | ITL err p99 ms | failed | load |"
    )
    out.append("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in tok:
        out.append(
            f"| {r['C']} | {r['offered_per_s']} | {r['client']} | {fmt(r['chunks_per_s'])} | "
            f"{fmt(r['chunks_per_cpu_s'])} | {r['cpu_util']:.0%} | "
            f"{fmt(r.get('err_p50_ms'), '.2f')} | {fmt(r.get('err_p99_ms'), '.2f')} | "
            f"{fmt(r.get('itl_err_p99_ms'), '.2f')} | {r['failed']}/{r['requests']} | {load(r)} |"
        )
    out += ["", *ratios(tok, ("C", "offered_per_s"))]
    out.append("Highest rate ingested with timing error p99 < 1 ms:")
    for client in dict.fromkeys(r["client"] for r in tok):
        good = [r for r in tok if r["client"] == client and (r.get("err_p99_ms") or 1e9) < 1]
        best = max(good, key=lambda r: r["chunks_per_s"], default=None)
        out.append(
            f"- {client}: "
            + (f"{best['chunks_per_s']:.0f} chunks/s (C={best['C']})" if best else "none")
        )
    return [*out, ""]


def baseline_section(rows: list[dict[str, Any]]) -> list[str]:
    """The current genbench against an older revision of it, point by point: the median of
    each client's rounds (run alternately), and the load average during each."""
    base = sorted({r["client"] for r in rows if r["client"].startswith(REFERENCE + "@")})
    if not base:
        return []
    out = ["### this revision against " + ", ".join(base), ""]
    out.append(
        "| mode | C | offered/s | client | chunks/CPU-s (median) | rounds | load (1 min) | × |"
    )
    out.append("|---|---:|---:|---|---:|---|---|---:|")
    points = dict.fromkeys((r["mode"], r["C"], r.get("offered_per_s")) for r in rows)
    for pt in points:
        at = [r for r in rows if (r["mode"], r["C"], r.get("offered_per_s")) == pt]
        med = {}
        for client in [REFERENCE, *base]:
            mine = [r for r in at if r["client"] == client]
            if mine:
                med[client] = statistics.median(r["chunks_per_cpu_s"] for r in mine)
        if REFERENCE not in med or len(med) < 2:
            continue
        for client, m in med.items():
            mine = [r for r in at if r["client"] == client]
            each = ", ".join(f"{r['chunks_per_cpu_s'] / 1000:.0f}K" for r in mine)
            ratio = "" if client == REFERENCE else f"{med[REFERENCE] / m:.3f}"
            out.append(
                f"| {pt[0]} | {pt[1]} | {fmt(pt[2])} | {client} | {m:.0f} | {each} | "
                f"{', '.join(load(r) for r in mine)} | {ratio} |"
            )
    return [*out, "", f"× = {REFERENCE} over the older revision, per CPU-second.", ""]


def scaling_section(rows: list[dict[str, Any]]) -> list[str]:
    sc = [r for r in rows if r["mode"] == "scaling"]
    if not sc:
        return []
    base = sc[0]["chunks_per_s"] / sc[0]["procs"]
    out = [f"### scaling: {REFERENCE} in N processes, bulk", ""]
    out.append("| procs | C | chunks/s | × one process | chunks/CPU-s | CPU per process |")
    out.append("|---:|---:|---:|---:|---:|---|")
    for r in sc:
        out.append(
            f"| {r['procs']} | {r['C']} | {fmt(r['chunks_per_s'])} | "
            f"{r['chunks_per_s'] / base:.2f} | {fmt(r['chunks_per_cpu_s'])} | "
            f"{r.get('cpu_s_per_proc')} |"
        )
    return [*out, ""]


def hold_section(rows: list[dict[str, Any]]) -> list[str]:
    hd = [r for r in rows if r["mode"] == "hold"]
    if not hd:
        return []
    out = ["### hold: C streams in flight at once", ""]
    out.append(
        "| C | client | RSS peak MiB | KiB per stream | CPU | failed | err p99 ms (all) | "
        "err p50/p99 ms (all streams running) |"
    )
    out.append("|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in hd:
        st = r.get("steady") or {}
        out.append(
            f"| {r['C']} | {r['client']} | {r['rss_peak_mib']:.0f} | "
            f"{r['rss_per_stream_kib']:.1f} | {r['cpu_util']:.0%} | "
            f"{r['failed']}/{r['requests']} | {fmt(r.get('err_p99_ms'), '.1f')} | "
            f"{fmt(st.get('err_p50_ms'), '.2f')} / {fmt(st.get('err_p99_ms'), '.2f')} |"
        )
    return [*out, ""]


def split_section(rows: list[dict[str, Any]]) -> list[str]:
    sp = [r for r in rows if r["mode"] == "split"]
    if not sp:
        return []
    out = ["### split: the sim cutting the byte stream at random positions", ""]
    out.append(
        "| piece bytes | tokens | client | failed | successful requests with text changed | "
        "characters lost (-) or added (+) in them |"
    )
    out.append("|---|---:|---|---:|---:|---:|")
    for r in sp:
        ok = r["requests"] - r["failed"]
        out.append(
            f"| {r['split']} | {r['tokens']} | {r['client']} | {r['failed']}/{r['requests']} "
            f"| {r['requests_text_differs']}/{ok} "
            f"| {r['chars'] - r['chars_expected']:+d} of {r['chars_expected']} |"
        )
    return [*out, ""]


def load(r: dict[str, Any]) -> str:
    return r["loadavg"][0] if "loadavg" in r else "–"


def ratios(rows: list[dict[str, Any]], by: tuple[str, ...]) -> list[str]:
    """genbench over each other client, per CPU-second, at each point (first round)."""
    out = []
    points = dict.fromkeys(tuple(r[k] for k in by) for r in rows)
    for pt in points:
        at: dict[str, dict[str, Any]] = {}
        for r in rows:
            if tuple(r[k] for k in by) == pt:
                at.setdefault(r["client"], r)
        g = at.get(REFERENCE)
        if not g:
            continue
        parts = [
            f"{g['chunks_per_cpu_s'] / r['chunks_per_cpu_s']:.2f}× {name}"
            for name, r in at.items()
            if name != REFERENCE and r["chunks_per_cpu_s"]
        ]
        label = ", ".join(f"{k}={v}" for k, v in zip(by, pt, strict=True))
        out.append(f"- {label}: {REFERENCE} per CPU-second = " + ", ".join(parts))
    return [*out, ""]
