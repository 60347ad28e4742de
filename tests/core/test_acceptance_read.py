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


def test_nothing_said_is_none_and_zero_steps_is_said():
    """No object: the server said nothing. Zero steps: it said the request never drafted
    (vLLM's `num_spec_steps: 0`), one token a step."""
    assert acceptance.from_vllm(None) is None and acceptance.from_sglang(None) is None
    assert acceptance.from_vllm({"num_spec_steps": 0, "num_accepted_draft_tokens": 0}) == {
        "src": "vllm", "steps": 0, "accepted": 0, "length": 1.0}  # fmt: skip


# the reply: 307 accepted of 30 drafted in 10 steps (length 31.7 at k = 4)
LIAR = {"num_spec_steps": 10, "num_accepted_draft_tokens": 307, "num_draft_tokens": 30,
        "num_spec_tokens": 4}  # fmt: skip
# no drafts count: the length 5.5 is past k + 1 = 5 (k from the histogram's size)
PAST_K = {"num_spec_steps": 2, "num_accepted_draft_tokens": 9,
          "acceptance_histogram": [0, 0, 0, 0, 2]}  # fmt: skip


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ({"num_spec_steps": "2", "num_accepted_draft_tokens": 1}, acceptance.NOT_COUNTS),
        ({"num_spec_steps": 2}, acceptance.NOT_COUNTS),
        ({"num_spec_steps": 2, "num_accepted_draft_tokens": -1}, acceptance.NOT_COUNTS),
        ({"num_spec_steps": 2, "num_accepted_draft_tokens": [1]}, acceptance.NOT_COUNTS),
        ({"num_spec_steps": 2, "num_accepted_draft_tokens": float("nan")}, acceptance.NOT_COUNTS),
        ("x", acceptance.NOT_COUNTS),
        (LIAR, acceptance.OVER_DRAFTED),
        (PAST_K, acceptance.OVER_K),
        ({"num_spec_steps": 0, "num_accepted_draft_tokens": 3}, acceptance.OVER_K),
    ],
)
def test_figures_that_cannot_be_are_dropped_with_why(bad, why):
    assert acceptance.from_vllm(bad) == {"src": "vllm", "dropped": why}


def test_more_steps_than_tokens_is_dropped_once_the_tokens_are_known():
    """Each verify step gives a token at least: 40 steps for 30 tokens cannot be; the
    record keeps why, not the figures (a record's readers take `spec` as sound)."""
    liar = {**VLLM_METRICS, "num_spec_steps": 40, "acceptance_histogram": [38, 1, 0, 1]}
    rec = parse(body([chunk(choices=[], usage=USAGE, metrics={"speculative_decoding": liar})]))
    assert rec.spec is None and rec.spec_dropped == acceptance.OVER_TOKENS
    assert read_back(rec).spec_dropped == acceptance.OVER_TOKENS
    sglang = {**SGLANG_DETAILS, "spec_num_correct_drafts": 99}  # 99 accepted of 24 drafted
    rec = parse(body([chunk(choices=[], sglext={"spec_tokens_details": sglang}),
                      chunk(choices=[], usage=USAGE)]))  # fmt: skip
    assert (rec.spec, rec.spec_dropped) == (None, acceptance.OVER_DRAFTED)


def read_back(rec: RequestRecord) -> RequestRecord:
    return RequestRecord.from_dict(orjson.loads(rec.to_json(compact=True)))


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


def test_a_row_that_said_nothing_is_unknown_and_left_out_of_the_pool():
    """The issue's case: rows whose replies lost their usage chunk said nothing of what was
    drafted; counting them at one token a step pulled the pool down (2.36 for 3.01). They
    are counted as unknown and left out. A row that said it drafted nothing (vLLM's zero
    steps) is one token a step in its group; figures that cannot be are dropped, by why."""
    from genbench.inspect.acceptance import AcceptTally

    t = AcceptTally()
    t.add({"meta": {"server": "a", "group": "code", "completion_tokens": 41,
                    "spec_steps": 10, "spec_accepted": 30}})  # fmt: skip
    t.add({"meta": {"server": "a", "group": "chat", "completion_tokens": 21,
                    "spec_steps": 0, "spec_accepted": 0}})  # fmt: skip
    for _ in range(3):  # said nothing: JSONL leaves the keys out, Parquet holds nulls
        t.add({"meta": {"server": "a", "group": "code", "completion_tokens": 41}})
    t.add({"meta": {"group": "code", "completion_tokens": 41, "spec_steps": None}})
    t.add({"meta": {"group": "code", "completion_tokens": 41, "spec_steps": 10,
                    "spec_accepted": 307, "spec_drafted": 30}})  # fmt: skip
    t.add({"meta": {"group": "code", "completion_tokens": 5, "spec_steps": 10,
                    "spec_accepted": 3}})  # fmt: skip
    t.add({"meta": {"group": "code", "completion_tokens": 5, "spec_steps": "10",
                    "spec_accepted": 3}})  # fmt: skip
    t.add({"meta": {"group": "code", "completion_tokens": 41, "spec_dropped": "steps > tokens"}})
    doc = t.to_dict()
    assert doc is not None and doc["requests"] == 2
    assert doc["unknown"] == 4
    assert doc["dropped"] == {"steps > tokens": 2, "accepted > drafted": 1, "not counts": 1}
    by = {g["group"]: g for g in doc["by_group"]}
    assert by["chat"]["requests"] == 1 and by["chat"]["length"] == 1.0
    assert by["code"]["requests"] == 1 and by["code"]["length"] == 4.0
    assert doc["length"] == pytest.approx(1.0 + 30 / 30)  # (10 + 20 steps, 30 accepted)
    words = acceptance.lines(doc | {"of": 10}, noun="row")[1]
    assert words == (
        "  left out: 4 rows that said none (unknown) · 4 dropped, their figures cannot be "
        "(steps > tokens: 2, accepted > drafted: 1, not counts: 1)"
    )


def test_run_pools_verify_steps_and_counts_what_it_left_out():
    """`run`'s pool is the server counters' (over verify steps): a request that never drafted
    adds none; one that said nothing or said the impossible is counted, not pooled."""
    from genbench.stats import acceptance as pool

    def rec(spec=None, dropped=None):
        return RequestRecord(id="r", completion_tokens=30, spec=spec, spec_dropped=dropped)

    recs = [rec({"src": "vllm", "steps": 10, "accepted": 20, "length": 3.0}),
            rec({"src": "vllm", "steps": 0, "accepted": 0, "length": 1.0}),
            rec(), rec(dropped=acceptance.OVER_DRAFTED)]  # fmt: skip
    out = pool(recs)
    assert out is not None
    assert (out["requests"], out["of"], out["length"]) == (1, 4, 3.0)
    assert (out["unknown"], out["dropped"]) == (1, {acceptance.OVER_DRAFTED: 1})
