"""A closed set of settings is one enum (generate/input/modes.py; transport/token_ids.IdsMode):
no module compares a setting of one with a value spelled as a string literal, so a value
renamed or added is renamed or added in one place. Read from the source with a regex; the
reference server (sim/) is left out: its flags are its own sets, spelled as the wire has them."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import pytest

from genbench.generate.input.modes import Answers, DataFormat, OnTruncated, ToolPolicy, Turns
from genbench.transport.token_ids import IdsMode

pytestmark = pytest.mark.core

SRC = Path(__file__).resolve().parents[2] / "src" / "genbench"
HOMES = {SRC / "generate" / "input" / "modes.py", SRC / "transport" / "token_ids.py"}
# each set, and the names a setting of it goes by in the code
SETS: list[tuple[type[StrEnum], tuple[str, ...]]] = [
    (DataFormat, ("fmt",)),
    (Answers, ("answers",)),
    (Turns, ("turns",)),
    (ToolPolicy, ("tool_policy", "tools")),
    (OnTruncated, ("on_truncated", "truncated")),
    (IdsMode, ("token_ids", "mode")),
]


NAMES = {name: enum for enum, names in SETS for name in names}
# `x.name == "value"`, `!=`, or `name in (..., "value", ...)`, the values as written
COMPARED = re.compile(
    rf"\b(?P<name>{'|'.join(NAMES)})(?:\s*(?:==|!=)\s*(?P<one>[\"'][^\"']*[\"'])"
    r"|\s+(?:not\s+)?in\s+\((?P<many>[^)]*)\))"
)


def spelled(text: str) -> list[tuple[int, str, str]]:
    """(line, what, set) for each comparison of a setting with one of its values as text."""
    out = []
    for m in COMPARED.finditer(text):
        enum = NAMES[m["name"]]
        said = re.findall(r"""["']([^"']*)["']""", m["one"] or m["many"] or "")
        if any(v in {e.value for e in enum} for v in said):
            out.append((text.count("\n", 0, m.start()) + 1, m.group(0), enum.__name__))
    return out


def test_no_setting_is_compared_with_its_value_spelled_out() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path in HOMES or "sim" in path.relative_to(SRC).parts[:1]:
            continue
        for line, what, name in spelled(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(SRC)}:{line}: {what} ({name})")
    assert not found, "\n".join(found)


def test_the_check_sees_a_literal() -> None:
    assert spelled('if cfg.fmt == "parquet":') == [(1, 'fmt == "parquet"', "DataFormat")]
    assert spelled('\nif a.turns not in ("all", "last"):')[0][:1] == (2,)
    assert not spelled("if cfg.fmt == DataFormat.PARQUET:")
    assert not spelled('if kind == "parquet" or fmt == "csv":')  # not a setting, not a value
