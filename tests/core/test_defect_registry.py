"""A defect rule is one registration (inspect/detect.py): a made-up one registered here is
found, counted with its rule text in inspect's report, named by `--drop` (its help too) and
left out of a clean copy, with nothing else of inspect changed."""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from genbench import cli
from genbench.inspect import Settings, inspect_data
from genbench.inspect.clean import parse_drop
from genbench.inspect.detect import BIT, DEFECTS, Defect, Thresholds, register
from genbench.rows import OutputRow, Turn

pytestmark = pytest.mark.core

ROWS = Path(__file__).parent / "rows_written_before_rowmeta.jsonl"


def says_many(turn: Turn, row: OutputRow, th: Thresholds) -> str | None:
    n = turn.answer.count(" many")
    return f"'many' {n} times" if n >= 2 else None


@pytest.fixture
def many() -> Iterator[Defect]:
    rule = register(Defect("many", "says many", "the answer says `many` twice", turn=says_many))
    yield rule
    del DEFECTS[rule.name], BIT[rule.name]
    importlib.reload(importlib.import_module("genbench.commands.inspect"))  # its help again
    cli._register(["inspect"])


def test_a_registered_rule_is_found_reported_and_dropped(many: Defect, tmp_path: Path):
    importlib.reload(importlib.import_module("genbench.commands.inspect"))
    cli._register(["inspect"])
    res = CliRunner().invoke(cli.app, ["inspect", "--help"], terminal_width=1000)
    assert "loops,unclosed,empty,tags,garbled,short,dup,many (or all)" in res.output
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(ROWS, src / "data-00000.jsonl")
    doc = inspect_data(src, Settings(), drop=parse_drop("many"), out=tmp_path / "clean")
    found = doc["defects"]["many"]
    assert found["rows"] == 1 and found["rule"] == "the answer says `many` twice"
    assert found["examples"][0]["id"] == "p2"
    assert found["examples"][0]["detail"] == "turn #2: 'many' 2 times"  # its turn named
    assert doc["defects"]["short"]["rows"] == 0 and doc["rows_with_defects"] == 1
    kept = [orjson.loads(x)["id"] for x in (tmp_path / "clean" / "data-00000.jsonl").read_bytes()
            .splitlines()]  # fmt: skip
    assert kept == ["p1", "a3"] and doc["clean"]["dropped_by_reason"]["many"] == 1
