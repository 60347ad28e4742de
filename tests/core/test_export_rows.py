"""`genbench export` on rows built in memory: what each trainer format holds, id for id,
which turns the rules leave out, and that every turn is counted either way."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from genbench.errors import GenbenchError, InputFileError, UsageError
from genbench.export import Rules, default_out, export_data, summary_path

pytestmark = pytest.mark.core

SYSTEM = {"role": "system", "content": "Be brief."}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def gen(
    text: str,
    prompt: list[int] | None,
    ids: list[int] | None,
    finish: str = "stop",
    thinking: str = "",
    error: str | None = None,
) -> dict[str, Any]:
    """A generated assistant turn as generate writes it (ids kept)."""
    t = {
        "role": "assistant",
        "content": text,
        "reasoning_content": thinking,
        "finish_reason": finish,
        "prompt_token_ids": prompt,
        "token_ids": ids,
    }
    if error:
        t["token_ids_error"] = error
    return t


def row(rid: str, conv: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    gens = [t for t in conv if t.get("finish_reason")]
    base = {
        "server": "http://a/v1",
        "model": "m",
        "completion_tokens": 99,
        "finish_reason": gens[-1]["finish_reason"] if gens else "stop",
        "turns": len(gens),
        "truncated": any(t["finish_reason"] == "length" for t in gens),
    }
    return {"id": rid, "conversations": conv, "meta": {**base, **meta}}


IDS = list(range(100, 120))  # 20 generated ids: above the default --min-turn-tokens 16
ROWS = [
    row("ok", [user("a"), gen("A", [1, 2, 3], IDS, thinking="hm")]),
    row("cut", [SYSTEM, user("b"), gen("B", [1, 4], IDS, finish="length")]),
    row("short", [user("c"), gen("C", [1, 5], [7, 8, 2])]),
    row("noids", [user("d"), gen("D", None, None)], completion_tokens=30),
    row("bad", [user("e"), gen("E", [1, 6], IDS, error="3 ids for 20 tokens")]),
    # three turns: the first is cut, the second fine; the third short
    row(
        "multi",
        [
            user("f"),
            gen("F", [1, 7], IDS, finish="length"),
            user("g"),
            gen("G", [1, 7, 9], IDS + [3]),
            user("h"),
            gen("H", [1, 8], [4, 2]),
        ],
    ),
]


def write_rows(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    d = tmp_path / "regen"
    d.mkdir(parents=True)
    (d / "data-00000.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows[:3]))
    (d / "data-00001.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows[3:]))
    return d


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def run(tmp_path: Path, fmt: str, rules: Rules = Rules(), **kw: Any) -> tuple[list, dict]:
    src = write_rows(tmp_path, ROWS)
    out = tmp_path / f"train.{fmt}.jsonl"
    doc = export_data(src, fmt, out, rules, **kw)
    assert orjson.loads(summary_path(out).read_bytes()) == doc
    return lines(out), doc


def test_token_rows_are_prompt_then_generated_ids_with_the_mask_on_the_generated(tmp_path) -> None:
    got, doc = run(tmp_path, "specforge-tokens")
    assert got == [
        {"id": "ok#1", "input_ids": [1, 2, 3, *IDS], "loss_mask": [0, 0, 0] + [1] * 20},
        {"id": "multi#3", "input_ids": [1, 7, 9, *IDS, 3], "loss_mask": [0, 0, 0] + [1] * 21},
    ]
    assert (doc["rows"], doc["turns"], doc["written"]) == (6, 8, 2)
    assert doc["left_out"] == {"no_ids": 1, "mismatch": 1, "cut": 2, "short": 2}
    assert doc["counted"] == {"no_ids": 1, "mismatch": 1, "cut": 2, "short": 2}
    assert doc["rows_without_a_sample"] == 4
    assert doc["ids"] == {
        "written": 23 + 24, "supervised": 41, "longest_sample": 24, "unchecked_samples": 0
    }  # fmt: skip


def test_the_rules_keep_what_the_user_asks_and_still_count_it(tmp_path) -> None:
    got, doc = run(tmp_path, "specforge-tokens", Rules(keep_cut=True, min_tokens=0))
    assert [g["id"] for g in got] == ["ok#1", "cut#2", "short#1", "multi#1", "multi#3", "multi#5"]
    assert got[2] == {"id": "short#1", "input_ids": [1, 5, 7, 8, 2], "loss_mask": [0, 0, 1, 1, 1]}
    assert doc["left_out"] == {"no_ids": 1, "mismatch": 1, "cut": 0, "short": 0}
    assert doc["counted"]["cut"] == 2  # kept, and counted


def test_min_tokens_is_the_generated_count(tmp_path) -> None:
    got, doc = run(tmp_path, "specforge-tokens", Rules(min_tokens=3))
    assert "short#1" in [g["id"] for g in got]  # 3 ids: not short at 3
    assert "multi#5" not in [g["id"] for g in got]  # 2 ids
    assert doc["counted"]["short"] == 1


def test_speculators_rows_carry_the_sample_its_conversation_and_metadata(tmp_path) -> None:
    got, _ = run(tmp_path, "speculators")
    assert got[0] == {
        "id": "ok#1",
        "primary_id": "ok",
        "input_ids": [1, 2, 3, *IDS],
        "loss_mask": [0, 0, 0] + [1] * 20,
        "metadata": {"turn": 1, "finish_reason": "stop", "server": "http://a/v1", "model": "m"},
    }
    assert [g["id"] for g in got] == ["ok#1", "multi#3"]


def test_the_conversations_file_has_the_system_turn_and_stops_before_a_turn_left_out(
    tmp_path,
) -> None:
    got, doc = run(tmp_path, "specforge")
    by_id = {g["id"]: g for g in got}
    assert set(by_id) == {"ok", "noids", "bad"}  # text does not need ids; cut/short left out
    assert by_id["ok"] == {
        "id": "ok",
        "conversations": [
            {"role": "system", "content": ""},
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "A", "reasoning_content": "hm"},
        ],
    }
    assert all(set(g) == {"id", "conversations"} for g in got)
    assert doc["system"] == {"sent": 0, "empty": 3, "none": 0}
    # multi: its first turn is cut, and every later prompt held it: nothing is left
    assert doc["left_out"]["after_left_out"] == 1
    assert doc["rows_without_a_sample"] == 3


def test_a_sent_system_turn_is_kept_and_no_empty_one_is_added_when_asked(tmp_path) -> None:
    got, doc = run(tmp_path, "specforge", Rules(keep_cut=True), empty_system=False)
    by_id = {g["id"]: g for g in got}
    assert by_id["cut"]["conversations"][0] == SYSTEM
    assert by_id["ok"]["conversations"][0] == {"role": "user", "content": "a"}
    assert doc["system"] == {"sent": 1, "empty": 0, "none": 4}
    # multi: turn 1 kept now, turn 3 too; turn 5 short: cut before it, the question with it
    assert [m["content"] for m in by_id["multi"]["conversations"]] == ["f", "F", "g", "G"]


def test_assistant_turns_from_the_input_are_counted_as_history(tmp_path) -> None:
    r = row(
        "last",
        [user("q1"), {"role": "assistant", "content": "old"}, user("q2"), gen("new", [1], IDS)],
    )
    src = write_rows(tmp_path, [r])
    doc = export_data(src, "specforge", tmp_path / "t.jsonl", Rules())
    assert doc["history_turns"] == 1 and doc["turns"] == 1 and doc["written"] == 1


def test_rows_written_before_ids_were_kept_export_as_text_only(tmp_path) -> None:
    legacy = {
        "id": 7,
        "conversations": [user("x"), {"role": "assistant", "content": "y"}],
        "meta": {"completion_tokens": 40, "finish_reason": "stop", "turns": 1},
    }
    cut = {
        "id": 8,
        "conversations": [user("x"), {"role": "assistant", "content": "y"}],
        "meta": {"completion_tokens": 40, "finish_reason": "length", "turns": 1},
    }
    src = write_rows(tmp_path, [legacy, cut])
    with pytest.raises(GenbenchError, match="no generated turn has token ids") as e:
        export_data(src, "specforge-tokens", tmp_path / "t.jsonl", Rules())
    assert e.value.exit_code == 1 and "--format specforge" in str(e.value)
    assert not (tmp_path / "t.jsonl").exists()  # no empty file for the trainer
    doc = export_data(src, "specforge", tmp_path / "c.jsonl", Rules())
    assert lines(tmp_path / "c.jsonl") == [
        {
            "id": "7",
            "conversations": [
                {"role": "system", "content": ""},
                user("x"),
                {"role": "assistant", "content": "y"},
            ],
        }
    ]
    assert doc["left_out"]["cut"] == 1


def test_a_bad_row_names_file_and_line_and_an_existing_file_stays_whole(tmp_path) -> None:
    src = write_rows(tmp_path, ROWS)
    out = tmp_path / "train.jsonl"
    out.write_bytes(b"old\n")
    with (src / "data-00001.jsonl").open("ab") as f:
        f.write(b'{"id": "x", "conversations": "no"}\n')
    with pytest.raises(InputFileError) as e:
        export_data(src, "specforge-tokens", out, Rules())
    assert "data-00001.jsonl" in str(e.value) and "line 4" in str(e.value)
    assert "conversations" in str(e.value)
    assert out.read_bytes() == b"old\n"
    assert not list(tmp_path.glob("*.tmp"))


def test_out_must_not_be_what_is_read_and_the_default_sits_beside(tmp_path) -> None:
    src = write_rows(tmp_path, ROWS)
    with pytest.raises(UsageError, match="one of the files being read"):
        export_data(src / "data-00000.jsonl", "specforge", src / "data-00000.jsonl", Rules())
    with pytest.raises(UsageError, match="a data shard's name"):
        export_data(src, "specforge", src / "data-00002.jsonl", Rules())
    with pytest.raises(UsageError, match="expected one of"):
        export_data(src, "sharegpt", tmp_path / "x.jsonl", Rules())
    assert default_out(src, "specforge") == tmp_path.resolve() / "regen.specforge.jsonl"
    assert (
        default_out(src / "data-00000.jsonl", "speculators").name == "data-00000.speculators.jsonl"
    )


@pytest.mark.parametrize("fmt", ["specforge-tokens", "speculators", "specforge"])
def test_parquet_shards_export_as_their_jsonl_does(tmp_path, fmt: str) -> None:
    pytest.importorskip("pyarrow")
    from genbench.rows import convert_to_parquet

    src = write_rows(tmp_path, ROWS)
    pq_dir = tmp_path / "pq"
    pq_dir.mkdir()
    for shard in sorted(src.glob("data-*.jsonl")):
        convert_to_parquet(str(shard), str(pq_dir / (shard.stem + ".parquet")))
    rules = Rules(keep_cut=True, min_tokens=0)
    a = export_data(src, fmt, tmp_path / "a.jsonl", rules)
    b = export_data(pq_dir, fmt, tmp_path / "b.jsonl", rules)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert a["written"] == b["written"] > 0 and a["counted"] == b["counted"]


def test_several_sources_go_into_one_file_in_order(tmp_path) -> None:
    a = write_rows(tmp_path / "a", ROWS[:1])
    b = write_rows(tmp_path / "b", ROWS[5:])
    out = tmp_path / "t.jsonl"
    doc = export_data([a, b], "specforge-tokens", out, Rules())
    assert [x["id"] for x in lines(out)] == ["ok#1", "multi#3"]
    assert doc["source"]["paths"] == [str(a), str(b)] and doc["rows"] == 2


def said(doc: dict[str, Any]) -> str:
    """What `genbench export` prints of the summary, as a user reads it."""
    from rich.console import Console

    from genbench.export.render import print_export

    console = Console(record=True, width=400, file=io.StringIO())
    print_export(doc, console)
    return console.export_text()


@pytest.mark.parametrize("keep_cut", [False, True], ids=["cut-left-out", "keep-cut"])
def test_the_console_says_each_cut_turn_once(tmp_path, keep_cut: bool) -> None:
    """The two cut turns, in one claim: left out (and the flag that keeps them), or kept
    with --keep-cut; never also in a second line that counts them again."""
    _, doc = run(tmp_path, "specforge-tokens", Rules(keep_cut=keep_cut))
    text = said(doc)
    assert text.count("cut by max_tokens") == 1, text
    if keep_cut:
        assert "left out: 1 without ids" in text
        assert "written all the same: 2 cut by max_tokens (--keep-cut)" in text
        assert doc["kept"]["cut"] == 2 and doc["left_out"]["cut"] == 0
    else:
        assert (
            "left out: 1 without ids (the server gave none), 1 whose ids disagree with "
            "the server's counts, 2 cut by max_tokens, 2 shorter than 16 tokens "
            "(--keep-cut and --min-turn-tokens 0 keep them)" in text
        )
        assert "written all the same" not in text and doc["kept"]["cut"] == 0
    assert "counted:" not in text


def test_the_text_format_says_the_turns_it_writes_without_ids(tmp_path) -> None:
    _, doc = run(tmp_path, "specforge")
    text = said(doc)
    assert (
        "written all the same: 1 without ids (the server gave none) (the text needs none)" in text
        and doc["kept"]["no_ids"] == 1
    )
