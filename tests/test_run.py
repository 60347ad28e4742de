"""`genbench run` against the sim, whose true rates are known (docs/sim.md):

a decode step takes a + b·n seconds for n decoding streams, so C streams always
in flight produce C / (a + b·C) tokens per second. Between a slot's requests the
stream is not decoding (client turnaround, the server's request handling, which a
busy VM host can stretch to tens of milliseconds), so a sustained rate is checked
against the step model applied to the streams the client saw decoding, with those
streams required to fill nearly every slot (`tests_helpers.check_sustained_rate`: where a
starved host made the sim shift its schedule, the rate is checked against the tokens
received in the window and never above the model, not against the model itself).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import genbench
from tests_helpers import check_sustained_rate, sim_metric, sim_rate_in_window

from genbench.records import read_records

TPS, PER_SEQ_MS = 400.0, 0.2
SIM_ARGS = ("--tps", str(TPS), "--per-seq-ms", str(PER_SEQ_MS), "--ttft-ms", "1")


def true_rate(c: int) -> float:
    b = PER_SEQ_MS / 1000
    a = 1 / TPS - b
    return c / (a + b * c)


def load(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def phase(doc: dict, name: str) -> dict:
    return next(p for p in doc["phases"] if p["name"] == name)


def test_sustained_rate_matches_the_sims_true_rate(sim_factory, tmp_path):
    sim = sim_factory(*SIM_ARGS)
    out = tmp_path / "run"
    p = genbench(
        "run",
        "--url",
        sim.url,
        "--skip",
        "warmup,single",
        "--concurrency",
        "1,4,16",
        "--sweep-tokens",
        "300",
        "--requests-per-slot",
        "3",
        "--shape",
        "sustained",
        "--out",
        str(out),
        timeout=300,
    )
    assert p.returncode == 0, p.stderr + p.stdout
    # a server without thinking: one line, not a table of zeros
    assert "thinking: none seen" in p.stdout and "thinking and answer" not in p.stdout
    doc = load(out)
    assert doc["status"] == "complete"
    for c in (1, 4, 16):
        s = phase(doc, f"sustained-c{c}")["summary"]
        assert s["failed"] == 0
        # the rate of the window, and the sim's model where the host let it keep its schedule
        want, streams = check_sustained_rate(out, f"sustained-c{c}", TPS, PER_SEQ_MS, sim.root)
        assert streams > 0.85 * c, (c, streams)  # sustained: the slots stayed full
        assert want == pytest.approx(true_rate(c), rel=0.15), c
        assert s["output_tokens"] == 300 * 3 * c  # usage counts, forced length


def test_burst_understates_a_job_with_mixed_lengths(sim_factory, tmp_path):
    # natural lengths spread 50..400 tokens: a burst waits for its longest request,
    # while sustained load keeps C streams decoding
    sim = sim_factory(*SIM_ARGS, "--output-len", "uniform:50:400")
    out = tmp_path / "run"
    p = genbench(
        "run",
        "--url",
        sim.url,
        "--skip",
        "warmup,single",
        "--concurrency",
        "8",
        "--sweep-tokens",
        "1000",
        "--requests-per-slot",
        "8",
        "--natural",
        "--out",
        str(out),
        timeout=300,
    )
    assert p.returncode == 0, p.stderr + p.stdout
    doc = load(out)
    burst = phase(doc, "burst-c8")["summary"]["output_tps"]
    sustained = phase(doc, "sustained-c8")["summary"]["steady_tps"]
    _, streams = check_sustained_rate(out, "sustained-c8", TPS, PER_SEQ_MS, sim.root, rel=0.03)
    assert streams > 0.85 * 8
    # why a burst understates: its slots sit idle while its longest request finishes (the
    # streams decoding, from the records: a busy host does not change it) ...
    recs = [r for r in read_records(out / "requests.jsonl") if r.phase == "burst-c8"]
    t0, t1 = min(r.t_send for r in recs), max(r.t_end for r in recs if r.t_end)
    _, burst_streams = sim_rate_in_window(recs, t0, t1, TPS, PER_SEQ_MS)
    assert burst_streams < 0.8 * streams, (burst_streams, streams)
    # ... so it reports less than sustained load, where the sim kept its schedule (a
    # starved host caps the sim by its CPU, not its step model: fewer streams then cost
    # it less)
    if sim_metric(sim.root, "decode_resync_seconds_total") == 0:
        assert burst < 0.9 * sustained
    lens = phase(doc, "sustained-c8")["summary"]["output_len"]
    assert lens["min"] < lens["max"]  # natural: a distribution, not one length


def test_records_file_has_one_line_per_request_sent_failures_included(sim_factory, tmp_path):
    sim = sim_factory(*SIM_ARGS, "--fault", "http:status=500,rate=0.3,after=1")
    out = tmp_path / "run"
    p = genbench(
        "run",
        "--url",
        sim.url,
        "--warmup",
        "0",
        "--lengths",
        "20",
        "--prompts-per-length",
        "4",
        "--concurrency",
        "2,4",
        "--sweep-tokens",
        "20",
        "--requests-per-slot",
        "3",
        "--out",
        str(out),
        timeout=120,
    )
    doc = load(out)
    recs = read_records(out / "requests.jsonl")
    sent = sum(ph["summary"]["requests"] for ph in doc["phases"])
    assert len(recs) == sent == 4 + (2 + 6) + (4 + 12)
    failed = [r for r in recs if not r.ok]
    assert failed and all(r.error_kind == "http_status" for r in failed)
    assert sum(ph["summary"]["failed"] for ph in doc["phases"]) == len(failed)
    assert p.returncode == 0, p.stderr


def test_server_killed_mid_run_ends_fast_with_partial_results(sim_factory, tmp_path):
    sim = sim_factory("--tps", "100", "--ttft-ms", "5")
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "genbench",
        "run",
        "--url",
        sim.url,
        "--warmup",
        "0",
        "--lengths",
        "50",
        "--concurrency",
        "4",
        "--sweep-tokens",
        "400",
        "--requests-per-slot",
        "50",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait until the sweep is running: the single-stream phase is in result.json
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (out / "result.json").exists() and "burst-c4" in (out / "result.json").read_text():
                break
            time.sleep(0.05)
        else:
            pytest.fail("run never reached the sweep")
        sim.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        stdout, stderr = proc.communicate(timeout=30)
        assert time.monotonic() - killed < 15
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "stopped answering" in stderr and "Traceback" not in stderr
    doc = load(out)
    assert doc["status"] == "server_down"
    assert phase(doc, "single-50")["summary"]["ok"] == 3
    recs = read_records(out / "requests.jsonl")
    assert len(recs) == sum(ph["summary"]["requests"] for ph in doc["phases"])
    # a plan from it names the run's status and the phase it died in, not a missing shape
    p = genbench("plan", "--from", str(out), "--samples", "1000", "--tokens-per-sample", "99")
    assert p.returncode == 2 and "the run was cut short" in p.stderr, p.stderr
    assert "status' is server_down" in p.stderr and "--shape sustained" not in p.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--lengths", "10,abc"], "--lengths"),
        (["--concurrency", "0,4"], "--concurrency"),
        (["--concurrency", ""], "--concurrency"),
        (["--duration", "0.1"], "--duration"),
        (["--shape", "spiky"], "--shape"),
        (["--skip", "everything"], "--skip"),
    ],
)
def test_bad_input_fails_before_any_load(fast_sim, args, needle):
    p = genbench("run", "--url", fast_sim.url, *args)
    assert p.returncode == 2, p.stderr
    assert needle in p.stderr and "Traceback" not in p.stderr


def test_out_dir_with_another_run_is_refused(fast_sim, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "result.json").write_text("{}")
    p = genbench("run", "--url", fast_sim.url, "--out", str(out))
    assert p.returncode == 2 and "already holds a run" in p.stderr


def test_context_window_smaller_than_longest_length(sim_factory, tmp_path):
    sim = sim_factory("--max-model-len", "1024")
    p = genbench("run", "--url", sim.url, "--lengths", "512,2048", "--out", str(tmp_path / "r"))
    assert p.returncode == 2 and "context window is 1024" in p.stderr
    assert not (tmp_path / "r" / "requests.jsonl").exists()


def test_every_phase_carries_the_client_self_check(fast_sim, tmp_path):
    out = tmp_path / "r"
    p = genbench(
        "run",
        "--url",
        fast_sim.url,
        "--warmup",
        "0",
        "--lengths",
        "30",
        "--prompts-per-length",
        "2",
        "--concurrency",
        "4",
        "--sweep-tokens",
        "30",
        "--out",
        str(out),
    )
    assert p.returncode == 0, p.stderr
    for ph in load(out)["phases"]:
        c = ph["client"]
        assert c["cpu_fraction"] is not None and c["loop_lag_p99_s"] is not None
        assert c["chunks_per_s"] > 0


def test_a_client_bound_phase_is_flagged(fast_sim, tmp_path):
    # block the client's event loop 30 ms of every 50: a saturated client, whatever the server
    out = tmp_path / "r"
    p = genbench(
        "run",
        "--url",
        fast_sim.url,
        "--warmup",
        "0",
        "--lengths",
        "60",
        "--prompts-per-length",
        "2",
        "--skip",
        "sweep",
        "--out",
        str(out),
        env={"GENBENCH_DEBUG_BLOCK_LOOP_MS": "30"},
    )
    assert p.returncode == 0, p.stderr
    ph = phase(load(out), "single-60")
    assert ph["client"]["client_bound"] is True
    assert any("client-bound" in n for n in ph["notes"])
    assert "client-bound" in p.stdout


def test_failures_among_the_first_requests_keep_the_steady_window(sim_factory, tmp_path):
    sim = sim_factory(*SIM_ARGS, "--fault", "http:status=500,rate=0.2,after=1")
    out = tmp_path / "run"
    p = genbench(
        "run",
        "--url",
        sim.url,
        "--skip",
        "warmup,single",
        "--concurrency",
        "8",
        "--sweep-tokens",
        "100",
        "--requests-per-slot",
        "4",
        "--shape",
        "sustained",
        "--out",
        str(out),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    s = phase(load(out), "sustained-c8")["summary"]
    assert s["failed"] > 0 and s["steady_tps"] is not None


def test_extra_body_reaches_the_server(sim_factory, tmp_path):
    # the sim honours chat_template_kwargs.enable_thinking=false: no thinking tokens
    sim = sim_factory(*SIM_ARGS, "--thinking-tokens", "10")
    out = tmp_path / "r"
    p = genbench(
        "run",
        "--url",
        sim.url,
        "--warmup",
        "0",
        "--lengths",
        "30",
        "--prompts-per-length",
        "2",
        "--skip",
        "sweep",
        "--out",
        str(out),
        "--extra-body",
        '{"chat_template_kwargs": {"enable_thinking": false}}',
    )
    assert p.returncode == 0, p.stderr
    assert phase(load(out), "single-30")["summary"]["thinking_tokens"] == 0
    p = genbench("run", "--url", sim.url, "--extra-body", "[1]", "--out", str(tmp_path / "x"))
    assert p.returncode == 2 and "--extra-body" in p.stderr


def test_summary_says_when_token_counts_are_estimated(sim_factory, tmp_path):
    # like llama-cpp-python's server: no usage in streams, so every phase's tokens are
    # counted one per chunk; result.json says so per phase and the console says it once
    sim = sim_factory(*SIM_ARGS, "--fault", "no-usage")
    out = tmp_path / "r"
    p = genbench(
        "run", "--url", sim.url, "--warmup", "0", "--lengths", "20", "--prompts-per-length", "2",
        "--skip", "sweep", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert all(ph["summary"]["tokens_estimated"] for ph in load(out)["phases"])
    assert "token counts estimated in 1 of 1 phases" in p.stdout
    assert "genbench-sim" in p.stdout and "unknown server" not in p.stdout


def test_records_are_written_as_they_complete_not_at_the_phase_end(sim_factory, tmp_path):
    """A run killed mid-phase keeps the records that phase already finished (a server
    without thinking: nothing is held back to count thinking tokens)."""
    sim = sim_factory("--tps", "200", "--ttft-ms", "5")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "genbench", "run", "--url", sim.url, "--warmup", "0",
           "--lengths", "20", "--concurrency", "4", "--sweep-tokens", "400",
           "--requests-per-slot", "50", "--out", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        done = None  # requests of the phases finished when the long one started
        while time.monotonic() < deadline and proc.poll() is None:
            res, log = out / "result.json", out / "requests.jsonl"
            if done is None and res.exists() and "burst-c4" in res.read_text():
                done = sum(ph["summary"]["requests"] for ph in load(out)["phases"])
            if done is not None and log.exists() and len(log.read_bytes().splitlines()) > done:
                break
            time.sleep(0.05)
        else:
            pytest.fail("no record of the running phase was written before its end")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    recs = read_records(out / "requests.jsonl")
    assert len(recs) > done and all(r.ok for r in recs)
    assert all(r.text is None for r in recs)  # text was never written


def test_one_500_on_the_preflight_is_retried_and_said(sim_factory, tmp_path):
    """generate's preflight retries a 5xx as its requests would; run's did not: one HTTP 500
    on the test request ended the run (exit 9), though its phases carry on past a failed
    request. Now tried again, said, and the run measures."""
    sim = sim_factory(*SIM_ARGS, "--fault", "http:until=1")
    out = tmp_path / "r"
    p = genbench(
        "run", "--url", sim.url, "--warmup", "0", "--lengths", "20", "--prompts-per-length", "1",
        "--skip", "sweep", "--out", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr + p.stdout
    assert "test request: HTTP 500" in p.stdout and "(1 of 3 retries: a server error" in p.stdout
    assert "as a request of the job would be" not in p.stdout  # run's requests are not retried
    assert load(out)["status"] == "complete"
