"""A request's speculative acceptance is read from either engine's dialect into one shape
(genbench.transport.acceptance), by the one stream parser, at any read boundary; a reply
without it leaves the record as it was."""

from __future__ import annotations

import orjson
import pytest

from genbench.records import RecordWriter, RequestRecord, read_records
from genbench.transport import acceptance
from genbench.transport.stream import StreamParser, parse_whole

pytestmark = pytest.mark.core

VLLM_METRICS = {
    "mean_acceptance_length": 3.5, "draft_acceptance_rate": 0.8333333333333334,
    "acceptance_histogram": [0, 1, 0, 1], "num_spec_steps": 2,
    "num_accepted_draft_tokens": 5, "num_draft_tokens": 6, "num_spec_tokens": 3,
}  # fmt: skip
SGLANG_DETAILS = {
    "spec_accept_rate": 0.875, "spec_accept_length": 3.75, "spec_cap_length": 3.0,
    "spec_block_accept_length": 0.0, "spec_num_correct_drafts": 21,
    "spec_num_proposed_drafts": 24, "spec_verify_ct": 8,
    "spec_correct_drafts_histogram": [1, 0, 0, 7], "spec_cap_lens_histogram": [],
}  # fmt: skip
USAGE = {"prompt_tokens": 5, "completion_tokens": 30, "total_tokens": 35}


def chunk(**obj: object) -> bytes:
    return b"data: " + orjson.dumps({"id": "x", "object": "chat.completion.chunk", **obj}) + b"\n\n"


def body(tail: list[bytes]) -> bytes:
    text = [chunk(choices=[{"index": 0, "delta": {"content": f"w{i} "}}]) for i in range(3)]
    fin = chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "length"}])
    return b"".join([*text, fin, *tail]) + b"data: [DONE]\n\n"


VLLM_BODY = body([chunk(choices=[], usage=USAGE,
                        metrics={"speculative_decoding": VLLM_METRICS})])  # fmt: skip
SGLANG_BODY = body([chunk(choices=[], sglext={"spec_tokens_details": SGLANG_DETAILS}),
                    chunk(choices=[], usage=USAGE)])  # fmt: skip
LEGACY_BODY = body([chunk(choices=[], usage=USAGE, meta_info={"spec_verify_ct": 8})])
PLAIN_BODY = body([chunk(choices=[], usage=USAGE)])


def parse(data: bytes, cut: int | None = None) -> RequestRecord:
    rec = RequestRecord(id="r")
    p = StreamParser(rec, 0.0, keep_text=False)
    parts = [data] if cut is None else [data[:cut], data[cut:]]
    for part in parts:
        p.feed(part, 1.0)
    assert p.finish() is None
    return rec


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            VLLM_BODY,
            {
                "src": "vllm",
                "steps": 2,
                "accepted": 5,
                "drafted": 6,
                "length": 3.5,
                "hist": [0, 1, 0, 1],
            },
        ),
        (
            SGLANG_BODY,
            {
                "src": "sglang",
                "steps": 8,
                "accepted": 21,
                "drafted": 24,
                "length": 3.625,
                "hist": [1, 0, 0, 7],
            },
        ),
        # older SGLang: the verify steps alone; 30 tokens = 1 from prefill + 8 steps + 21
        (LEGACY_BODY, {"src": "sglang-meta", "steps": 8, "accepted": 21, "length": 3.625}),
    ],
    ids=["vllm", "sglang", "sglang-meta"],
)
def test_each_dialect_gives_one_shape_at_every_read_boundary(data, expected):
    for cut in [None, *range(0, len(data), 7)]:
        rec = parse(data, cut)
        assert rec.spec == expected, cut
        assert rec.completion_tokens == 30


def test_a_reply_without_it_leaves_none():
    rec = parse(PLAIN_BODY)
    assert rec.spec is None
    assert "spec" not in rec.to_dict()


def test_a_whole_body_in_either_dialect():
    base = {"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": USAGE}  # fmt: skip
    for extra, src in [({"metrics": {"speculative_decoding": VLLM_METRICS}}, "vllm"),
                       ({"sglext": {"spec_tokens_details": SGLANG_DETAILS}}, "sglang"),
                       ({"meta_info": {"spec_verify_ct": 8}}, "sglang-meta")]:  # fmt: skip
        rec = RequestRecord(id="r")
        assert parse_whole(rec, orjson.dumps({**base, **extra}), 0.0, 1.0, False) is None
        assert rec.spec is not None and rec.spec["src"] == src


@pytest.mark.parametrize(
    "bad",
    [{"num_spec_steps": 0, "num_accepted_draft_tokens": 0}, {"num_spec_steps": "2"},
     {"num_spec_steps": 2}, {"num_spec_steps": 2, "num_accepted_draft_tokens": -1}, "x", None],
)  # fmt: skip
def test_figures_that_say_nothing_are_not_kept(bad):
    assert acceptance.from_vllm(bad) is None


def test_the_record_keeps_it_in_full_and_compact_lines(tmp_path):
    rec = parse(SGLANG_BODY)
    for compact in (False, True):
        path = tmp_path / f"r{compact}.jsonl"
        with RecordWriter(path, compact=compact) as w:
            w.write(rec)
        assert read_records(path)[0].spec == rec.spec


def test_sglang_servers_are_asked_in_the_request_others_not():
    assert acceptance.ask_for("SGLang") == acceptance.SGLANG
    assert acceptance.REQUEST_FIELDS[acceptance.SGLANG] == {"return_spec_tokens_details": True}
    assert acceptance.ask_for("vLLM") is None and acceptance.ask_for(None) is None


def test_a_silent_row_of_a_speculative_server_counts_as_drafting_nothing():
    """vLLM sends no figures for a request that never drafted: on a server that said it for
    other rows, such a row is one token a step in its group, not left out (it is what the
    drafter serves worst); on a server that never said it, rows stay out."""
    from genbench.inspect.acceptance import AcceptTally

    t = AcceptTally()
    t.add({"meta": {"server": "a", "group": "code", "completion_tokens": 41,
                    "spec_steps": 10, "spec_accepted": 30}})  # fmt: skip
    t.add({"meta": {"server": "a", "group": "chat", "completion_tokens": 21}})
    t.add({"meta": {"server": "b", "group": "chat", "completion_tokens": 21}})  # autoregressive
    doc = t.to_dict()
    assert doc is not None and doc["requests"] == 2
    by = {g["group"]: g for g in doc["by_group"]}
    assert by["chat"]["requests"] == 1 and by["chat"]["length"] == 1.0
    assert by["code"]["length"] == 4.0
    assert [g["group"] for g in doc["by_group"]] == ["chat", "code"]
