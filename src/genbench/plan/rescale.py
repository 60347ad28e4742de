"""`plan --from RUN --prompts FILE --url URL`: a speculative run's rate, rescaled to the
acceptance of the job's own prompts (measured by a pilot on the same server).

The model (docs/acceptance.md, "plan"): under speculative decoding a decode step emits, per
request, one token plus the drafts the target accepted, and costs what it costs whether they
were accepted or not (the K drafts are verified either way). So at one concurrency the
output rate is steps per second × tokens per step, and the steps per second are the
server's, not the prompts': prompts that accept differently change only tokens per step.

    rate on the job's prompts = run's rate × T(pilot) / T(run's phase at that C)

T is tokens per decode step pooled over requests, Σ(out − 1) / Σ(out − 1 − accepted): each
request's first token comes from prefill, every other from a step that emitted 1 + its
accepted drafts. It counts the steps in which nothing was drafted (vLLM's n-gram proposer
drafts nothing when it finds no match, and vLLM's `steps` leave those out), so it is the
tokens per step the rate is made of, not the verify steps' acceptance length.

Assumptions, said with the plan: the pilot ran on the server the run measured (same
drafter, same K); a step costs the same at any acceptance (a step that drafts nothing is, in
truth, cheaper: a pilot of prompts that draft less is forecast a little slow); prefill's
share of the time is not rescaled; the run's rate bar is kept, the pilot's acceptance taken
as exact.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from genbench import fmt
from genbench.records import RequestRecord, read_records
from genbench.run.result import REQUESTS_FILE

# a pilot whose decode steps drafted this much less often than the run's gets a note
DRAFTING_GAP = 0.10


def tokens_per_step(records: Iterable[RequestRecord]) -> dict[str, Any] | None:
    """Pooled tokens per decode step of the answered requests (None when none said its
    acceptance), with the request count, the sums it came from, and the share of decode
    steps that drafted. Among requests that said it, one that said nothing is counted as
    accepting none in steps that drafted nothing: vLLM says nothing for a request none of
    whose steps drafted (its n-gram proposer found no match), and leaving it out would
    credit the prompts with acceptance they did not have."""
    rows: list[tuple[int, dict[str, Any] | None]] = []
    for r in records:
        out = (r.completion_tokens or 0) - 1
        if r.ok and out > 0:
            rows.append((out, r.spec))
    if not any(s for _, s in rows):
        return None
    tokens = steps = drafting = said = 0
    for out, s in rows:
        decode_steps = out - int((s or {}).get("accepted") or 0)
        if decode_steps <= 0:  # the engine counted drafts past the answer's end
            continue
        tokens, steps = tokens + out, steps + decode_steps
        drafting += min(int((s or {}).get("steps") or 0), decode_steps)
        said += s is not None
    return {"tokens_per_step": tokens / steps, "requests": len(rows), "said": said,
            "tokens": tokens, "steps": steps, "drafting_share": drafting / steps}  # fmt: skip


def run_tokens_per_step(result: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Tokens per decode step of each sustained phase of a run, by concurrency, from its
    requests.jsonl (nothing for a phase none of whose requests said acceptance)."""
    names = {
        p["name"]: int(p["concurrency"])
        for p in result.get("phases") or []
        if p.get("kind") == "sustained" and p.get("concurrency") and p.get("name")
    }
    req = Path(result.get("_path", "result")).parent / REQUESTS_FILE
    by_phase: dict[str, list[RequestRecord]] = {name: [] for name in names}
    if req.exists():
        for r in read_records(req):
            if r.phase in by_phase:
                by_phase[r.phase].append(r)
    out: dict[int, dict[str, Any]] = {}
    for name, c in names.items():
        t = tokens_per_step(by_phase[name])
        if t is not None:
            out[c] = t
    return out


def scaled_result(
    result: dict[str, Any], pilot: dict[str, Any], run: dict[int, dict[str, Any]]
) -> tuple[dict[str, Any], dict[int, float]]:
    """A copy of the run's result whose sustained rates carry the pilot's tokens per step,
    and the factor applied at each concurrency (a C the run has no acceptance for is not
    rescaled, and not in the factors)."""
    scaled = copy.deepcopy(result)
    scaled["_rescaled"] = True
    table = ((scaled.get("sweep") or {}).get("sustained") or {}).get("by_concurrency") or {}
    factors: dict[int, float] = {}
    for k, v in table.items():
        c = int(k)
        if c in run and isinstance(v, int | float):
            factors[c] = pilot["tokens_per_step"] / run[c]["tokens_per_step"]
            table[k] = v * factors[c]
    return scaled, factors


