"""The sim refuses the impossible before it binds a port: a thinking budget that leaves no
reply an answer, another engine's token ids for its dialect; `auto` takes the dialect's ids
and thinking field; its first line names every setting that shapes a reply (#46)."""

from __future__ import annotations

import pytest

from genbench.errors import UsageError
from genbench.sim.config import SimConfig, startup_line

pytestmark = pytest.mark.core


@pytest.mark.parametrize(("given", "needle"), [
    ({"dialect": "sglang", "token_ids": "vllm"}, "never vLLM's"),
    ({"dialect": "vllm", "token_ids": "sglang"}, "sglang ids with --dialect sglang"),
])  # fmt: skip
def test_the_impossible_is_refused_in_one_line(given, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(")):
        SimConfig(**given).validate()


@pytest.mark.parametrize(("dialect", "ids", "field"), [
    ("sim", "none", "reasoning_content"),
    ("sglang", "sglang", "reasoning_content"),
    ("vllm", "vllm", "reasoning"),
])  # fmt: skip
def test_auto_follows_the_dialect(dialect, ids, field):
    cfg = SimConfig(dialect=dialect).validate()
    assert (cfg.token_ids, cfg.reasoning_dialect) == (ids, field)
    # what is given is kept: an older vLLM sent reasoning_content
    given = SimConfig(dialect=dialect, reasoning_dialect="reasoning_content").validate()
    assert given.reasoning_dialect == "reasoning_content"


@pytest.mark.parametrize(("given", "needle"), [
    ({"thinking_tokens": 300}, "--thinking-tokens 300 with --output-len fixed:256: every "
     "reply is thinking only"),
    ({"thinking_tokens": 40, "output_len": "uniform:10:40"}, "e.g. fixed:296"),
])  # fmt: skip
def test_a_budget_that_leaves_no_answer_is_said_in_one_line(given, needle):
    """Refused at first, it is a note now: a model that thinks past its length is one a
    test plays (tests/test_think_learn.py), and the start says what it does."""
    (note,) = SimConfig(**given).validate().notes()
    assert needle in note


def test_a_share_of_thinking_only_replies_is_a_note_and_none_is_silent():
    assert SimConfig(thinking_tokens=200).validate().notes() == []  # fixed:256: all answer
    cfg = SimConfig(thinking_tokens=30, output_len="uniform:21:40").validate()
    assert cfg.notes() == ["--thinking-tokens 30 with --output-len uniform:21:40: about 50% "
                           "of replies are thinking only, with no answer"]  # fmt: skip


def test_the_first_line_names_every_setting_that_shapes_a_reply():
    cfg = SimConfig(dialect="vllm", thinking_tokens=20, output_len="lognormal:40:0.5",
                    spec_k=3, spec_accept=0.7, drift="10:60", seed=7).validate()  # fmt: skip
    line = startup_line(cfg, 8000)
    assert line.startswith("genbench sim listening on http://127.0.0.1:8000/v1 (")
    for part in ("dialect vllm", "output-len lognormal:40:0.5", "thinking-tokens 20 in "
                 "reasoning", "token-ids vllm", "spec-k 3 accept 0.7", "drift 10:60",
                 "seed 7", "max-model-len 32768", "prefill-tps none"):  # fmt: skip
        assert part in line, (part, line)
