"""`genbench report` on real runs of the sim: one HTML file, offline, every plot drawn.

The browser test opens the page in headless Chromium over the DevTools protocol,
records every network request, console message and exception, checks that each
plot is an <svg> with data marks and a real size, and saves a full-page
screenshot under the test's tmp dir. It fails when Chromium is missing (CI
installs Debian's `chromium`), unless GENBENCH_SKIP_BROWSER=1.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import struct
import subprocess
import time
from html import escape
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import genbench

from genbench.records import read_records
from genbench.sim.process import SimProcess, start_all

RUN_ARGS = (
    "--skip",
    "warmup",
    "--lengths",
    "64,128",
    "--prompts-per-length",
    "2",
    "--concurrency",
    "1,4,8",
    "--sweep-tokens",
    "64",
    "--requests-per-slot",
    "3",
)
SPEC = ("--thinking-tokens", "24", "--spec-k", "3", "--spec-accept", "0.7", "--ttft-ms", "5")
# plots every report of these runs has: one <svg class="plot"> each, with data marks
PLOTS = {
    "throughput",
    "per_request",
    "ttft_cdf",
    "itl_cdf",
    "tokens_over_time",
    "gantt_fast",
    "gantt_slow",
    "token_split",
    "server_spec_mean_acceptance_length",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    sims = [SimProcess("--tps", "400", *SPEC), SimProcess("--tps", "250", *SPEC)]
    start_all(sims)
    try:
        for sim, name in zip(sims, ("fast", "slow"), strict=True):
            p = genbench("run", "--url", sim.url, *RUN_ARGS, "--out", str(base / name))
            assert p.returncode == 0, p.stderr + p.stdout
    finally:
        for s in sims:
            s.close()
    return {"fast": base / "fast", "slow": base / "slow"}


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    p = genbench("report", str(runs["fast"]), str(runs["slow"] / "result.json"), "-o", str(out))
    assert p.returncode == 0, p.stderr + p.stdout
    assert str(out) in p.stdout
    return out


def plot_ids(html: str) -> list[str]:
    return re.findall(r'<svg class="plot" data-figure="([^"]+)"', html)


def test_report_is_one_self_contained_file(report):
    html = report.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    # nothing to fetch: no scripts, stylesheets, images or fonts by URL
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\((?!#)", html, re.I)
    # the only URLs are text (the servers' addresses) and the SVG namespace
    for url in re.findall(r"https?://[^\s\"'<]+", html):
        assert url == "http://www.w3.org/2000/svg" or url.startswith("http://127.0.0.1"), url
    ids = plot_ids(html)
    assert set(ids) >= PLOTS, set(PLOTS) - set(ids)
    assert len(ids) == len(set(ids))
    # both runs, each in its own colour, and the sections a reader looks for
    for needle in ("fast", "slow", "#4e79a7", "#f28e2b", "Throughput vs concurrency", "Numbers"):
        assert needle in html
    assert "steady window" in html and "thinking" in html
    assert "Forecast" not in html  # no plan.json next to these runs


def test_every_plot_has_data_marks(report):
    html = report.read_text()
    for svg in re.findall(r'<svg class="plot".*?</svg>', html, re.S):
        fig = re.search(r'data-figure="([^"]+)"', svg).group(1)
        marks = len(re.findall(r'class="mark ', svg))
        assert marks > 0 and 'class="empty"' not in svg, fig
        assert 'class="xlabel"' in svg, fig  # an axis title with its unit


def test_timeline_shows_the_steady_window_and_caps_the_bars(runs, tmp_path):
    out = tmp_path / "r.html"
    p = genbench("report", str(runs["fast"]), "-o", str(out), "--max-bars", "10")
    assert p.returncode == 0, p.stderr
    html = out.read_text()
    gantt = re.search(r'<svg class="plot" data-figure="gantt_fast".*?</svg>', html, re.S).group(0)
    n = sum(1 for r in read_records(runs["fast"] / "requests.jsonl") if r.phase == "sustained-c8")
    assert n == 24
    assert "10 of 24 requests drawn" in html
    # each drawn request: a waiting part and a decoding part
    assert len(re.findall(r'class="mark bar"', gantt)) == 20
    for band in ("ramp", "steady window", "tail"):
        assert f">{band}<" in gantt or f"<title>{band}:" in gantt, band


def test_default_output_is_next_to_the_run_and_phase_can_be_chosen(runs, tmp_path):
    run = tmp_path / "copy"
    shutil.copytree(runs["slow"], run)
    p = genbench("report", str(run), "--phase", "sustained-c4")
    assert p.returncode == 0, p.stderr
    html = (run / "report.html").read_text()
    assert "Timeline of sustained-c4" in html
    bad = genbench("report", str(run), "--phase", "sustained-c99")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--phase sustained-c99: no such phase" in bad.stderr


# plan.json's own names: the report shows what they mean, never the keys themselves
RAW_KEYS = ("ours_best", "rate_halfwidth", "sustained_tps_by_concurrency", "schema_version",
            "tokens_per_sample_basis", "model.", "jsonl_bytes", "naive_pilot",
            "rel_halfwidth")  # fmt: skip


def forecast_section(html: str) -> str:
    """The page from the first forecast's heading to the next section that is not its own."""
    start = html.index("<h2>Forecast")
    ends = [i for h in ("<h2>Numbers", "<h2>Generate job", "<h2>Data set", "<footer")
            if (i := html.find(h, start)) > 0]  # fmt: skip
    return html[start : min(ends)]


