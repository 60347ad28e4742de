"""Speculative acceptance in a generated data set: which kinds of prompt the drafter served
worst, the data the next drafter needs most.

A row generated on a server that said each request's acceptance keeps it summed over its
turns in `meta` (`spec_steps`, `spec_accepted`; generate/conversation.py) beside its
`group` (the input row's group, category or source field). Rows are told apart by group,
worst first, and by output length (genbench.stats.acceptance_of); a row's length is its
`1 + accepted / steps`.

A row that said it drafted nothing (vLLM's `num_spec_steps: 0`) counts at one token a step,
so the prompts the drafter serves worst are not left out of their group. A row that said
nothing is unknown: counted, and left out of every pool (a reply that lost its usage chunk
says nothing of what was drafted). Figures that cannot be (more accepted than drafted, more
verify steps than tokens, counts that are not counts) are dropped and counted by why.
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any

from genbench.rows import RowMeta
from genbench.stats import acceptance_of, left_out
from genbench.transport.acceptance import NOT_COUNTS, impossible


class AcceptTally:
    """The rows' (steps, accepted, group, tokens), kept compactly: a set may hold millions;
    with the rows left out: `unknown` (said nothing), `dropped` (by why)."""

    def __init__(self) -> None:
        self.steps, self.accepted, self.tokens = array("q"), array("q"), array("q")
        self.group = array("I")
        self.names: dict[str, int] = {"": 0}
        self.unknown = 0
        self.dropped: Counter[str] = Counter()

    def add(self, obj: Any) -> None:
        """One row, as a JSONL line or a Parquet row gives it."""
        raw = obj.get("meta") if isinstance(obj, dict) else None
        if not isinstance(raw, dict):
            return
        m = RowMeta.read(raw)
        figures = (m.spec_steps, m.spec_accepted, m.spec_drafted)
        # a figure the row holds that RowMeta read as None is not a count (a string, a list)
        held = sum(raw.get(k) is not None for k in ("spec_steps", "spec_accepted", "spec_drafted"))
        garbled = held > sum(v is not None for v in figures)
        self.add_request(
            m.spec_steps, m.spec_accepted, m.group, m.completion_tokens or 0,
            drafted=m.spec_drafted, dropped=NOT_COUNTS if garbled else m.spec_dropped,
            estimated=m.tokens_estimated is True,
        )  # fmt: skip

    def add_request(self, steps: Any, accepted: Any, group: Any, tokens: int, *,
                    drafted: Any = None, dropped: Any = None,
                    estimated: bool = False) -> None:  # fmt: skip
        """One row's or one answer's figures (the job report's): pooled, unknown or
        dropped. `dropped` is why generate dropped them already; `estimated` tokens (no
        usage) prove nothing about the steps."""
        if dropped is not None:
            self.dropped[str(dropped)] += 1
            return
        if steps is None and accepted is None:
            self.unknown += 1
            return
        if why := impossible(steps, accepted, drafted, tokens=None if estimated else tokens):
            self.dropped[why] += 1
            return
        if not steps:  # said: it drafted nothing, one token a step (the first is prefill's)
            if tokens <= 1:
                return  # no decode step to count
            steps = tokens - 1
        self.add_item(steps, accepted, group, tokens)

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
        """By group worst first and by output length, with what was left out; None when no
        row kept acceptance."""
        names = {i: n for n, i in self.names.items()}
        out = acceptance_of(
            (s, a, names[g], t)
            for s, a, g, t in zip(self.steps, self.accepted, self.group, self.tokens, strict=True)
        )
        if out is not None:
            left_out(out, self.unknown, self.dropped)
        return out
