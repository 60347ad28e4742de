"""`genbench report OUT_DIR` on a generate job: its history drawn from its request log.

The job runs on two sims; one is SIGKILLed mid-job and started again on its port. The
report must show that server's down interval where it was (between the kill and the
restart), the rows requeued off it, and pass the same browser check as the run report.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time

import pytest
from conftest import genbench
from test_generate import SIM, error_rows, line_count, popen, prompts, wait_for, write_rows
from test_plan import saved_plan
from test_report import browse, chromium, layout_problems, png_size

from genbench.report.joblog import read_job_log

JOB_PLOTS = {"job_rows", "job_tokens", "job_servers", "job_failures", "job_eta", "job_latency",
             "job_lengths"}  # fmt: skip


@pytest.fixture(scope="module")
def job(tmp_path_factory, request) -> dict[str, object]:
    """A 400-row job on two sims, one killed for a while and restarted."""
    from genbench.sim.process import SimProcess

    tmp = tmp_path_factory.mktemp("job")
    inp, out = tmp / "in.jsonl", tmp / "out"
    write_rows(inp, prompts(400))
    plan = saved_plan(tmp, "--rate", "400", "--tokens-per-sample", "40", "--samples", "400",
                      "--servers", "2")  # fmt: skip
    sims = [SimProcess(*SIM, "--thinking-tokens", "5"), SimProcess(*SIM)]
    for s in sims:
        s.__enter__()
    killed = sims[1]
    try:
        proc = popen(tmp, "-i", str(inp), "-o", str(out), "--url", sims[0].url, "--url",
                     killed.url, "-c", "3", "--retry-backoff", "0.05", "--progress-every", "1",
                     "--plan", str(plan))  # fmt: skip
        wait_for(lambda: line_count(out) >= 60, 60, "60 rows written")
        killed_at = time.time()
        killed.kill()
        wait_for(lambda: line_count(out) >= 150, 60, "150 rows written by the other server")
        restarted_at = time.time()
        sims.append(SimProcess(*SIM, "--port", str(killed.port)))
        sims[-1].__enter__()
        assert proc.wait(120) == 0, (tmp / "stderr.txt").read_text()
    finally:
        for s in sims:
            s.__exit__(None, None, None)
    return {"out": out, "url": killed.url, "other": sims[0].url, "killed_at": killed_at,
            "restarted_at": restarted_at}  # fmt: skip


def test_the_killed_servers_down_interval_and_its_requeued_rows_are_drawn(job, tmp_path):
    out = job["out"]
    assert error_rows(out) == []
    h = read_job_log(out / ".genbench" / "requests.jsonl")
    killed, other = h.servers[job["url"]], h.servers[job["other"]]
    assert other.downs == []
    assert len(killed.downs) == 1, killed.downs
    start, end, requeued = killed.downs[0]
    # down from the failure the kill caused until a request was sent to it again, after
    # the restart (its /health is polled with a backoff: well within 30 s)
    assert job["killed_at"] - 0.5 <= start <= job["killed_at"] + 5
    assert job["restarted_at"] - 0.5 <= end <= job["restarted_at"] + 30
    assert requeued >= 1 and requeued == killed.requeued  # its rows in flight went back
    assert killed.rows + other.rows == 400 and killed.rows > 0
    p = genbench("report", str(out))
    assert p.returncode == 0, p.stderr
    html = (out / "report.html").read_text()
    assert set(re.findall(r'data-figure="([^"]+)"', html)) >= JOB_PLOTS
    host = job["url"].removeprefix("http://").removesuffix("/v1")
    assert f"down {_dur(end - start)}, {requeued} requeued" in html  # the bar on the timeline
    assert f"{host} down ({requeued} requeued)" in html  # the band on the rate plots
    assert "src=" not in html and "href=" not in html  # self-contained


def _dur(s: float) -> str:
    from genbench.fmt import duration

    return duration(s)


def test_the_eta_is_drawn_against_the_plan(job):
    notes = [json.loads(x) for x in (job["out"] / ".genbench/runs.jsonl").read_text().splitlines()]
    start = next(n for n in notes if n["event"] == "start")
    assert start["total"] == 400 and start["plan"]["seconds"] == pytest.approx(20.0)
    from genbench.report.job import figures as job_figures
    from genbench.report.job import load_job

    h, notes = load_job(job["out"])
    eta = next(f for f in job_figures(h, notes) if f.id == "job_eta")
    run, plan = eta.series[0], next(s for s in eta.series if s.label == "plan")
    assert run.label == "run 1" and len(run.xs) > 3
    assert plan.ys == [pytest.approx(20.0)] * 2  # seconds: the job was short
    # at the end, where the run was headed is what it took: the last row was the end
    took = h.runs[0][1] - start["at"]
    assert run.ys[-1] == pytest.approx(took, abs=1.0)


def test_with_an_inspection_both_the_job_and_the_data_set_are_drawn(job, tmp_path):
    out = job["out"]
    p = genbench("inspect", str(out))
    assert p.returncode == 0, p.stderr
    page = tmp_path / "both.html"
    p = genbench("report", str(out), "-o", str(page))
    assert p.returncode == 0, p.stderr
    html = page.read_text()
    assert f"Generate job: {out}</h2>" in html and "Data set:" in html


def test_the_job_report_renders_in_a_browser(job, tmp_path):
    if chromium() is None:
        if os.environ.get("GENBENCH_SKIP_BROWSER") == "1":
            pytest.skip("GENBENCH_SKIP_BROWSER=1 and no chromium")
        pytest.fail("no chromium on PATH: apt-get install chromium (or GENBENCH_SKIP_BROWSER=1)")
    # the job, its plan and its inspection with a clean copy: the commands to regenerate
    # what was dropped name long paths, which must wrap, not run off the page
    out, plan = job["out"], job["out"].parent / "plan.json"
    clean = tmp_path / ("a-long-directory-name-for-the-clean-copy-" * 3) / "clean"
    # every row "short", so there is something to regenerate (a copy that dropped nothing
    # names no command)
    p = genbench("inspect", str(out), "--drop", "loops,empty,short", "--min-tokens", "100000",
                 "--out", str(clean))  # fmt: skip
    assert p.returncode == 0, p.stderr
    page = tmp_path / "job.html"
    # the inspection of `out` is in the copy (CLEAN/inspect.json: `out` is only read)
    p = genbench("report", str(plan), str(out), str(clean / "inspect.json"), "-o", str(page))
    assert p.returncode == 0, p.stderr
    assert str(clean) in page.read_text() and "<pre>" in page.read_text()
    shot = tmp_path / "job.png"
    seen = asyncio.run(browse(page, shot, tmp_path / "chromium-profile"))
    urls = [e["params"]["request"]["url"] for e in seen["events"]
            if e["method"] == "Network.requestWillBeSent"]  # fmt: skip
    assert urls == [page.as_uri()], urls  # offline
    problems = [e for e in seen["events"] if e["method"] in ("Runtime.exceptionThrown",
                "Network.loadingFailed") or (e["method"] == "Runtime.consoleAPICalled"
                and e["params"]["type"] in ("error", "warning"))]  # fmt: skip
    assert not problems, problems
    plots = {p["id"]: p for p in seen["plots"]}
    assert set(plots) >= JOB_PLOTS, JOB_PLOTS - set(plots)
    for fig in JOB_PLOTS:  # (an inspection of the same directory draws its own)
        p = plots[fig]
        assert p["w"] > 300 and p["h"] > 100, (fig, p)
        assert p["marks"] > 0 and p["drawn"] == p["marks"] and not p["empty"], (fig, p)
    w, h = png_size(shot)
    assert w == 1400 and h == seen["height"] > 2000
    assert shot.stat().st_size > 100_000
    assert layout_problems(seen["layout"]) == []
    # each thing once, by the path given and what it is: not "job, job out, out"
    assert seen["layout"]["title"] == (
        f"genbench report — {out.parent} (plan), {out} (generate job, inspected)"
    )
    print(f"screenshot: {shot}")


def test_each_shard_of_a_job_is_drawn_as_a_job_of_its_own(tmp_path):
    from genbench.sim.process import SimProcess

    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(60))
    with SimProcess(*SIM) as sim:
        for shard in ("1/2", "2/2"):
            p = genbench("generate", "-i", str(inp), "-o", str(out), "--url", sim.url,
                         "--shard", shard, "--progress-every", "1")  # fmt: skip
            assert p.returncode == 0, p.stderr
    assert (out / ".genbench/runs-1of2.jsonl").exists()
    p = genbench("report", str(out))
    assert p.returncode == 0, p.stderr
    html = (out / "report.html").read_text()
    ids = re.findall(r'data-figure="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # every figure once on the page
    assert {f"{f}_1of2" for f in JOB_PLOTS} | {f"{f}_2of2" for f in JOB_PLOTS} <= set(ids)
    assert f"Generate job: {out}, shard 1/2" in html and f"{out}, shard 2/2" in html
    assert "1 server ·" in html and "server(s)" not in html and "run(s)" not in html
    # a job run without --plan has no plan to draw the ETA against: the panel says so
    assert "ETA against the plan" not in html and "no --plan to hold it against" in html
    assert "the plan's forecast" not in html
