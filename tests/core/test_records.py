"""The request record: what it derives from what was observed, and how it is stored."""

from __future__ import annotations

import orjson
import pytest
from synthetic import rec

from genbench.records import ErrorKind, RecordWriter, RequestRecord, read_records

pytestmark = pytest.mark.core


def test_ok_and_end_to_end_time():
    r = rec(10.0, [0.5, 1.0], end=12.25)
    assert r.ok is True
    assert r.e2e == 2.25  # 12.25 - 10
    failed = rec(10.0, [], end=None, error=ErrorKind.READ_TIMEOUT)
    assert failed.ok is False
    assert failed.e2e is None


def test_answer_tokens_are_completion_minus_reasoning():
    assert rec(0.5, tokens=10, reasoning=4).answer_tokens == 6
    assert rec(0.5, tokens=10).answer_tokens == 10  # no reasoning reported: all answer
    assert rec(0.5, reasoning=4).answer_tokens is None  # no usage at all


def test_tpot_with_multi_token_chunks_counts_tokens_not_chunks():
    # 4 chunks at 0.5 0.75 1.5 2.5 carrying 9 tokens (speculative decoding):
    # decode time 2.5 - 0.5 = 2; TPOT = 2 / (9 - 1) = 0.25 s; 1/0.25 = 4 tok/s
    r = rec(1.0, [0.5, 0.75, 1.5, 2.5], tokens=9)
    assert r.decode_time == 2.0
    assert r.tpot == 0.25
    assert r.decode_rate == 4.0
    # ITL is per chunk: the gaps 0.25 0.75 1.0
    assert r.itls() == [0.25, 0.75, 1.0]


def test_tpot_needs_two_chunks_and_two_tokens():
    assert rec(1.0, [0.5], tokens=5).decode_time is None  # one chunk: no decode time
    assert rec(1.0, [0.5], tokens=5).tpot is None
    assert rec(1.0, [0.5], tokens=5).itls() == []
    assert rec(1.0, [0.5, 1.5], tokens=1).tpot is None  # one token: nothing after it
    assert rec(1.0, [0.5, 1.5], tokens=0).tpot is None
    assert rec(1.0, [0.5, 1.5], tokens=None).tpot is None
    assert rec(1.0, [0.5, 1.5], tokens=2).tpot == 1.0  # (1.5 - 0.5) / (2 - 1)
    # every chunk at once: TPOT 0, and no decode rate rather than a division by zero
    burst = rec(1.0, [0.5, 0.5], tokens=3)
    assert burst.tpot == 0.0
    assert burst.decode_rate is None


def test_to_dict_rounds_offsets_to_microseconds_and_drops_what_was_not_kept():
    r = rec(1.0, [0.1234567, 0.2], tokens=2)
    d = r.to_dict()
    assert d["chunk_offsets"] == [0.123457, 0.2]
    assert "text" not in d and "reasoning" not in d and "extra" not in d
    r.text, r.reasoning, r.extra = "42", "let me think", {"row": 3}
    d = r.to_dict()
    assert (d["text"], d["reasoning"], d["extra"]) == ("42", "let me think", {"row": 3})
    assert r.chunk_offsets == [0.1234567, 0.2]  # the record itself keeps full precision


def test_from_dict_ignores_fields_it_does_not_know():
    r = rec(1.0, [0.5, 1.5], "ra", tokens=4, reasoning=2, prompt=7, rid="x")
    d = orjson.loads(r.to_json())
    d["added_by_a_newer_version"] = 1
    back = RequestRecord.from_dict(d)
    assert back == r


def test_writer_appends_lines_and_reader_skips_a_torn_tail(tmp_path):
    path = tmp_path / "run" / "sub" / "requests.jsonl"  # directories made as needed
    a = rec(1.0, [0.5], tokens=1, rid="a")
    b = rec(2.0, [0.5, 0.75], tokens=2, rid="b", error="read_timeout")
    with RecordWriter(path, fsync=True) as w:
        w.write(a)
        w.write(b)
        assert w.count == 2
    w.close()  # closing twice is harmless
    with open(path, "ab") as f:
        f.write(b"\n")  # a blank line is skipped
        f.write(rec(3.0, rid="torn").to_json()[:-5])  # a crash mid-write: no newline
    got = read_records(path)
    assert [r.id for r in got] == ["a", "b"]
    assert got[1].error_kind == "read_timeout" and got[1].chunk_offsets == [0.5, 0.75]


def test_a_second_writer_appends_after_what_is_there(tmp_path):
    path = tmp_path / "requests.jsonl"
    for rid in ("a", "b"):
        with RecordWriter(path) as w:
            w.write(rec(1.0, [0.5], tokens=1, rid=rid))
    assert [r.id for r in read_records(path)] == ["a", "b"]


def test_the_writer_fsyncs_only_when_asked(tmp_path, monkeypatch):
    import genbench.records as records

    synced = []
    monkeypatch.setattr(records.os, "fsync", lambda fd: synced.append(fd))
    with RecordWriter(tmp_path / "a.jsonl") as w:
        w.write(rec(1.0, rid="a"))
    assert synced == []
    with RecordWriter(tmp_path / "b.jsonl", fsync=True) as w:
        w.write(rec(1.0, rid="b"))
        w.write(rec(1.0, rid="c"))
    assert len(synced) == 2


def test_a_closed_writer_writes_nothing_more(tmp_path):
    w = RecordWriter(tmp_path / "a.jsonl")
    w.close()
    with pytest.raises(ValueError):
        w.write(rec(1.0))