def test_a_runs_plan_is_drawn_as_a_forecast_not_its_keys(runs, tmp_path):
    from genbench.fmt import duration, duration_range

    run = tmp_path / "q1"
    shutil.copytree(runs["fast"], run)
    p = genbench("plan", "--from", str(run), "--samples", "100K,900K", "--tokens-per-sample",
                 "2965", "--deadline", "3d", "--price", "2.5", "--gpus-per-server", "8",
                 env={"GENBENCH_CONFIG": ""})  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    plan = json.loads((run / "plan.json").read_text())
    p = genbench("report", str(run))
    assert p.returncode == 0, p.stderr
    html = (run / "report.html").read_text()
    part = forecast_section(html)
    for key in RAW_KEYS:
        assert key not in part, key
    assert part.count("<tr>") < 30, part.count("<tr>")  # tables a person reads, not ~100 rows
    # the figures the forecast used, and each count's time with its bar, as plan prints them
    assert "From the run " in part and "sustained rate" in part and "2,965" in part
    for row in plan["rows"]:
        e = row["ours_best"]
        assert duration(e["seconds"]) in part and duration_range(e["lo_s"], e["hi_s"]) in part
        assert f"±{e['rel_halfwidth']:.1%}" in part
    assert 'data-figure="forecast_run_0"' in part and "The forecast&#x27;s bar" in part
    # its decision: the servers for the deadline, the cost
    assert "deadline 3d" in part and "servers<br>for 3d" in part and "cost" in part
    for note in plan["notes"]:
        assert f"<li>{escape(note)}</li>" in part


def test_a_pilot_plans_report_shows_its_forecast(tmp_path):
    from genbench.fmt import duration

    (tmp_path / "in.jsonl").write_text("".join(
        json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"item {i}"}]}) + "\n"
        for i in range(40)))  # fmt: skip
    out = tmp_path / "plans" / "job"
    with SimProcess("--tps", "1000", "--per-seq-ms", "0.1", "--ttft-ms", "2",
                    "--thinking-tokens", "8") as sim:
        p = genbench("plan", "--prompts", str(tmp_path / "in.jsonl"), "--url", sim.url,
                     "--pilot", "24", "-c", "4", "--samples", "40,100K", "--max-tokens", "32",
                     "--warmup-time", "0", "--bootstrap", "50", "--out", str(out))  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    plan = json.loads((out / "plan.json").read_text())
    p = genbench("report", str(out))
    assert p.returncode == 0, p.stderr
    html = (out / "report.html").read_text()
    assert f"<title>genbench report — {escape(str(out))} (plan)</title>" in html
    part = forecast_section(html)
    for key in RAW_KEYS:
        assert key not in part, key
    assert "A pilot of 24 requests at C=4" in part and "model check" in part
    for row in plan["rows"]:
        assert duration(row["ours"]["seconds"]) in part
        assert f"±{row['ours']['rel_halfwidth']:.1%}" in part
    assert 'data-figure="forecast_0"' in part and "naive: pilot × N/K" in part
    assert "tokens and storage" in part.lower() and "Parquet" in part
    assert "No decision in this plan" in part  # said once, under the forecast


