"""From the plan to the job: the files a user submits to run it on a cluster.

A plan decides how many servers a job needs (for a deadline, or `--servers`); these files
run that many `genbench generate --shard auto` tasks into one shared output directory, each
task one client beside its own engine, every id in exactly one task's share:

* `genbench-array.sbatch`: a Slurm array (`sbatch genbench-array.sbatch`), `--requeue`
  safe: a requeued task keeps its array id, so its share and its files, and resumes them;
* `genbench-indexed-job.yaml`: a Kubernetes Indexed Job (`kubectl apply -f`), one pod per
  completion index, the completions count passed down as GENBENCH_SHARD_COUNT.

Each task starts its own engine (`generate --serve`: started, watched, restarted, stopped
with the task), or reads a file of URLs of servers already running. What only the user
knows (partition, image, model path, the engine's command, the shared volume) is marked
FILL_IN; docs/cluster.md lists each.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from genbench.errors import OutputError
from genbench.fmt import counted

SBATCH = "genbench-array.sbatch"
MANIFEST = "genbench-indexed-job.yaml"


def tasks_for(doc: dict[str, Any], servers: int) -> tuple[int, str]:
    """How many tasks (one server each) the job runs, and why: the servers the deadline
    needs for the largest sample count the plan forecast, else --servers."""
    decision = doc.get("decision") or {}
    rows = [r for c in _chosen(decision) for r in c.get("rows") or []]
    needs = [(r["samples"], r["servers_needed"]["servers"]) for r in rows
             if r.get("servers_needed")]  # fmt: skip
    if needs:
        samples, n = max(needs)
        deadline = (decision.get("deadline") or {}).get("text")
        needs_text = f"what the deadline {deadline} needs for {counted(samples, 'sample')}"
        return n, f"{counted(n, 'server')}: {needs_text}"
    return servers, f"{counted(servers, 'server')}: --servers"


def generate_flags(args: Any, doc: dict[str, Any] | None = None) -> list[str]:
    """The job's request fields the plan was asked with, as generate's flags (the plan
    forecasts the job the same flags run). Without `-c`, the concurrency the forecast was
    made at (a pilot's, a run's), where the plan's configurations share one: generate's
    own default differs, and the forecast holds at the C it measured."""
    flags: list[str] = []
    for name in ("max_tokens", "temperature", "top_p", "top_k", "concurrency"):
        value = getattr(args, name, None)
        if name == "concurrency" and value is None:
            value = _forecast_concurrency(doc or {})
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    if getattr(args, "turns", "all") != "all":
        flags += ["--turns", args.turns]
    for p in getattr(args, "param", None) or []:
        flags += ["--param", p]
    return flags


def _forecast_concurrency(doc: dict[str, Any]) -> int | None:
    """The concurrency the chosen configuration was measured at, else None."""
    found = {c.get("concurrency") for c in _chosen(doc.get("decision") or {})} - {None}
    return found.pop() if len(found) == 1 else None


def _chosen(decision: dict[str, Any]) -> list[dict[str, Any]]:
    """The configuration the plan chose (several --from: the fastest at the largest count,
    the one its forecast tables use); all of them where it names none."""
    configs = decision.get("configurations") or []
    best = decision.get("best") or []
    if len(configs) > 1 and best:
        name = max(best, key=lambda b: b["samples"]).get("fastest")
        return [c for c in configs if c.get("name") == name] or configs
    return configs


def sbatch_script(tasks: int, why: str, input: str, flags: list[str]) -> str:
    """The Slurm array: one task per server, each `generate --shard auto`."""
    quoted = " ".join(shlex.quote(f) for f in flags)
    return f"""#!/bin/bash
# genbench generate as a Slurm array, written by `genbench plan --job-files` (docs/cluster.md).
# {counted(tasks, "task")} = {why}.
# Each task is one client and one engine; task i takes the ids of --shard i+1/{tasks}
# (--shard auto/{tasks} reads SLURM_ARRAY_TASK_ID), into one directory on a shared file system.
# A requeued task (scontrol requeue, a node failure) keeps its id and resumes its share;
# some tasks resubmitted (sbatch --array=1,4 this script) take the shares of those ids.
#SBATCH --job-name=genbench
#SBATCH --array=0-{tasks - 1}
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=genbench-%A_%a.log
# ---- FILL_IN: your cluster (docs/cluster.md) -------------------------------------------
#SBATCH --partition=FILL_IN_PARTITION
#SBATCH --gres=gpu:FILL_IN_GPUS_PER_SERVER
#SBATCH --time=FILL_IN_TIME_LIMIT
# -----------------------------------------------------------------------------------------
set -euo pipefail

GENBENCH="${{GENBENCH:-genbench}}"
INPUT="${{GENBENCH_INPUT:-{input}}}"          # the prompt file, readable by every task
OUT="${{GENBENCH_OUT:-FILL_IN_SHARED_DIR/genbench-out}}"  # one directory for every task
FLAGS=({quoted})               # the job's request fields, as the plan was made with

