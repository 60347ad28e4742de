"""A resumed job's settings against its job.json (generate/store/jobfile.py), and how a run's
end is worded (generate/ending.py): pure functions, no server."""

from __future__ import annotations

import pytest

from genbench.errors import UsageError
from genbench.generate.ending import Failures, ending, failed_exit
from genbench.generate.store.jobfile import job_setting, setting_change, token_ids_change

pytestmark = pytest.mark.core


def test_a_missing_tool_policy_is_replay_and_changes_name_their_flag():
    assert job_setting({}, "tool_policy") == "replay"
    assert setting_change({}, {"tool_policy": "keep"}, "tool_policy") == (
        "--tool-policy", "replay", "keep")  # fmt: skip
    old, new = {"format": "batch", "answers": "batch"}, {"format": "jsonl", "answers": "both"}
    assert setting_change(old, new, "format") == ("--answers", "batch", "both")
    assert setting_change({"format": "batch"}, {"format": "jsonl"}, "format")[1:] == (
        "batch", "conversations")  # fmt: skip
    assert setting_change({"format": "jsonl"}, {"format": "parquet"}, "format")[0] == "format"


def test_a_changed_sampling_field_names_the_flag_that_sets_it():
    """With job.json there, as without it (lostjob.py): `--temperature was not set, now
    0.7`, never `params was {}, now {"temperature":0.7}`."""
    assert setting_change({"params": {}}, {"params": {"temperature": 0.7}}, "params") == (
        "--temperature", "not set", "0.7")  # fmt: skip
    old, new = {"params": {"top_p": 0.9, "min_p": 0.1}}, {"params": {"top_p": 0.9}}
    assert setting_change(old, new, "params") == ("--param min_p", "0.1", "not set")
    assert setting_change({"params": {"max_tokens": 512}}, {"params": {"max_tokens": 1024}},
                          "params") == ("--max-tokens", "512", "1024")  # fmt: skip


def test_token_ids_off_and_on_do_not_mix_without_force():
    assert token_ids_change(None, "off", False) is None
    assert token_ids_change({}, "off", False) is None  # a job.json older than the key
    assert token_ids_change({"token_ids": "auto"}, "auto", False) is None
    assert "as before" in (token_ids_change({"token_ids": "auto"}, "on", False) or "")
    for was, now in (("auto", "off"), ("off", "on"), ("on", "off")):
        with pytest.raises(UsageError, match=f"--token-ids was {was}, now {now}"):
            token_ids_change({"token_ids": was}, now, False)
        assert "(--force)" in (token_ids_change({"token_ids": was}, now, True) or "")


def test_the_end_says_all_rows_done_only_when_none_failed():
    none = Failures()
    assert ending("complete", none, 5, 0, None, 5, 1.0) == ("complete", "all rows done")
    assert ending("complete", none, 10, 0, 20, 10, 1.0) == (
        "limit", "the first 10 (--limit); 20 left")  # fmt: skip
    some = Failures()
    some.add("http_status", "HTTP 400: no")
    some.add("http_status", "HTTP 400: other words")
    some.add("read_timeout", "silent")
    assert ending("complete", some, 7, 0, None, 10, 1.0) == ("some_failed", "3 rows failed, 7 done")
    status, why = ending("complete", some, 0, 0, None, 3, 1.0)
    assert status == "failed" and why == "every row failed (3 rows, none done)"
    assert some.most_common() == {"kind": "http_status", "rows": 2, "message": "HTTP 400: no"}
    assert failed_exit(some.most_common()) == 9
    assert failed_exit({"kind": "truncated", "rows": 1, "message": ""}) == 11
    assert failed_exit(None) == 9
    assert ending("interrupted", some, 0, 0, None, 3, 1.0)[0] == "interrupted"
