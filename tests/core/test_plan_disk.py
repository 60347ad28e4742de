"""The plan's hidden-state forecast held to the job's disk (plan/disk.py): worked by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from genbench.plan import HiddenStates, StorageModel
from genbench.plan.disk import disk_check, free_space

pytestmark = pytest.mark.core

AT = Path("/data/job")


def _rows(hidden: HiddenStates, tokens_per_sample: int, counts: list[int]) -> list[dict]:
    model = StorageModel(1000.0, None, "b", hidden)  # 1,000 JSONL bytes a sample
    return [{"samples": n, "storage": model.row(n, n * tokens_per_sample)} for n in counts]


def test_fp8_bytes_are_a_byte_a_value_and_a_scale_per_token():
    h = HiddenStates(hidden_size=4096, layers=4)  # bf16
    # 10 tokens × (4096 × 4 × 1 byte + 4 bytes of scale) = 163,880; bf16 327,680
    assert h.fp8_bytes_for(10) == 163_880 and h.bytes_for(10) == 327_680
    row = _rows(h, 10, [1])[0]["storage"]
    assert row["hidden_state_bytes_fp8"] == 163_880


def test_a_disk_that_holds_the_job_says_nothing_and_counts_what_fits():
    rows = _rows(HiddenStates(256, 4), 100, [10, 20])
    # a sample: 1,000 + 100 × 256 × 4 × 2 = 205,800 bytes; FP8 1,000 + 100 × 1,028 = 103,800
    doc, notes = disk_check(rows, 10_000_000, AT)
    assert notes == []
    assert doc == {"path": "/data/job", "free_bytes": 10_000_000, "fits_samples": 48,
                   "fits_samples_fp8": 96}  # fmt: skip


def test_where_bf16_will_not_fit_but_fp8_will_the_note_says_both_ways():
    rows = _rows(HiddenStates(256, 4), 100, [10, 20, 50])
    # 50 samples: 10.29 MB in bf16, 5.19 MB in FP8; 8 MB free
    doc, notes = disk_check(rows, 8_000_000, AT)
    assert doc["fits_samples"] == 38 and doc["fits_samples_fp8"] == 77
    (note,) = notes
    assert note.startswith("the disk will not hold the hidden states: 50 samples need up to ")
    assert "1.3× the 8.00 MB free at /data/job; it holds 38 samples" in note
    assert "in FP8 (5.19 MB, generate --states-fp8) it would hold them all" in note
    assert "train online" in note


def test_the_fields_job_is_far_beyond_any_disk_and_the_online_route_is_named():
    # 1.8B tokens of a 7,168-wide model at 4 layers: 103 TB in bf16, 51.6 TB in FP8
    rows = _rows(HiddenStates(7168, 4), 2000, [900_000])
    doc, notes = disk_check(rows, 2_000_000_000_000, AT, given=False)  # 2 TB free
    (note,) = notes
    assert "103 TB" in note and "52×" in note and "in FP8 still 51.6 TB" in note
    assert "out of reach" in note and "current directory" in note
    assert "a trainer that captures the states while it trains" in note


def test_no_hidden_states_no_check_and_the_free_space_of_a_dir_not_made_yet(tmp_path):
    model = StorageModel(1000.0, None, "b")
    rows = [{"samples": 10, "storage": model.row(10, 1000)}]
    assert disk_check(rows, 1, AT) == ({"path": "/data/job", "free_bytes": 1}, [])
    free, at = free_space(tmp_path / "not" / "yet")
    assert at == tmp_path and free > 0
