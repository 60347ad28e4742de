"""`plan --from PLAN_DIR`: a pilot's plan made again from the records it kept, sending
nothing. The same flags give the same plan, figure for figure; other servers, samples or a
deadline are extended from the simulations the plan kept, with no job simulated again."""

from __future__ import annotations

import inspect
import math
import os
import random
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import genbench
from synthetic import rec

from genbench.commands.plan import plan
from genbench.errors import UsageError
from genbench.generate.wander import unseen_drift
from genbench.plan import walltime
from genbench.plan.document import add_asked, read_plan, save_plan
from genbench.plan.from_pilot import plan_from_pilot
from genbench.plan.make import PlanArgs, make_plan
from genbench.plan.pilot import PilotRun
from genbench.plan.render import asked_line
from genbench.records import RecordWriter, read_records
from genbench.run.result import REQUESTS_FILE

pytestmark = pytest.mark.core

C = 4


def pilot(n: int = 120) -> list[Any]:
    """A pilot at C=4: each worker sends its next request as the last ends; a request of
    L tokens decodes at 20 ms a token (a chunk a token), after a 50 ms TTFT."""
    rnd = random.Random(7)
    out, free = [], [1.0] * C  # a clock's times, never 0
    for i in range(n):
        w = min(range(C), key=lambda j: free[j])
        length = rnd.randint(20, 60)
        offsets = [0.05 + 0.02 * t for t in range(length)]
        extra = {"row": i, "turn": 0, "turns": 1, "jsonl_bytes": 300 + length}
        out.append(rec(free[w], offsets, tokens=length, prompt=12, rid=f"p{i}", extra=extra))
        free[w] += offsets[-1] + 0.001
    return out


def args(**given: Any) -> PlanArgs:
    """plan's options as the command passes them: every default, the given ones typed."""
    typed = {n: p.default.default for n, p in inspect.signature(plan).parameters.items()}
    for name in ("json", "job_files", "progress_every"):
        typed.pop(name)
    typed["from_"] = typed.pop("from_")
    return PlanArgs(**{**typed, **given})


class Quiet:
    def say(self, line: str) -> None: ...
    def pilot_started(self, total: int | None, stop: Any) -> None: ...
    def record(self, rec: Any) -> None: ...
    def pilot_ended(self) -> None: ...


@pytest.fixture(scope="module")
def pilot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pilot_plan(tmp_path_factory.mktemp("pilot"))


def pilot_plan(tmp_path: Path) -> Path:
    """A pilot's directory as `plan --prompts` leaves it: requests.jsonl and plan.json."""
    records = pilot()
    w = RecordWriter(tmp_path / REQUESTS_FILE)
    for r in records:
        w.write(r)
    w.close()
    records = read_records(tmp_path / REQUESTS_FILE)  # as the pilot reads them back
    wall = max(r.t_end for r in records) - min(r.t_send for r in records)
    run = PilotRun(records, wall, [r.extra["jsonl_bytes"] for r in records], samples=len(records))
    inputs = {"samples": [100_000, 900_000], "servers": 1, "concurrency": C, "pilot": 120,
              "params": {"max_tokens": 64}, "turns": "all", "tool_policy": "replay",
              "speed_drift": None, "seed": 0, "bootstrap": 40}  # fmt: skip
    source = {"kind": "pilot", "records": str(tmp_path / REQUESTS_FILE)}
    doc = plan_from_pilot(run, C, [100_000, 900_000], 1, None, source, inputs, 40, 0)
    add_asked(doc)  # as make_plan does
    save_plan(doc, tmp_path)
    return tmp_path


def test_the_same_flags_give_the_same_plan_from_the_records(pilot_dir, monkeypatch):
    before = read_plan(pilot_dir)

    def simulated(*a: Any, **k: Any) -> None:
        raise AssertionError("a re-plan of long jobs simulated one again")

    monkeypatch.setattr(walltime, "simulate_job", simulated)
    doc, saved = make_plan(args(from_=[pilot_dir], samples="100K,900K", bootstrap=40), Quiet())
    assert saved == pilot_dir / "plan.json"
    assert doc["rows"] == before["rows"] and doc["model"] == before["model"]
    assert any("re-planned from the pilot recorded in" in n for n in doc["notes"])
    # saved over the plan it was made from: said, with what that plan was and how to keep it
    [said] = [n for n in doc["notes"] if "this plan replaces" in n]
    assert f"replaces {pilot_dir / 'plan.json'} (the plan for 100,000, 900,000 samples" in said
    assert "-o DIR saves a re-plan elsewhere" in said


