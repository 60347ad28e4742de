"""generate's resume scan on crafted files: which ids a shard holds, what is cut, and what
the index may be trusted for (only bytes the data file has, ending on a line boundary)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from genbench.generate.store.durable import scan_errors
from genbench.generate.store.readback import scan_jsonl_part
from genbench.generate.store.writer import Store

pytestmark = pytest.mark.core


def line(row_id) -> bytes:
    return orjson.dumps({"id": row_id, "conversations": [], "meta": {}}) + b"\n"


def batch(end: int, ids: list[str]) -> bytes:
    return orjson.dumps({"end": end, "ids": ids}) + b"\n"


def shard(tmp_path: Path, content: bytes, index: bytes | None = None) -> tuple[Path, Path]:
    data, idx = tmp_path / "data-00000.jsonl", tmp_path / "data-00000.idx"
    data.write_bytes(content)
    if index is not None:
        idx.write_bytes(index)
    return data, idx


def index_of(idx: Path) -> list[dict]:
    """The index's batches: end and ids (their content checks are tested on their own)."""
    return [
        {k: v for k, v in orjson.loads(x).items() if k in ("end", "ids")}
        for x in idx.read_bytes().splitlines()
    ]


def indexed(idx: Path) -> tuple[int, list[str]]:
    """What the index vouches for: up to which byte, which ids (in however many batches)."""
    batches = index_of(idx)
    return batches[-1]["end"], [i for b in batches for i in b["ids"]]


A, B, C, D = line("a"), line("b"), line("c"), line("d")


def test_a_clean_shard_without_an_index(tmp_path):
    data, idx = shard(tmp_path, A + B + C)
    s = scan_jsonl_part(data, idx)
    assert (s.ids, s.valid_bytes, s.notes) == (["a", "b", "c"], len(A + B + C), [])
    # the scan leaves an index of what it read, for the next resume
    assert indexed(idx) == (len(A + B + C), ["a", "b", "c"])
    s = scan_jsonl_part(data, None)  # without an index path, none is written
    assert s.ids == ["a", "b", "c"]


def test_an_index_that_covers_the_shard_is_trusted_and_left_alone(tmp_path):
    index = batch(len(A), ["a"]) + batch(len(A + B), ["b"])
    data, idx = shard(tmp_path, A + B, index)
    s = scan_jsonl_part(data, idx)
    assert (s.ids, s.valid_bytes, s.notes) == (["a", "b"], len(A + B), [])
    assert idx.read_bytes() == index  # nothing to repair: not rewritten


def test_rows_written_after_the_last_index_update_are_found(tmp_path):
    # the index was last updated after row a; b and c are in the file, not in the index
    data, idx = shard(tmp_path, A + B + C, batch(len(A), ["a"]))
    s = scan_jsonl_part(data, idx)
    assert s.ids == ["a", "b", "c"]
    assert s.valid_bytes == len(A + B + C)
    assert indexed(idx) == (len(A + B + C), ["a", "b", "c"])


def test_a_torn_last_line_is_cut(tmp_path):
    torn = line("d")[:-7]
    data, idx = shard(tmp_path, A + B + torn, batch(len(A), ["a"]))
    s = scan_jsonl_part(data, idx)
    assert s.ids == ["a", "b"]
    assert s.valid_bytes == len(A + B)
    assert s.notes == [f"data-00000.jsonl: cut {len(torn)} bytes of an incomplete last line"]
    assert data.read_bytes() == A + B
    assert indexed(idx) == (len(A + B), ["a", "b"])


def test_without_repair_nothing_is_cut_or_rewritten(tmp_path):
    index = batch(len(A), ["a"])
    data, idx = shard(tmp_path, A + B + b'{"id": "c"', index)
    s = scan_jsonl_part(data, idx, repair=False)
    assert s.ids == ["a", "b"] and s.valid_bytes == len(A + B)
    assert s.notes == ["data-00000.jsonl: cut 10 bytes of an incomplete last line"]
    assert data.read_bytes() == A + B + b'{"id": "c"'
    assert idx.read_bytes() == index


