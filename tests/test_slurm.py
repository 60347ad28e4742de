"""A real Slurm: the plan's sbatch array of `generate --shard auto` tasks on a one-node
cluster, one task requeued mid-way, then `genbench merge`: every id exactly once.

The fixture starts its own munged (as the munge user), slurmctld and slurmd (as root) with
a one-node slurm.conf in a temp dir, on free ports, and stops them after. It skips, saying
why, where it cannot: not root, no slurm-wlm/munge (scripts/test.sh installs them as root),
or GENBENCH_SKIP_SLURM=1. Every wait is on an event (a socket, a node state, a job state, a
file), bounded.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import genbench
from test_generate import assert_exactly_once, prompts, write_rows

from genbench.engines.process import alive
from genbench.generate.input.shard import ShardSpec
from genbench.sim.process import SimProcess

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo")
# one row takes 1 s (100 tokens at 100 tok/s): a task's 10 rows at -c 2 take ~5 s, time to
# requeue it mid-way on a busy machine
SLOW = ("--tps", "100", "--per-seq-ms", "0.05", "--ttft-ms", "1", "--output-len", "fixed:100")


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def why_not() -> str | None:
    """Why a Slurm cannot be started here, or None."""
    if os.environ.get("GENBENCH_SKIP_SLURM") == "1":
        return "GENBENCH_SKIP_SLURM=1"
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        return f"no {', '.join(missing)}: apt-get install slurm-wlm munge (scripts/test.sh does)"
    if os.geteuid() != 0:
        return "slurmd and slurmctld are started as root: run the test as root"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key (the munge package makes it)"
    return None


@dataclass
class Slurm:
    dir: Path
    env: dict[str, str]
    partition: str = "genbench"

    def run(self, *cmd: str, check: bool = True) -> str:
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr}")
        return p.stdout

    def states(self, job: str) -> dict[str, str]:
        """Array task id -> state, of the job's tasks Slurm still knows (scontrol keeps a
        finished one for MinJobAge, 300 s)."""
        out = self.run("scontrol", "-o", "show", "job", job, check=False)
        found = {}
        for line in out.splitlines():
            f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if "ArrayTaskId" in f:
                found[f["ArrayTaskId"]] = f["JobState"]
        return found

    def field(self, job: str, task: int, name: str) -> str:
        out = self.run("scontrol", "-o", "show", "job", f"{job}_{task}")
        f = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
        return f[name]


def slurm_conf(d: Path, host: str, ports: tuple[int, int]) -> str:
    return f"""ClusterName=genbench
SlurmctldHost={host}
SlurmUser=root
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
AuthType=auth/munge
AuthInfo=socket={d}/munge/sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs=2 State=UNKNOWN
PartitionName=genbench Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


@pytest.fixture(scope="module")
def slurm() -> Iterator[Slurm]:
    reason = why_not()
    if reason:
        pytest.skip(f"no Slurm: {reason}")
    d = Path(tempfile.mkdtemp(prefix="genbench-slurm-"))
    d.chmod(0o755)  # munged requires every user to reach its socket's directory
    for sub in ("state", "spool", "munge"):
        (d / sub).mkdir()
    shutil.copy("/etc/munge/munge.key", d / "munge" / "key")
    shutil.chown(d / "munge", "munge", "munge")
    shutil.chown(d / "munge" / "key", "munge", "munge")
    (d / "munge" / "key").chmod(0o600)
    host = socket.gethostname().split(".")[0]
    (d / "slurm.conf").write_text(slurm_conf(d, host, (free_port(), free_port())))
    env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}
    for var in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[var]  # a test run inside a Slurm job talks to this cluster only
    procs: list[subprocess.Popen[bytes]] = []
    logs = [open(d / f"{n}.out", "wb") for n in ("munged", "slurmctld", "slurmd")]  # noqa: SIM115
    try:
        m = d / "munge"
        procs.append(subprocess.Popen(
            ["munged", "-F", f"--socket={m}/sock", f"--key-file={m}/key", f"--pid-file={m}/pid",
             f"--log-file={m}/log", f"--seed-file={m}/seed"],
            user="munge", group="munge", stdout=logs[0], stderr=subprocess.STDOUT,
        ))  # fmt: skip
        wait_for(lambda: (m / "sock").exists(), 30, "munged's socket")
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i"], env=env, stdout=logs[1],
                                      stderr=subprocess.STDOUT))  # fmt: skip
        procs.append(subprocess.Popen(["slurmd", "-D"], env=env, stdout=logs[2],
                                      stderr=subprocess.STDOUT))  # fmt: skip
        s = Slurm(d, env)
        wait_for(lambda: s.run("sinfo", "-h", "-o", "%T", check=False).strip() == "idle", 60,
                 "the node to be idle (slurmd registered)")  # fmt: skip
        yield s
        s.run("scancel", "--partition", s.partition, check=False)
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in logs:
            f.close()
        shutil.rmtree(d, ignore_errors=True)


