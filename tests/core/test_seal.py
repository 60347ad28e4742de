"""A sealed part's checksum (genbench.generate.store.seal): verified, changed, or not
verified where none was recorded; a resume sets aside every row of a batch whose bytes
changed, readable or not, and keeps the others."""

from __future__ import annotations

import zlib
from pathlib import Path

import orjson
import pytest

from genbench.generate.store import seal as sealed
from genbench.generate.store.durable import digest64, index_entry
from genbench.generate.store.readback import scan_jsonl_part

pytestmark = pytest.mark.core


def row(i: int) -> bytes:
    return orjson.dumps({"id": f"r{i}", "conversations": [{"role": "user", "content": "hi"}],
                         "meta": {}}) + b"\n"  # fmt: skip


def part_with_index(tmp_path: Path, batches: list[list[int]]) -> tuple[Path, Path]:
    """A JSONL part and its index, one index batch per list of rows, as generate writes."""
    (tmp_path / ".genbench").mkdir(exist_ok=True)
    part, idx = tmp_path / "data-00000.jsonl", tmp_path / ".genbench" / "data-00000.idx"
    data, entries = b"", b""
    for rows in batches:
        chunk = b"".join(row(i) for i in rows)
        data += chunk
        ids = [f"r{i}" for i in rows]
        entries += index_entry(len(data), ids, [], digest64(chunk), 1)
    part.write_bytes(data)
    idx.write_bytes(entries)
    return part, idx


def test_verified_changed_and_not_verified(tmp_path):
    part, _ = part_with_index(tmp_path, [[0, 1]])
    assert sealed.check(part).state == sealed.UNSEALED  # an older genbench's part
    sealed.seal(part)
    doc = orjson.loads((tmp_path / ".genbench" / "data-00000.jsonl.sum").read_bytes())
    assert doc["bytes"] == part.stat().st_size
    assert doc["crc32"] == f"{zlib.crc32(part.read_bytes()):08x}"
    assert sealed.check(part).state == sealed.VERIFIED
    data = bytearray(part.read_bytes())
    data[data.index(b"hi")] = ord("h") ^ 1  # one bit, the size kept
    part.write_bytes(data)
    got = sealed.check(part)
    assert got.state == sealed.CHANGED and got.detail.startswith(f"sealed at {len(data)} bytes")
    assert sealed.held_ids(part) == ["r0", "r1"]  # from its index
    lines = sealed.damage_lines(tmp_path, [got])
    assert lines[0].startswith("data-00000.jsonl: its bytes changed since it was sealed")
    assert "it holds 2 rows (r0, r1); regenerate them: genbench generate -i INPUT -o" in lines[0]
    other = tmp_path / "data-00001.jsonl"
    other.write_bytes(row(2))
    checks = sealed.verify([part, other])
    assert sealed.summary(checks) == (
        "integrity: 0 of 2 parts verified (CRC-32); 1 changed since sealed; 1 not verified "
        "(no checksum recorded: written before genbench sealed its parts, or still being "
        "written)"
    )


def test_a_resume_sets_aside_the_rows_of_each_changed_batch_even_those_that_read(tmp_path):
    """A bit flipped inside a text leaves valid JSON: the row reads, and its bytes are not
    those written. Only the batch's hash tells: its rows go, the other batch's stay."""
    part, idx = part_with_index(tmp_path, [[0, 1], [2, 3]])
    data = bytearray(part.read_bytes())
    data[data.rindex(b"hi")] = ord("H")  # in r3, batch 2: still a readable row
    part.write_bytes(data)
    quarantine = tmp_path / "quarantine.jsonl"
    scan = scan_jsonl_part(part, idx, True, quarantine, changed=True)
    assert scan.ids == ["r0", "r1"]
    assert "2 rows of the batches that changed (r2, r3) moved to quarantine.jsonl" in scan.notes[0]
    assert [orjson.loads(x)["id"] for x in quarantine.read_bytes().splitlines()] == ["r2", "r3"]
    assert part.read_bytes() == row(0) + row(1)


def test_the_command_that_regenerates_a_shares_part_names_its_share(tmp_path):
    (tmp_path / ".genbench").mkdir()
    job = {"input": "in put.jsonl", "params": {"max_tokens": 16}}
    (tmp_path / ".genbench" / "job-2of4.json").write_bytes(orjson.dumps(job))
    part = tmp_path / "data-2of4-00003.jsonl"
    assert sealed.regenerate_command(tmp_path, part) == (
        f"genbench generate -i 'in put.jsonl' -o {tmp_path} --shard 2/4 --url URL --max-tokens 16"
    )


def test_inspects_clean_copy_is_sealed(tmp_path):
    """`inspect --drop ... --out CLEAN` writes each part whole, so it is sealed: merge and a
    resume into the copy verify it instead of calling it "written before genbench sealed"."""
    from genbench.inspect import Settings, inspect_data
    from genbench.inspect.clean import parse_drop

    src = tmp_path / "in"
    src.mkdir()
    rows = Path(__file__).parent / "rows_written_before_rowmeta.jsonl"
    (src / "data-00000.jsonl").write_bytes(rows.read_bytes())
    inspect_data(src, Settings(), drop=parse_drop("short"), out=tmp_path / "clean")
    assert sealed.check(tmp_path / "clean" / "data-00000.jsonl").state == sealed.VERIFIED