@pytest.mark.parametrize(
    "bad",
    [
        b"{not json}\n",  # garbled
        b'{"conversations": []}\n',  # no id
        b'{"id": true}\n',  # an id that is not text or an integer
        b'{"id": null}\n',
        b'{"id": 1.5}\n',
        b"[1, 2]\n",  # not an object
        b'"text"\n',
    ],
)
def test_an_unreadable_line_between_rows_is_quarantined_and_the_rest_kept(tmp_path, bad):
    data, idx = shard(tmp_path, A + bad + C)
    q = tmp_path / "quarantine.jsonl"
    s = scan_jsonl_part(data, idx, quarantine=q)
    # the bad line goes, with its offset, to the quarantine file; the rows after it stay
    assert s.ids == ["a", "c"] and s.quarantined == 1
    assert data.read_bytes() == A + C and s.valid_bytes == len(A + C)
    (entry,) = [orjson.loads(x) for x in q.read_bytes().splitlines()]
    assert (entry["file"], entry["offset"], entry["length"]) == (data.name, len(A), len(bad))
    assert entry["text"] == bad.rstrip(b"\n").decode()
    (note,) = s.notes
    assert f"an unreadable line at byte {len(A)} ({len(bad)} bytes) moved to quarantine" in note
    assert "the rest of the file is kept" in note and "generated again" in note
    assert indexed(idx) == (len(A + C), ["a", "c"])
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("bad", [b"{not json}\n", b'{"conversations": []}\n', b"\n"])
def test_unreadable_lines_at_the_end_are_a_torn_tail_and_cut(tmp_path, bad):
    data, idx = shard(tmp_path, A + B + bad + bad)
    q = tmp_path / "quarantine.jsonl"
    s = scan_jsonl_part(data, idx, quarantine=q)
    assert s.ids == ["a", "b"] and data.read_bytes() == A + B
    assert s.notes == [f"data-00000.jsonl: cut {2 * len(bad)} bytes of an incomplete last line"]
    assert not q.exists()


def test_integer_ids_are_kept_as_text(tmp_path):
    data, idx = shard(tmp_path, line(7) + line("x"))
    assert scan_jsonl_part(data, idx).ids == ["7", "x"]


def test_an_index_beyond_the_file_is_trusted_only_up_to_the_file(tmp_path):
    # the index claims rows up to a byte the file does not have: only the batches before
    # that one count, and the rest of the file is read line by line
    index = batch(len(A), ["a"]) + batch(len(A + B + C) + 100, ["b", "c", "ghost"])
    data, idx = shard(tmp_path, A + B + C, index)
    s = scan_jsonl_part(data, idx)
    assert s.ids == ["a", "b", "c"]
    assert indexed(idx) == (len(A + B + C), ["a", "b", "c"])


def test_an_index_beyond_the_file_is_dropped_even_when_nothing_follows(tmp_path):
    # the file ends exactly where the trusted batches end: the batch beyond it must still
    # go, or once resume appends a row as long as the ghost batch claims, the next scan
    # would trust it and count a row that was never written
    index = batch(len(A), ["a"]) + batch(len(A + B), ["ghost"])
    data, idx = shard(tmp_path, A, index)
    assert scan_jsonl_part(data, idx).ids == ["a"]
    with open(data, "ab") as f:  # resume appends b and indexes it
        f.write(B)
    with open(idx, "ab") as f:
        f.write(batch(len(A + B), ["b"]))
    assert scan_jsonl_part(data, idx).ids == ["a", "b"]


def test_an_index_off_a_line_boundary_is_not_about_this_file(tmp_path):
    # end falls inside row b: the whole index is ignored and the file read from the start
    index = batch(len(A), ["x"]) + batch(len(A) + 3, ["y"])
    data, idx = shard(tmp_path, A + B, index)
    s = scan_jsonl_part(data, idx)
    assert s.ids == ["a", "b"]
    assert indexed(idx) == (len(A + B), ["a", "b"])


def test_the_index_is_read_up_to_its_first_bad_entry(tmp_path):
    ok = batch(len(A), ["a"])
    for rest in (
        b'{"end": 5',  # torn (and the entries after it with it)
        b"{oops}\n",  # garbled
        b'{"ids": ["b"]}\n',  # no end
        b'{"end": "x", "ids": ["b"]}\n',  # an end that is not a number
        b'{"end": 3, "ids": ["b"]}\n',  # going backwards
    ):
        data, idx = shard(tmp_path, A + B, ok + rest + batch(len(A + B), ["b"]))
        s = scan_jsonl_part(data, idx)
        assert s.ids == ["a", "b"], rest  # b read from the file, not from the index
        assert indexed(idx) == (len(A + B), ["a", "b"])


def test_the_index_is_trusted_without_reading_what_it_covers(tmp_path):
    # the fast path: ids come from the index for the bytes it covers (here deliberately
    # not those of the file, to show which was read)
    data, idx = shard(tmp_path, A + B + C, batch(len(A + B), ["p", "q"]))
    assert scan_jsonl_part(data, idx).ids == ["p", "q", "c"]


def test_an_empty_shard(tmp_path):
    data, idx = shard(tmp_path, b"")
    s = scan_jsonl_part(data, idx)
    assert (s.ids, s.valid_bytes, s.notes) == ([], 0, [])
    assert not idx.exists()
    # an index that names rows of an empty file is emptied
    data, idx = shard(tmp_path, b"", batch(len(A), ["a"]))
    assert scan_jsonl_part(data, idx).ids == []
    assert idx.read_bytes() == b""


