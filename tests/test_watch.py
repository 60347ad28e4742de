"""`generate --metrics-port` watched by a real Prometheus (Debian's `prometheus` package).

The test starts its own Prometheus binary on 127.0.0.1 with a generated config and a temp
storage directory, lets it scrape a running job on the sim, and asks its query API for the
rows done: the answer must be the rows on disk when that scrape was taken (give or take
one scrape interval). scripts/test.sh installs the package on a fresh machine; a service
the package may have started is not used (its port and storage are not the test's).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_generate import gen, line_count, popen, prompts, wait_for, write_rows
from tests_helpers import free_port

from genbench.sim.process import SimProcess

SCRAPE_S = 2.0  # the tolerance too: the rows on disk within one scrape interval
SLOW_SIM = ("--tps", "300", "--per-seq-ms", "0.5", "--ttft-ms", "20", "--output-len",
            "uniform:40:80", "--thinking-tokens", "10")  # fmt: skip


def prometheus_binary() -> str:
    exe = shutil.which("prometheus")
    if exe is None:
        if os.environ.get("GENBENCH_SKIP_PROMETHEUS") == "1":
            pytest.skip("GENBENCH_SKIP_PROMETHEUS=1 and no prometheus")
        pytest.fail("no prometheus on PATH: apt-get install prometheus (scripts/test.sh does)")
    return exe


class Prometheus:
    """A Prometheus of the test's own: loopback, a free port, storage under tmp."""

    def __init__(self, tmp: Path, target: str) -> None:
        self.port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE_S:g}s\n"
            f"  scrape_timeout: {SCRAPE_S:g}s\n"
            "scrape_configs:\n"
            "  - job_name: genbench\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    def query(self, promql: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class DiskWatch:
    """Rows on disk over time, sampled in a thread: (wall time, count) pairs."""

    def __init__(self, out: Path) -> None:
        self.out, self.seen, self.stop = out, [(time.time(), 0)], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            self.seen.append((time.time(), line_count(self.out)))

    def at(self, t: float) -> int:
        """The count last seen at or before wall time t."""
        return max((n for ts, n in self.seen if ts <= t), default=0)


def test_prometheus_scrapes_the_job_and_its_rows_done_are_the_rows_on_disk(tmp_path):
    port = free_port()
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(600))
    with SimProcess(*SLOW_SIM) as sim:
        # a first run does 100 rows: the watched run resumes, and counts them as done
        first = gen(inp, out, "--url", sim.url, "-c", "8", "--limit", "100")
        assert first.returncode == 0 and line_count(out) == 100, first.stderr
        job = popen(tmp_path, "-i", str(inp), "-o", str(out), "--url", sim.url, "-c", "4",
                    "--metrics-port", str(port), "--progress-every", "1")  # fmt: skip
        prom = Prometheus(tmp_path, f"127.0.0.1:{port}")
        disk = DiskWatch(out)
        try:
            wait_for(prom.ready, 60, "prometheus ready")
            wait_for(lambda: line_count(out) >= 120, 60, "20 rows more written")
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            names = {f.name for f in text_string_to_metric_families(body.decode())}
            assert {"genbench_rows_done", "genbench_rows_remaining", "genbench_tokens",
                    "genbench_server_up", "genbench_requests", "genbench_rows_per_second",
                    "genbench_server_in_flight"} <= names, names  # fmt: skip

            def scraped_some() -> bool:
                got = prom.query("genbench_rows_done_total")
                return bool(got) and float(got[0]["value"][1]) >= 120

            wait_for(scraped_some, 60, "a scrape with rows done")
            got = prom.query("genbench_rows_done_total")
            when = prom.query("timestamp(genbench_rows_done_total)")
            value, at = float(got[0]["value"][1]), float(when[0]["value"][1])
            time.sleep(SCRAPE_S + 0.2)  # the disk sampler has seen past the window
            lo, hi = disk.at(at - SCRAPE_S), disk.at(at + SCRAPE_S)
            assert lo <= value <= hi, (value, lo, hi, disk.at(at))
            assert hi < 600, "the job finished before the query: nothing was watched"
            rate = prom.query("sum(rate(genbench_requests_total[5s]))")
            assert rate and float(rate[0]["value"][1]) > 0
            up = prom.query(f'genbench_server_up{{server="{sim.url}"}}')
            assert up and float(up[0]["value"][1]) == 1.0
            # what was to be watched is seen: the operator's SIGTERM ends the job (a drain,
            # exit 143), rather than waiting for the rest of its rows
            job.send_signal(signal.SIGTERM)
            assert job.wait(120) == 143, (tmp_path / "stderr.txt").read_text()
        finally:
            disk.stop.set()
            prom.stop()
            if job.poll() is None:
                job.kill()
                job.wait()
    stdout = (tmp_path / "stdout.txt").read_text()
    assert f"metrics: http://127.0.0.1:{port}/metrics" in stdout  # loopback unless asked


