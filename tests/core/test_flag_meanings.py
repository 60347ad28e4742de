"""One flag, one meaning: every option of every command is walked, and a long name that
two commands give different defaults, or a switch in one and a value in the other, fails
unless it is one of the few the rule names (docs/cli.md, "The rule"), each with why. A
renamed flag keeps its old spelling as a hidden alias (cli.ALIASES) (#46)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from genbench import cli
from genbench.commands import clidoc

pytestmark = pytest.mark.core

# the names whose meaning is one but whose value differs by command, and why
ONE_MEANING_OTHER_VALUE = {
    "--concurrency": "run sweeps: a list where the others take one number",
    "--out": "what each command writes: a directory or a file, each its own default place",
    "--format": "the format of the file the command writes (generate's data, export's file)",
    "--input": "merge finds the prompt file its job files name",
    "--model": "sim: the one it serves; the others: the one to request",
    "--api-key-env": "sim: the key it requires; the others: the key they send",
    "--url": "a server's base URL; generate's job takes several (repeatable)",
}


def meanings() -> dict[str, dict[str, tuple[str | None, bool, bool]]]:
    """Each long name: per command, (its default's first case, a switch?, repeatable?)."""
    by: dict[str, dict[str, tuple[str | None, bool, bool]]] = defaultdict(dict)
    for name, cmd in clidoc.app_commands().items():
        for opt in clidoc.options(cmd):
            shown = clidoc.shown_default(opt)
            first = shown.split(";")[0].strip() if shown else None  # "all; --plan: ..."
            by[clidoc.long_name(opt)][name] = (first, bool(opt.is_flag), bool(opt.multiple))
    return by


def test_a_flag_name_has_one_meaning_and_one_default_in_every_command():
    two = {name: per for name, per in meanings().items() if len(set(per.values())) > 1}
    unexplained = {n: p for n, p in two.items() if n not in ONE_MEANING_OTHER_VALUE}
    assert not unexplained, f"one name, two meanings (rename one: cli.ALIASES): {unexplained}"
    stale = set(ONE_MEANING_OTHER_VALUE) - set(two)
    assert not stale, f"no longer differ: take them out of the list: {stale}"


def test_renamed_flags_keep_their_old_spelling():
    assert cli.ALIASES["check"]["--timeout"] == "--test-timeout"
    assert cli.ALIASES["export"]["--min-tokens"] == "--min-turn-tokens"
    assert cli.apply_aliases(["check", "--timeout", "5"]) == ["check", "--test-timeout", "5"]
    # a data file's part is no longer called a shard (--shard i/N is the cluster's share)
    argv = ["generate", "--shard-size", "4KB", "--shard", "1/2", "--shard-size=8KB"]
    new = ["generate", "--part-size", "4KB", "--shard", "1/2", "--part-size=8KB"]
    assert cli.apply_aliases(argv) == new
    generate = {n for o in clidoc.options(clidoc.app_commands()["generate"]) for n in o.opts}
    assert "--part-size" in generate and "--shard-size" not in generate
    # the temperature's default is the server's wherever it is a flag
    per = meanings()["--temperature"]
    assert set(per) >= {"run", "plan", "generate"} and len(set(per.values())) == 1
