"""`plan --from PLAN_DIR`: a pilot's plan made again from the pilot it recorded, sending
nothing: other `--samples`, `--servers`, `--deadline`, `--price`, `--speed-drift` or hidden
states are arithmetic and a simulation on the same records, seconds, not another pilot of
minutes. What the pilot measured (its concurrency, its sampling, its prompts) stays as it
was: a flag that would change it asks for a new pilot and is refused, naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from genbench import fmt
from genbench.errors import UsageError
from genbench.plan.bar import target_of
from genbench.plan.document import PLAN_FILE, PLAN_SCHEMA, PLAN_SCHEMA_VERSION
from genbench.plan.from_pilot import plan_from_pilot
from genbench.plan.pilot import PilotRun, pilot_wall_s
from genbench.plan.storage import HiddenStates, StorageModel
from genbench.plan.units import speed_drift
from genbench.records import read_records
from genbench.run.result import REQUESTS_FILE, read_document

# the flags of a pilot that a re-plan cannot honour: what they set was measured
MEASURED = ("prompts", "url", "pilot", "max_tokens", "temperature", "top_p", "top_k",
            "thinking", "param", "config")  # fmt: skip


def is_plan(path: Path) -> bool:
    """A plan.json, or a directory holding one and no run (a pilot's directory)."""
    if path.is_dir():
        return (path / PLAN_FILE).is_file() and not (path / "result.json").exists()
    return path.name == PLAN_FILE and path.is_file()


def read_pilot_plan(path: Path) -> dict[str, Any]:
    """The plan at `path`, checked to be a pilot's (one line naming the file otherwise)."""
    file = path / PLAN_FILE if path.is_dir() else path
    doc = read_document(file, PLAN_SCHEMA, PLAN_SCHEMA_VERSION, "plan", flag="--from")
    if doc.get("mode") != "pilot":
        raise UsageError(
            f"--from {file}: a plan made {_mode(doc)}, not from a pilot: it recorded no "
            "requests to plan from again; give its own source (--from RUN, or --rate)"
        )
    return doc


def _mode(doc: dict[str, Any]) -> str:
    return {"result": "from a run", "arithmetic": "by arithmetic"}.get(
        str(doc.get("mode")), f"in mode {doc.get('mode')!r}"
    )


def refuse_measured(args: Any, doc: dict[str, Any]) -> None:
    """A flag that changes what the pilot measured is refused: its answer is a new pilot."""
    given = [n for n in MEASURED if getattr(args, n, None) not in (None, [], False)]
    c = (doc.get("inputs") or {}).get("concurrency")
    if args.concurrency is not None and args.concurrency != c:
        given.append("concurrency")
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise UsageError(
            f"--from {doc.get('_path')}: {flags} would change what the pilot measured (at "
            f"C={c}, with its own prompts and sampling): run a new pilot (plan --prompts FILE "
            "--url URL) for that; a re-plan takes --samples, --servers, --deadline, --price, "
            "--gpus-per-server, --speed-drift, --bootstrap, --seed and hidden-state flags"
        )


def records_path(path: Path, doc: dict[str, Any]) -> Path:
    """The pilot's requests.jsonl: beside the plan, else where the plan says it wrote them."""
    here = (path if path.is_dir() else path.parent) / REQUESTS_FILE
    if here.is_file():
        return here
    said = Path(str((doc.get("source") or {}).get("records") or here))
    if not said.is_file():
        raise UsageError(
            f"--from {doc.get('_path')}: the pilot's records are not there ({here}, {said}): "
            "a re-plan needs them"
        )
    return said


def replan(
    path: Path,
    args: Any,
    counts: list[int],
    hidden: HiddenStates | None,
) -> tuple[dict[str, Any], Path]:
    """The pilot's plan made again at the flags' sample counts, servers and bar, from the
    records it kept; and the directory it is saved in (the pilot's, or --out)."""
    old = read_pilot_plan(path)
    refuse_measured(args, old)
    src = records_path(path, old)
    records = read_records(src)
    if not any(r.ok for r in records):
        raise UsageError(f"--from {old['_path']}: no pilot request in {src} succeeded")
    inputs = dict(old.get("inputs") or {})
    c = int(inputs.get("concurrency") or 1)
    sent = {(r.extra or {}).get("row") for r in records}
    run = PilotRun(
        records=records,
        wall_s=pilot_wall_s(records),
        jsonl_bytes=[
            int(r.extra["jsonl_bytes"]) for r in records if r.extra and "jsonl_bytes" in r.extra
        ],  # fmt: skip
        stopped=str(inputs.get("pilot_stopped") or "size"),
        stopped_at=dict(inputs.get("pilot_stopped_at") or {}),
        samples=int(inputs.get("pilot") or len(sent)),
    )
    given = speed_drift(args.speed_drift)
    # the pilot's plan's --speed-drift holds unless given again: a re-plan for other servers
    # must not drop the user's word on their server's speed; `default` asks for genbench's
    kept = inputs.get("speed_drift") if given is None else None
    drift = kept if given is None else given if isinstance(given, float) else None
    inputs.update(
        samples=counts, servers=args.servers, speed_drift=drift, seed=args.seed,
        bootstrap=args.bootstrap,
    )  # fmt: skip
    if args.target_error is not None:  # else the pilot's plan's target holds
        inputs["target_error"] = target_of(args.target_error)
    source = {**(old.get("source") or {}), "records": str(src), "replanned_from": old["_path"]}
    doc = plan_from_pilot(run, c, counts, args.servers, hidden, source, inputs, args.bootstrap,
                          args.seed, storage=_storage(old, run, hidden),
                          simulation=old.get("simulation"))  # fmt: skip
    holds = ""
    if kept is not None:
        holds = (f"; its --speed-drift {100 * kept:g} holds (--speed-drift PCT changes it, "
                 "--speed-drift default asks for genbench's allowance)")  # fmt: skip
    doc["notes"].append(
        f"re-planned from the pilot recorded in {src} (nothing sent): its "
        f"{len(records):,} requests at C={c}, measured {old.get('created') or 'before'}{holds}"
    )
    where = args.out_dir or (path if path.is_dir() else path.parent)
    if (where / PLAN_FILE).resolve() == Path(old["_path"]).resolve():
        doc["notes"].append(_replaces(old))
    return doc, where


def _replaces(old: dict[str, Any]) -> str:
    """Said where a re-plan is saved over the plan it was made from: what that plan was, and
    how to keep it (its records stay: it can be made again, nothing sent)."""
    rows = [int(r["samples"]) for r in old.get("rows") or [] if isinstance(r, dict)
            and r.get("samples")]  # fmt: skip
    what = f" for {', '.join(f'{n:,}' for n in sorted(set(rows)))} samples" if rows else ""
    made = f", made {fmt.when(old['created'])}" if old.get("created") else ""
    return (
        f"this plan replaces {old['_path']} (the plan{what}{made}); -o DIR saves a re-plan "
        "elsewhere and keeps it, and the pilot's records make it again (nothing sent)"
    )


def _storage(old: dict[str, Any], run: PilotRun, hidden: HiddenStates | None) -> StorageModel:
    """Bytes per sample as the pilot measured them: JSONL from its records, Parquet from the
    plan (its rows were not kept), the hidden states the flags now ask."""
    rows = old.get("rows") or [{}]
    st = rows[0].get("storage") or {}
    jsonl = (float(np.mean(run.jsonl_bytes)) if run.jsonl_bytes  # as the pilot's plan did
             else float(st.get("jsonl_bytes_per_sample") or 0.0))  # fmt: skip
    basis = str((old.get("model") or {}).get("storage_basis") or "measured on the pilot")
    return StorageModel(jsonl, st.get("parquet_bytes_per_sample"), basis, hidden)