def attach(
    plan: dict[str, Any],
    unscaled: dict[str, Any],
    pilot: dict[str, Any],
    run: dict[int, dict[str, Any]],
    factors: dict[int, float],
) -> None:
    """Keep both numbers: the rescale in `plan["acceptance_rescale"]`, and each row's time
    at the run's own rate beside the rescaled one (`ours_best.unscaled`)."""
    m = unscaled["model"]
    plan["acceptance_rescale"] = {
        "model": "rate × T(pilot) / T(run), T = tokens per decode step = "
        "Σ(output − 1) / Σ(output − 1 − accepted drafts)",
        "pilot": pilot,
        "run_by_concurrency": {str(c): t for c, t in sorted(run.items())},
        "factor_by_concurrency": {str(c): f for c, f in sorted(factors.items())},
        "run_tps_by_concurrency": m["sustained_tps_by_concurrency"],
        "assumptions": "the pilot ran on the run's server (same drafter and K); a decode "
        "step costs the same at any acceptance; prefill's share not rescaled; the range is "
        "the run's rate's, the pilot's acceptance taken as exact",
    }
    other = sorted(c for c in factors if c != pilot.get("concurrency"))
    if other:
        plan["notes"].append(
            f"the pilot ran at C={pilot.get('concurrency')}, and rescales the run's "
            f"C={', '.join(map(str, other))}: acceptance can move with the batch (on vLLM's "
            "CPU build it fell from 4.0 single-stream to 2.2 at C=2 on one group); pilot at "
            "the job's concurrency (--concurrency)"
        )
    for c, t in run.items():
        gap = t["drafting_share"] - pilot["drafting_share"]
        if c in factors and gap > DRAFTING_GAP:
            plan["notes"].append(
                f"{fmt.pct(1 - pilot['drafting_share'])} of the pilot's decode steps drafted "
                f"nothing, {fmt.pct(1 - t['drafting_share'])} of the run's at C={c}: a step "
                "that drafts nothing verifies nothing and costs less, so the rate on your "
                "prompts is likely higher than rescaled (the forecast pessimistic)"
            )
    if m["field"]["concurrency"]:
        plan["notes"].append(
            "the field's column is the run's burst at the run's acceptance, not rescaled: "
            "the field's method does not see the job's prompts"
        )
    for row, before in zip(plan["rows"], unscaled["rows"], strict=True):
        b = before["ours_best"]
        row["ours_best"]["unscaled"] = {"tok_per_s": b["tok_per_s"], "seconds": b["seconds"]}


def lines(plan: dict[str, Any]) -> list[str]:
    """The console's account of the rescale: both tokens per step, the factor, both rates."""
    a = plan.get("acceptance_rescale")
    if not a:
        return []
    p = a["pilot"]
    out = [
        f"speculative decoding: {p['tokens_per_step']:.2f} tokens per decode step on "
        f"your prompts (pilot at C={p.get('concurrency')}: {_said(p)})"
    ]
    for c, f in a["factor_by_concurrency"].items():
        t = a["run_by_concurrency"][c]
        before = a["run_tps_by_concurrency"][c]
        out.append(
            f"  C={c}: the run's prompts {t['tokens_per_step']:.2f} tokens per step "
            f"({_said(t)}): rate × {f:.3f}, "
            f"{fmt.rate(before, '')} → {fmt.rate(before * f, '')} tok/s"
        )
    out.append(f"  model: {a['model']}; assumes {a['assumptions']}")
    return out


def _said(t: dict[str, Any]) -> str:
    """How many requests the tokens per step pooled, and how many of them said acceptance."""
    n, said = t["requests"], t["said"]
    if said == n:
        return f"{fmt.counted(n, 'request')}, each said its acceptance"
    return (
        f"{fmt.counted(n, 'request')}, {said} said acceptance, {n - said} nothing: "
        "counted as drafting none"
    )
