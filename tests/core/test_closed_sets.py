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


def comparisons(names: tuple[str, ...], value: str) -> re.Pattern[str]:
    """`x.name == "value"`, `!=`, or `name in (..., "value", ...)`."""
    name = rf"\b(?:{'|'.join(names)})"
    lit = rf"""["']{re.escape(value)}["']"""
    return re.compile(rf"{name}\s*(?:==|!=)\s*{lit}|{name}\s+(?:not\s+)?in\s+\([^)]*{lit}")


def test_no_setting_is_compared_with_its_value_spelled_out() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path in HOMES or "sim" in path.relative_to(SRC).parts[:1]:
            continue
        text = path.read_text(encoding="utf-8")
        for enum, names in SETS:
            for member in enum:
                for m in comparisons(names, member.value).finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    found.append(f"{path.relative_to(SRC)}:{line}: {m.group(0)} ({enum.__name__})")
    assert not found, "\n".join(found)


def test_the_check_sees_a_literal() -> None:
    assert comparisons(("fmt",), "parquet").search('if cfg.fmt == "parquet":')
    assert comparisons(("turns",), "all").search('if a.turns not in ("all", "last"):')
    assert not comparisons(("fmt",), "parquet").search("if cfg.fmt == DataFormat.PARQUET:")
