"""The progress snapshot (generate/progress.py `Snapshot`): a typed value whose JSON is the
progress line's, keys and order as the files and logs already hold them; the listeners
after the console see the plan's course it adds; the metrics server's table lists each family
once, in its order."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from genbench.generate.listeners import Listeners, RunNotes
from genbench.generate.metrics_server import METRICS, MetricsServer
from genbench.generate.outcome import JobResult, Listener
from genbench.generate.progress import EngineState, Progress, ServerState, Snapshot

pytestmark = pytest.mark.core

LINE_KEYS = ["elapsed_s", "total", "done", "failed", "done_this_run", "failed_this_run",
             "truncated_this_run", "remaining", "rows_per_s", "tokens_per_s",
             "thinking_tokens_per_s", "answer_tokens_per_s", "tokens", "thinking_tokens",
             "eta_s", "eta_err_s", "eta_lo_s", "eta_hi_s", "all_down_s", "servers"]  # fmt: skip
SERVER_KEYS = ["url", "state", "down_s", "in_flight", "concurrency", "downs", "rows_per_s",
               "tokens_per_s"]  # fmt: skip
ENGINE = {"engine": "engine 1", "url": "http://a/v1", "up": False, "pid": 7, "restarts": 1,
          "restarts_by_cause": {"oom": 1}, "down_s": 4.5, "last_death": "killed"}  # fmt: skip


class Engines:
    def states(self) -> list[dict[str, object]]:
        return [dict(ENGINE)]

    def availability(self, window: float) -> tuple[float, float]:
        return 0.5, 0.75


def snapshot(engines: bool = False) -> Snapshot:
    prog = Progress(10, 2, 1, ["http://a/v1"], clock=lambda: 0.0)
    if engines:
        prog.engines = Engines()
    return prog.snapshot([ServerState("http://a/v1", "down", 3.0, 0, 4, 1)])


def test_the_progress_line_keeps_its_keys_and_their_order():
    d = snapshot().to_dict()
    # no engines without --serve, no plan without --plan; the server down: no ETA, and why
    assert list(d) == [*LINE_KEYS, "eta_note"] and d["eta_note"] == "no server"
    assert (d["total"], d["done"], d["failed"], d["remaining"], d["all_down_s"]) == (10, 2, 1,
                                                                                     7, 3.0)
    assert list(d["servers"][0]) == SERVER_KEYS
    served = replace(snapshot(engines=True), plan={"seconds": 5.0})
    d = orjson.loads(orjson.dumps(served.to_dict()))
    assert list(d) == [*LINE_KEYS, "engines", "engines_availability", "plan", "eta_note"]
    assert d["engines"] == [ENGINE] and d["engines_availability"] == 0.75
    assert served.engines == (EngineState(**ENGINE),)


def test_the_json_result_holds_the_snapshot_as_the_line_writes_it():
    snap = snapshot()
    assert JobResult("complete", snapshot=snap).to_dict()["snapshot"] == snap.to_dict()
    assert JobResult("interrupted").to_dict()["snapshot"] == {}


def test_the_listeners_after_the_console_see_the_snapshot_it_hands_on():
    seen: list[Snapshot] = []

    class Console(Listener):
        def tick(self, snap: Snapshot) -> Snapshot:
            return replace(snap, plan={"seconds": 9.0})

    class After(Listener):
        def tick(self, snap: Snapshot) -> None:
            seen.append(snap)

    Listeners(Listener(), Console(), After()).tick(snapshot())
    assert seen[0].plan == {"seconds": 9.0}


def test_the_jobs_run_notes_see_the_plan_the_commands_console_adds(tmp_path):
    """The job hears the command's listeners (console, metrics server) as one, then its RunNotes:
    the plan's forecast the console adds reaches runs.jsonl's start line (the job report
    draws the ETA against it)."""

    class Console(Listener):
        def tick(self, snap: Snapshot) -> Snapshot:
            return replace(snap, plan={"seconds": 9.0, "lo_s": 8.0, "hi_s": 11.0, "off": 0.1})

    (tmp_path / ".genbench").mkdir()
    notes = RunNotes(tmp_path)
    Listeners(Listeners(Console(), Listener()), notes).tick(snapshot())
    start = orjson.loads(notes.path.read_bytes().splitlines()[0])
    assert start["event"] == "start" and start["plan"] == {"seconds": 9.0, "lo_s": 8.0,
                                                           "hi_s": 11.0}  # fmt: skip


def test_the_metrics_server_lists_each_declared_family_once_in_its_order():
    assert len({m.name for m in METRICS}) == len(METRICS)
    e = MetricsServer()
    e.tick(replace(snapshot(engines=True), plan={"seconds": 5.0, "lo_s": 4.0, "hi_s": 6.0,
                                                 "on_course_s": 5.5, "verdict": "inside"}))
    text = generate_latest(e.collector).decode()
    names = [f.name for f in text_string_to_metric_families(text)]
    unknown = ("genbench_rows_per_second", "genbench_tokens_per_second", "genbench_eta_seconds",
               "genbench_eta_low_seconds", "genbench_eta_high_seconds")  # no rows ended yet
    declared = [m.name for m in METRICS if m.name not in unknown]
    assert names == ["genbench_job_info", *declared]
    assert 'genbench_engine_restarts_total{cause="oom",engine="engine 1"} 1.0' in text
    assert 'genbench_server_down_seconds{server="http://a/v1"} 3.0' in text
    assert "genbench_rows_remaining 7.0" in text