# ---- FILL_IN: the engine this task starts on its node (generate --serve) --------------
# genbench starts it ({{port}}: a free port), waits until it is healthy, restarts it if it
# dies (its log: $OUT/.genbench/engines-<i>of{tasks}/, i this task's shard), and stops it
# when the task ends.
SERVE="${{GENBENCH_SERVE:-}}"
[ -n "$SERVE" ] || SERVE='vllm serve FILL_IN_MODEL_PATH --port {{port}}'
# Or servers already running: a file of 'URL [CONCURRENCY]' lines for this task (or a
# router's URL), e.g. GENBENCH_URL_FILE=urls-$SLURM_ARRAY_TASK_ID.txt; used instead of SERVE.
URL_FILE="${{GENBENCH_URL_FILE:-}}"
# -----------------------------------------------------------------------------------------
case "$INPUT $OUT" in *FILL_IN*)  # a relative FILL_IN dir would split the job per node
  echo "genbench-array.sbatch: set GENBENCH_INPUT and GENBENCH_OUT (or INPUT=, OUT=): FILL_IN" >&2
  exit 2
esac
if [ -n "$URL_FILE" ]; then
  SERVER=(--url-file "$URL_FILE")
else
  case "$SERVE" in *FILL_IN*)
    echo "genbench-array.sbatch: set GENBENCH_SERVE (the engine's command, with {{port}})" \
      "or GENBENCH_URL_FILE: FILL_IN" >&2
    exit 2
  esac
  SERVER=(--serve "$SERVE")
fi

exec "$GENBENCH" generate --input "$INPUT" --out "$OUT" --shard auto/{tasks} "${{SERVER[@]}}" \\
  "${{FLAGS[@]}}"
"""


def manifest(tasks: int, why: str, input: str, flags: list[str]) -> str:
    """The Kubernetes Indexed Job: one pod per completion index, each `--shard auto`
    beside the engine it starts (`--serve`)."""
    cmd = " ".join(
        ["exec genbench generate --input", shlex.quote(input), "--out /shared/genbench-out",
         "--shard auto", '--serve "$GENBENCH_SERVE"', *(shlex.quote(f) for f in flags)]
    )  # fmt: skip
    return f"""# genbench generate as a Kubernetes Indexed Job, written by
# `genbench plan --job-files` (docs/cluster.md). {counted(tasks, "completion")} = {why}.
# Pod i takes the ids of --shard i+1/{tasks} (--shard auto reads JOB_COMPLETION_INDEX and
# GENBENCH_SHARD_COUNT), into one directory on a ReadWriteMany volume, and starts its own
# engine (generate --serve: started, watched, restarted, stopped with the pod). A pod
# restarted (restartPolicy OnFailure) keeps its index and resumes its share.
# FILL_IN: image, the engine's command (GENBENCH_SERVE), the volume, the GPUs.
apiVersion: batch/v1
kind: Job
metadata:
  name: genbench
spec:
  completionMode: Indexed
  completions: {tasks}
  parallelism: {tasks}
  backoffLimit: {4 * tasks}
  template:
    spec:
      restartPolicy: OnFailure
      containers:
        - name: genbench
          image: FILL_IN_IMAGE  # genbench and the engine
          env:
            - name: GENBENCH_SHARD_COUNT  # must equal completions
              value: "{tasks}"
            - name: GENBENCH_SERVE  # FILL_IN: the engine this pod starts ({{port}}: a free port)
              value: "vllm serve FILL_IN_MODEL_PATH --port {{port}}"
          command: ["/bin/sh", "-c"]
          # servers already running instead: replace --serve "$GENBENCH_SERVE" by
          # --url-file /shared/urls.txt (a file of 'URL [CONCURRENCY]' lines)
          args:
            - {_yaml_str(cmd)}
          resources:
            limits:
              nvidia.com/gpu: 1  # FILL_IN: GPUs per server
          volumeMounts:
            - name: shared
              mountPath: /shared
      volumes:
        - name: shared
          persistentVolumeClaim:
            claimName: FILL_IN_PVC  # ReadWriteMany: every pod writes the same directory
"""


def _yaml_str(text: str) -> str:
    """A YAML double-quoted scalar (JSON's escaping is valid YAML)."""
    return json.dumps(text)


def job_files_dir(where: Path) -> None:
    """Make `where` (before a pilot of minutes, not after it): one line, exit 12, where
    it cannot be made or written."""
    if where.exists() and not where.is_dir():
        raise OutputError(f"--job-files {where}: is a file; give a directory")
    try:
        where.mkdir(parents=True, exist_ok=True)
        probe = where / ".genbench-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OutputError(f"--job-files {where}: cannot write there: {e.strerror or e}") from None


def write_job_files(
    where: Path, doc: dict[str, Any], args: Any, servers: int
) -> tuple[list[Path], str]:
    """Write both files into `where`; the paths and the line that says why so many tasks."""
    tasks, why = tasks_for(doc, servers)
    prompts = getattr(args, "prompts", None)
    input = str(Path(prompts).resolve()) if prompts else "FILL_IN_PROMPTS.jsonl"
    flags = generate_flags(args, doc)
    job_files_dir(where)
    paths = [where / SBATCH, where / MANIFEST]
    in_pod = input if input.startswith("FILL_IN") else f"/shared/{Path(input).name}"
    try:
        paths[0].write_text(sbatch_script(tasks, why, input, flags), encoding="utf-8")
        paths[0].chmod(0o755)
        paths[1].write_text(manifest(tasks, why, in_pod, flags), encoding="utf-8")
    except OSError as e:
        raise OutputError(f"--job-files {where}: cannot write there: {e.strerror or e}") from None
    return paths, f"{counted(tasks, 'task')} ({why})"
