"""A row's `meta` is one typed value, `RowMeta`: files written before it existed read back
(JSONL and Parquet, fixtures made by `genbench generate` against the sim before the
change), written again to the same bytes, keys it lacks or does not know passed over, and a
field added to it is one line that round-trips through both formats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from genbench.generate.progress import Progress
from genbench.rows import DataRow, RowMeta, _omit, parquet_schema

pytestmark = pytest.mark.core

HERE = Path(__file__).parent
OLD_JSONL = HERE / "rows_written_before_rowmeta.jsonl"
OLD_PARQUET = HERE / "rows_written_before_rowmeta.parquet"


def jsonl_rows() -> list[dict]:
    return [orjson.loads(line) for line in OLD_JSONL.read_bytes().splitlines()]


def parquet_rows() -> list[dict]:
    pq = pytest.importorskip("pyarrow.parquet")
    return pq.read_table(OLD_PARQUET).to_pylist()


def test_an_old_jsonl_file_reads_back_typed_and_writes_again_to_the_same_bytes() -> None:
    lines = OLD_JSONL.read_bytes().splitlines(keepends=True)
    by_id = {}
    for line in lines:
        row = orjson.loads(line)
        meta = RowMeta.of(row)
        by_id[row["id"]] = meta
        again = DataRow(row["id"], row["conversations"], meta, row.get("tools")).line()
        assert again == line
    chat, multi, agent = by_id["p1"], by_id["p2"], by_id["a3"]
    assert chat.group == "chat" and chat.spec_steps == 7 and chat.spec_drafted == 21
    assert chat.completion_tokens == 24 and chat.reasoning_tokens == 8
    assert chat.token_ids == "exact" and chat.reasoning_tokens_from == "server"
    assert multi.turns == 2 and multi.group == "multi" and multi.tool_policy is None
    assert agent.tool_policy == "replay" and agent.tool_calls == 1 and agent.turns == 2
    assert agent.tool_call_cut is False and agent.group is None
    assert isinstance(agent.request, str) and int(agent.request, 16)


def test_an_old_parquet_file_reads_back_as_its_jsonl_twin_and_keeps_its_schema() -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    assert pq.read_schema(OLD_PARQUET).field("meta").type == parquet_schema().field("meta").type
    jsonl = {r["id"]: RowMeta.of(r) for r in jsonl_rows()}
    parquet = {r["id"]: RowMeta.of(r) for r in parquet_rows()}
    assert parquet.keys() == jsonl.keys()
    for rid, meta in parquet.items():  # two runs: the same rows, other timings
        same = ("group", "tool_policy", "tool_calls", "turns", "token_ids", "completion_tokens")
        assert [getattr(meta, k) for k in same] == [getattr(jsonl[rid], k) for k in same]
    assert parquet["a3"].tool_names_differ is False and parquet["p1"].tool_calls is None


def test_missing_unknown_and_mistyped_keys_are_passed_over() -> None:
    meta = RowMeta.read({"server": "s", "turns": True, "spec_length": 3, "later": [1]})
    assert meta == RowMeta(server="s", spec_length=3)
    assert RowMeta.read(None) == RowMeta() == RowMeta.of({"id": 1})
    assert RowMeta.read({"completion_tokens": "12"}).completion_tokens is None
    # written: every plain field, null or not; an omitted one only where it has a value
    out = RowMeta(server="s").to_json()
    assert out["ttft_s"] is None and "request" not in out and "tool_calls" not in out


def test_progress_counts_a_row_from_its_meta() -> None:
    meta = RowMeta(server="u", completion_tokens=9, reasoning_tokens=4, truncated=True,
                   tokens_estimated=False, reasoning_tokens_from="tokenizer")  # fmt: skip
    p = Progress(3, 0, 0, ["u"])
    p.on_durable("row", [("a", meta), ("b", RowMeta())])
    p.on_durable("error", [("c", None)])
    assert (p.done, p.failed, p.tokens, p.thinking, p.truncated) == (2, 1, 9, 4, 1)
    assert (p.estimated, p.tokenized) == (0, 1)


@dataclass(frozen=True, slots=True)
class WithHidden(RowMeta):
    """A field added to RowMeta: one line (here in a subclass, so the test leaves it alone)."""

    hidden_layers: int | None = _omit()


def test_a_new_field_is_one_line_and_round_trips_through_jsonl_and_parquet() -> None:
    pa = pytest.importorskip("pyarrow")
    meta = WithHidden(server="s", completion_tokens=3, hidden_layers=4)
    line = DataRow("r1", [{"role": "assistant", "content": "hi"}], meta).line()
    row = orjson.loads(line)
    assert row["meta"]["hidden_layers"] == 4 and WithHidden.of(row) == meta
    schema = parquet_schema(WithHidden)
    assert schema.field("meta").type.field("hidden_layers").type == pa.int64()
    back = pa.Table.from_pylist([row], schema=schema).to_pylist()[0]
    assert WithHidden.of(back) == meta
    assert "hidden_layers" not in RowMeta(server="s").to_json()  # RowMeta itself unchanged
