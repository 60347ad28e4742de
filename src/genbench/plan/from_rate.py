"""The field's arithmetic (`--rate`, `--tokens-per-sample`): samples × tokens / rate, kept
exact so that its numbers can be reproduced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genbench.errors import UsageError
from genbench.plan.document import new_plan_doc
from genbench.plan.storage import StorageModel
from genbench.plan.units import duration


def arithmetic(samples: int, tokens_per_sample: float, rate: float, servers: int = 1) -> dict:
    """The field's method, exactly: samples × tokens per sample / (rate × servers)."""
    if samples <= 0:
        raise UsageError(f"--samples: {samples} must be positive")
    if tokens_per_sample <= 0:
        raise UsageError(f"--tokens-per-sample must be positive, got {tokens_per_sample}")
    if rate <= 0:
        raise UsageError(f"--rate must be positive, got {rate}")
    if servers <= 0:
        raise UsageError(f"--servers must be positive, got {servers}")
    tokens = samples * tokens_per_sample
    return {
        "samples": samples,
        "tokens_per_sample": tokens_per_sample,
        "tokens": tokens,
        "tok_per_s": rate,
        "servers": servers,
        **duration(tokens / (rate * servers)),
    }


def plan_arithmetic(
    samples: Sequence[int],
    rate: float,
    tokens_per_sample: float,
    servers: int,
    storage: StorageModel,
) -> dict[str, Any]:
    doc = new_plan_doc(
        "arithmetic",
        {"kind": "arithmetic"},
        {
            "samples": list(samples),
            "tok_per_s": rate,
            "tokens_per_sample": tokens_per_sample,
            "servers": servers,
        },
    )
    doc["model"] = {"storage_basis": storage.basis}
    for s in samples:
        one = arithmetic(s, tokens_per_sample, rate, 1)
        row: dict[str, Any] = {
            "samples": s,
            "tokens": {"output": one["tokens"]},
            "one_server": {k: one[k] for k in ("tok_per_s", "seconds", "hours", "days")},
            "storage": storage.row(s, one["tokens"]),
        }
        if servers > 1:
            many = arithmetic(s, tokens_per_sample, rate, servers)
            row["at_servers"] = {"servers": servers, **duration(many["seconds"])}
        doc["rows"].append(row)
    return doc
