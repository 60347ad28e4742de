"""The command line's vocabulary: one meaning per flag, defaults shown one way, old spellings
still working, and docs/cli.md generated from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import genbench
from typer.testing import CliRunner

from genbench.cli import ALIASES, app, apply_aliases
from genbench.commands import clidoc

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
COMMANDS = clidoc.app_commands()


def test_docs_cli_md_is_generated_from_the_code() -> None:
    assert DOC.read_text(encoding="utf-8") == clidoc.cli_markdown(), (
        f"docs/cli.md is stale: regenerate it with `{clidoc.REGENERATE}`"
    )


def test_every_row_of_docs_cli_md_has_its_tables_columns() -> None:
    """A flag's value named `N|auto` split its row into one cell too many: a pipe inside a
    cell is escaped, in code too."""
    width = 0
    for line in clidoc.cli_markdown().splitlines():
        if not line.startswith("|"):
            width = 0
            continue
        cells = len(re.split(r"(?<!\\)\|", line)) - 2
        width = width or cells  # the header's
        assert cells == width, line


def test_every_flag_has_one_meaning_in_every_command() -> None:
    assert clidoc.problems() == []


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_shows_every_default_in_one_style(name: str) -> None:
    res = CliRunner().invoke(app, [name, "--help"], terminal_width=1000)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    for opt in clidoc.options(COMMANDS[name]):
        default = clidoc.shown_default(opt)
        if default is not None:
            assert f"[default: {' '.join(default.split())}]" in text, (name, opt.opts)
        # no second style: "(default: x)", "Default: x", "[default x]", "[1024]"
        help_ = opt.help or ""
        assert not re.search(r"\(default|Default:|\[default [^:]|\[\d[\d,.KM]*\]", help_), (
            name,
            opt.opts,
            help_,
        )


def test_computed_defaults_survive_the_help_renderer() -> None:
    """Brackets in help text are printed, not eaten as console markup."""
    res = CliRunner().invoke(app, ["run", "--help"], terminal_width=1000)
    text = " ".join(res.output.split())
    assert "[default: 1024,2048,4096; --quick 256,1024; local demo 128,256,512]" in text


@pytest.mark.parametrize(
    ("command", "option"),
    [(c, o) for c in COMMANDS for o in ("-o", "-c")],
)
def test_writers_take_out_and_load_senders_take_c(command: str, option: str) -> None:
    writes = {"run", "plan", "generate", "inspect", "export", "report", "merge"}
    sends_load = {"run", "plan", "generate", "hidden-states"}
    has = any(option in o.opts for o in clidoc.options(COMMANDS[command]))
    expected = command in (writes if option == "-o" else sends_load)
    assert has == expected


def test_old_spellings_are_rewritten_with_one_warning(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["generate", "-i", "p.jsonl", "--output", "out", "--output=again"]
    assert apply_aliases(argv) == ["generate", "-i", "p.jsonl", "--out", "out", "--out=again"]
    assert capsys.readouterr().err.count("--output is now --out") == 1
    # another command's old spelling is left alone: run's --prompts is not plan's
    assert apply_aliases(["plan", "--prompts", "p.jsonl"]) == ["plan", "--prompts", "p.jsonl"]
    assert apply_aliases(["run", "--prompts", "2"]) == ["run", "--prompts-per-length", "2"]
    assert apply_aliases(["report", "x", "--", "--output"])[-1] == "--output"


def test_every_alias_points_at_a_flag_its_command_has() -> None:
    for command, table in ALIASES.items():
        flags = {n for o in clidoc.options(COMMANDS[command]) for n in o.opts}
        for old, new in table.items():
            assert new in flags and old not in flags, (command, old)


def test_an_old_spelling_still_works_end_to_end() -> None:
    p = genbench("plan", "--rate", "100", "--tokens-per-sample", "1000", "--warmup", "5")
    assert p.returncode == 0, p.stderr
    assert "plan --warmup is now --warmup-time" in p.stderr
