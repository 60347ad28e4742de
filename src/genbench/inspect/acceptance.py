"""Speculative acceptance in a generated data set: which kinds of prompt the drafter served
worst, the data the next drafter needs most.

A row generated on a server that said each request's acceptance keeps it summed over its
turns in `meta` (`spec_steps`, `spec_accepted`; generate/conversation.py) beside its
`group` (the input row's group, category or source field). Rows are told apart by group,
worst first, and by output length (genbench.stats.acceptance_of); a row's length is its
`1 + accepted / steps`.
"""

from __future__ import annotations

from array import array
from typing import Any

from genbench.stats import acceptance_of


class AcceptTally:
    """The rows' (steps, accepted, group, tokens), kept compactly: a set may hold millions."""

    def __init__(self) -> None:
        self.steps, self.accepted, self.tokens = array("q"), array("q"), array("q")
        self.group = array("I")
        self.names: dict[str, int] = {"": 0}

    def add(self, obj: Any) -> None:
        meta = obj.get("meta") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return
        steps, accepted = meta.get("spec_steps"), meta.get("spec_accepted")
        if type(steps) is not int or type(accepted) is not int or steps <= 0 or accepted < 0:
            return
        tokens = meta.get("completion_tokens")
        self.add_item(steps, accepted, meta.get("group"), tokens if type(tokens) is int else 0)

    def add_item(self, steps: int, accepted: int, group: Any, tokens: int) -> None:
        """One row's (or one request's: the job report's) figures."""
        g = self.names.setdefault(group, len(self.names)) if isinstance(group, str) else 0
        self.steps.append(steps)
        self.accepted.append(accepted)
        self.group.append(g)
        self.tokens.append(tokens)

    @property
    def rows(self) -> int:
        return len(self.steps)

    def to_dict(self) -> dict[str, Any] | None:
        """By group worst first and by output length; None when no row kept acceptance."""
        names = {i: n for n, i in self.names.items()}
        return acceptance_of(
            (s, a, names[g], t)
            for s, a, g, t in zip(self.steps, self.accepted, self.group, self.tokens, strict=True)
        )