def plan_script(tmp: Path, slurm: Slurm) -> Path:
    """The plan's array script, with the FILL_IN lines filled as docs/cluster.md says."""
    p = genbench("plan", "--rate", "100", "--tokens-per-sample", "100", "--samples", "30",
                 "--servers", "3", "-c", "2", "--job-files", str(tmp / "jobs"))  # fmt: skip
    assert p.returncode == 0, p.stderr
    path = tmp / "jobs" / "genbench-array.sbatch"
    text = path.read_text()
    filled = (
        text.replace("--partition=FILL_IN_PARTITION", f"--partition={slurm.partition}")
        .replace("#SBATCH --gres=gpu:FILL_IN_GPUS_PER_SERVER\n", "")  # no GPUs on this node
        .replace("--time=FILL_IN_TIME_LIMIT", "--time=10")
    )
    assert "FILL_IN_PARTITION" not in filled and "#SBATCH --array=0-2" in filled
    path.write_text(filled)
    return path


def engine_events(out: Path) -> list[dict]:
    return [json.loads(x) for p in sorted((out / ".genbench").glob("engines-*.jsonl"))
            for x in p.read_text().splitlines()]  # fmt: skip


def test_a_slurm_array_with_a_requeued_task_writes_every_id_once(slurm, tmp_path):
    """The script as the docs show it: each task starts its own engine (GENBENCH_SERVE,
    here the sim), which goes with the task when it is requeued and when it ends."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    ids = [f"r{i}" for i in range(30)]
    write_rows(inp, prompts(30))
    script = plan_script(tmp_path, slurm)
    serve = shlex.join([sys.executable, "-m", "genbench", "sim", "--port", "{port}", *SLOW])
    env = {**slurm.env, "GENBENCH": str(Path(sys.executable).with_name("genbench")),
           "GENBENCH_INPUT": str(inp), "GENBENCH_OUT": str(out),
           "GENBENCH_SERVE": serve, "COLUMNS": "200", "NO_COLOR": "1"}  # fmt: skip
    p = subprocess.run(["sbatch", "--parsable", f"--chdir={tmp_path}", str(script)],
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip().split(";")[0]
    mine = next(out.glob("data-2of3-*.jsonl"), None)

    def started() -> bool:  # task 1 (shard 2/3) has rows on disk, not all of them
        nonlocal mine
        mine = mine or next(out.glob("data-2of3-*.jsonl"), None)
        return mine is not None and mine.stat().st_size > 0

    wait_for(started, 120, "task 1's first rows")
    share = sum(ShardSpec(2, 3).owns(i) for i in ids)
    assert mine is not None and mine.read_bytes().count(b"\n") < share  # mid-way
    slurm.run("scontrol", "requeue", f"{job}_1")
    wait_for(lambda: slurm.states(job).get("1") == "PENDING", 120, "task 1 requeued")
    # Slurm holds a requeued task 120 s; 2 s is enough: slurmd refuses a launch whose
    # credential is from the same second as the kill's revocation ("Job credential
    # revoked", the task then FAILED: seen in a rehearsal with StartTime=now)
    slurm.run("scontrol", "update", f"JobId={job}_1", "StartTime=now+2")
    wait_for(lambda: set(slurm.states(job).values()) == {"COMPLETED"}, 300,
             "every task to complete")  # fmt: skip
    assert slurm.field(job, 1, "Restarts") == "1"
    assert {slurm.field(job, t, "ExitCode") for t in (0, 1, 2)} == {"0:0"}
    log = (tmp_path / f"genbench-{job}_1.log").read_text()
    assert log.count("(shard 2/3, from SLURM_ARRAY_TASK_ID=1 of SLURM_ARRAY_TASK_COUNT=3)") == 2
    assert "resuming: " in log.split("DUE TO JOB REQUEUE")[1]  # its own files, not again
    assert log.count("engine 1 is healthy after") == 2, log  # its engine, started twice
    evs = engine_events(out)
    ups = [e for e in evs if e["event"] == "up"]
    assert len(ups) == 4 and not any(alive(e["pid"]) for e in ups)  # none left running
    logs = sorted(p.name for p in (out / ".genbench").glob("engines-*of3"))
    assert logs == ["engines-1of3", "engines-2of3", "engines-3of3"]  # each task's own
    p = genbench("merge", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "every input id exactly once: 30 of 30 input rows, in 3 shards" in p.stdout
    assert_exactly_once(out, ids)


def test_the_array_tasks_merge_names_resubmitted_finish_the_job(slurm, tmp_path):
    """Tasks 0 and 2 only, then the merge's hint `sbatch --array=1 genbench-array.sbatch`
    run as it reads: Slurm counts that array as 1 task, the script's --shard auto/3 keeps
    task 1's share (2/3), and the merge proves every id once."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(30))
    script = plan_script(tmp_path, slurm)
    with SimProcess("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1") as sim:
        urls = tmp_path / "urls.txt"
        urls.write_text(f"{sim.url}\n")
        env = {**slurm.env, "GENBENCH": str(Path(sys.executable).with_name("genbench")),
               "GENBENCH_INPUT": str(inp), "GENBENCH_OUT": str(out),
               "GENBENCH_URL_FILE": str(urls), "COLUMNS": "300", "NO_COLOR": "1"}  # fmt: skip

        def submit(array: str) -> str:
            p = subprocess.run(["sbatch", "--parsable", f"--chdir={tmp_path}", array,
                                str(script)], capture_output=True, text=True, env=env,
                               timeout=60)  # fmt: skip
            assert p.returncode == 0, p.stderr
            job = p.stdout.strip().split(";")[0]
            ended = {"COMPLETED", "FAILED"}
            wait_for(lambda: set(slurm.states(job).values() or {"?"}) <= ended, 300,
                     f"the tasks of {array} to end")  # fmt: skip
            assert set(slurm.states(job).values()) == {"COMPLETED"}, (
                array, [p.read_text() for p in tmp_path.glob(f"genbench-{job}_*.log")])
            return job

        submit("--array=0,2")
        p = genbench("merge", str(out), cwd=tmp_path / "jobs")  # where the script is
        assert p.returncode == 1 and "--shard 2/3; or, as a Slurm array, resubmit tasks 1 " \
            in p.stdout, p.stdout
        assert "task i runs --shard i+1/3): sbatch --array=1 genbench-array.sbatch" in p.stdout
        job = submit("--array=1")
    log = (tmp_path / f"genbench-{job}_1.log").read_text()
    assert "(shard 2/3, from SLURM_ARRAY_TASK_ID=1 of --shard auto/3)" in log, log
    p = genbench("merge", str(out))
    assert p.returncode == 0 and "every input id exactly once: 30 of 30" in p.stdout, p.stdout
    assert_exactly_once(out, [f"r{i}" for i in range(30)])