def test_a_metrics_port_in_use_is_a_one_line_error(tmp_path):
    import socket

    from conftest import genbench

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        inp = tmp_path / "in.jsonl"
        write_rows(inp, prompts(2))
        p = genbench("generate", "-i", str(inp), "-o", str(tmp_path / "o"), "--url",
                     "http://127.0.0.1:9", "--metrics-port", str(port))  # fmt: skip
    assert p.returncode != 0
    assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in p.stderr
    assert "Traceback" not in p.stderr


def test_the_documented_alert_rule_is_one_prometheus_loads(tmp_path):
    """docs/generate.md's alert rule, checked by promtool (from the same package)."""
    import re

    promtool = shutil.which("promtool")
    if promtool is None:
        prometheus_binary()  # fails (or skips) with the install hint
        pytest.skip("prometheus without promtool")
    doc = (Path(__file__).resolve().parent.parent / "docs" / "generate.md").read_text()
    rules = next(b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "alert:" in b)
    path = tmp_path / "rules.yml"
    path.write_text(rules)
    p = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 rules found" in p.stdout
    # and it fires when rows stop, not while they come: promtool's own rule unit test
    labels = '{job="genbench",instance="gen:9400"}'
    (tmp_path / "test.yml").write_text(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n"
        "    input_series:\n"
        f"      - series: 'genbench_rows_done_total{labels}'\n        values: '0+10x10 100x30'\n"
        f"      - series: 'genbench_rows_remaining{labels}'\n        values: '500-10x10 400x30'\n"
        "    alert_rule_test:\n"
        "      - {eval_time: 15m, alertname: GenbenchJobStalled, exp_alerts: []}\n"
        "      - eval_time: 25m\n        alertname: GenbenchJobStalled\n        exp_alerts:\n"
        "          - exp_labels: {job: genbench, instance: 'gen:9400'}\n"
        "            exp_annotations: {summary: 'genbench job gen:9400: no row done for 10 "
        "minutes'}\n"
    )
    p = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")],
                       capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr


def test_every_metric_is_named_by_the_conventions_and_listed_in_the_docs():
    """Fed a full snapshot (a plan, a server down, a failed request), the metrics server's every
    family starts with genbench_, has its unit in its name where it has one, counters end
    in _total, and docs/generate.md lists each."""
    import re

    from prometheus_client import generate_latest

    from genbench.errors import ErrorKind
    from genbench.generate.metrics_server import MetricsServer
    from genbench.generate.progress import ServerState, Snapshot
    from genbench.records import RequestRecord

    e = MetricsServer()
    e.planned({"input": "in.jsonl", "output": "out", "shard": None})
    server = ServerState(url="http://a/v1", state="down", down_s=3.0, in_flight=0,
                         concurrency=4, downs=1, rows_per_s=None, tokens_per_s=None)  # fmt: skip
    e.tick(Snapshot(total=10, done=3, failed=1, done_this_run=3, failed_this_run=1,
                    truncated_this_run=0, remaining=6, elapsed_s=5.0, tokens=100,
                    thinking_tokens=30, rows_per_s=0.5, tokens_per_s=20.0,
                    thinking_tokens_per_s=5.0, answer_tokens_per_s=15.0, eta_s=12, eta_err_s=2,
                    eta_lo_s=10, eta_hi_s=15, all_down_s=3.0, servers=(server,),
                    plan={"seconds": 20, "lo_s": 15, "hi_s": 25, "on_course_s": 17,
                          "verdict": "inside"}))  # fmt: skip
    for outcome in ("requeued", "retry"):
        e.record(RequestRecord("r", server="http://a/v1", error_kind=ErrorKind.DISCONNECTED,
                               extra={"outcome": outcome}))  # fmt: skip
    text = generate_latest(e.registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    doc = (Path(__file__).resolve().parent.parent / "docs" / "generate.md").read_text()
    listed = set(re.findall(r"`(genbench_\w+?)(?:\{[^}]*\})?`", doc))
    for name, fam in families.items():
        full = name + ("_total" if fam.type == "counter" else "")
        assert full.startswith("genbench_"), full
        assert "_created" not in full  # no noise series beside each counter
        if fam.type == "counter":
            assert text.count(f"# TYPE {full} counter") == 1, full
        if "seconds" in full or "timestamp" in full:
            assert full.endswith("_seconds"), full
        assert full in listed or name + "_info" in listed, f"{full} is not in docs/generate.md"
    assert 'genbench_request_failures_total{kind="disconnected",server="http://a/v1"} 2.0' in text
    assert 'genbench_server_up{server="http://a/v1"} 0.0' in text
    assert 'genbench_plan_verdict{verdict="inside"} 1.0' in text
