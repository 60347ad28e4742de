"""`genbench generate`'s options as one value (generate/flags.py GenerateArgs; the command's
signature, as typer reads it, built from its table of flags in commands/generate.py): the
command's defaults make the library's JobConfig, and a bad option is refused naming its
flag, before any server is asked."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from genbench.commands.generate import generate
from genbench.errors import UsageError
from genbench.generate.flags import GenerateArgs, job_config
from genbench.generate.jobconfig import JobConfig
from genbench.generate.servers import ServerSpec
from genbench.generate.tuner import SAFE_START

pytestmark = pytest.mark.core

URL = "http://127.0.0.1:9/v1"


def args(**given: Any) -> GenerateArgs:
    """The options as the command passes them: every default, the given ones typed."""
    typed = {n: p.default.default for n, p in inspect.signature(generate).parameters.items()}
    return GenerateArgs(**{**typed, "input": Path("in.jsonl"), "output": Path("out"),
                           "url": [URL], **given})  # fmt: skip


def test_the_commands_defaults_are_the_librarys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    auto = ServerSpec(URL, SAFE_START, auto=True)  # -c auto: found and held per server
    assert job_config(args()) == JobConfig(Path("in.jsonl"), Path("out"), [auto])
    assert job_config(args(concurrency="64")).servers == [ServerSpec(URL, 64)]  # exactly that


@pytest.mark.parametrize(("given", "message"), [
    ({"retries": -1}, "--retries, --retry-backoff and --drain must be 0 or more"),
    ({"concurrency": "0"}, "-c/--concurrency '0': expected a number >= 1 or auto"),
    ({"concurrency": "lots"}, "-c/--concurrency 'lots': expected a number >= 1 or auto"),
    ({"turns": "some"}, "--turns 'some': expected one of all, last"),
    ({"answers": "batch", "fmt": "parquet"}, "--answers batch writes JSON Lines"),
    ({"shard_size": "1KB"}, "--shard-size '1KB': must be at least 4KB"),
    ({"url": None}, "no server: give --url URL"),
])  # fmt: skip
def test_a_bad_option_is_refused_naming_its_flag(given, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        job_config(args(**given))


def test_a_setting_kept_as_typed_reaches_the_job():
    cfg = job_config(args(retries=5, drain=0.0, answers="both", truncated="error"))
    assert (cfg.retries, cfg.drain, cfg.answers, cfg.on_truncated) == (5, 0.0, "both", "error")
