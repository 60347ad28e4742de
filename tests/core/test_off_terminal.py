"""Off a terminal (nohup, a Slurm log) a job and its pilot print a line for people at
--progress-every (JSON lines only when asked); on a narrow terminal the live panel keeps
the ETA and the plan's verdict and drops the rest first (#46)."""

from __future__ import annotations

import io
import re
import time

import pytest
from rich.console import Console

from genbench.generate.progress import Snapshot
from genbench.generate.render import JobConsole, panel, progress_text
from genbench.plan.document import JobForecast
from genbench.plan.pilot import PilotStop
from genbench.plan.render import PilotProgress
from genbench.records import RequestRecord

pytestmark = pytest.mark.core


def snap(**kw) -> Snapshot:
    base = dict(elapsed_s=600.0, total=1000, done=300, failed=2, done_this_run=300,
                failed_this_run=2, truncated_this_run=0, remaining=698, rows_per_s=0.5,
                tokens_per_s=1500.0, thinking_tokens_per_s=500.0, answer_tokens_per_s=1000.0,
                tokens=900_000, thinking_tokens=300_000, eta_s=1400.0, eta_err_s=100.0,
                eta_lo_s=1300.0, eta_hi_s=1550.0, all_down_s=None)  # fmt: skip
    base["plan"] = {"seconds": 2000.0, "lo_s": 1800.0, "hi_s": 2200.0, "verdict": "inside"}
    return Snapshot(**{**base, **kw})


def test_the_line_for_people_holds_rows_rate_eta_and_the_plans_verdict():
    line = progress_text(snap())
    assert "rows 302/1,000 (30.2%), 2 failed" in line and "0.50 rows/s" in line
    assert "ETA 23.3 min (21.7 – 25.8 min)" in line
    assert line.endswith("plan: inside, the plan's 33 min (30 – 37 min)")  # no decimal it needs


def test_the_live_eta_in_whole_seconds_shows_no_decimal_it_does_not_have():
    """The ETA is counted in whole seconds (the plan's and the job's combined, rounded): it
    read 'ETA 102.0 s (98.0 – 106.0 s)', a decimal that said nothing."""
    whole = snap(eta_s=102.0, eta_lo_s=98.0, eta_hi_s=106.0, plan=None)
    assert "ETA 102 s (98 – 106 s)" in progress_text(whole)
    out = io.StringIO()
    Console(file=out, width=200).print(panel(whole, None, 200))
    assert "ETA 102 s (98 – 106 s)" in out.getvalue()
    # with a plan, the ETA shown is the two combined, rounded to whole seconds: as whole
    out = io.StringIO()
    jc = JobConsole(Console(file=out, force_terminal=False, width=300), 0.0, False)
    jc.forecast = JobForecast("p", "pilot", 1000, 1, 700.0, 650.0, 760.0, "b", None)
    jc.tick(whole)
    assert re.search(r"ETA \d+ s \(\d+ – \d+ s\)", out.getvalue()), out.getvalue()


def test_off_a_terminal_a_line_for_people_unless_json_is_asked(capsys):
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    JobConsole(console, 0.0, False).tick(snap())
    assert "ETA 23.3 min" in out.getvalue() and not capsys.readouterr().err
    JobConsole(console, 0.0, False, progress_json=True).tick(snap())
    assert capsys.readouterr().err.startswith('{"event":"progress"')


def test_a_narrow_panel_keeps_the_eta_and_the_verdict():
    out = io.StringIO()
    Console(file=out, width=80).print(panel(snap(), None, 80))
    text = out.getvalue()
    assert "ETA 23.3 min (21.7 – 25.8 min)  plan: inside" in text
    assert "elapsed" not in text and "finishes" not in text


def test_the_pilot_says_where_it_is_off_a_terminal():
    out = io.StringIO()
    p = PilotProgress(Console(file=out, force_terminal=False), 200, PilotStop(), every=0.0)
    p.record(RequestRecord("a", t_send=1.0, t_end=2.0, completion_tokens=50))
    assert out.getvalue().startswith("  pilot: 1/200 requests in ")


def test_the_pilots_time_and_rate_leave_the_warm_up_out():
    """The warm-up runs between pilot_started and the first pilot send: 20 s of it must not
    count as pilot time (it read "79 requests in 30.0 s, 106.7 tok/s" for 18 s at 334)."""
    out = io.StringIO()
    p = PilotProgress(Console(file=out, force_terminal=False), 200, PilotStop(), every=0.0)
    p.t0 -= 20.0  # the bar made 20 s ago: the warm-up
    sent = time.perf_counter() - 2.0
    p.record(RequestRecord("a", t_send=sent, t_end=sent + 2.0, completion_tokens=100))
    seconds = float(re.search(r"requests in ([\d.]+) s", out.getvalue()).group(1))
    assert 1.9 <= seconds < 10.0
