"""The hidden states' forecast held to the disk the job writes to: where it will not fit,
the plan says so before the job starts, and names the ways that do.

Offline drafter training keeps every token's states at a few layers: 1.8B tokens of a
7,168-wide model at 4 layers in bf16 is ~103 TB, beyond any one disk. A job that learns
this when its disk fills (generate stops, exit 12) has spent its hours; the plan knows the
bytes and can look at the free space first. The ways out it names: FP8 files (half the
bytes, hs-connectors' format, which speculators' `FP8Transfer` reads: `generate
--states-fp8`), fewer samples, or the online route: a trainer that captures the states
while it trains (speculators' and SpecForge's online modes) needs only the token ids
genbench generates.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from genbench import fmt

FAR_BEYOND = 10.0  # a forecast this many times the free space: FP8 will not save it either
ONLINE = (
    "or train online: a trainer that captures the states while it trains (speculators' or "
    "SpecForge's online mode) needs only the token ids genbench generates (docs/hidden-states.md)"
)


def free_space(where: Path) -> tuple[int, Path]:
    """Bytes free to an unprivileged writer on the filesystem that holds `where` (or, while it
    does not exist yet, its nearest existing parent), and the directory measured."""
    at = where.absolute()
    while not at.exists() and at != at.parent:
        at = at.parent
    st = os.statvfs(at)
    return st.f_bavail * st.f_frsize, at


def disk_check(
    rows: list[dict[str, Any]], free: int, at: Path, given: bool = True
) -> tuple[dict[str, Any], list[str]]:
    """plan.json's `disk` (the free space, the samples whose output fits it in the states'
    dtype and in FP8) and the notes: one where a forecast's bytes (JSONL and hidden states)
    exceed it. `rows` are the plan's rows (their `samples` and `storage`)."""
    sized = [r for r in rows if (r.get("storage") or {}).get("hidden_state_bytes") is not None]
    doc: dict[str, Any] = {"path": str(at), "free_bytes": free}
    if not sized:
        return doc, []

    def need(r: dict[str, Any], key: str) -> float:
        return float(r["storage"][key]) + float(r["storage"].get("jsonl_bytes") or 0)

    per = {k: need(sized[-1], k) / sized[-1]["samples"]
           for k in ("hidden_state_bytes", "hidden_state_bytes_fp8")}  # fmt: skip
    doc["fits_samples"] = int(free // per["hidden_state_bytes"])
    doc["fits_samples_fp8"] = int(free // per["hidden_state_bytes_fp8"])
    over = [r for r in sized if need(r, "hidden_state_bytes") > free]
    if not over:
        return doc, []
    worst = over[-1]
    total, fp8 = need(worst, "hidden_state_bytes"), need(worst, "hidden_state_bytes_fp8")
    counts = ", ".join(fmt.count(r["samples"]) for r in over)
    line = (
        f"the disk will not hold the hidden states: {counts} samples need up to "
        f"{fmt.nbytes(total)} (rows and states), {_times(total / free)} the {fmt.nbytes(free)} "
        f"free at {at}; it holds {fmt.count(doc['fits_samples'])} samples"
    )
    if fp8 <= free:
        line += f"; in FP8 ({fmt.nbytes(fp8)}, generate --states-fp8) it would hold them all"
    elif total <= FAR_BEYOND * free:
        line += f" ({fmt.count(doc['fits_samples_fp8'])} in FP8: {fmt.nbytes(fp8)} for all)"
    else:
        line += f"; in FP8 still {fmt.nbytes(fp8)}: offline states are out of reach here"
    where = "" if given else " (the current directory's disk: --job-out names the job's)"
    return doc, [f"{line}{where}. A larger disk, fewer samples, {ONLINE}"]


def _times(x: float) -> str:
    return f"{x:,.1f}×" if x < 10 else f"{x:,.0f}×"


def add_disk_check(doc: dict[str, Any], where: Path | None) -> None:
    """Hold the plan's hidden-state forecast to the free space at `where` (the job's output
    directory; the current directory when not given): `doc["disk"]` and a note."""
    rows = doc.get("rows") or []
    if not any((r.get("storage") or {}).get("hidden_state_bytes") is not None for r in rows):
        return
    free, at = free_space(where if where is not None else Path.cwd())
    doc["disk"], notes = disk_check(rows, free, at, where is not None)
    doc["notes"].extend(notes)
