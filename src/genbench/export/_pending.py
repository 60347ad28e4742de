"""Until branch `tokens` lands: the reader of a turn's ids that `genbench.generate.rows`
will hold (`turn_ids`, `TurnIds`), with the same shape. Removed at the merge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TurnIds:
    turn: int
    prompt: list[int] | None
    generated: list[int] | None
    finish_reason: str | None
    error: str | None = None

    @property
    def exact(self) -> bool:
        return self.prompt is not None and self.generated is not None and self.error is None


def turn_ids(row: Mapping[str, Any]) -> list[TurnIds]:
    out = []
    for i, t in enumerate(row.get("conversations") or ()):
        if not isinstance(t, Mapping) or t.get("role") != "assistant":
            continue
        if t.get("finish_reason") is None:
            continue
        prompt, gen = t.get("prompt_token_ids"), t.get("token_ids")
        out.append(
            TurnIds(
                i,
                None if prompt is None else list(prompt),
                None if gen is None else list(gen),
                t.get("finish_reason"),
                t.get("token_ids_error"),
            )
        )
    return out
