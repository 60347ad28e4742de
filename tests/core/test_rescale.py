"""The tokens per decode step a speculative plan is rescaled by (plan/rescale.py): counted
from each request's output and accepted drafts, so steps that drafted nothing count."""

from __future__ import annotations

import pytest

from genbench.plan.rescale import tokens_per_step
from genbench.records import RequestRecord


def rec(out: int, spec: dict | None, error: bool = False) -> RequestRecord:
    return RequestRecord(id="r", completion_tokens=out, spec=spec,
                         error_kind="http" if error else None)  # fmt: skip


def test_steps_that_drafted_nothing_count_as_steps():
    # vLLM counts 10 verify steps (accepting 30 drafts) in a 61-token answer: 60 tokens
    # after the first in 30 decode steps, 20 of which drafted nothing (T 2.0, not 4.0)
    t = tokens_per_step([rec(61, {"steps": 10, "accepted": 30, "src": "vllm"})])
    assert t == {"tokens_per_step": 2.0, "requests": 1, "said": 1, "tokens": 60, "steps": 30,
                 "drafting_share": pytest.approx(1 / 3)}  # fmt: skip


def test_a_silent_request_among_speaking_ones_drafted_nothing():
    recs = [rec(41, {"steps": 10, "accepted": 30, "src": "vllm"}), rec(41, None),
            rec(41, None, error=True)]  # fmt: skip
    t = tokens_per_step(recs)
    # 40 + 40 tokens in 10 + 40 steps; the failed request is not counted
    assert (t["tokens_per_step"], t["requests"], t["said"]) == (80 / 50, 2, 1)
    assert tokens_per_step([rec(41, None), rec(41, None)]) is None  # nothing said: no T
