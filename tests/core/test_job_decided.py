"""What a generate job derives from its config, worked out once (generate/decided.py): the
servers' endpoints, every rule of the shard, the input's path as job.json keeps it, and the
token-ids note of `--answers batch` (#43)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_generate_args import args

from genbench.generate.decided import Decided
from genbench.generate.flags import job_config
from genbench.generate.input.shard import ShardSpec
from genbench.generate.jobconfig import JobConfig
from genbench.generate.servers import ServerSpec
from genbench.transport.token_ids import IdsMode

pytestmark = pytest.mark.core


def test_a_relative_input_is_kept_absolute_and_each_url_parsed_once() -> None:
    cfg = JobConfig(Path("in.jsonl"), Path("out"), [ServerSpec("http://h:1", 4)], api_key="k")
    d = Decided.of(cfg)
    assert d.input == os.path.join(os.getcwd(), "in.jsonl") and os.path.isabs(d.input)
    assert [e.base_url for e in d.endpoints] == ["http://h:1/v1"] and d.endpoints[0].api_key
    assert (d.files_tag, d.share, d.shard_count, d.shard_asked) == (None, None, 1, "no --shard")


def test_the_shard_rules_in_one_place() -> None:
    one = Decided.of(JobConfig(Path("i"), Path("o"), [], shard=ShardSpec(1, 1)))
    assert (one.files_tag, one.share, one.shard_count) == (None, "1of1", 1)  # job.json's
    two = Decided.of(JobConfig(Path("i"), Path("o"), [], shard=ShardSpec(2, 3)))
    assert (two.files_tag, two.share, two.shard_asked) == ("2of3", "2of3", "--shard 2/3")


def test_answers_batch_keeps_no_ids_decided_by_the_flags_said_by_the_job() -> None:
    cfg = job_config(args(answers="batch", url=["http://h:1"]))
    assert cfg.token_ids == IdsMode.OFF and "not kept" in (Decided.of(cfg).ids_said or "")
    assert Decided.of(job_config(args(url=["http://h:1"]))).ids_said is None
