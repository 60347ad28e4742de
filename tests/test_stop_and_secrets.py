"""The operator's word ends a job, and a secret stays secret (issue #45): real genbench
processes against the sim on 127.0.0.1, as an `--url` server or a `--serve` engine.

Every wait is on an event (a line in a log, a file, a process gone), with a deadline far
above what it takes on a quiet machine.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import genbench

from genbench.engines.process import group_members
from genbench.sim.process import SimProcess

PY = shlex.quote(sys.executable)
SIM_ARGS = ("--tps", "400", "--ttft-ms", "2", "--output-len", "fixed:8")
SIM = f"{PY} -m genbench sim --port {{port}} " + " ".join(SIM_ARGS)
DRAIN = 2.0  # the jobs' --drain: a stop must end them within it and a few seconds


def wait_for(what: str, cond: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := cond():
            return got
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")


def write_prompts(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"r{i}", "messages": [{"role": "user",
                    "content": f"question {i}"}]}) + "\n" for i in range(n)))  # fmt: skip
    return path


def events(out: Path) -> list[dict[str, Any]]:
    p = out / ".genbench" / "engines.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def start(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    log = open(tmp / "genbench.log", "wb")  # noqa: SIM115 - the child holds it
    argv = [sys.executable, "-m", "genbench", *args]
    env = {**os.environ, **(env or {})}
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


def said(tmp: Path) -> str:
    return (tmp / "genbench.log").read_text(errors="replace")


def ended_within(proc: subprocess.Popen[bytes], seconds: float) -> int:
    """The exit status of a process that must end within `seconds` (killed if not)."""
    try:
        return proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"still running {seconds:g} s after the signal") from None


def lock_free(out: Path) -> bool:
    """No process holds the output directory's lock (a second job could take it)."""
    lock = out / ".genbench" / "lock"
    if not lock.exists():
        return True
    with open(lock, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def groups_empty(out: Path) -> bool:
    """Every engine the job started (each in its own process group) is gone, children too."""
    pgids = {e["pgid"] for e in events(out) if e.get("pgid")}
    return bool(pgids) and not any(group_members(g) for g in pgids)


# -- 5: every engine event is a line, the failed first start included -----------------------


def test_a_failed_first_start_is_a_line_of_engines_jsonl_and_report_draws_it(tmp_path):
    inp, out = write_prompts(tmp_path / "in.jsonl", 3), tmp_path / "out"
    engine = "sh -c 'echo loading the model; exit 3' --port {port}"
    r = genbench("generate", "-i", str(inp), "-o", str(out), "--serve", engine, timeout=60)
    assert r.returncode == 13, r.stderr
    evs = events(out)
    assert [e["event"] for e in evs] == ["start", "start_failed"], evs
    assert evs[1]["code"] == 3 and "exited with status 3" in evs[1]["line"]
    r = genbench("report", str(out), "-o", str(tmp_path / "r.html"), timeout=60)
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text()
    assert "exited with status 3; its last line: loading the model" in page


# -- 3, 4: the engine gets the job's key; no planted secret is written or printed ----------

ENV_KEY, WORD, FLAG = "sk-envkey-PLANTED1", "hf_word_PLANTED2", "sk-flag-PLANTED3"


def test_three_planted_secrets_reach_the_engine_and_appear_in_no_file_line_or_metric(tmp_path):
    """The job's key in OPENAI_API_KEY (which the engine asks for: the sim's --api-key-env),
    a `HF_TOKEN=` word and an `--api-key` flag in --serve. The engine prints its arguments
    and the key it got (as vLLM prints its arguments at start-up)."""
    inp, out = write_prompts(tmp_path / "in.jsonl", 400), tmp_path / "out"
    shown = 'echo "args: $*; key: $OPENAI_API_KEY; hf: $HF_TOKEN"'
    engine = (
        f"HF_TOKEN={WORD} sh -c '{shown}; exec {SIM} --tps 40 --api-key-env "
        f"OPENAI_API_KEY' {{port}} --api-key {FLAG}"
    ).replace("{port} --tps", "$0 --tps")
    port = free_port()
    proc = start(tmp_path, "generate", "-i", str(inp), "-o", str(out), "--serve", engine,
                 "--metrics-port", str(port), "--drain", str(DRAIN), "-c", "4",
                 env={"OPENAI_API_KEY": ENV_KEY})  # fmt: skip
    try:
        reqs = out / ".genbench" / "requests.jsonl"
        wait_for("requests answered", lambda: reqs.exists() and reqs.read_bytes().count(b"\n") > 8)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert ended_within(proc, DRAIN + 15) == 143
    finally:
        proc.kill()
        proc.wait()
    r = genbench("report", str(out), "-o", str(out / "report.html"), timeout=60)
    assert r.returncode == 0, r.stderr
    log = (out / ".genbench" / "engines" / "engine-1.log").read_text()
    assert "args: --api-key ***; key: ***; hf: ***" in log  # it got them; we wrote ***
    assert "genbench_engine_up" in metrics
    texts = {"console": said(tmp_path) + r.stdout + r.stderr, "/metrics": metrics}
    texts |= {str(p): p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()}
    leaks = [(where, s) for where, t in texts.items() for s in (ENV_KEY, WORD, FLAG) if s in t]
    assert not leaks, leaks
    assert "HF_TOKEN=*** sh -c" in said(tmp_path)  # the command is shown, its secret not


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- 1: SIGTERM and SIGINT end a job in every state -----------------------------------------


class Case:
    """One job, stopped in one state: `ready` says it is there, `sigs` are then sent (the
    second once the first was heard), and it must end with `code` within DRAIN + 5 s."""

    def __init__(self, name: str, tmp: Path, args: list[str], ready: Callable[[Case], Any],
                 sigs: tuple[int, ...] = (signal.SIGTERM,), rows: int = 400) -> None:  # fmt: skip
        self.name, self.tmp, self.ready, self.sigs = name, tmp / name, ready, sigs
        self.tmp.mkdir()
        self.out = self.tmp / "out"
        inp = write_prompts(self.tmp / "in.jsonl", rows)
        self.proc = start(self.tmp, "generate", "-i", str(inp), "-o", str(self.out), "-c", "4",
                          "--drain", str(DRAIN), *args)  # fmt: skip
        self.code = 128 + sigs[0]

    def log_has(self, text: str, times: int = 1) -> bool:
        return said(self.tmp).count(text) >= times

    def stop(self) -> int:
        there = lambda: self.ready(self) or self.proc.poll() is not None  # noqa: E731
        wait_for(f"{self.name}: its state", there)
        assert self.proc.poll() is None, f"{self.name} ended by itself: {said(self.tmp)}"
        self.proc.send_signal(self.sigs[0])
        if len(self.sigs) > 1:  # the second once the first was heard: stop now, not drain
            wait_for(f"{self.name}: the first heard", lambda: self.log_has("stopping: waiting"))
            self.proc.send_signal(self.sigs[1])
        return ended_within(self.proc, DRAIN + 5)


def test_sigterm_and_sigint_end_a_job_in_every_state_engines_stopped_lock_released(tmp_path):
    dying = f"{SIM} --fault die:after=12"
    with SimProcess(*SIM_ARGS, "--fault", "die:after=12") as gone, \
            SimProcess(*SIM_ARGS, "--tps", "4", "--output-len", "fixed:4000") as slow, \
            socket.socket() as deaf:  # fmt: skip
        deaf.bind(("127.0.0.1", 0))
        deaf.listen(8)  # the kernel accepts; nothing ever answers
        deaf.setblocking(False)
        deaf_url = f"http://127.0.0.1:{deaf.getsockname()[1]}/v1"
        held: list[socket.socket] = []
        marker = tmp_path / "started-once"
        flapping = (
            f"sh -c 'if [ -e {marker} ]; then exec {SIM} --fault unhealthy; else touch "
            f"{marker}; exec {dying}; fi'"
        ).replace("{port}", "$0") + " {port}"
        cases = [  # the preflight first: its /health wait is bounded (5 s), the others' not
            Case("preflight", tmp_path, ["--url", deaf_url, "--timeout", "300"],
                 lambda c: accepted(deaf, held)),
            Case("all_down", tmp_path, ["--url", gone.url],
                 lambda c: c.log_has("is down (")),
            Case("backoff", tmp_path, ["--serve", dying, "--engine-backoff", "600"],
                 lambda c: c.log_has("restarting in")),
            Case("restarting", tmp_path, ["--serve", flapping, "--engine-backoff", "0.1"],
                 lambda c: [e for e in events(c.out) if e.get("restart") == 1],
                 (signal.SIGINT,)),
            Case("gave_up", tmp_path, ["--serve", dying, "--engine-restarts", "0", "--url",
                                       f"http://127.0.0.1:{free_port()}/v1"],
                 lambda c: c.log_has("not restarted again")),
            Case("second", tmp_path, ["--url", slow.url, "--drain", "60"],
                 lambda c: (c.out / ".genbench" / "requests.jsonl").exists(),
                 (signal.SIGTERM, signal.SIGTERM)),
        ]  # fmt: skip
        try:
            ended = {c.name: c.stop() for c in cases}
        finally:
            for c in cases:
                c.proc.kill()
                c.proc.wait()
            for conn in held:
                conn.close()
    assert ended == {c.name: c.code for c in cases}, {c.name: said(c.tmp) for c in cases}
    for c in cases:
        assert lock_free(c.out), c.name
        if events(c.out):
            assert groups_empty(c.out), (c.name, events(c.out))
            assert events(c.out)[-1]["event"] in ("stop", "gave_up", "down"), c.name
    assert "gives up after" not in said(tmp_path / "second")


def accepted(server: socket.socket, held: list[socket.socket]) -> bool:
    """A client connected (the job's preflight is waiting on an answer that never comes)."""
    try:
        held.append(server.accept()[0])
    except BlockingIOError:
        return bool(held)
    return True


def test_sigterm_ends_the_plans_pilot_and_run_serve_and_takes_the_engine(tmp_path):
    inp = write_prompts(tmp_path / "in.jsonl", 40)
    slow = ("--tps", "4", "--output-len", "fixed:4000")
    with SimProcess(*SIM_ARGS, *slow) as sim:
        plan = start(_dir(tmp_path, "plan"), "plan", "--prompts", str(inp), "--url", sim.url,
                     "--pilot", "20", "-c", "4", "-o", str(tmp_path / "pilot"))  # fmt: skip
        run = start(_dir(tmp_path, "run"), "run", "--serve", f"{SIM} {' '.join(slow)}", "-o",
                    str(tmp_path / "runs"), "--skip", "warmup")  # fmt: skip
        try:
            wait_for("the pilot sending", lambda: list((tmp_path / "pilot").rglob("*.jsonl")))
            plan.send_signal(signal.SIGTERM)
            assert ended_within(plan, 10) == 143
            log = tmp_path / "runs" / "engine-1.log"
            wait_for("the run's engine serving", lambda: log.exists() and b"listening" in
                     log.read_bytes() and children(run.pid))  # fmt: skip
            keeper = children(run.pid)[0]  # the engine's process group
            wait_for("the run measuring", lambda: (tmp_path / "runs" / "result.json").exists())
            run.send_signal(signal.SIGTERM)
            assert ended_within(run, 15) == 143
        finally:
            for p in (plan, run):
                p.kill()
                p.wait()
    assert not group_members(keeper)
    assert "interrupted" in said(tmp_path / "plan") and "interrupted" in said(tmp_path / "run")


def _dir(tmp: Path, name: str) -> Path:
    (tmp / name).mkdir()
    return tmp / name


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


# -- 2: a job that can make no progress ends; no ETA while nothing can run ----------------


def test_every_engine_out_of_restarts_ends_the_job_at_once_naming_each_death(tmp_path):
    inp, out = write_prompts(tmp_path / "in.jsonl", 400), tmp_path / "out"
    r = genbench("generate", "-i", str(inp), "-o", str(out), "-c", "4", "--serve",
                 f"{SIM} --fault die:after=12", "--engine-restarts", "0", "--progress-json",
                 "--progress-every", "0.1", timeout=120)  # fmt: skip
    assert r.returncode == 14, r.stdout + r.stderr
    end = [ln for ln in r.stdout.splitlines() if ln.startswith("stopped, no server left")]
    assert len(end) == 1 and "every engine is out of restarts (--engine-restarts): engine 1 " \
        "(pid " in end[0] and "exited with status" in end[0], r.stdout  # fmt: skip
    lines = [json.loads(x) for x in r.stderr.splitlines() if x.startswith('{"event":"progress"')]
    down = [p for p in lines if p["all_down_s"] is not None]
    assert down and all(p["eta_s"] is None and p["eta_note"] == "no server" for p in down)
    assert [e["event"] for e in events(out)][-1] == "gave_up"


def test_an_engine_refusing_the_jobs_key_is_named_at_once_with_both_settings(tmp_path):
    engine = f"SIMKEY=sk-engine-PLANTED4 {SIM} --api-key-env SIMKEY"
    r = genbench("check", "--serve", engine, env={"OPENAI_API_KEY": ENV_KEY}, timeout=60)
    assert r.returncode == 6, r.stdout + r.stderr  # the key's code, not 13 after a long wait
    line = r.stderr.strip().splitlines()[-1]
    assert "refused genbench's API key" in line and "$OPENAI_API_KEY (--api-key-env)" in line
    assert "SIMKEY (its environment), --api-key-env SIMKEY" in line, line
    assert "PLANTED" not in r.stdout + r.stderr
