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
from genbench.commands.plan import plan
from genbench.errors import UsageError
from genbench.generate.flags import GenerateArgs, job_config, plan_lines
from genbench.generate.jobconfig import JobConfig
from genbench.generate.planned import DEFAULT_CONCURRENCY, Planned, departures, taken
from genbench.generate.servers import ServerSpec
from genbench.generate.tuner import SAFE_START
from genbench.plan.document import plan_settings
from genbench.plan.make import DEFAULT_PILOT_C

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
    # plan's pilot runs 32 unless -c says otherwise; generate --plan runs the plan's
    assert inspect.signature(plan).parameters["concurrency"].default.default is None
    assert DEFAULT_PILOT_C == DEFAULT_CONCURRENCY


@pytest.mark.parametrize(("given", "message"), [
    ({"retries": -1}, "--retries, --retry-backoff and --drain must be 0 or more"),
    ({"concurrency": "0"}, "-c/--concurrency '0': expected a number >= 1 or auto"),
    ({"concurrency": "lots"}, "-c/--concurrency 'lots': expected a number >= 1 or auto"),
    ({"turns": "some"}, "--turns 'some': expected one of all, last"),
    ({"answers": "batch", "fmt": "parquet"}, "--answers batch writes JSON Lines"),
    ({"part_size": "1KB"}, "--part-size '1KB': must be at least 4KB"),
    ({"url": None}, "no server: give --url URL"),
])  # fmt: skip
def test_a_bad_option_is_refused_naming_its_flag(given, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        job_config(args(**given))


def test_a_setting_kept_as_typed_reaches_the_job():
    cfg = job_config(args(retries=5, drain=0.0, answers="both", truncated="error"))
    assert (cfg.retries, cfg.drain, cfg.answers, cfg.on_truncated) == (5, 0.0, "both", "error")


def pilot_plan(**inputs: Any) -> dict[str, Any]:
    """A pilot's plan.json as `genbench plan --prompts` writes it, its inputs given."""
    base = {"concurrency": 16, "servers": 2, "params": {"max_tokens": 512, "temperature": 0.6},
            "turns": "last", "tool_policy": "keep"}  # fmt: skip
    return {"mode": "pilot", "_path": "plans/job/plan.json", "inputs": {**base, **inputs},
            "rows": [{"samples": 100, "ours": {"seconds": 50.0}}]}  # fmt: skip


def test_the_plan_is_the_jobs_settings_where_no_flag_says_otherwise():
    planned = plan_settings(pilot_plan())
    assert planned == Planned("plans/job/plan.json", 16, 2, {"max_tokens": 512,
                              "temperature": 0.6}, "last", "keep")  # fmt: skip
    a = args(url=[URL, "http://127.0.0.1:10/v1"])
    cfg = job_config(a, planned)
    assert [s.concurrency for s in cfg.servers] == [16, 16]
    assert cfg.params == {"max_tokens": 512, "temperature": 0.6}
    assert (cfg.turns, cfg.tool_policy) == ("last", "keep")
    runs, departs = plan_lines(a, planned, cfg)
    assert departs == [] and runs == (
        "C=16 per server; 2 servers; max_tokens 512, temperature 0.6; this job runs it as planned"
    )


def test_a_flag_that_departs_from_the_plan_is_said_with_what_it_does_to_the_forecast():
    planned = plan_settings(pilot_plan())
    a = args(concurrency=64, max_tokens=256, temperature=None, turns="all")
    cfg = job_config(a, planned)
    assert cfg.servers[0].concurrency == 64 and cfg.turns == "all"
    assert cfg.params == {"max_tokens": 256, "temperature": 0.6}  # the flag over the plan's
    runs, departs = plan_lines(a, planned, cfg)
    assert runs == (
        "C=16 per server; 2 servers; max_tokens 512, temperature 0.6; this job runs "
        "C=64 per server; 1 server; max_tokens 256, temperature 0.6 instead (below)"
    )
    text = "\n".join(departs)
    assert len(departs) == 4, text
    assert "-c 64 departs from the plan's C=16" in text and "another load" in text
    assert "1 server here, the plan decided 2" in text and "longer than the plan's" in text
    assert "max_tokens 256 departs from the plan's 512" in text and "forecast may be long" in text
    assert "--turns all departs from the plan's last" in text


def test_the_plans_configuration_line_says_what_the_plan_decided_not_what_the_job_runs():
    """Seen by a new user: "plan's configuration: runs C=32 per server; 1 server; ..." then
    "1 server here, the plan decided 2": the first read as the plan's own configuration.
    The line says the plan's, then what this job runs instead of it."""
    planned = plan_settings(pilot_plan())
    a = args()  # one --url: one server of the plan's two
    cfg = job_config(a, planned)
    runs, departs = plan_lines(a, planned, cfg)
    assert runs == ("C=16 per server; 2 servers; max_tokens 512, temperature 0.6; this job "
                    "runs 1 server instead, the rest as planned (below)")  # fmt: skip
    assert departs == [departures(planned, concurrency="16", servers=1, params=cfg.params,
                                  turns="last", tool_policy="keep")[0]]  # fmt: skip
    assert "1 server here, the plan decided 2" in departs[0]
    # a plan that sets no concurrency nor sampling (the field's arithmetic): the job's own
    arithmetic = Planned("plan.json", None, 1)
    assert taken(arithmetic, "auto", 1, {"max_tokens": 64}) == (
        "1 server; this job runs it as planned, with C=auto per server (the plan set none); "
        "max_tokens 64 (the plan set none)")  # fmt: skip
    assert taken(Planned("plan.json", 8, 1, {}), "auto", 1, {}) == (
        "C=8 per server; 1 server; the server's own sampling; this job runs C=auto from 8 per "
        "server instead, the rest as planned (below)")  # fmt: skip


def test_a_run_plan_gives_its_chosen_concurrency_and_no_sampling():
    chosen = {"seconds": 5.0, "concurrency": 8}
    doc = {"mode": "result", "inputs": {"servers": 1},
           "rows": [{"samples": 10, "ours_chosen": chosen}]}  # fmt: skip
    planned = plan_settings(doc)
    assert (planned.concurrency, planned.servers, planned.params) == (8, 1, None)
    cfg = job_config(args(), planned)
    assert cfg.servers[0].concurrency == 8 and cfg.params == {}
    # a deadline's need is the servers the plan decided
    doc["decision"] = {"deadline": {"text": "1h"}, "configurations": [
        {"rows": [{"samples": 10, "servers_needed": {"servers": 3}}]}]}  # fmt: skip
    assert plan_settings(doc).servers == 3
