"""How a run's end names the rows that are not an answer (generate/ending.py) and how a
setting is named with job.json gone (generate/store/lostjob.py): pure functions, no server."""

from __future__ import annotations

import pytest

from genbench.generate.ending import Failures, Unanswered, ending
from genbench.generate.input.reader import Row
from genbench.generate.recipe import Recipe
from genbench.generate.request_hash import RequestCheck, request_hash
from genbench.generate.store.lostjob import COULD_HAVE, attribute, refusal

pytestmark = pytest.mark.core


def test_rows_ending_on_a_call_are_never_all_rows_done():
    """One pair of parentheses: the reasons, never a reason's own aside nested in them."""
    u = Unanswered(ran_out=25, call_cut=2)
    status, why = ending("complete", Failures(), 40, 0, None, 40, 1.0, u)
    assert status == "unanswered" and "all rows done" not in why
    assert why == (
        "27 rows of this run end on a tool call without an answer (25 with no result left in "
        "the input: --tool-policy replay, the results ran out; 2 cut by max_tokens mid-call); "
        "13 answered"
    )
    some = Failures()
    some.add("http_status", "HTTP 400")
    status, why = ending("complete", some, 39, 0, None, 40, 1.0, Unanswered(ran_out=1))
    assert status == "some_failed" and why.endswith("1 row of this run ends on a tool call "
        "without an answer (1 with no result left in the input: --tool-policy replay, the "
        "results ran out)")  # fmt: skip
    status, why = ending("complete", Failures(), 5, 2, None, 5, 1.0, Unanswered(ran_out=1))
    assert status == "unanswered" and why.endswith("failed in an earlier run (--retry-errors "
                                                   "to try them again)")  # fmt: skip


def test_token_ids_on_stops_and_auto_counts():
    auto = Unanswered()
    assert not auto.without_ids(["none"], "http://a/v1", "auto")
    assert not auto.without_ids(["exact", "none"], "http://a/v1", "auto")  # partial
    assert not auto.without_ids(["exact"], "http://a/v1", "auto")
    assert not auto.without_ids(["none"], "http://a/v1", "off")
    assert auto.stopped_by is None
    assert auto.ids_line(9) == "2 rows of this run without token ids (of 9 written; http://a/v1: 2)"
    on = Unanswered()
    assert on.without_ids(["none"], "http://b/v1", "on")
    assert on.without_ids(["none"], "http://c/v1", "on")
    assert on.stopped_by == "http://b/v1"
    status, why = ending("interrupted", Failures(), 3, 0, None, 9, 1.0, on)
    assert status == "no_token_ids" and why.startswith("http://b/v1 answered without token ids")
    assert "2 rows of this run without token ids (not kept; http://b/v1: 1, http://c/v1: 1)" in why


def _row(i: int) -> Row:
    return Row(f"r{i}", [{"role": "user", "content": f"question {i}"}], {}, i)


@pytest.mark.parametrize(
    ("then", "now", "said"),
    [
        ({"temperature": 0.6}, {"temperature": 0.7}, "--temperature was 0.6, now 0.7"),
        ({}, {"temperature": 0.7}, "--temperature was not set, now 0.7"),
        ({"max_tokens": 4096}, {"max_tokens": 2048}, "--max-tokens was 4096, now 2048"),
        ({"top_k": 20}, {"top_k": 40}, "--top-k was 20, now 40"),
        ({"min_p": 0.05}, {}, "--param min_p was 0.05, now not set"),
        ({}, {"chat_template_kwargs": {"enable_thinking": True}}, "--thinking was not set, now on"),
        ({}, {"stop": ["x"]}, '--param stop was not set, now ["x"]'),
    ],
)
def test_a_changed_setting_is_found_from_the_rows_fingerprints(then, now, said):
    samples = [(_row(i), request_hash(_row(i), Recipe(then))) for i in range(3)]
    assert attribute(samples, Recipe(now)) == f"{said} (found from the rows' fingerprints)"


def test_turns_are_found_and_two_changes_are_listed_not_guessed():
    samples = [(_row(i), request_hash(_row(i), Recipe({}, "last"))) for i in range(2)]
    assert attribute(samples, Recipe()).startswith("--turns was last, now all")
    two = {"temperature": 0.3, "top_p": 0.5}
    samples = [(_row(i), request_hash(_row(i), Recipe(two))) for i in range(2)]
    check = RequestCheck(Recipe({"temperature": 0.7, "top_p": 0.9}), {})
    check.samples = samples
    assert refusal("missing", check) == (
        ".genbench/job.json is missing, so no setting can be named; any of these could have "
        f"changed: {COULD_HAVE}"
    )
