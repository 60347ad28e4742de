"""A generated turn as a training sample, and the rules that keep it or leave it out.

A drafter learns from the turns the target generated: each one is a sample (the prompt
the server saw, then the ids it generated), whatever format it is written in. Two kinds
of turn teach the wrong thing and are left out by default, and counted either way:

* `cut`: the turn ended at `max_tokens` (finish reason `length`). Its text stops where the
  target would not have stopped, and a trainer that renders it through a chat template
  closes it with an end-of-turn token the model never produced.
* `short`: fewer than `min_tokens` generated ids. A block drafter (DFlash, blocks of 16 by
  default) learns nothing from fewer than one block; SpecForge's own DFlash filter wants
  two supervised ids in a row at the very least.

Two more apply where the format is token-exact: `no_ids` (the server gave none) and
`mismatch` (ids kept, but genbench found they disagree with the server's own counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from genbench.rows import RowMeta, turn_ids

CUT, SHORT, NO_IDS, MISMATCH = "cut", "short", "no_ids", "mismatch"
REASONS = (NO_IDS, MISMATCH, CUT, SHORT)  # the order a left-out turn's reason is named in
DEFAULT_MIN_TOKENS = 16


@dataclass(frozen=True)
class Rules:
    """What a user can change about which turns are written."""

    keep_cut: bool = False
    min_tokens: int = DEFAULT_MIN_TOKENS

    def describe(self) -> dict[str, Any]:
        return {"keep_cut": self.keep_cut, "min_tokens": self.min_tokens}


@dataclass(frozen=True)
class Sample:
    """One generated turn of a row: `turn` is its index in the row's conversations, so
    `id` (`ROW#TURN`) leads back to it. `tokens` is its generated ids' count (the ids'
    own length where kept, else the server's count where the row tells it)."""

    row_id: str | int
    turn: int
    prompt: list[int] | None
    generated: list[int] | None
    finish_reason: str | None
    error: str | None
    tokens: int | None

    @property
    def id(self) -> str:
        return f"{self.row_id}#{self.turn}"

    @property
    def exact(self) -> bool:
        return self.prompt is not None and self.generated is not None and self.error is None

    @property
    def cut(self) -> bool:
        return self.finish_reason == "length"

    def ids(self) -> dict[str, list[int]]:
        """A token format's fields: the prompt's ids then the generated ones, and the loss
        mask over them (1 on the generated ids: the loss is taken there)."""
        assert self.prompt is not None and self.generated is not None
        mask = [0] * len(self.prompt) + [1] * len(self.generated)
        return {"input_ids": self.prompt + self.generated, "loss_mask": mask}

    def short(self, min_tokens: int) -> bool:
        return self.tokens is not None and self.tokens < min_tokens

    def kinds(self, min_tokens: int) -> list[str]:
        """Every reason that applies to this turn, kept or not (what the summary counts)."""
        found = []
        if self.prompt is None or self.generated is None:
            found.append(NO_IDS)
        elif self.error is not None:
            found.append(MISMATCH)
        if self.cut:
            found.append(CUT)
        if self.short(min_tokens):
            found.append(SHORT)
        return found

    def left_out(self, rules: Rules, need_ids: bool) -> str | None:
        """Why this turn is not written (the first rule that applies), or None."""
        for kind in self.kinds(rules.min_tokens):
            if kind in (NO_IDS, MISMATCH) and not need_ids:
                continue
            if kind == CUT and rules.keep_cut:
                continue
            return kind
        return None


def _legacy(row: Mapping[str, Any], conv: list[Any]) -> list[tuple[int, str | None]]:
    """(index, finish reason) of the generated turns of a row written before genbench kept
    ids and per-turn finish reasons: the last `meta.turns` assistant turns, the last one
    with the row's finish reason. An earlier turn's cut is not told apart: where the row
    was cut but not at its last turn, every earlier generated turn counts as cut."""
    meta = RowMeta.of(row)
    assistants = [
        i for i, t in enumerate(conv) if isinstance(t, Mapping) and t.get("role") == "assistant"
    ]
    n = meta.turns
    n = n if n is not None and 0 < n <= len(assistants) else min(1, len(assistants))
    picked = assistants[len(assistants) - n :]
    last = meta.finish_reason
    earlier = "length" if meta.truncated and last != "length" else None
    return [(i, last if i == picked[-1] else earlier) for i in picked]


def samples(row: Mapping[str, Any]) -> list[Sample]:
    """The generated turns of one output row (decoded JSONL line or Parquet row), in order."""
    rid = row.get("id")
    rid = rid if isinstance(rid, str | int) else str(rid)
    conv = row.get("conversations") or []
    found = turn_ids(row)
    if not found:
        legacy = _legacy(row, conv)
        tokens = RowMeta.of(row).completion_tokens if len(legacy) == 1 else None
        return [Sample(rid, i, None, None, f, None, tokens) for i, f in legacy]
    out = []
    for t in found:
        n = len(t.generated) if t.generated is not None else _turn_tokens(row, conv, t.turn, found)
        out.append(Sample(rid, t.turn, t.prompt, t.generated, t.finish_reason, t.error, n))
    return out


def _turn_tokens(
    row: Mapping[str, Any], conv: list[Any], turn: int, found: list[Any]
) -> int | None:
    """A turn without ids: the server's count, where the row tells it (one generated turn:
    the row's completion tokens)."""
    t = conv[turn] if turn < len(conv) else None
    own = t.get("completion_tokens") if isinstance(t, Mapping) else None
    if isinstance(own, int):
        return own
    return RowMeta.of(row).completion_tokens if len(found) == 1 else None
