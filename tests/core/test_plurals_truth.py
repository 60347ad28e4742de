"""Counts a person reads are worded by fmt.counted everywhere: "1 id", never "1 ids".
The merge's proof and the plan's pilot size, at a count of one (issue 37, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from genbench.export.merge import Proof

pytestmark = pytest.mark.core


def test_the_merge_proof_says_one_id_at_one():
    p = Proof(Path("out"), Path("in.jsonl"), 1, rows=1, ids=1, input_rows=2,
              missing=["r1"], extra=1)  # fmt: skip
    text = "\n".join(p.lines())
    assert "2 input rows, 1 id in the data)" in text, text
    assert "1 id in the data is not in in.jsonl (another input?)" in text, text
    assert "1 ids" not in text
    two = "\n".join(Proof(Path("o"), Path("i"), 1, ids=2, input_rows=2, extra=2).lines())
    assert "2 ids in the data are not in i" in two, two
