"""Every hint names something that exists: the scripts the docs run as commands are
executable (with a `#!` line), each `genbench COMMAND --flag` genbench prints names a real
command and its real flags, and every scripts/ or benchmarks/ path it prints is in the
repository. (The trainers' own commands, `speculators prepare-data` and SpecForge's config
keys, are checked against the installed trainers in tests/test_trainer_hints.py.)
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from genbench.commands import clidoc

pytestmark = pytest.mark.core

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "genbench"
DOCS = [
    REPO / "README.md",
    REPO / "benchmarks" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "scripts").glob("*.sh")),
]
PATH = r"(?:\./)?((?:scripts|benchmarks)/[\w./-]+\.(?:sh|py))"
# a script run as a command: first on a line (a code block, a usage comment, `$ `), or in
# backticks with its arguments; `bash scripts/x.sh`, `python benchmarks/y.py` name the
# interpreter and need no mode
AT_LINE = re.compile(r"^\s*(?:#\s*)?(?:\$\s+)?" + PATH + r"(?=\s|$)", re.M)
IN_TICKS = re.compile(r"`" + PATH + r" [^`]+`")
# genbench COMMAND, then its arguments up to the end of the clause
HINT = re.compile(r"(?<![\w./-])genbench ([a-z][a-z-]*)((?: +[^\s;,)(`'\"]+)*)")


def run_as_commands() -> set[tuple[str, str]]:
    found = set()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for rx in (AT_LINE, IN_TICKS):
            for m in rx.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                found.add((m.group(1), f"{doc.relative_to(REPO)}:{line}"))
    return found


def git_mode(path: str) -> str | None:
    """The file's mode in git's index (100755: executable), None outside a git checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "-s", path], cwd=REPO, capture_output=True,
                             text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout.strip() else None


def test_the_scripts_the_docs_run_are_executable():
    found = run_as_commands()
    names = {p for p, _ in found}
    assert "scripts/trainers.sh" in names and "scripts/vllm-test-server.sh" in names  # seen
    for path, where in sorted(found):
        f = REPO / path
        assert f.is_file(), f"{where}: {path} does not exist"
        assert f.read_bytes()[:2] == b"#!", f"{where}: {path} has no #! line"
        mode = git_mode(path)
        if mode is not None:
            fix = "git update-index --chmod=+x"
            assert mode == "100755", f"{where}: {path} is {mode} in git ({fix})"
        assert os.access(f, os.X_OK), f"{where}: {path} is not executable"


def printed_strings() -> Iterator[tuple[str, str]]:
    """Every string in genbench's source (an f-string with {} for its values), and where."""
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}"
                               for v in node.values)  # fmt: skip
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            yield text, f"{path.relative_to(REPO)}:{node.lineno}"


def test_every_genbench_command_a_hint_names_exists_with_its_flags():
    commands = clidoc.app_commands()
    flags = {
        name: {n for p in cmd.params for n in [*getattr(p, "opts", []),
                                               *getattr(p, "secondary_opts", [])]}
        for name, cmd in commands.items()
    }  # fmt: skip
    checked = 0
    for text, where in printed_strings():
        for m in HINT.finditer(text):
            word, args = m.group(1), m.group(2).split()
            if word not in commands:
                # prose ("genbench reads ..."), unless a flag follows at once
                assert not (args and args[0].startswith("--")), f"{where}: no command {word}"
                continue
            for a in args:
                if re.fullmatch(r"--[a-z][\w-]*", a):
                    assert a in flags[word], f"{where}: genbench {word} has no {a}"
                    checked += 1
    assert checked >= 5  # the scan sees the hints (run --sweep-tokens, plan --prompts, ...)


def test_every_script_a_hint_names_is_in_the_repository():
    for text, where in printed_strings():
        for m in re.finditer(r"(?<![\w/.-])" + PATH, text):
            assert (REPO / m.group(1)).exists(), f"{where}: {m.group(1)} is not in the repository"


def test_runs_next_line_names_no_server_the_run_started_and_stopped():
    """The local demo and a --serve engine are stopped when run ends: its next line must not
    send the user to their URL (connection refused); a server run was pointed at is named."""
    from types import SimpleNamespace

    from genbench.run.render import next_line

    def line(**target: object) -> str:
        doc = {"target": {"url": "http://127.0.0.1:37915/v1", **target}, "config": {}}
        return next_line(SimpleNamespace(states=[[SimpleNamespace(doc=doc)]], out=Path("o")))

    assert "--url URL" in line(local_demo=True)
    assert "--url URL" in line(engine="vllm serve m")
    assert "--url http://127.0.0.1:37915/v1" in line()