def test_other_servers_samples_and_a_deadline_are_arithmetic_on_the_kept_simulations(
    pilot_dir, tmp_path, monkeypatch
):
    before = read_plan(pilot_dir)
    monkeypatch.setattr(walltime, "simulate_job", None)  # nothing may be simulated
    out = tmp_path / "four"
    given = args(from_=[pilot_dir], samples="900K", servers=4, deadline="1h", bootstrap=40,
                 out_dir=out)  # fmt: skip
    doc, _ = make_plan(given, Quiet())
    [row] = doc["rows"]
    assert row["ours"] == before["rows"][1]["ours"]  # one server's forecast: unchanged
    assert row["at_servers"]["servers"] == 4
    assert row["at_servers"]["seconds"] < row["ours"]["seconds"] / 3
    assert doc["decision"]["configurations"][0]["rows"][0]["servers_needed"]["servers"] >= 1
    assert (out / "plan.json").exists() and not (out / REQUESTS_FILE).exists()
    assert not any("this plan replaces" in n for n in doc["notes"])  # -o: nothing replaced


@pytest.mark.parametrize(("given", "needle"), [
    ({"concurrency": 8}, "--concurrency would change what the pilot measured (at C=4"),
    ({"max_tokens": 32}, "--max-tokens would change"),
    ({"tokens_per_sample": 100.0}, "--tokens-per-sample and --rate do not apply"),
])  # fmt: skip
def test_a_flag_that_changes_what_the_pilot_measured_is_refused(pilot_dir, given, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(")):
        make_plan(args(from_=[pilot_dir], **given), Quiet())


def test_the_figure_asked_for_is_the_time_on_the_servers_asked_in_hours_and_days(pilot_dir):
    doc, _ = make_plan(args(rate=100.0, tokens_per_sample=2965.0, servers=4, samples="900K"),
                       Quiet())  # fmt: skip
    [row] = doc["rows"]
    one = 900_000 * 2965 / 100
    assert row["asked"] == {"servers": 4, "seconds": one / 4, "hours": one / 4 / 3600,
                            "days": one / 4 / 86400, "lo_s": None, "hi_s": None}  # fmt: skip
    assert asked_line(doc) == "the job: 900,000 samples on 4 servers: 1,853.1 h = 77.21 days"
    # a pilot's, with its range, and on one server the one-server figure
    doc, _ = make_plan(args(from_=[pilot_dir], samples="900K", bootstrap=40), Quiet())
    a, ours = doc["rows"][0]["asked"], doc["rows"][0]["ours"]
    assert (a["servers"], a["seconds"], a["lo_s"], a["hi_s"]) == (
        1, ours["seconds"], ours["lo_s"], ours["hi_s"])  # fmt: skip
    assert "days (95%: " in asked_line(doc)


def test_a_short_job_is_said_in_its_own_unit_not_as_zero_days(pilot_dir, tmp_path):
    """Seen by a new user: 'the job: 300 samples on 1 server: 0.0 h = 0.00 days (95%: 0.00 –
    0.00 days)'. Under a day the job is said in s, min or h, its range with the decimals
    that tell its ends apart; from a day on in hours and days as before."""
    doc, _ = make_plan(args(rate=100.0, tokens_per_sample=10.0, samples="30"), Quiet())
    assert asked_line(doc) == "the job: 30 samples on 1 server: 3.0 s"
    doc, _ = make_plan(args(from_=[pilot_dir], samples="300", bootstrap=40,
                            out_dir=tmp_path / "short"), Quiet())  # fmt: skip
    line = asked_line(doc)
    assert "days" not in line and " s (95%: " in line and line.endswith(" s)"), line
    lo, hi = line.split("(95%: ")[1].removesuffix(" s)").split(" – ")
    assert lo != hi
    doc, _ = make_plan(args(rate=100.0, tokens_per_sample=10.0, samples="1M"), Quiet())
    assert asked_line(doc) == "the job: 1,000,000 samples on 1 server: 27.8 h = 1.16 days"


def test_a_pilot_that_is_most_of_its_job_says_so(pilot_dir, tmp_path):
    doc, _ = make_plan(args(from_=[pilot_dir], samples="200", bootstrap=40,
                            out_dir=tmp_path / "small"), Quiet())  # fmt: skip
    [said] = [n for n in doc["notes"] if "a job this small" in n]
    assert said.startswith("the pilot's 120 samples are 60% of the job's 200")
    doc, _ = make_plan(args(from_=[pilot_dir], samples="100K", bootstrap=40,
                            out_dir=tmp_path / "large"), Quiet())  # fmt: skip
    assert not any("a job this small" in n for n in doc["notes"])


def test_a_fixed_pilot_refuses_a_minimum_time_it_would_ignore(tmp_path):
    """`--pilot K` runs K requests; --pilot-min-time was ignored without a word."""
    (tmp_path / "p.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    given = args(prompts=tmp_path / "p.jsonl", url="http://127.0.0.1:9/v1", pilot=64,
                 pilot_min_time=30.0)  # fmt: skip
    with pytest.raises(UsageError, match="--pilot-min-time applies to a pilot that stops"):
        make_plan(given, Quiet())


def test_the_default_allowance_note_names_the_flag_for_a_longer_pilot(pilot_dir, tmp_path):
    """A pilot of --pilot K is made longer by a larger K (--pilot-min-time does nothing to
    it); an open-ended one by --pilot-min-time, with --pilot-max-time where it must rise."""
    from genbench.plan.from_pilot import _longer
    from genbench.plan.model import PilotModel

    doc, _ = make_plan(args(from_=[pilot_dir], samples="100K", bootstrap=40,
                            out_dir=tmp_path / "n"), Quiet())  # fmt: skip
    [said] = [n for n in doc["notes"] if "genbench's default, 15%" in n]
    # a pilot of seconds for a job of hours: twice as long leaves the allowance as it was,
    # and says so (it said 'would make it ±15.0%' beside a range of ±15.0%)
    assert "a pilot twice as long (--pilot-min-time " in said
    assert " would leave it ±15.0% (the job is " in said and "would make it" not in said, said
    doc, _ = make_plan(args(from_=[pilot_dir], samples="2K", bootstrap=40,
                            out_dir=tmp_path / "k"), Quiet())  # fmt: skip
    [said] = [n for n in doc["notes"] if "genbench's default, 15%" in n]
    shown = re.search(r"the range includes ±([\d.]+)% in speed", said)
    would = re.search(r"twice as long \(--pilot-min-time \d+\) would make it ±([\d.]+)%", said)
    assert shown and would and float(would[1]) < float(shown[1]), said
    # a pilot over half its job: twice it would outrun the job, so none is asked for
    doc, _ = make_plan(args(from_=[pilot_dir], samples="200", bootstrap=40,
                            out_dir=tmp_path / "s"), Quiet())  # fmt: skip
    [said] = [n for n in doc["notes"] if "genbench's default, 15%" in n]
    assert "this pilot is 60% of the job already: a longer one would narrow it little" in said
    assert "twice as long" not in said
    doc, _ = make_plan(args(from_=[pilot_dir], samples="200", bootstrap=40, speed_drift="0",
                            out_dir=tmp_path / "s0"), Quiet())  # fmt: skip
    [said] = [n for n in doc["notes"] if "is not in the range (--speed-drift 0)" in n]
    # none twice as long; the one the bar's target asks for, where it asks one
    need = doc["pilot_size_for_target"]["requests"]
    asked = f"a longer pilot, of about {need} requests, the ±5% target's above (--pilot-min-time "
    assert (asked in said) if need else ("a longer pilot" not in said)
    assert "twice" not in said and said.endswith("--speed-drift PCT adds what you know")
    model = PilotModel.from_records(pilot(), C)
    assert _longer(model, {"pilot_fixed": 120}) == "--pilot 240"
    t = math.ceil(2 * model.pilot_wall_s)
    assert _longer(model, {"pilot_max_time_s": 600.0}) == f"--pilot-min-time {t}"
    assert _longer(model, {"pilot_max_time_s": 1.0}) == (
        f"--pilot-min-time {t} --pilot-max-time {t}")  # fmt: skip


def test_the_next_command_names_genbench_as_it_can_be_run(tmp_path):
    """README's walk runs `.venv/bin/genbench`: a `next:` line of bare `genbench` is not
    found there. Named as typed where PATH's genbench is another (or none); `genbench`
    where PATH finds this one."""
    from genbench.fmt import program

    assert program(".venv/bin/genbench", path="") == ".venv/bin/genbench"
    here = Path(".venv/bin/genbench").resolve()
    assert program(str(here), path="") == str(here)
    assert program("genbench", path="") == "genbench"  # run by PATH: found there
    assert program("/a dir/genbench", path="") == "'/a dir/genbench'"
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "genbench").write_text("#!/bin/sh\n")
    (bin_ / "genbench").chmod(0o755)
    assert program(str(bin_ / "genbench"), path=str(bin_)) == "genbench"  # PATH finds it
    assert program(str(bin_ / "genbench"), path=str(tmp_path)) == str(bin_ / "genbench")


def test_the_next_command_names_python_m_genbench_as_it_was_run(tmp_path):
    """Seen by a new user: under `python -m genbench` the `next:` line said a bare
    `genbench`, which was not on PATH. It says `python -m genbench` where PATH's python is
    this interpreter, else this interpreter's path; a venv's python, a link to the
    system's, is not the system's."""
    from genbench.fmt import program

    main = "/usr/lib/python3/site-packages/genbench/__main__.py"
    venv, system = tmp_path / "venv" / "bin", tmp_path / "usr" / "bin"
    for d in (venv, system):
        d.mkdir(parents=True)
    (system / "python3.12").write_text("#!/bin/sh\n")
    (system / "python3.12").chmod(0o755)
    for d in (venv, system):
        (d / "python").symlink_to(system / "python3.12")
    (venv / "python3").symlink_to(system / "python3.12")
    py = str(venv / "python")
    assert program(main, path=str(venv), executable=py) == "python -m genbench"
    assert program(main, path=str(venv), executable=str(venv / "python3")) == (
        "python -m genbench")  # fmt: skip
    assert program(main, path=str(system), executable=py) == f"{py} -m genbench"
    assert program(main, path="", executable=py) == f"{py} -m genbench"
    spaced = tmp_path / "a dir" / "python"
    assert program(main, path="", executable=str(spaced)) == f"'{spaced}' -m genbench"
    assert program(main, path=str(system), executable="") == "genbench"  # none to name


def test_a_plan_run_by_python_m_genbench_names_it_so(pilot_dir, tmp_path):
    """The `next:` line of `python -m genbench plan`, as the process names itself: PATH's
    python where that is this interpreter, this interpreter's path where PATH has none."""
    bindir = os.path.dirname(sys.executable)
    for path, named in ((bindir, "python -m genbench"), (str(tmp_path / "none"),
                        f"{shlex.quote(sys.executable)} -m genbench")):  # fmt: skip
        if path == bindir and os.path.basename(sys.executable) != "python":
            continue  # this interpreter is not called python: PATH's python is another
        p = genbench("plan", "--from", str(pilot_dir), "--samples", "100K", "--bootstrap",
                     "40", "-o", str(tmp_path / "out"), env={"PATH": path})  # fmt: skip
        assert p.returncode == 0, p.stderr[-2000:]
        assert f"next: {named} generate -i " in p.stdout, p.stdout[-2000:]


def test_one_plan_suggests_one_longer_pilot(pilot_dir, tmp_path):
    """Seen by a new user: one plan asked for the ±5% target's pilot in its bar line
    ('--pilot 287') and for one twice as long in its --speed-drift note ('--pilot-min-time
    52: twice this one'). Where the bar asks for a pilot, the note names that one."""
    from rich.console import Console

    from genbench.plan import forecast
    from genbench.plan.from_pilot import _twice
    from genbench.plan.model import PilotModel
    from genbench.plan.render import print_plan

    doc, _ = make_plan(args(from_=[pilot_dir], samples="1000", bootstrap=40, speed_drift="0",
                            out_dir=tmp_path / "zero"), Quiet())  # fmt: skip
    need = doc["pilot_size_for_target"]["requests"]
    assert need and need > 2 * 120  # the bar asks for more than twice this pilot
    console = Console(width=400, record=True)
    print_plan(doc, console)
    text = console.export_text()
    assert f"±5% needs a pilot of about {need} requests (--pilot {need})" in text
    [said] = [n for n in doc["notes"] if "is not in the range (--speed-drift 0)" in n]
    # the same pilot, its flag as this open-ended pilot's: the time it takes at its pace
    model = PilotModel.from_records(pilot(), C)
    t = math.ceil(model.pilot_wall_s * need / model.pilot_samples)
    assert (f"a longer pilot, of about {need} requests, the ±5% target's above "
            f"(--pilot-min-time {t}), sees more of it") in said  # fmt: skip
    assert "twice" not in said
    # the default allowance's note: what that pilot would make it; a fixed pilot's flag
    (f,) = forecast(model, [(1000, 1)], boot=2, drift=None)
    assert f.rel_halfwidth > 0.05
    said = _twice(model, {"pilot_fixed": 120}, f, {"target": 0.05, "requests": 300})
    allowed = unseen_drift(f.seconds, model.pilot_wall_s * 300 / model.pilot_samples)
    assert said == (f"a pilot of about 300 requests, the ±5% target's above (--pilot 300), "
                    f"would make it ±{allowed:.1%} and see more of the server's own "
                    "wander")  # fmt: skip
    assert _twice(model, {}, f, {"target": 0.05, "requests": None}).startswith(
        "a pilot twice as long (--pilot-min-time ")  # fmt: skip


def test_a_days_column_is_left_out_where_every_row_is_under_a_day(pilot_dir, tmp_path):
    """Seen by a new user: a plan of minutes showed a `days` column of 0.00 beside times in
    s, min and h; the plan's other lines already say a job under a day in those units."""
    from rich.console import Console

    from genbench.plan.render import print_plan

    def table_head(samples: str, servers: int) -> str:
        doc, _ = make_plan(args(from_=[pilot_dir], samples=samples, servers=servers,
                                bootstrap=40, out_dir=tmp_path / f"{samples}-{servers}"),
                           Quiet())  # fmt: skip
        console = Console(width=400, record=True)
        print_plan(doc, console)
        [head] = [ln for ln in console.export_text().splitlines() if "naive: pilot" in ln]
        return head

    assert "days" not in table_head("100K", 1)  # 5.9 h
    head = table_head("900K", 4)  # 52.9 h on one server, 13.2 h on four
    assert "days (1 server)" in head and "days ×4 servers" not in head


def test_the_parquet_hint_keeps_its_extra_in_brackets(pilot_dir, tmp_path, monkeypatch):
    """Seen by a new user: 'pip install 'genbench'': Rich read '[parquet]' as markup and
    dropped it. Where pyarrow is not found, the printed hint is one that installs it."""
    import importlib.util

    from rich.console import Console

    from genbench.plan.render import print_plan

    doc, _ = make_plan(args(from_=[pilot_dir], samples="100K", bootstrap=40,
                            out_dir=tmp_path / "pq"), Quiet())  # fmt: skip
    for row in doc["rows"]:
        row["storage"]["parquet_bytes"] = None  # as a plan made without pyarrow has it
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pyarrow" else real(name, *a))
    console = Console(width=400, record=True)
    print_plan(doc, console)
    text = console.export_text()
    assert "pyarrow is not installed (pip install 'genbench[parquet]')" in text, text


def test_a_replan_keeps_the_speed_drift_its_pilot_was_planned_with(pilot_dir, tmp_path):
    """Seen by a new user: a pilot planned with --speed-drift 0 (±4.5%), re-planned for two
    servers, came back with the default allowance (±14.6%) and speed_drift null. It holds,
    said so; given again it changes; `default` asks for genbench's allowance again."""
    first = tmp_path / "zero"
    make_plan(args(from_=[pilot_dir], samples="100K", bootstrap=40, speed_drift="0",
                   out_dir=first), Quiet())  # fmt: skip
    doc, _ = make_plan(args(from_=[first], samples="100K", servers=2, bootstrap=40,
                            out_dir=tmp_path / "two"), Quiet())  # fmt: skip
    assert doc["inputs"]["speed_drift"] == 0.0
    assert doc["rows"][0]["ours"]["speed"]["drift"] == 0.0
    [said] = [n for n in doc["notes"] if "its --speed-drift 0 holds" in n]
    assert "--speed-drift default asks for genbench's allowance" in said
    doc, _ = make_plan(args(from_=[first], samples="100K", bootstrap=40, speed_drift="10",
                            out_dir=tmp_path / "ten"), Quiet())  # fmt: skip
    assert doc["inputs"]["speed_drift"] == pytest.approx(0.10)  # given again: changed
    assert not any("holds" in n for n in doc["notes"]), doc["notes"]
    doc, _ = make_plan(args(from_=[first], samples="100K", bootstrap=40, speed_drift="default",
                            out_dir=tmp_path / "back"), Quiet())  # fmt: skip
    assert doc["inputs"]["speed_drift"] is None
    ours = doc["rows"][0]["ours"]
    assert ours["speed"]["drift"] == pytest.approx(
        unseen_drift(ours["seconds"], doc["model"]["pilot_wall_s"]))  # fmt: skip
    assert not any("holds" in n for n in doc["notes"]), doc["notes"]


@pytest.mark.parametrize("given", ["-1", "abc", "nan", "inf"])
def test_a_speed_drift_that_is_no_percent_is_refused(pilot_dir, given):
    with pytest.raises(UsageError, match="0 or more percent, or default"):
        make_plan(args(from_=[pilot_dir], samples="100K", speed_drift=given), Quiet())


def test_the_next_command_runs_the_job_planned_as_printed():
    """Seen by a new user: a plan for 300 samples of a 3,000-row file printed a generate
    line that ran all 3,000; a plan for 2 servers added '(and a --url for each …)', which a
    shell reads as a syntax error."""
    import shlex

    from genbench.plan.render import next_line

    doc = {"mode": "pilot", "rows": [{"samples": 300}],
           "source": {"prompts": "prompts.jsonl", "prompts_in_file": 3000,
                      "url": "http://127.0.0.1:8000/v1"},
           "inputs": {"servers": 1}}  # fmt: skip
    line = next_line(doc, Path("plans/p300/plan.json"))
    assert line.endswith("-o out/p300 --url http://127.0.0.1:8000/v1 --plan plans/p300 "
                         "--limit 300"), line  # fmt: skip
    doc["rows"] = [{"samples": 3000}]
    assert "--limit" not in next_line(doc, Path("plans/p/plan.json"))  # the whole file
    doc["inputs"]["servers"] = 2
    line = next_line(doc, Path("plans/p/plan.json")).removeprefix("next: ")
    words = shlex.split(line, comments=True)  # as a shell reads it: the rest is a comment
    assert words[-2:] == ["--plan", "plans/p"] and "#" in line, line


def test_a_replan_takes_target_error_or_keeps_its_pilots(pilot_dir, tmp_path):
    """--target-error on a re-plan sizes the pilot for that bar (a trial gave 10 and read
    'no pilot reaches ±5%': neither applied nor refused); not given, the pilot's plan's
    target holds, and a pilot plan without one is sized for ±5%."""
    doc, _ = make_plan(args(from_=[pilot_dir], samples="20K", bootstrap=40, speed_drift="0",
                            target_error=10.0, out_dir=tmp_path / "ten"), Quiet())  # fmt: skip
    assert doc["inputs"]["target_error"] == pytest.approx(0.10)
    assert doc["pilot_size_for_target"]["target"] == pytest.approx(0.10)
    again, _ = make_plan(args(from_=[tmp_path / "ten"], samples="20K", bootstrap=40,
                              out_dir=tmp_path / "kept"), Quiet())  # fmt: skip
    assert again["pilot_size_for_target"]["target"] == pytest.approx(0.10)
    plain, _ = make_plan(args(from_=[pilot_dir], samples="20K", bootstrap=40,
                              out_dir=tmp_path / "five"), Quiet())  # fmt: skip
    assert plain["pilot_size_for_target"]["target"] == pytest.approx(0.05)
