"""What shapes a row's requests: the job's `Recipe` (its sampling, `--turns` and
`--tool-policy`, what the job's salt hashes: request_hash.py), and each row's `TurnPlan` under
it: which of its turns are asked for, in order, and which are sent as written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from genbench.generate.input.modes import Turns
from genbench.generate.input.reader import Row
from genbench.generate.input.tools import POLICIES, is_agentic

ALL, LAST = TURNS = tuple(Turns)  # --turns
REPLAY, KEEP = POLICIES  # --tool-policy (agent.py)


@dataclass(frozen=True)
class Recipe:
    """A job's recipe for its rows' requests; the defaults are generate's."""

    params: Mapping[str, Any] = field(default_factory=dict)  # sampling (input/params.py)
    turns: str = ALL
    tool_policy: str = REPLAY

    def __post_init__(self) -> None:  # a copy, read-only: the recipe cannot change under a job
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def all_turns(self) -> bool:
        return self.turns == ALL


class TurnPlan(NamedTuple):
    """Which turns of a row are asked for: a request after each message `asks` names
    (indices into `messages`, in order), carrying the messages before it that `sent` marks;
    the others are answers generated again, or come after the last turn asked. `tools`: the
    policy an agentic row's calls are under; None for a chat row."""

    messages: list[dict[str, Any]]
    asks: tuple[int, ...]
    sent: tuple[bool, ...]
    tools: str | None = None

    @property
    def requests(self) -> int:
        """Requests the row makes: one per turn asked; under `replay`, as many as the
        original's assistant turns after each user turn asked (the target may make more or
        fewer)."""
        if self.tools != REPLAY:
            return len(self.asks)
        answers = (sum(m["role"] == "assistant" for m in self.segment(i)) for i in self.asks)
        return sum(max(1, n) for n in answers)

    def segment(self, ask: int) -> list[dict[str, Any]]:
        """The original's messages after the turn at `ask`, up to the next user turn."""
        msgs = self.messages
        end = next((j for j in range(ask + 1, len(msgs)) if msgs[j]["role"] == "user"), None)
        return msgs[ask + 1 : end]


def turn_plan(row: Row, recipe: Recipe) -> TurnPlan:
    """The row's plan: a chat row's (and under `replay`, an agentic row's) user turns are
    answered, each by the first assistant turn after it; under `keep` a tool result is a
    turn answered too, and an original call that results follow is sent as written."""
    msgs, n = row.messages, len(row.messages)
    agentic = is_agentic(msgs, row.tools) or "tools" in row.params  # tools in its params too
    tools = recipe.tool_policy if agentic else None
    keep = tools == KEEP
    prompts = ("user", "tool") if keep else ("user",)
    if not recipe.all_turns:  # the last turn asked, the turns before it as written
        last = max(i for i, m in enumerate(msgs) if m["role"] in prompts)
        return TurnPlan(msgs, (last,), (True,) * (last + 1) + (False,) * (n - last - 1), tools)
    again = ("assistant", "tool") if tools == REPLAY else ("assistant",)  # generated again
    sent, asks = [], []
    for i, m in enumerate(msgs):
        sent.append(m["role"] not in again or keep and _called(msgs, i))
        if m["role"] in prompts and _answered(msgs, i, keep):
            asks.append(i)
    return TurnPlan(msgs, tuple(asks), tuple(sent), tools)


def _called(msgs: list[dict[str, Any]], i: int) -> bool:
    """An original call that results follow."""
    return "tool_calls" in msgs[i] and i + 1 < len(msgs) and msgs[i + 1]["role"] == "tool"


def _answered(msgs: list[dict[str, Any]], i: int, keep: bool) -> bool:
    """The turn at `i` is answered next: it ends the row, or (under `keep`) a plain answer
    follows it, or (else) no other user turn does."""
    if i + 1 == len(msgs):
        return True
    if keep:
        return msgs[i + 1]["role"] == "assistant" and not _called(msgs, i + 1)
    return msgs[i + 1]["role"] != "user"


def turn_count(row: Row, recipe: Recipe) -> int:
    """Requests one row makes under `recipe` (`TurnPlan.requests`)."""
    return turn_plan(row, recipe).requests
