"""Options reach the core one way: a command builds one typed value of its options (a
dataclass, its signature made from it by commands/common.py signature), declared once and
checked once; none collects its parameters with `dict(locals())` and hands them on by
name (#43)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import genbench.commands
from genbench.commands.generate import generate
from genbench.commands.inspect import inspect_cmd
from genbench.commands.plan import plan
from genbench.commands.run import run

pytestmark = pytest.mark.core

COMMANDS = Path(genbench.commands.__file__).parent


def test_no_command_collects_its_locals():
    found = [p.name for p in sorted(COMMANDS.glob("*.py")) if "locals()" in p.read_text()]
    assert not found, f"dict(locals()) in commands/: build the command's typed args: {found}"


@pytest.mark.parametrize("command", [generate, run, plan, inspect_cmd])
def test_the_big_commands_take_one_typed_value(command):
    # the signature typer reads is made from the args dataclass, one option per field
    params = inspect.signature(command).parameters
    assert command.__signature__ is not None and len(params) > 15
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())


def test_run_takes_the_prompt_file_as_input_and_its_old_spelling():
    from genbench.cli import apply_aliases

    assert apply_aliases(["run", "--workload", "p.jsonl"]) == ["run", "--input", "p.jsonl"]
    names = {n for p in inspect.signature(run).parameters.values() for n in p.default.param_decls}
    assert {"--input", "-i"} <= names and "--workload" not in names
