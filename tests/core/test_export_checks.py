"""What `genbench export` never does silently: write a row id twice (several sources),
write nothing (or replace a good file with nothing), or blame the wrong flag for the
assistant turns that came from the input."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from rich.console import Console
from test_export_rows import IDS, ROWS, gen, lines, row, user, write_rows

from genbench.errors import GenbenchError
from genbench.export import Rules, export_data, summary_path
from genbench.export.render import print_export

pytestmark = pytest.mark.core

ALL = Rules(keep_cut=True, min_tokens=0)


def console_text(doc: dict) -> str:
    con = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_export(doc, con)
    return con.export_text()


@pytest.mark.parametrize("fmt", ["specforge-tokens", "specforge"])
def test_the_same_source_twice_writes_each_row_once_and_says_so(tmp_path, fmt) -> None:
    src = write_rows(tmp_path, ROWS)
    out = tmp_path / "t.jsonl"
    once = export_data(src, fmt, tmp_path / "once.jsonl", ALL)
    doc = export_data([src, src], fmt, out, ALL)
    ids = [x["id"] for x in lines(out)]
    assert len(ids) == len(set(ids)) and ids == [x["id"] for x in lines(tmp_path / "once.jsonl")]
    assert doc["written"] == once["written"] and doc["rows"] == len(ROWS)
    assert doc["repeated"]["rows"] == len(ROWS) and doc["repeated"]["examples"][0] == "ok"
    assert orjson.loads(summary_path(out).read_bytes())["repeated"]["rows"] == len(ROWS)
    text = console_text(doc)
    (line,) = [x for x in text.splitlines() if "skipped" in x]
    assert "6 rows skipped" in line and "the first row of each id is written" in line


def test_two_jobs_over_the_same_prompts_keep_the_first_sources_row(tmp_path) -> None:
    a = write_rows(tmp_path / "a", [row("q0", [user("x"), gen("A", [1], IDS)])])
    b = write_rows(
        tmp_path / "b",
        [row("q0", [user("x"), gen("B", [2], IDS)]), row("q1", [user("y"), gen("C", [3], IDS)])],
    )
    out = tmp_path / "t.jsonl"
    doc = export_data([a, b], "specforge-tokens", out, ALL)
    got = {x["id"]: x["input_ids"][0] for x in lines(out)}
    assert got == {"q0#1": 1, "q1#1": 3}  # q0 from the first source, q1 from the second
    assert doc["repeated"]["rows"] == 1 and doc["repeated"]["examples"] == ["q0"]
    assert "1 row skipped" in console_text(doc)
    one = export_data(b, "specforge-tokens", tmp_path / "b.jsonl", ALL)
    assert one["repeated"]["rows"] == 0
    assert "skipped" not in console_text(one)


def test_an_export_of_nothing_keeps_the_existing_file_and_says_why(tmp_path) -> None:
    src = write_rows(tmp_path, [row("c", [user("b"), gen("B", [1, 4], IDS, finish="length")])])
    out = tmp_path / "train.jsonl"
    out.write_bytes(b'{"id": "good"}\n')
    for fmt in ("specforge-tokens", "specforge"):
        with pytest.raises(GenbenchError) as e:
            export_data(src, fmt, out, Rules(min_tokens=16))
        msg = str(e.value)
        assert e.value.exit_code == 1 and "\n" not in msg
        assert "1 cut by max_tokens" in msg and "--keep-cut" in msg
        assert out.read_bytes() == b'{"id": "good"}\n'
        assert not summary_path(out).exists() and not list(tmp_path.glob("*.tmp"))
    short = write_rows(tmp_path / "s", [row("s", [user("c"), gen("C", [1, 5], [7, 8, 2])])])
    shorter = "1 shorter than --min-turn-tokens 16.*--min-turn-tokens 0"
    with pytest.raises(GenbenchError, match=shorter):
        export_data(short, "specforge-tokens", out, Rules())


def test_without_ids_the_way_on_is_the_text_format_or_a_server_with_ids(tmp_path) -> None:
    src = write_rows(tmp_path, [row("n", [user("d"), gen("D", None, None)], completion_tokens=30)])
    out = tmp_path / "t.jsonl"
    with pytest.raises(GenbenchError) as e:
        export_data(src, "speculators", out, ALL)
    msg = str(e.value)
    assert "no generated turn has token ids" in msg and "--format specforge" in msg
    assert "server that gives ids" in msg and not out.exists()
    doc = export_data(src, "specforge", out, ALL)  # the way on works
    assert doc["written"] == 1


def keep_row() -> dict:
    """A row of `--tool-policy keep`: the original calls and results as history, the final
    answer generated (no --turns last in sight)."""
    call = {"id": "o1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    conv = [
        user("task"),
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "o1", "content": "42"},
        gen("done", [1, 2], IDS),
    ]
    return row("k", conv, tool_policy="keep")


def test_the_history_note_names_tool_policy_keep_not_turns_last(tmp_path) -> None:
    src = write_rows(tmp_path, [keep_row()])
    out = tmp_path / "t.jsonl"
    doc = export_data(src, "specforge", out, ALL)
    (conv,) = [x["conversations"] for x in lines(out)]
    assert conv[2]["tool_calls"][0]["id"] == "o1" and conv[3]["tool_call_id"] == "o1"
    assert doc["history_turns"] == 1
    assert doc["history_by_cause"] == {"tool_policy_keep": 1, "turns_last": 0}
    (note,) = [x for x in console_text(doc).splitlines() if "came from the input" in x]
    assert "--tool-policy keep" in note and "--turns last" not in note
    assert note.startswith("note: 1 assistant turn came")


def test_an_earlier_turn_kept_as_written_is_named_as_turns_last(tmp_path) -> None:
    r = row(
        "last",
        [user("q1"), {"role": "assistant", "content": "old"}, user("q2"), gen("new", [1], IDS)],
    )
    src = write_rows(tmp_path, [r])
    doc = export_data(src, "specforge", tmp_path / "t.jsonl", Rules())
    assert doc["history_by_cause"] == {"tool_policy_keep": 0, "turns_last": 1}
    text = console_text(doc)
    assert "1 earlier turn kept as written (--turns last)" in text
    assert "--tool-policy" not in text


def test_counts_of_one_are_singular(tmp_path: Path) -> None:
    src = write_rows(tmp_path, [row("ok", [user("a"), gen("A", [1, 2, 3], IDS)])])
    doc = export_data(src, "specforge-tokens", tmp_path / "t.jsonl", ALL)
    head = console_text(doc).splitlines()[0]
    assert "1 row, 1 generated turn -> 1 sample (1 turn)" in head
