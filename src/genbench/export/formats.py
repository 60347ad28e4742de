"""The trainer formats `genbench export` writes, as a registry: a format is one module that
registers a `Format` (export/specforge.py, export/speculators.py; export/__init__.py imports
them), and `--format`'s choices and help, the summary's shape and the console's hints all
come from it.

A token-exact format writes one line per generated turn from the ids the server generated
(`sample`: the turn's sample and its row's meta -> the line); a text format one line per row
(`row`: the row, its samples, the turns left out, empty_system -> a `TextRow`), which the
trainer re-tokenizes; a directory format (`directory`: export/states.py) writes the hidden
states beside the ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genbench.errors import UsageError
from genbench.export.samples import Rules, Sample
from genbench.rows import RowMeta


@dataclass
class TextRow:
    """One row of a conversations file, and what making it showed."""

    line: bytes | None  # None: no generated turn left to train on
    turns: int  # generated turns written
    system: str  # "sent" | "empty" (none was sent; an empty one written) | "none"
    history: int  # assistant turns written that genbench did not generate (the input's)
    history_kept_calls: int = 0  # of them, the original calls `--tool-policy keep` kept


@dataclass(frozen=True)
class Format:
    """A trainer's file: its name, what it is (for --format's help), what to tell the user
    to give the trainer (`{out}`: the file), and its writer."""

    name: str
    help: str
    give: str
    sample: Callable[[Sample, RowMeta], bytes] | None = None  # token-exact: a turn's line
    row: Callable[[Mapping[str, Any], list[Sample], set[int], bool], TextRow] | None = None
    # a directory (the hidden states beside the ids): source, out, rules -> the summary
    directory: Callable[[Path, Path, Rules], dict[str, Any]] | None = None
    max_length: int | None = None  # the longest sample the trainer keeps unless told
    too_long: str = ""  # the note when one is longer ({max}, {longest})

    @property
    def token_exact(self) -> bool:
        return self.sample is not None


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    FORMATS[fmt.name] = fmt
    return fmt


def get(name: str) -> Format:
    if name not in FORMATS:
        raise UsageError(f"--format {name!r}: expected one of {', '.join(FORMATS)}")
    return FORMATS[name]


def choices_help() -> str:
    """--format's help: each format and what it is, in the order they registered."""
    *first, last = [f"{f.name} ({f.help})" for f in FORMATS.values()]
    return (", ".join(first) + " or " if first else "") + last + "."
