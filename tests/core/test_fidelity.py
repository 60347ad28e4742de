"""inspect's token fidelity on rows built in memory: token-exact rows, turns without ids or
with ids found wrong, cut and short turns, and the sample the tokenizer round-trips."""

from __future__ import annotations

import pytest
from test_export_rows import IDS, ROWS, gen, row, user

from genbench.inspect.fidelity import Fidelity, _first_difference, _in_order

pytestmark = pytest.mark.core


def test_counts_from_the_rows_alone() -> None:
    f = Fidelity(16)
    for r in ROWS:
        f.add(r)
    legacy = {"id": 9, "conversations": [user("x"), {"role": "assistant", "content": "y"}],
              "meta": {"completion_tokens": 4, "finish_reason": "stop"}}  # fmt: skip
    f.add(legacy)
    d = f.describe()
    assert d["rows"] == 7
    # ok, cut, short have every generated turn exact; multi too (cut and short are not
    # about the ids); noids, bad and the legacy row are not
    assert d["rows_token_exact"] == 4 and d["rows_not_token_exact"] == 3
    assert d["rows_by_token_ids"] == {"absent": 7}
    assert d["turns"] == 8  # the legacy row's turn carries no finish reason: not generated
    assert (d["turns_token_exact"], d["turns_without_ids"], d["turns_ids_mismatch"]) == (6, 1, 1)
    assert (d["turns_cut"], d["turns_short"]) == (2, 2)
    assert f.with_ids == 6 and f.sample == []  # nothing kept unless a tokenizer will check


def test_the_sample_is_a_fixed_size_reservoir_of_turns_with_ids() -> None:
    f = Fidelity(16, sample_size=3)
    for i in range(50):
        f.add(row(f"r{i}", [user("q"), gen(f"A{i}", [1], IDS, thinking="t")]))
    assert f.with_ids == 50 and len(f.sample) == 3
    assert len({c.id for c in f.sample}) == 3
    assert all(c.ids.tolist() == IDS and c.texts[0] == "t" for c in f.sample)
    assert f.model == "m"


def test_text_in_decoded_ids_in_order_and_the_first_difference() -> None:
    assert _in_order("abc</think>\n\nanswer<|im_end|>", ("abc", "\n\nanswer"))
    assert _in_order("answer", ("", "answer"))
    assert not _in_order("answer abc", ("abc", "answer"))
    assert _first_difference([1, 2, 3], [1, 2, 4]) == 2
    assert _first_difference([1, 2, 3], [1, 2]) == 2