def test_the_errors_file(tmp_path):
    path = tmp_path / "errors.jsonl"
    assert scan_errors(path) == (set(), [])
    good = (
        orjson.dumps({"id": "x", "error": "read_timeout"})
        + b"\n"
        + orjson.dumps({"line": 7, "error": "bad row"})  # a row without an id: its line
        + b"\n"
        + orjson.dumps({"id": 12})
        + b"\n"
        + b"[1]\n"  # JSON, not an entry: skipped, kept
    )
    path.write_bytes(good + b'{"id": "y", "err')
    keys, notes = scan_errors(path, repair=False)
    assert keys == {"x", "line:7", "12"}
    assert notes == ["errors.jsonl: cut 16 bytes of an incomplete last line"]
    assert path.read_bytes().endswith(b'"err')
    keys, notes = scan_errors(path)
    assert path.read_bytes() == good
    path.write_bytes(good + b"{garbled}\n" + orjson.dumps({"id": "z"}) + b"\n")
    keys, notes = scan_errors(path)
    assert keys == {"x", "line:7", "12"}  # z after a garbled line is not trusted
    assert path.read_bytes() == good


def test_load_existing_scans_every_shard_and_the_errors(tmp_path):
    out = tmp_path / "out"
    (out / ".genbench").mkdir(parents=True)
    (out / ".genbench" / "job.json").write_bytes(orjson.dumps({"model": "m"}))
    (out / "data-00000.jsonl").write_bytes(A + B)
    (out / ".genbench" / "data-00000.idx").write_bytes(batch(len(A + B), ["a", "b"]))
    # the second shard: one row after its index, then a torn line; b again (a duplicate)
    (out / "data-00001.jsonl").write_bytes(C + line("b") + b'{"id": "e"')
    (out / ".genbench" / "data-00001.idx").write_bytes(batch(len(C), ["c"]))
    (out / "data-00002.parquet.tmp").write_bytes(b"half a conversion")
    (out / "errors.jsonl").write_bytes(orjson.dumps({"id": "f"}) + b"\n")
    (out / "data-2of4-00000.jsonl").write_bytes(D)  # another --shard's file: not ours
    (out / "notes.txt").write_bytes(b"")
    ex = Store(out).load_existing()
    assert set(ex.done) == {"a", "b", "c"}
    assert ex.duplicates == 1
    assert ex.failed == {"f"}
    assert [p.name for p in ex.parts] == ["data-00000.jsonl", "data-00001.jsonl"]
    assert [p.name for p in ex.jsonl_parts] == ["data-00000.jsonl", "data-00001.jsonl"]
    assert ex.next_number == 2
    assert ex.job == {"model": "m"}
    assert ex.notes == ["data-00001.jsonl: cut 10 bytes of an incomplete last line"]
    assert not (out / "data-00002.parquet.tmp").exists()
    assert (out / "data-00001.jsonl").read_bytes() == C + line("b")
    # the other shard's files are its own
    ex2 = Store(out, shard_tag="2of4").load_existing()
    assert set(ex2.done) == {"d"} and ex2.failed == set()


def test_load_existing_of_no_directory_or_a_broken_job_file(tmp_path):
    ex = Store(tmp_path / "absent").load_existing()
    assert (ex.done, ex.failed, ex.parts, ex.next_number, ex.job) == ({}, set(), [], 0, None)
    (tmp_path / "out" / ".genbench").mkdir(parents=True)
    (tmp_path / "out" / ".genbench" / "job.json").write_bytes(b"{torn")
    assert Store(tmp_path / "out").load_existing().job is None


