"""A plan from several `run` results of one model (`--from A --from B …`): which
configuration generates the job fastest, and at what cost.

The field compares configurations (autoregressive TP8, expert-parallel EP8, a speculative
drafter) by single-stream speed, which is the wrong number for a batch job: the job runs
at its concurrency, where a drafter's extra work competes with other requests for the
same GPUs, and it often gains least there. So every configuration is rated as the job
will run it: the sustained rate at the job's concurrency (`--concurrency`, else each
run's best), for the same tokens per sample, and the decision (`decide`) is made on
those. A run whose sweep did not reach the job's concurrency or length says so in its
row. Runs of different models are refused: they answer different jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genbench.errors import UsageError
from genbench.plan.decide import Candidate, Deadline, Pricing, decide
from genbench.plan.from_result import (
    measured_concurrency,
    natural_tokens_per_sample,
    plan_from_result,
)
from genbench.plan.storage import HiddenStates
from genbench.run.result import repeat_dirs


def run_names(results: Sequence[dict[str, Any]]) -> list[str]:
    """Each run by its directory's name, made unique with #2, #3 (as `report` labels them)."""
    seen: dict[str, int] = {}
    names = []
    for doc in results:
        where = Path(doc.get("_path", "run")).parent
        if repeat_dirs(where.parent) == [where]:
            where = where.parent  # a side's one run (`run --versus`): named by its side
        base = where.name or "run"
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


def same_model(results: Sequence[dict[str, Any]]) -> None:
    """Refuse, in one line, runs that served different models."""
    first = results[0]
    model = (first.get("target") or {}).get("model")
    for doc in results[1:]:
        other = (doc.get("target") or {}).get("model")
        if other != model:
            raise UsageError(
                f"--from {doc.get('_path')}: model {other!r}, but {first.get('_path')} "
                f"measured {model!r}: plan compares configurations of one model"
            )


def plan_from_results(
    results: Sequence[dict[str, Any]],
    samples: Sequence[int],
    servers: int,
    concurrency: int | None,
    tokens_per_sample: float | None,
    hidden: HiddenStates | None,
    bytes_per_token: float | None,
    deadline: Deadline | None,
    pricing: Pricing | None,
) -> dict[str, Any]:
    """The fastest configuration's plan (its rows are what `generate --plan` reads), with
    the `decision` over every configuration."""
    same_model(results)
    basis = None
    notes: list[str] = []
    if tokens_per_sample is None:
        pooled = natural_tokens_per_sample(results)
        if pooled is not None:
            tokens_per_sample, basis = pooled
            notes.append(
                "tokens per sample measured on the runs' built-in prompts, not yours: "
                "pass --tokens-per-sample, or forecast from a pilot (--prompts)"
            )
    candidates = []
    for name, doc in zip(run_names(results), results, strict=True):
        c, why = (None, None) if concurrency is None else measured_concurrency(doc, concurrency)
        plan = plan_from_result(
            doc, samples, servers, c, tokens_per_sample, hidden, bytes_per_token,
            tokens_basis=basis,
        )  # fmt: skip
        candidates.append(Candidate(name, plan, [*([why] if why else []), *plan["model"]["reach"]]))
    decision = decide(candidates, servers, deadline, pricing)
    decision["concurrency"] = concurrency  # the job's; None: each run at its best
    last = max(decision["best"], key=lambda b: b["samples"])
    chosen = next(c for c in candidates if c.name == last["fastest"])
    doc = chosen.plan
    paths = [str(d.get("_path")) for d in results]
    doc["source"]["compared"] = paths
    doc["inputs"]["from"] = paths
    doc["notes"] = [
        f"{len(results)} configurations compared; the forecast tables and `generate --plan` "
        f"use the fastest, {chosen.name}",
        *notes,
        *(n for n in doc["notes"] if n not in chosen.notes),
    ]
    doc["decision"] = decision
    return doc
