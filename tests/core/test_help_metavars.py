"""Every value in `--help` and docs/cli.md is named in words (`URL`, `FILE`, `N`), never by
the python type typer 0.29 prints for an option or argument declared without a metavar
(`<list[str]>`, `<float>`, a required argument as `{path}`): a new user reads the help, not
the source."""

from __future__ import annotations

import re

import click
import pytest
from typer.testing import CliRunner

from genbench import cli
from genbench.commands import clidoc

pytestmark = pytest.mark.core

# a python type as typer shows it: <str>, <int>, <path>, <list[Path]>, <Choice[...]>, ...
TYPE = re.compile(r"<(str|int|float|bool|path|file|dir|datetime|uuid|[A-Za-z_]+\[[^>]*\])>")
REQUIRED = re.compile(r"\{[a-z_]+\}")  # typer's spelling of a required argument


def test_every_value_in_help_is_named_in_words() -> None:
    found = []
    for name, cmd in clidoc.app_commands().items():
        ctx = click.Context(cmd, info_name=name)
        usage = " ".join(cmd.collect_usage_pieces(ctx))
        if TYPE.search(usage) or REQUIRED.search(usage):
            found.append(f"{name} usage: {usage}")
        for p in cmd.params:
            record = p.get_help_record(ctx)
            shown = record[0] if record else ""  # the flags and the value's name
            if TYPE.search(shown) or REQUIRED.search(shown) or "<" in shown:
                found.append(f"{name}: {shown}")
    assert not found, "values named by their python type:\n" + "\n".join(found)


def test_help_and_docs_show_no_python_type() -> None:
    cli._register([])
    runner = CliRunner()
    texts = {"docs/cli.md": clidoc.cli_markdown()}
    for name in ["", *clidoc.app_commands()]:
        args = [name, "--help"] if name else ["--help"]
        texts[f"genbench {name} --help"] = runner.invoke(cli.app, args, terminal_width=200).output
    bad = {where: TYPE.findall(text) for where, text in texts.items() if TYPE.search(text)}
    assert not bad, bad
    usage = {w: t.splitlines()[0] for w, t in texts.items() if w.endswith("--help")}
    assert not [u for u in usage.values() if REQUIRED.search(u)], usage
    assert "genbench inspect [OPTIONS] PATH" in usage["genbench inspect --help"]