def test_load_existing_finishes_an_interrupted_conversion(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    out = tmp_path / "out"
    (out / ".genbench").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a", "b"]}), out / "data-00000.parquet")
    # converted, but the JSONL was not yet deleted
    (out / "data-00000.jsonl").write_bytes(A + B)
    (out / ".genbench" / "data-00000.idx").write_bytes(batch(len(A + B), ["a", "b"]))
    (out / "data-00001.jsonl").write_bytes(C)
    ex = Store(out, fmt="parquet").load_existing()
    assert set(ex.done) == {"a", "b", "c"}
    assert [p.name for p in ex.parts] == ["data-00000.parquet", "data-00001.jsonl"]
    assert [p.name for p in ex.jsonl_parts] == ["data-00001.jsonl"]
    assert not (out / "data-00000.jsonl").exists()
    # the index stays: the Parquet shard's rows keep their input lines' keys in it
    assert (out / ".genbench" / "data-00000.idx").exists()
    assert ex.next_number == 2


def test_an_empty_batch_in_the_index_is_still_in_order(tmp_path):
    index = batch(len(A), ["a"]) + batch(len(A), []) + batch(len(A + B), ["b"])
    data, idx = shard(tmp_path, A + B, index)
    assert scan_jsonl_part(data, idx).ids == ["a", "b"]
    assert idx.read_bytes() == index  # every batch trusted: nothing to rewrite


def test_a_blank_first_line_is_not_a_row(tmp_path):
    data, idx = shard(tmp_path, b"\n" + A + B)
    s = scan_jsonl_part(data, idx, quarantine=tmp_path / "q.jsonl")
    assert (s.ids, s.valid_bytes, s.quarantined) == (["a", "b"], len(A + B), 1)
    assert data.read_bytes() == A + B


def resumable(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    (out / ".genbench").mkdir(parents=True)
    (out / "data-00000.jsonl").write_bytes(A + B + line("a"))  # a again: a duplicate
    (out / ".genbench" / "data-00000.idx").write_bytes(batch(len(A), ["a"]))
    (out / "data-00001.jsonl").write_bytes(C + line("b") + b'{"id": "e"')  # b again, torn
    (out / "errors.jsonl").write_bytes(orjson.dumps({"id": "f"}) + b"\n" + b'{"id": "g"')
    return out


def test_load_existing_repairs_what_it_scans(tmp_path):
    out = resumable(tmp_path)
    ex = Store(out).load_existing()
    assert set(ex.done) == {"a", "b", "c"}
    assert ex.duplicates == 2  # one in each shard
    assert ex.failed == {"f"}
    assert (out / "data-00001.jsonl").read_bytes() == C + line("b")
    assert (out / "errors.jsonl").read_bytes() == orjson.dumps({"id": "f"}) + b"\n"
    # the indexes now cover each shard
    assert indexed(out / ".genbench" / "data-00000.idx") == (len(A + B + A), ["a", "b", "a"])
    assert indexed(out / ".genbench" / "data-00001.idx") == (len(C + B), ["c", "b"])


def test_load_existing_without_repair_changes_nothing(tmp_path):
    out = resumable(tmp_path)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    ex = Store(out).load_existing(repair=False)
    assert set(ex.done) == {"a", "b", "c"} and ex.failed == {"f"}
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_directory_without_shards_starts_at_shard_zero(tmp_path):
    (tmp_path / "out" / ".genbench").mkdir(parents=True)
    ex = Store(tmp_path / "out").load_existing()
    assert (ex.next_number, ex.parts, ex.done) == (0, [], {})


def test_a_converted_shard_without_an_index_is_finished_too(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    out = tmp_path / "out"
    (out / ".genbench").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a"]}), out / "data-00000.parquet")
    (out / "data-00000.jsonl").write_bytes(A)  # left over, and it never had an index
    ex = Store(out, fmt="parquet").load_existing()
    assert set(ex.done) == {"a"} and not (out / "data-00000.jsonl").exists()


def test_an_index_torn_at_its_end(tmp_path):
    data, idx = shard(tmp_path, A + B, batch(len(A), ["a"]) + b'{"end": 9')
    assert scan_jsonl_part(data, idx).ids == ["a", "b"]


def test_a_quarantine_cut_short_by_a_crash_is_not_written_twice(tmp_path):
    """The entry is written before the data file is rewritten: a crash (or a full disk)
    between the two leaves both, and the rerun quarantines the same line again."""
    bad = b"{not json}\n"
    data, idx = shard(tmp_path, A + bad + C)
    q = tmp_path / "quarantine.jsonl"
    scan_jsonl_part(data, idx, quarantine=q)
    first = q.read_bytes()
    data.write_bytes(A + bad + C)  # as the crash left it: the entry written, the line still in
    idx.unlink()
    s = scan_jsonl_part(data, idx, quarantine=q)
    assert s.ids == ["a", "c"] and data.read_bytes() == A + C
    assert q.read_bytes() == first  # the one entry, once
    q.write_bytes(first + first[: len(first) // 2])  # a crash mid-append: a torn entry
    data.write_bytes(A + bad + C)
    scan_jsonl_part(data, idx, quarantine=q)
    assert q.read_bytes() == first
    # another unreadable line, elsewhere, later: a new entry beside the first
    data.write_bytes(A + C + bad + C)
    scan_jsonl_part(data, idx, quarantine=q)
    entries = [orjson.loads(x) for x in q.read_bytes().splitlines()]
    assert [e["offset"] for e in entries] == [len(A), len(A + C)]
    assert len({e["entry_id"] for e in entries}) == 2
