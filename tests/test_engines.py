"""`generate --serve CMD`: genbench starts its engines, names why one died, restarts it, and
leaves none behind. The engine is `genbench sim` (cheap); the OOM kill is the kernel's own,
in a memory cgroup whose limit is lowered (root and cgroup v1 only: skipped elsewhere).

Every wait is on an event (a line of engines.jsonl, a record of the job, a pid gone), each
with a deadline far above what it takes on a quiet machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import genbench
from test_generate import assert_log_holds_every_attempt

from genbench.engines.command import parse_command
from genbench.engines.death import read_kernel_log
from genbench.engines.process import alive
from genbench.engines.supervisor import EngineOptions
from genbench.generate.hidden import CaptureSpec
from genbench.generate.job import Job
from genbench.generate.jobconfig import JobConfig
from genbench.generate.metrics_server import MetricsServer
from genbench.generate.servers import ServerSpec
from genbench.records import RequestRecord

PY = shlex.quote(sys.executable)
SIM = f"{PY} -m genbench sim --port {{port}} --tps 200 --ttft-ms 5 --output-len uniform:20:60"
CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def write_prompts(path: Path, n: int) -> list[str]:
    ids = [f"r{i}" for i in range(n)]
    path.write_text("".join(json.dumps({"id": i, "messages": [{"role": "user", "content":
                    f"question {i}"}]}) + "\n" for i in ids))  # fmt: skip
    return ids


def events(out: Path) -> list[dict[str, Any]]:
    return events_of(out, "engines.jsonl")


def events_of(out: Path, name: str) -> list[dict[str, Any]]:
    p = out / ".genbench" / name
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def wait_for(what: str, cond: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")


def ids_once(out: Path, ids: list[str]) -> None:
    files = sorted(out.glob("data*.jsonl"))
    got = [json.loads(x)["id"] for p in files for x in p.read_text().splitlines()]
    assert sorted(got) == sorted(ids), "every id exactly once"


class Acting(MetricsServer):
    """Serves /metrics like the job's metrics server, and does `act(pid)` to the engine once
    `after` requests were answered (the job is then surely mid-way)."""

    def __init__(self, after: int, act: Callable[[int], None]) -> None:
        super().__init__()
        self.after, self.act, self.seen, self.done = after, act, 0, False
        self.job: Job | None = None
        self.notes: list[str] = []

    def note(self, text: str, style: str = "") -> None:
        self.notes.append(text)

    def record(self, rec: RequestRecord) -> None:
        super().record(rec)
        self.seen += rec.ok
        if self.seen >= self.after and not self.done and self.job and self.job.engines:
            self.done = True
            self.act(self.job.engines.engines[0].proc.pid)


def run_job(tmp_path: Path, n: int, listener: Acting, cmd: str = SIM,
            params: dict[str, Any] | None = None, capture: CaptureSpec | None = None,
            **opts: Any) -> Any:  # fmt: skip
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    ids = write_prompts(inp, n)
    eng = parse_command(cmd)
    options = EngineOptions(**{"backoff": 0.2, "grace": 2.0, **opts})
    cfg = JobConfig(inp, out, [ServerSpec(eng.url, 8)], retry_backoff=0.05, engines=[eng],
                    engine=options, params=params or {}, capture=capture)  # fmt: skip
    job = Job(cfg, listener)
    listener.job = job
    listener.start()
    try:
        result = asyncio.run(job.run(handle_signals=False))
        with urllib.request.urlopen(f"http://127.0.0.1:{listener.port}/metrics") as r:
            metrics = r.read().decode()
    finally:
        listener.stop()
    assert result.status == "complete", (result, listener.notes)
    ids_once(out, ids)
    return out, metrics, result


# -- starts that fail -----------------------------------------------------------------------


def test_an_engine_with_a_bad_flag_is_named_in_seconds_with_exit_13(tmp_path: Path):
    write_prompts(tmp_path / "in.jsonl", 3)
    t0 = time.monotonic()
    r = genbench("generate", "-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out"),
                 "--serve", SIM + " --bogus-flag", timeout=120)  # fmt: skip
    assert r.returncode == 13, r.stderr
    assert time.monotonic() - t0 < 60  # not the 900 s start timeout: it exited at once
    line = r.stderr.strip().splitlines()[-1]
    assert re.search(r"engine 1 \(pid \d+\) exited with status 2: .*--bogus-flag", line), line
    assert "while starting" in line and "engine-1.log" in line


def test_an_engine_never_healthy_is_stopped_and_named_at_its_start_timeout(tmp_path: Path):
    write_prompts(tmp_path / "in.jsonl", 3)
    r = genbench("generate", "-i", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out"),
                 "--serve", SIM + " --fault unhealthy", "--engine-start-timeout", "3",
                 timeout=120)  # fmt: skip
    assert r.returncode == 13, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "was not healthy within 3.0 s (--engine-start-timeout)" in line, line
    assert "503" in line and "stopped it" in line
    pid = int(re.search(r"\(pid (\d+)\)", line)[1])  # type: ignore[index]
    assert not alive(pid)


# -- deaths mid-job: named, restarted, every id once ---------------------------------------


def test_an_engine_sigkilled_mid_job_is_named_restarted_and_every_id_written_once(tmp_path):
    listener = Acting(15, lambda pid: os.kill(pid, signal.SIGKILL))
    out, metrics, result = run_job(tmp_path, 120, listener)
    # the downtime said once, in the end block after the tokens/s it lowered, not before
    # the status line as a stray note
    assert result.engines_line.startswith("engines: engine 1 down "), result.engines_line
    assert "1 restart)" in result.engines_line
    assert not [n for n in listener.notes if n.startswith("engines: ")], listener.notes
    from rich.console import Console

    from genbench.generate.render import print_result

    console = Console(width=400, record=True)
    print_result(result, console)
    text = console.export_text()
    assert text.index("  tokens: ") < text.index("  engines: engine 1 down") < text.index(
        "  data: "), text  # fmt: skip
    evs = events(out)
    down = [e for e in evs if e["event"] == "down"]
    assert len(down) == 1 and down[0]["cause"] == "signal"
    assert down[0]["line"].startswith(f"engine 1 (pid {down[0]['pid']}) was killed by SIGKILL")
    ups = [e for e in evs if e["event"] == "up"]
    assert len(ups) == 2 and ups[1]["restart"] == 1 and ups[1]["pid"] != ups[0]["pid"]
    assert evs[-1]["event"] == "stop" and not alive(evs[-1]["pid"])
    assert 'genbench_engine_restarts_total{cause="signal",engine="engine 1"} 1.0' in metrics
    assert re.search(r'genbench_engine_up\{engine="engine 1",server="[^"]+"\} 1\.0', metrics)


def test_an_engine_alive_but_not_answering_is_killed_after_its_grace_and_restarted(tmp_path):
    listener = Acting(15, lambda pid: os.kill(pid, signal.SIGSTOP))  # alive, deaf to SIGTERM
    out, metrics, result = run_job(tmp_path, 60, listener, hang_timeout=1.5, grace=1.0)
    down = [e for e in events(out) if e["event"] == "down"]
    assert [d["cause"] for d in down] == ["hang"]
    assert "has not answered /health for" in down[0]["line"]
    # down since it last answered, not since it was stopped: the hang counts as downtime
    assert down[0]["since"] <= down[0]["at"] - 1.5
    assert result.snapshot.engines[0].down_s >= 1.5
    assert down[0]["code"] is None or down[0]["code"] == -signal.SIGKILL
    assert 'genbench_engine_restarts_total{cause="hang",engine="engine 1"} 1.0' in metrics


def _can_oom_kill() -> str | None:
    """Why the kernel cannot be asked for an OOM kill here, or None."""
    if os.geteuid() != 0 or not (CGROUP_V1 / "memory.limit_in_bytes").exists():
        return "needs root and cgroup v1's memory controller (/sys/fs/cgroup/memory)"
    if not read_kernel_log():
        return "needs to read the kernel log (/dev/kmsg) to see the OOM killer's line"
    return None


_SEQ = itertools.count()


@contextlib.contextmanager
def memory_cgroup() -> Iterator[Path]:
    d = CGROUP_V1 / f"genbench-test-{os.getpid()}-{next(_SEQ)}"
    d.mkdir()
    try:
        yield d
    finally:
        wait_for("the cgroup to empty", lambda: not (d / "cgroup.procs").read_text().strip(), 30)
        d.rmdir()


def oom_kill(cgroup: Path, url: str) -> Callable[[int], None]:
    """Move the engine into `cgroup`, cap it at 4 MB more than it has, then send it an 8 MB
    body: it grows past the cap and the kernel kills it (exit 137, its line in dmesg)."""

    def act(pid: int) -> None:
        (cgroup / "cgroup.procs").write_text(str(pid))
        (cgroup / "memory.limit_in_bytes").write_text(str(4 << 20))
        body = json.dumps({"model": "genbench-sim", "max_tokens": 1,
                           "messages": [{"role": "user", "content": "x" * (8 << 20)}]})  # fmt: skip
        req = urllib.request.Request(url + "/chat/completions", body.encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip

        def send() -> None:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(req, timeout=30).read()

        threading.Thread(target=send, daemon=True).start()

    return act


@pytest.mark.skipif(_can_oom_kill() is not None, reason=str(_can_oom_kill()))
def test_an_engine_oom_killed_by_the_kernel_is_named_by_its_line_and_restarted(tmp_path):
    cmd = parse_command(SIM)
    with memory_cgroup() as cg:
        listener = Acting(15, oom_kill(cg, cmd.url))
        out, metrics, result = run_job(tmp_path, 80, listener, cmd=cmd.text.replace(
            "{port}", str(cmd.port)))  # fmt: skip
    ids = [json.loads(x)["id"] for x in (tmp_path / "in.jsonl").read_text().splitlines()]
    failed = assert_log_holds_every_attempt(out, ids)  # each attempt, its kind, its fate
    assert failed, "the rows in flight when the engine died are in the request log"
    down = [e for e in events(out) if e["event"] == "down"]
    assert [d["cause"] for d in down] == ["oom"], down
    line = down[0]["line"]
    assert line.startswith(f"engine 1 (pid {down[0]['pid']}) was killed by the kernel's OOM")
    assert re.search(rf"Memory cgroup out of memory: Killed process {down[0]['pid']}\b", line)
    assert any(line in n for n in listener.notes)  # said on the console, as the job ran
    assert "OOM-killed by the kernel 1 time" in result.engines_line, result  # at the end
    assert 'genbench_engine_restarts_total{cause="oom",engine="engine 1"} 1.0' in metrics
    assert result.snapshot.engines[0].down_s > 0
    r = genbench("report", str(out))
    assert r.returncode == 0, r.stderr
    html = (out / "report.html").read_text()
    assert "Engines up and down, and why" in html and "Memory cgroup out of memory" in html


# -- nothing outlives genbench --------------------------------------------------------------


def _start_job(tmp_path: Path, n: int, *serve: str) -> tuple[subprocess.Popen[bytes], Path]:
    write_prompts(tmp_path / "in.jsonl", n)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "genbench", "generate", "-i", str(tmp_path / "in.jsonl"),
            "-o", str(out), "-c", "4"]  # fmt: skip
    for s in serve:
        args += ["--serve", s]
    log = open(tmp_path / "genbench.log", "wb")  # noqa: SIM115 - the child holds it
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT), out


SLOW = SIM.replace("--tps 200", "--tps 20")


def test_genbench_sigkilled_takes_its_two_engines_and_their_children_with_it(tmp_path):
    """The second engine has a child of its own (as vLLM has its engine core and workers),
    which the kernel's parent-death signal alone would leave running."""
    with_child = f"sh -c 'sleep 600 & exec {SLOW}'"
    proc, out = _start_job(tmp_path, 500, SLOW, with_child)
    try:
        ups = wait_for("both engines healthy",
                       lambda: len(u := [e for e in events(out) if e["event"] == "up"]) == 2 and u)
        pids = [e["pid"] for e in ups]
        pids += [kid for p in pids for kid in children(p)]
        assert len(pids) == 3 and all(alive(p) for p in pids)
        proc.kill()  # SIGKILL: genbench runs no code of its own now
        proc.wait(30)
        wait_for("the engines and their children gone", lambda: not any(map(alive, pids)), 15)
    finally:
        proc.kill()
        proc.wait()


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def test_sigterm_stops_the_job_and_waits_for_its_engine(tmp_path: Path):
    proc, out = _start_job(tmp_path, 500, SLOW)
    try:
        up = wait_for("the engine healthy", lambda: [e for e in events(out) if e["event"] == "up"])
        log = out / ".genbench" / "requests.jsonl"
        wait_for("requests answered", lambda: log.exists() and log.read_bytes().count(b"\n") > 3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143  # 128 + SIGTERM, as a shell says
    finally:
        proc.kill()
        proc.wait()
    last = events(out)[-1]
    assert last["event"] == "stop" and last["cause"] == "end" and last["pid"] == up[0]["pid"]
    assert not alive(up[0]["pid"])
    said = (tmp_path / "genbench.log").read_text()
    assert "a second SIGTERM to stop now" in said and "Ctrl-C" not in said, said


def test_ctrl_c_stops_the_job_and_waits_for_its_engine(tmp_path: Path):
    """SIGINT to genbench alone (a Ctrl-C at a terminal reaches its group; the engine's
    group is its own): the job stops, exit 130, and the engine is stopped and waited for."""
    proc, out = _start_job(tmp_path, 500, SLOW)
    try:
        up = wait_for("the engine healthy", lambda: [e for e in events(out) if e["event"] == "up"])
        log = out / ".genbench" / "requests.jsonl"
        wait_for("requests answered", lambda: log.exists() and log.read_bytes().count(b"\n") > 3)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
    finally:
        proc.kill()
        proc.wait()
    wait_for("the engine gone", lambda: not alive(up[0]["pid"]), 15)
    last = events(out)[-1]
    assert last["event"] == "stop" and last["cause"] == "end" and last["pid"] == up[0]["pid"]
    assert "rerun the same command to resume" in (tmp_path / "genbench.log").read_text()


def test_an_engine_dying_while_the_job_stops_is_not_announced_as_a_wait(tmp_path: Path):
    """A requeued Slurm task: SIGTERM reaches genbench and its engine. Once stopping, a
    server gone is said as down, not "waiting ... gives up after 30 min", which it won't."""
    proc, out = _start_job(tmp_path, 500, SLOW)
    log = tmp_path / "genbench.log"
    try:
        up = wait_for("the engine healthy", lambda: [e for e in events(out) if e["event"] == "up"])
        reqs = out / ".genbench" / "requests.jsonl"
        wait_for("requests answered", lambda: reqs.exists() and reqs.read_bytes().count(b"\n") > 3)
        proc.send_signal(signal.SIGTERM)
        wait_for("the job draining its rows in flight", lambda: b"stopping: " in log.read_bytes())
        os.kill(up[0]["pid"], signal.SIGKILL)
        assert proc.wait(60) == 143
    finally:
        proc.kill()
        proc.wait()
    said = log.read_text()
    assert "is down (" in said and "gives up after" not in said, said
    assert not any(alive(e["pid"]) for e in events(out) if e["event"] == "up")


def test_ctrl_c_while_the_engines_load_stops_them_before_anything_is_sent(tmp_path: Path):
    proc, out = _start_job(tmp_path, 5, SIM + " --fault unhealthy", SIM + " --fault unhealthy")
    logs = [out / ".genbench" / "engines" / f"engine-{i}.log" for i in (1, 2)]
    try:
        wait_for(
            "both engines listening (and never healthy)",
            lambda: all(p.exists() and b"listening" in p.read_bytes() for p in logs),
        )
        keepers = children(proc.pid)
        pids = keepers + [kid for k in keepers for kid in children(k)]
        assert len(pids) == 4 and all(alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 130
    finally:
        proc.kill()
        proc.wait()
    wait_for("the engines gone", lambda: not any(map(alive, pids)), 15)
    said = (tmp_path / "genbench.log").read_text().strip().splitlines()[-1]
    assert said == (
        "genbench: error: SIGINT while the engines started: stopped them, nothing was sent"
    )
    assert not (out / ".genbench" / "requests.jsonl").exists()


def test_two_engines_of_a_small_sharded_job_both_get_rows(tmp_path: Path):
    """Fewer rows than the first engine's slots: the rows still go to both engines (the
    second was left idle when the first server's workers all started first)."""
    write_prompts(tmp_path / "in.jsonl", 16)
    out = tmp_path / "out"
    r = genbench("generate", "-i", str(tmp_path / "in.jsonl"), "-o", str(out), "--shard",
                 "1/2", "--serve", SIM, "--serve", SIM, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    ups = [e for e in events_of(out, "engines-1of2.jsonl") if e["event"] == "up"]
    log = (out / ".genbench" / "requests-1of2.jsonl").read_text()
    assert len(ups) == 2 and all(f'"server":"{e["url"]}"' in log for e in ups), log[:400]
    assert (out / ".genbench" / "engines-1of2" / "engine-2.log").exists()


def test_a_fatal_error_after_the_start_stops_the_engine_and_waits_for_it(tmp_path: Path):
    write_prompts(tmp_path / "in.jsonl", 3)
    out = tmp_path / "out"
    r = genbench("generate", "-i", str(tmp_path / "in.jsonl"), "-o", str(out), "--serve", SIM,
                 "--model", "no-such-model", timeout=120)  # fmt: skip
    assert r.returncode == 8, r.stderr  # the preflight's: the model is not served
    evs = events(out)
    assert [e["event"] for e in evs] == ["start", "up", "stop"] and not alive(evs[1]["pid"])


# -- check --serve, run --serve, plan --from --------------------------------------------------


def test_check_serve_starts_checks_and_stops_the_engine(tmp_path: Path):
    r = genbench("check", "--serve", SIM, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["model"] == "genbench-sim"
    port = int(doc["url"].rsplit(":", 1)[1].split("/")[0])
    with pytest.raises(OSError):  # stopped: nothing listens there any more
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


def test_run_serve_measures_each_configuration_in_turn_and_plan_names_the_faster(tmp_path):
    out = tmp_path / "runs"
    slow, fast = SIM.replace("--tps 200", "--tps 50"), SIM.replace("--tps 200", "--tps 400")
    r = genbench("run", "--serve", slow, "--serve", fast, "-o", str(out), "--skip",
                 "single", "-c", "4", "--shape", "sustained", "--requests-per-slot", "2",
                 "--warmup", "1", "--sweep-tokens", "32", "--json", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    for side, cmd in (("a", slow), ("b", fast)):
        doc = json.loads((out / side / "result.json").read_text())
        assert doc["target"]["engine"] == cmd
        assert (out / side / "engine-1.log").read_text().startswith("genbench sim listening")
    assert f"genbench plan --from {out}" in r.stderr
    assert f"results: {out}/a, {out}/b (1 repeat each)" in r.stderr
    assert f"genbench run --serve '{slow}' → {out}/a" in r.stderr  # as typed, quoted
    p = genbench("report", str(out))  # the directory of both: each is named
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().endswith(f"holds runs, not a run itself: give them ({out}/a {out}/b)")
    p = genbench("plan", "--from", str(out), "--samples", "1000", "--tokens-per-sample", "300",
                 "-o", str(tmp_path / "plan"), "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "the forecast tables and `generate --plan` use the fastest, b" in p.stderr


@pytest.mark.llamacpp
def test_serve_local_is_the_demo_target_as_an_engine_generate_can_use(tmp_path: Path):
    pytest.importorskip("xllamacpp", reason="--serve local needs genbench[local]")
    ids = write_prompts(tmp_path / "in.jsonl", 6)
    out = tmp_path / "out"
    r = genbench("generate", "-i", str(tmp_path / "in.jsonl"), "-o", str(out), "--serve",
                 "local", "--max-tokens", "8", "-c", "2", timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    ids_once(out, ids)
    evs = events(out)
    assert [e["event"] for e in evs] == ["start", "up", "stop"] and evs[1]["command"] == "local"
    assert not alive(evs[0]["pid"])


# -- the done-when case: a real vLLM CPU engine, OOM-killed mid-job -------------------------


def vllm_command() -> str:
    """scripts/vllm-test-server.sh's command line, with {port}: the tiny Llama on CPU."""
    from fixtures_vllm import REPO, _setup_once

    _setup_once()  # the venv and the model, built once (fails, never skips, when broken)
    venv = Path(os.environ.get("GENBENCH_VLLM_VENV", REPO / ".cache" / "vllm-venv"))
    model = Path(os.environ.get("GENBENCH_VLLM_MODEL", REPO / ".cache" / "vllm-model"))
    return (f"VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 {venv}/bin/python "
            f"-m vllm.entrypoints.openai.api_server --model {model} --served-model-name "
            "tiny-llama --host 127.0.0.1 --port {port} --dtype float32 --max-model-len 4096 "
            "--enforce-eager --disable-uvicorn-access-log")  # fmt: skip


def states_once_each(out: Path) -> None:
    """Every turn's states file once, holding its own ids (a torn or cut file is refused
    by tensors.read), and the engines' directory left empty."""
    from genbench import tensors
    from genbench.rows import turn_ids

    rows = [json.loads(x) for p in sorted(out.glob("data*.jsonl"))
            for x in p.read_text().splitlines()]  # fmt: skip
    turns = [t for r in rows for t in turn_ids(r)]
    kept = sorted(str(p.relative_to(out)) for p in (out / "hidden_states").rglob("*.safetensors"))
    assert turns and kept == sorted(t.states for t in turns)
    for t in turns:
        got = tensors.read(out / t.states)
        assert got["token_ids"].array.tolist() == (t.prompt + t.generated)[:-1]
        assert got["hidden_states"].shape[:2] == (len(t.prompt) + len(t.generated) - 1, 4)
    assert [p.name for p in (out / ".genbench" / "hs-incoming").iterdir()] == []


@pytest.mark.vllm
@pytest.mark.skipif(_can_oom_kill() is not None, reason=str(_can_oom_kill()))
def test_a_vllm_engine_oom_killed_mid_job_is_named_restarted_and_the_job_completes(tmp_path):
    """Run under `flock /tmp/genbench-vllm.lock`: two vLLM starts, a few minutes of CPU.

    With hidden states captured (genbench's CPU connector): the engine dies with requests
    in flight, their files not written (their locks let go by the kernel); after the
    restart every row's states are there once, whole and its own, and nothing the dead
    engine began is taken or left behind."""
    from fixtures_vllm import _skip_requested

    if _skip_requested():
        pytest.skip("GENBENCH_SKIP_VLLM=1: vLLM test server disabled")
    cmd = parse_command(vllm_command())
    with memory_cgroup() as cg:
        listener = Acting(5, oom_kill(cg, cmd.url))  # the API server, sent an 8 MB body
        out, metrics, result = run_job(
            tmp_path, 30, listener, cmd=cmd.text.replace("{port}", str(cmd.port)),
            params={"max_tokens": 16}, start_timeout=600.0,
            capture=CaptureSpec(layers=(1, 2, 3, 4)),
        )  # fmt: skip
    ids = [json.loads(x)["id"] for x in (tmp_path / "in.jsonl").read_text().splitlines()]
    failed = assert_log_holds_every_attempt(out, ids)  # each attempt, its kind, its fate
    assert failed, "the rows in flight when the engine died are in the request log"
    states_once_each(out)
    down = [e for e in events(out) if e["event"] == "down"]
    assert [d["cause"] for d in down] == ["oom"], down
    assert "was killed by the kernel's OOM killer" in down[0]["line"]
    assert "out of memory: Killed process" in down[0]["line"]
    assert [e["restart"] for e in events(out) if e["event"] == "up" and "restart" in e] == [1]
    assert 'genbench_engine_restarts_total{cause="oom",engine="engine 1"} 1.0' in metrics
    assert result.snapshot.engines[0].down_s > 0
    r = genbench("report", str(out))
    assert r.returncode == 0, r.stderr
    html = (out / "report.html").read_text()
    assert "Engines up and down, and why" in html and "out of memory: Killed process" in html


STOPPED = [(signal.SIGINT, "genbench: interrupted", 130),
           (signal.SIGTERM, "genbench: stopped by SIGTERM", 143)]  # fmt: skip


@pytest.mark.parametrize("sig, said, code", STOPPED)
def test_check_serve_stopped_while_its_engine_loads_says_so_and_takes_the_engine(sig, said, code):
    """A command without a stop of its own (check, run) ends a Ctrl-C or SIGTERM with one
    line and exit 128 + the signal; the engine it was waiting for does not outlive it."""
    marker = f"genbench-test-loading-{os.getpid()}-{sig}"
    engine = f'bash -c "sleep 300; echo {{port}} {marker}"'
    args = [sys.executable, "-m", "genbench", "check", "--serve", engine]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def running() -> bool:
        found = subprocess.run(["pgrep", "-f", f"echo [0-9]+ {marker}"], capture_output=True)
        return found.returncode == 0  # the engine's own line: its port filled in

    try:
        wait_for("the engine started", running, 60)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == code, out
    assert out.strip().splitlines()[-1] == said and "Traceback" not in out, out
    wait_for("the engine gone", lambda: not running(), 15)
