"""The index is trusted only as far as the data proves it: each batch's hash and the
file's mtime, on shards written by the real Store."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pytest

from genbench.generate.store.readback import scan_jsonl_part
from genbench.generate.store.writer import Store
from genbench.rows import DataRow, RowMeta

pytestmark = pytest.mark.core
JOB = {"model": "m", "params": {}, "turns": "all", "format": "jsonl"}


def written(tmp_path: Path, batches: int = 3, per: int = 4) -> tuple[Path, Path, list[bytes]]:
    """A shard of `batches` fsynced batches, as a job writes it."""

    async def go() -> None:
        store = Store(tmp_path, sync_rows=1 << 30)
        store.begin(store.load_existing(), JOB)
        for b in range(batches):
            for i in range(per):
                rid, fp = f"r{b * per + i}", b * per + i + 1
                line = DataRow(rid, [], RowMeta(request=f"{fp:016x}")).line()
                store.write_row(rid, line, None, (fp, 1000 + fp))
            await store.sync()
        await store.close()

    asyncio.run(go())
    data = tmp_path / "data-00000.jsonl"
    return data, tmp_path / ".genbench" / "data-00000.idx", data.read_bytes().splitlines(True)


def test_an_untouched_shard_is_trusted_from_its_index_alone(tmp_path):
    data, idx, lines = written(tmp_path)
    s = scan_jsonl_part(data, idx)
    assert s.ids == [f"r{i}" for i in range(12)] and s.notes == []
    assert s.hashes == list(range(1, 13))  # the fingerprints and line keys, from the index
    assert s.srcs == list(range(1001, 1013))


def test_a_line_garbled_at_the_same_length_is_found_by_its_batchs_hash(tmp_path):
    data, idx, lines = written(tmp_path)
    index_before = idx.read_bytes().splitlines(True)
    bad = b"#" * (len(lines[5]) - 1) + b"\n"  # in the second batch
    with open(data, "r+b") as f:
        f.seek(sum(map(len, lines[:5])))
        f.write(bad)
    s = scan_jsonl_part(data, idx, quarantine=tmp_path / "quarantine.jsonl")
    assert s.ids == [f"r{i}" for i in range(12) if i != 5] and s.quarantined == 1
    assert data.read_bytes() == b"".join(lines[:5] + lines[6:])
    after = idx.read_bytes().splitlines(True)
    assert after[0] == index_before[0]  # the batch before it, trusted as it was
    assert s.hashes == [i + 1 for i in range(12) if i != 5]
    # the rows read again keep their line keys, known from the index's batch
    assert s.srcs == [1001 + i for i in range(12) if i != 5]
    again = scan_jsonl_part(data, idx)  # the rewritten index is trusted again
    assert again.ids == s.ids and again.notes == []


def test_a_change_that_keeps_size_and_mtime_is_not_seen_by_the_fast_path(tmp_path):
    # the documented limit: bit rot under an unchanged mtime is trusted from the index
    data, idx, lines = written(tmp_path)
    st = data.stat()
    with open(data, "r+b") as f:
        f.seek(sum(map(len, lines[:5])))
        f.write(b"#" * (len(lines[5]) - 1))
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert "r5" in scan_jsonl_part(data, idx).ids


def test_a_copied_shard_with_a_new_mtime_is_verified_once(tmp_path):
    data, idx, _ = written(tmp_path)
    os.utime(data)  # e.g. copied without preserving times: the bytes are hashed
    s = scan_jsonl_part(data, idx)
    assert len(s.ids) == 12 and s.notes == []
    last = orjson.loads(idx.read_bytes().splitlines()[-1])
    assert last["mtime"] == data.stat().st_mtime_ns  # and re-stamped: fast next time