def test_a_run_card_counts_the_requests_compare_counts(tmp_path):
    from genbench.compare.rule import failures
    from genbench.compare.runs import load_sides

    with SimProcess("--tps", "500", "--ttft-ms", "2") as sim:
        out = tmp_path / "run"
        p = genbench("run", "--url", sim.url, "--lengths", "16", "--concurrency", "2",
                     "--sweep-tokens", "16", "--requests-per-slot", "2", "--out", str(out),
                     "--report")  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = json.loads((out / "result.json").read_text())
    every = sum(ph["summary"]["requests"] for ph in doc["phases"])
    warm = sum(ph["summary"]["requests"] for ph in doc["phases"] if ph["kind"] == "warmup")
    assert warm >= 1  # the warm-up was sent, and is not a measurement
    measured = failures(load_sides([out])[0])["requests"]
    assert measured == every - warm
    html = (out / "report.html").read_text()
    assert f"of {measured:,} measured" in html and f"of {every:,}" not in html


def test_a_result_without_requests_still_reports(runs, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(runs["fast"] / "result.json", bare / "result.json")
    p = genbench("report", str(bare))
    assert p.returncode == 0, p.stderr
    html = (bare / "report.html").read_text()
    assert "no requests.jsonl" in html
    assert "throughput" in plot_ids(html)


def test_bad_inputs_are_one_line_errors(runs, tmp_path):
    for args, needle in (
        ([str(tmp_path / "missing")], "no such file or run directory"),
        ([str(runs["fast"]), "--max-bars", "0"], "--max-bars"),
    ):
        p = genbench("report", *args, "-o", str(tmp_path / "x.html"))
        assert p.returncode == 2, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and needle in p.stderr
    newer = tmp_path / "newer"
    shutil.copytree(runs["fast"], newer)
    doc = json.loads((newer / "result.json").read_text())
    doc["schema_version"] = 99
    (newer / "result.json").write_text(json.dumps(doc))
    p = genbench("report", str(newer))
    assert p.returncode == 2 and "newer than this genbench reads" in p.stderr


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", data[16:24])


def test_png_export(runs, tmp_path):
    import matplotlib  # noqa: F401 - the report extra is installed by the test command

    out = tmp_path / "pngs"
    p = genbench("report", str(runs["fast"]), str(runs["slow"]), "-o", str(tmp_path / "r.html"),
                 "--png", str(out))  # fmt: skip
    assert p.returncode == 0, p.stderr
    names = {f.stem for f in out.glob("*.png")}
    assert names >= PLOTS, PLOTS - names
    for f in out.glob("*.png"):
        w, h = png_size(f)
        assert w >= 800 and h >= 300 and f.stat().st_size > 10_000, f


def test_png_without_matplotlib_says_how_to_get_it(runs, tmp_path):
    # a matplotlib that cannot be imported, first on the path
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    env = {"PYTHONPATH": str(fake.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = genbench("report", str(runs["fast"]), "-o", str(tmp_path / "r.html"), "--png",
                 str(tmp_path / "p"), env=env)  # fmt: skip
    assert p.returncode == 2 and "genbench[report]" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_run_with_report_flag_writes_it_beside_the_result(tmp_path):
    with SimProcess("--tps", "500", "--ttft-ms", "2", "--per-seq-ms", "0.1") as sim:
        out = tmp_path / "run"
        p = genbench("run", "--url", sim.url, "--skip", "warmup", "--lengths", "16",
                     "--concurrency", "2", "--sweep-tokens", "16", "--requests-per-slot", "2",
                     "--out", str(out), "--report")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert (out / "report.html").exists() and "report.html" in p.stdout
    assert "throughput" in plot_ids((out / "report.html").read_text())


# --- the browser test ---------------------------------------------------------------------


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class DevTools:
    """Just enough of the Chrome DevTools protocol: send a command, wait for its answer,
    and keep every event that arrives meanwhile."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws, self.next_id, self.events = ws, 0, []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send_json({"id": my_id, "method": method, "params": params})
        while True:
            msg = await self.ws.receive_json(timeout=30)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    async def until(self, event: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not any(e["method"] == event for e in self.events):
            msg = await self.ws.receive_json(timeout=max(0.1, deadline - time.monotonic()))
            if "method" in msg:
                self.events.append(msg)


PROBE = """JSON.stringify([...document.querySelectorAll('svg.plot')].map(s => {
  const r = s.getBoundingClientRect();
  return {id: s.dataset.figure, w: r.width, h: r.height,
          marks: s.querySelectorAll('.mark').length,
          drawn: [...s.querySelectorAll('.mark')].filter(m => {
              const b = m.getBBox(); return b.width > 0 || b.height > 0; }).length,
          empty: !!s.querySelector('.empty')};
}))"""


# what a reader would see wrong on the page: the title, anything wider than the page or its
# own box (a command that does not wrap), a plot without labels under its x axis
LAYOUT = """JSON.stringify((() => {
  const width = document.documentElement.clientWidth;
  // inside a scrolling table, or drawn inside a plot (clipped to it): not the page's width
  const scrolls = e => e.closest('.tablewrap') !== null || e.closest('svg') !== e
                       && e.closest('svg') !== null;
  const over = [...document.querySelectorAll('main *')].filter(e => !scrolls(e)).filter(e => {
    const r = e.getBoundingClientRect();
    const own = e.clientWidth > 0 && getComputedStyle(e).overflowX === 'visible'
                && e.scrollWidth > e.clientWidth + 1;
    return r.right > width + 1 || own;
  }).map(e => e.tagName.toLowerCase() + ': ' + (e.textContent || '').slice(0, 80));
  return {title: document.title, h1: document.querySelector('h1').textContent,
          page_scrolls: document.documentElement.scrollWidth > width,
          overflow: over,
          xticks: Object.fromEntries([...document.querySelectorAll('svg.plot')].map(s =>
              [s.dataset.figure, [...s.querySelectorAll('text.xtick')].map(t => t.textContent)])),
          empty: [...document.querySelectorAll('svg.plot')].filter(s => s.querySelector('.empty'))
                   .map(s => s.dataset.figure)};
})())"""


def layout_problems(layout: dict[str, Any]) -> list[str]:
    """What `LAYOUT` found wrong: overflow, and plots (with data) whose x axis has fewer than
    two tick labels."""
    bad = [f"overflows: {o}" for o in layout["overflow"]]
    if layout["page_scrolls"]:
        bad.append("the page scrolls sideways")
    bad += [f"{fig}: x tick labels {ticks}" for fig, ticks in layout["xticks"].items()
            if len(ticks) < 2 and fig not in layout["empty"]]  # fmt: skip
    return bad


async def browse(page: Path, shot: Path, user_dir: Path) -> dict[str, Any]:
    exe = chromium()
    assert exe
    proc = subprocess.Popen(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-default-apps", f"--user-data-dir={user_dir}", "--remote-debugging-port=0",
         "--window-size=1400,1000", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        ws_url = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and ws_url is None:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {proc.returncode}")
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            ws_url = m.group(1) if m else None
        assert ws_url, "chromium printed no DevTools address"
        port = re.search(r":(\d+)/", ws_url).group(1)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
                targets = await r.json()
            target = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                cdp = DevTools(ws)
                for domain in ("Page", "Runtime", "Log", "Network"):
                    await cdp.call(f"{domain}.enable")
                await cdp.call("Page.navigate", url=page.as_uri())
                await cdp.until("Page.loadEventFired")
                probe = await cdp.call("Runtime.evaluate", expression=PROBE, returnByValue=True)
                plots = json.loads(probe["result"]["value"])
                looks = await cdp.call("Runtime.evaluate", expression=LAYOUT, returnByValue=True)
                layout = json.loads(looks["result"]["value"])
                metrics = await cdp.call("Page.getLayoutMetrics")
                height = int(metrics["cssContentSize"]["height"])
                await cdp.call(
                    "Emulation.setDeviceMetricsOverride",
                    width=1400,
                    height=height,
                    deviceScaleFactor=1,
                    mobile=False,
                )
                png = await cdp.call("Page.captureScreenshot", format="png")
                shot.write_bytes(base64.b64decode(png["data"]))
                return {"plots": plots, "events": cdp.events, "height": height, "layout": layout}
    finally:
        proc.kill()
        proc.wait()


def test_report_renders_in_a_browser(report, tmp_path):
    if chromium() is None:
        if os.environ.get("GENBENCH_SKIP_BROWSER") == "1":
            pytest.skip("GENBENCH_SKIP_BROWSER=1 and no chromium")
        pytest.fail("no chromium on PATH: apt-get install chromium (or GENBENCH_SKIP_BROWSER=1)")
    shot = tmp_path / "report.png"
    seen = asyncio.run(browse(report, shot, tmp_path / "chromium-profile"))
    events = seen["events"]
    # offline: the page asked for nothing but itself
    urls = [
        e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"
    ]
    assert urls == [report.as_uri()], urls
    problems = [
        e
        for e in events
        if e["method"] == "Runtime.exceptionThrown"
        or (
            e["method"] == "Runtime.consoleAPICalled"
            and e["params"]["type"] in ("error", "warning")
        )
        or (
            e["method"] == "Log.entryAdded"
            and e["params"]["entry"]["level"] in ("error", "warning")
        )
        or e["method"] == "Network.loadingFailed"
    ]
    assert not problems, problems
    plots = {p["id"]: p for p in seen["plots"]}
    assert set(plots) >= PLOTS, PLOTS - set(plots)
    for fig, p in plots.items():
        assert p["w"] > 300 and p["h"] > 100, (fig, p)
        assert p["marks"] > 0 and p["drawn"] == p["marks"] and not p["empty"], (fig, p)
    w, h = png_size(shot)
    assert w == 1400 and h == seen["height"] > 2000
    assert shot.stat().st_size > 100_000  # plots and text, not a blank page
    assert layout_problems(seen["layout"]) == []
    assert seen["layout"]["title"] == "genbench report — fast, slow"
    print(f"screenshot: {shot}")


def test_a_planned_run_reads_well_in_a_browser(runs, tmp_path):
    """The forecast beside the run: its bar drawn, nothing wider than the page, every plot's
    x axis labelled (the screenshot is kept for a person to look at)."""
    if chromium() is None:
        if os.environ.get("GENBENCH_SKIP_BROWSER") == "1":
            pytest.skip("GENBENCH_SKIP_BROWSER=1 and no chromium")
        pytest.fail("no chromium on PATH: apt-get install chromium (or GENBENCH_SKIP_BROWSER=1)")
    run = tmp_path / "q1"
    shutil.copytree(runs["slow"], run)
    p = genbench("plan", "--from", str(run), "--tokens-per-sample", "2965", "--deadline", "5d",
                 "--servers", "2", env={"GENBENCH_CONFIG": ""})  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    assert genbench("report", str(run)).returncode == 0
    shot = tmp_path / "planned.png"
    seen = asyncio.run(browse(run / "report.html", shot, tmp_path / "chromium-profile"))
    plots = {p["id"]: p for p in seen["plots"]}
    bar = plots["forecast_run_0"]
    assert bar["marks"] >= 12 and bar["drawn"] == bar["marks"], bar  # 4 counts × 3 marks
    assert layout_problems(seen["layout"]) == []
    assert seen["layout"]["h1"] == "genbench report — q1"
    print(f"screenshot: {shot}")
