"""The sim's speculative acceptance per request, said as vLLM and SGLang say it.

With `--spec-k K` each decode step of a request drafts K-1 tokens and accepts some (all, or
Binomial(K-1, P) with `--spec-accept P`; `--spec-accept-match TEXT:P` gives requests whose
messages contain TEXT their own P, so tests can pin two groups' acceptance exactly). A
request's `Tally` counts its steps as the server's `/metrics` counters count them, so its
figures pool to theirs exactly. Said (docs/sim.md):

* `sim` dialect (vLLM), with `--per-request-spec-decode-metrics summary|detailed`:
  `metrics.speculative_decoding` on the usage chunk, or at the top of a whole body;
* `sglang` dialect, when the request asks `return_spec_tokens_details`:
  `sglext.spec_tokens_details`, in a `choices: []` chunk before the usage chunk (with the
  ids when they are asked too), or at the top of a whole body.
"""

from __future__ import annotations

from typing import Any

import orjson

from genbench.errors import UsageError

SPEC_METRICS = ("none", "summary", "detailed")


class Tally:
    """One request's verify steps: accepted drafts by step, as vLLM's histogram counts."""

    __slots__ = ("steps", "accepted", "drafted", "hist", "per_step", "bad")

    def __init__(self, k: int, detailed: bool) -> None:
        self.steps = self.accepted = self.drafted = 0
        self.bad = False  # `--fault bad-acceptance`: said as 10 x the drafts + 7 accepted
        self.hist = [0] * k  # index j: steps that accepted j of the K-1 drafts
        self.per_step: list[int] | None = [] if detailed else None

    def step(self, accepted: int, drafted: int) -> None:
        self.steps += 1
        self.accepted += accepted
        self.drafted += drafted
        self.hist[accepted] += 1
        if self.per_step is not None:
            self.per_step.append(accepted)


def vllm_metrics(t: Tally) -> dict[str, Any]:
    """vLLM's `SpeculativeDecodingMetrics` (vllm/v1/metrics/stats.py `to_dict`)."""
    out: dict[str, Any] = {
        "mean_acceptance_length": 1.0 + t.accepted / t.steps if t.steps else 1.0,
        "draft_acceptance_rate": t.accepted / t.drafted if t.drafted else 0.0,
        "acceptance_histogram": t.hist, "num_spec_steps": t.steps,
        "num_accepted_draft_tokens": t.accepted, "num_draft_tokens": t.drafted,
        "num_spec_tokens": len(t.hist) - 1,
    }  # fmt: skip
    if t.per_step is not None:
        out["per_step_accepted"] = t.per_step
        out["per_step_drafted"] = [len(t.hist) - 1] * len(t.per_step)
    return out


def sglang_details(t: Tally, completion_tokens: int) -> dict[str, Any]:
    """SGLang's `SpecTokensDetails`; its accept length is completion tokens / verify steps."""
    k1 = len(t.hist) - 1
    return {
        "spec_accept_rate": t.accepted / t.drafted if t.drafted else 0.0,
        "spec_accept_length": completion_tokens / t.steps if t.steps else 0.0,
        "spec_cap_length": float(k1), "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": t.accepted, "spec_num_proposed_drafts": t.drafted,
        "spec_verify_ct": t.steps, "spec_correct_drafts_histogram": t.hist,
        "spec_cap_lens_histogram": [],
    }  # fmt: skip


def parse_accept_match(spec: str) -> tuple[str, float]:
    """`--spec-accept-match TEXT:P`: requests containing TEXT accept each draft with P."""
    text, sep, p = spec.rpartition(":")
    try:
        prob = float(p)
    except ValueError:
        prob = -1.0
    if not sep or not text or not 0.0 <= prob <= 1.0:
        raise UsageError(f"--spec-accept-match {spec!r}: expected TEXT:P, 0 <= P <= 1")
    return text, prob


def accept_for(messages_json: bytes, rules: list[tuple[str, float]], default: float) -> float:
    """The draft acceptance of a request: the first rule whose TEXT its messages hold."""
    for text, p in rules:
        if text.encode() in messages_json:
            return p
    return default


def wants(dialect: str, spec_metrics: str, body: dict[str, Any]) -> bool:
    """Does this request get its acceptance said? vLLM: by the server's flag; SGLang: asked."""
    if dialect == "sglang":
        return bool(body.get("return_spec_tokens_details"))
    return spec_metrics != "none"


def setup(r: Any, cfg: Any, body: dict[str, Any], messages: Any, faults: set[str]) -> None:
    """Fix a request's acceptance, whether it is said, and whether truly (the fault kinds
    that hit it), before it decodes."""
    if cfg.spec_k < 2:
        return
    if cfg.spec_accept_match:
        rules = [parse_accept_match(m) for m in cfg.spec_accept_match]
        r.accept = accept_for(orjson.dumps(messages), rules, cfg.spec_accept)
    else:
        r.accept = cfg.spec_accept
    if wants(cfg.dialect, cfg.spec_metrics, body):
        r.spec = Tally(cfg.spec_k, cfg.spec_metrics == "detailed")
        r.spec.bad = "bad-acceptance" in faults


def said(r: Any, dialect: str, completion_tokens: int) -> tuple[str, dict[str, Any]] | None:
    """Where the acceptance goes and what it says: ("metrics", ...) or ("sglext", ...)."""
    if r.spec is None:
        return None
    t = r.spec
    if t.bad:  # a copy that cannot be: more accepted than drafted, the length past K
        t = Tally(len(t.hist), False)
        t.steps, t.drafted, t.accepted = r.spec.steps, r.spec.drafted, 10 * r.spec.drafted + 7
    if dialect == "sglang":
        return "sglext", {"spec_tokens_details": sglang_details(t, completion_tokens)}
    return "metrics", {"speculative_decoding": vllm_metrics(t)}
