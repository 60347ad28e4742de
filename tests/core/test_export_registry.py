"""A trainer format is one registration (export/formats.py): a made-up one registered here
is offered by `export --help`, accepted by `--format` and written, its traits (token-exact,
what to give the trainer) taken from the registration alone."""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from genbench import cli
from genbench.export import Rules, export_data
from genbench.export.formats import FORMATS, Format, register
from genbench.export.samples import Sample
from genbench.rows import RowMeta

pytestmark = pytest.mark.core

ROWS = Path(__file__).parent / "rows_written_before_rowmeta.jsonl"


def made_up_line(s: Sample, meta: RowMeta) -> bytes:
    assert s.generated is not None
    return orjson.dumps({"sample": s.id, "n": len(s.generated), "model": meta.model}) + b"\n"


def command_again(name: str) -> None:
    """The command's module run again, so its options' help reads the registries as they
    are now, and the command registered with the app again."""
    importlib.reload(importlib.import_module(f"genbench.commands.{name}"))
    cli._register([name])


@pytest.fixture
def made_up() -> Iterator[Format]:
    fmt = register(Format("made-up", "a test's own rows", "Nobody: give it {out}",
                          sample=made_up_line))  # fmt: skip
    yield fmt
    del FORMATS[fmt.name]
    command_again("export")  # its help as it was


def test_a_registered_format_is_in_the_help_and_written(made_up: Format, tmp_path: Path):
    command_again("export")
    res = CliRunner().invoke(cli.app, ["export", "--help"], terminal_width=1000)
    assert res.exit_code == 0
    said = "specforge-states (a directory: SpecForge's offline EAGLE-3 files) or made-up"
    assert said + " (a test's own rows)." in (" ".join(res.output.split()))
    src = tmp_path / "data-00000.jsonl"
    shutil.copy(ROWS, src)
    out = tmp_path / "made.jsonl"
    doc = export_data(src, "made-up", out, Rules(min_tokens=0))
    lines = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert [x["sample"] for x in lines] == ["p1#1", "a3#1", "a3#3", "p2#2", "p2#4"]
    assert {x["model"] for x in lines} == {"genbench-sim"} and lines[0]["n"] == 24
    assert doc["ids"]["supervised"] == sum(x["n"] for x in lines)  # token-exact: ids counted
