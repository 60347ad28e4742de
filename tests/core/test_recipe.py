"""A job's recipe (what shapes its rows' requests) and a row's turn plan under it: which
turns are asked for, which are sent as written, and how many requests that makes."""

from __future__ import annotations

import dataclasses

import pytest

from genbench.generate.agent import start
from genbench.generate.input.reader import Row
from genbench.generate.recipe import Recipe, turn_count, turn_plan

pytestmark = pytest.mark.core

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
CALL = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}


def msgs(*roles: str) -> list[dict]:
    """Turns by role; `call` is an assistant turn that calls."""
    out = []
    for i, r in enumerate(roles):
        m = {"role": "assistant" if r == "call" else r, "content": f"{r}{i}"}
        if r == "call":
            m["tool_calls"] = [CALL]
        out.append(m)
    return out


def test_a_recipe_is_a_copy_that_cannot_change_under_a_job():
    params = {"temperature": 0.6}
    recipe = Recipe(params)
    params["temperature"] = 1.0
    assert recipe.params == {"temperature": 0.6} and recipe == Recipe({"temperature": 0.6})
    with pytest.raises(TypeError):
        recipe.params["top_p"] = 0.9  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.turns = "last"  # type: ignore[misc]
    assert (Recipe().turns, Recipe().tool_policy, Recipe().all_turns) == ("all", "replay", True)
    assert not Recipe(turns="last").all_turns


def test_a_chat_row_asks_each_user_turn_that_an_answer_follows():
    row = Row("x", msgs("system", "user", "assistant", "user", "user", "assistant"), {}, 1)
    plan = turn_plan(row, Recipe(tool_policy="keep"))  # a chat row has no calls to keep
    assert plan.tools is None and plan.asks == (1, 4) and plan.requests == 2
    assert plan.sent == (True, True, False, True, True, False)
    last = turn_plan(row, Recipe(turns="last"))
    assert last.asks == (4,) and last.sent == (True,) * 5 + (False,) and last.requests == 1


def test_an_agentic_rows_plan_follows_its_tool_policy():
    roles = ("user", "call", "tool", "call", "tool", "assistant", "user", "assistant")
    row = Row("x", msgs(*roles), {}, 1, tools=TOOLS)
    replay = turn_plan(row, Recipe())
    assert replay.tools == "replay" and replay.asks == (0, 6)
    assert replay.sent == (True, False, False, False, False, False, True, False)
    assert replay.requests == 4  # three assistant turns after the first user turn, one after
    keep = turn_plan(row, Recipe(tool_policy="keep"))
    assert keep.asks == (4, 6) and keep.requests == 2  # the result a plain answer follows
    assert keep.sent == (True, True, True, True, True, False, True, False)
    assert turn_plan(row, Recipe(turns="last", tool_policy="keep")).asks == (6,)
    assert turn_count(row, Recipe()) == 4
    # tools in the row's params make it agentic too
    assert turn_plan(Row("y", msgs("user"), {"tools": TOOLS}, 1), Recipe()).tools == "replay"


@pytest.mark.parametrize("recipe", [Recipe(), Recipe(turns="last"), Recipe(tool_policy="keep")])
def test_a_conversation_asks_what_its_plan_says(recipe):
    roles = ("system", "user", "call", "tool", "assistant", "user", "assistant")
    for row in (Row("x", msgs(*roles), {}, 1, tools=TOOLS), Row("y", msgs(*roles[:2]), {}, 1)):
        plan = turn_plan(row, recipe)
        first = next(start(row, recipe).asked())
        upto = row.messages[: plan.asks[0] + 1]
        sent = [m["content"] for i, m in enumerate(upto) if plan.sent[i]]
        assert [m["content"] for m in first.messages] == sent
    chat = Row("z", msgs("user", "assistant", "user", "assistant"), {}, 1)
    asked = list(start(chat, recipe).asked())
    assert len(asked) == turn_count(chat, recipe)
    answer = "assistant1" if recipe.turns == "last" else ""  # as written, or the one asked
    assert [m["content"] for m in asked[-1].messages] == ["user0", answer, "user2"]
