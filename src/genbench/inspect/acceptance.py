"""Speculative acceptance in a generated data set: which kinds of prompt the drafter served
worst, the data the next drafter needs most.

A row generated on a server that said each request's acceptance keeps it summed over its
turns in `meta` (`spec_steps`, `spec_accepted`; generate/conversation.py) beside its
`group` (the input row's group, category or source field). Rows are told apart by group,
worst first, and by output length (genbench.stats.acceptance_of); a row's length is its
`1 + accepted / steps`. A row that said nothing, generated on a server that said it for
other rows, drafted nothing (vLLM sends no figures for such a request): it counts at one
token a step, so the prompts the drafter serves worst are not left out of their group.
"""

from __future__ import annotations

from array import array
from typing import Any

from genbench.rows import RowMeta
from genbench.stats import acceptance_of


class AcceptTally:
    """The rows' (steps, accepted, group, tokens), kept compactly: a set may hold millions."""

    def __init__(self) -> None:
        self.steps, self.accepted, self.tokens = array("q"), array("q"), array("q")
        self.group = array("I")
        self.names: dict[str, int] = {"": 0}
        # rows that said nothing, by server: on a server that said it for other rows, a
        # request that never drafted (vLLM then sends no figures): one token a step
        self.silent: dict[Any, tuple[array[int], array[int]]] = {}  # server: groups, tokens
        self.speaking: set[Any] = set()

    def add(self, obj: Any) -> None:
        raw = obj.get("meta") if isinstance(obj, dict) else None
        if not isinstance(raw, dict):
            return
        m, said = RowMeta.read(raw), "spec_steps" in raw  # held, even null (so a Parquet row)
        self.add_request(m.server, m.spec_steps, m.spec_accepted, m.group,
                         m.completion_tokens or 0, said)  # fmt: skip

    def add_request(self, server: Any, steps: Any, accepted: Any, group: Any, tokens: int,
                    said: bool = False) -> None:  # fmt: skip
        """One answer's figures; an answer without them (`said`: it held the field, empty)
        waits to learn whether its server gives acceptance for others (`settle`)."""
        if type(steps) is not int or type(accepted) is not int or steps <= 0 or accepted < 0:
            if tokens > 1 and not said:
                g = self.names.setdefault(group, len(self.names)) if isinstance(group, str) else 0
                groups, counts = self.silent.setdefault(server, (array("I"), array("q")))
                groups.append(g)
                counts.append(tokens)
            return
        self.speaking.add(server)
        self.add_item(steps, accepted, group, tokens)

    def settle(self) -> None:
        """The silent rows of a speculative server counted at one token a step (accepted
        0); those of a server that never said acceptance stay out."""
        for server in self.speaking & self.silent.keys():
            groups, counts = self.silent.pop(server)
            self.steps.extend(n - 1 for n in counts)
            self.accepted.extend(0 for _ in counts)
            self.group.extend(groups)
            self.tokens.extend(counts)

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
        self.settle()
        names = {i: n for n, i in self.names.items()}
        return acceptance_of(
            (s, a, names[g], t)
            for s, a, g, t in zip(self.steps, self.accepted, self.group, self.tokens, strict=True)
        )
