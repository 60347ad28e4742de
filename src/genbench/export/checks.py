"""What an export refuses to do silently: write a row twice, or write nothing at all.

* Several sources (two jobs over the same prompts, or one directory given twice) can hold
  rows of the same id, and so samples of the same `ROW#TURN` id. A trainer that reads
  both would supervise the same turn twice and could not tell them apart by id, so the
  first row of each id is written (sources in the order given) and every later one is
  skipped and counted: in the summary (`repeated`) and in one line on the console.
* An export whose every turn was left out would leave an empty file for the trainer, or
  replace a good one with it: it stops instead, the existing file untouched, with one line
  naming why and the way on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from genbench.errors import ExitCode, GenbenchError

REPEAT_EXAMPLES = 5


@dataclass
class Repeats:
    """Row ids already written, as 64-bit hashes (a million rows take tens of MB, not the
    ids' text); the later rows of a seen id are counted, a few of their ids kept."""

    seen: set[int] = field(default_factory=set)
    rows: int = 0
    examples: list[str] = field(default_factory=list)

    def first(self, rid: Any) -> bool:
        """Whether this row's id is new: True once per id (an integer id and its text are
        the same id: both give the same sample ids)."""
        key = str(rid)
        h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
        if h not in self.seen:
            self.seen.add(h)
            return True
        self.rows += 1
        if len(self.examples) < REPEAT_EXAMPLES:
            self.examples.append(key)
        return False

    def describe(self) -> dict[str, Any]:
        return {"rows": self.rows, "examples": list(self.examples), "kept": "the first"}

    def line(self) -> str | None:
        """The console's one line about them, or None when no id repeated."""
        if not self.rows:
            return None
        ex = ", ".join(self.examples[:3]) + (", ..." if self.rows > 3 else "")
        return (
            f"{self.rows:,} {_rows(self.rows)} skipped: an earlier source already had "
            f"{'its id' if self.rows == 1 else 'their ids'} ({ex}); the first row of each id "
            "is written, so no sample id repeats"
        )


def _rows(n: int) -> str:
    return "row" if n == 1 else "rows"


def nothing_written(
    fmt_needs_ids: bool, left_out: dict[str, int], rows: int, min_tokens: int
) -> GenbenchError:
    """The one line an export that would write nothing stops with: why, and the way on."""
    no_ids = left_out.get("no_ids", 0) + left_out.get("mismatch", 0)
    cut, short = left_out.get("cut", 0), left_out.get("short", 0)
    if fmt_needs_ids and no_ids and not cut and not short:
        why = (
            "no generated turn has token ids the server gave (the servers gave none, or "
            "--token-ids off)"
        )
        way = (
            "export --format specforge (the text, re-tokenized by the trainer), or generate "
            "on a server that gives ids (vLLM, SGLang; genbench check says which)"
        )
    else:
        parts = [f"{cut:,} cut by max_tokens"] if cut else []
        parts += [f"{short:,} shorter than --min-turn-tokens {min_tokens}"] if short else []
        if no_ids and fmt_needs_ids:
            parts.append(f"{no_ids:,} without trusted ids")
        why = "every generated turn was left out (" + (", ".join(parts) or "none left") + ")"
        way = "--keep-cut keeps the cut turns, --min-turn-tokens 0 the short ones"
        if no_ids and fmt_needs_ids:
            way += "; --format specforge needs no ids"
    return GenbenchError(
        f"nothing to export from {rows:,} {_rows(rows)}: {why}; the output file was not "
        f"written (an existing one is kept): {way}",
        ExitCode.FAILED,
    )
