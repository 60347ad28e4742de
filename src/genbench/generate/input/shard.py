"""`--shard i/N`: which ids one of N clients takes, by a hash stable across hosts.

`--shard auto` takes the share from the scheduler that started the process, so that one
script serves every task of an array (docs/cluster.md):

* a Slurm array (`sbatch --array=0-3`): `SLURM_ARRAY_TASK_ID` among
  `SLURM_ARRAY_TASK_COUNT`, counted from `SLURM_ARRAY_TASK_MIN` in steps of
  `SLURM_ARRAY_TASK_STEP`; a requeued task keeps its id, and so its share and its files.
  With `--shard auto/N` (the plan's script) an array of fewer tasks is some tasks of an
  `--array=0-(N-1)` array resubmitted (`sbatch --array=1,4`, what `genbench merge` names):
  Slurm then counts only those, so the task id itself is the share;
* a Kubernetes Indexed Job: `JOB_COMPLETION_INDEX` (0-based), among the completions
  count, which Kubernetes does not expose: `--shard auto/N`, or `GENBENCH_SHARD_COUNT`
  (the manifest `genbench plan --job-files` writes sets it);
* `RANK` among `WORLD_SIZE` (torchrun, MPI-style launchers).

A missing or inconsistent environment is one line (exit 2), never a guess: a wrong share
would leave ids to no task, or to two.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from genbench.errors import UsageError
from genbench.fmt import counted

COUNT_ENV = "GENBENCH_SHARD_COUNT"  # the completions count a K8s manifest passes down


@dataclass(frozen=True)
class ShardSpec:
    """`--shard i/N`: this client takes the ids whose stable hash is i-1 modulo N."""

    index: int  # 1-based
    count: int
    source: str = field(default="", compare=False)  # `--shard auto`: the variables read

    @classmethod
    def parse(cls, text: str, env: Mapping[str, str] | None = None) -> ShardSpec:
        if text == "auto" or text.startswith("auto/"):
            return from_env(text, os.environ if env is None else env)
        a, sep, b = text.partition("/")
        try:
            i, n = int(a), int(b)
        except ValueError:
            i = n = 0
        if not sep or n < 1 or not 1 <= i <= n:
            raise UsageError(
                f"--shard '{text}': expected i/N with 1 <= i <= N (e.g. 1/4), or auto "
                "(the share from SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX or RANK)"
            )
        return cls(i, n)

    def owns(self, row_id: str) -> bool:
        return self.count == 1 or stable_hash(row_id) % self.count == self.index - 1

    @property
    def tag(self) -> str:
        return f"{self.index}of{self.count}"


def stable_hash(text: str) -> int:
    """64-bit hash that is the same on every host and Python version (unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def from_env(text: str, env: Mapping[str, str]) -> ShardSpec:
    """`--shard auto` or `auto/N`: this task's share from the scheduler's variables."""
    asked = _int(text, "N in auto/N", text.partition("/")[2]) if "/" in text else None
    if asked is not None and asked < 1:
        raise UsageError(f"--shard {text}: N must be 1 or more")
    if "SLURM_ARRAY_TASK_ID" in env:
        index, count, source = _slurm(env, asked)
    elif "JOB_COMPLETION_INDEX" in env:
        index, count, source = _indexed_job(env, asked)
    elif "RANK" in env or "WORLD_SIZE" in env:
        index, count, source = _rank(env)
    else:
        raise UsageError(
            f"--shard {text}: no scheduler share in the environment (SLURM_ARRAY_TASK_ID "
            "of an sbatch --array, JOB_COMPLETION_INDEX of a Kubernetes Indexed Job, or "
            "RANK and WORLD_SIZE); give --shard i/N"
        )
    if asked is not None and asked != count:
        raise UsageError(
            f"--shard {text}: the environment says {counted(count, 'shard')} ({source})"
        )
    if count < 1:
        raise UsageError(f"--shard {text}: {source}: no tasks to share the ids")
    if not 0 <= index < count:
        raise UsageError(f"--shard {text}: {source} is not a task of {count} (0 to {count - 1})")
    return ShardSpec(index + 1, count, source)


def _slurm(env: Mapping[str, str], asked: int | None) -> tuple[int, int, str]:
    task = _int("auto", "SLURM_ARRAY_TASK_ID", env["SLURM_ARRAY_TASK_ID"])
    if "SLURM_ARRAY_TASK_COUNT" not in env:
        raise UsageError(
            "--shard auto: SLURM_ARRAY_TASK_ID is set but not SLURM_ARRAY_TASK_COUNT "
            "(Slurm 18.08 or later sets both); give --shard i/N"
        )
    count = _int("auto", "SLURM_ARRAY_TASK_COUNT", env["SLURM_ARRAY_TASK_COUNT"])
    low = _int("auto", "SLURM_ARRAY_TASK_MIN", env.get("SLURM_ARRAY_TASK_MIN", "0"))
    step = _int("auto", "SLURM_ARRAY_TASK_STEP", env.get("SLURM_ARRAY_TASK_STEP", "1"))
    high = env.get("SLURM_ARRAY_TASK_MAX")
    if asked is not None and count < asked:  # some tasks of a 0-(N-1) array, resubmitted
        return task, asked, f"SLURM_ARRAY_TASK_ID={task} of --shard auto/{asked}"
    source = f"SLURM_ARRAY_TASK_ID={task} of SLURM_ARRAY_TASK_COUNT={count}"
    regular = step >= 1 and (task - low) % step == 0
    if regular and high is not None:
        regular = (_int("auto", "SLURM_ARRAY_TASK_MAX", high) - low) // step + 1 == count
    if not regular:
        raise UsageError(
            f"--shard auto: the array's task ids are not a range ({source}, "
            f"SLURM_ARRAY_TASK_MIN={low}, SLURM_ARRAY_TASK_MAX={high or 'unset'}, step {step}): "
            "submit --array=0-(N-1), or give --shard i/N"
        )
    return (task - low) // step, count, source


def _indexed_job(env: Mapping[str, str], asked: int | None) -> tuple[int, int, str]:
    index = _int("auto", "JOB_COMPLETION_INDEX", env["JOB_COMPLETION_INDEX"])
    count = asked
    if COUNT_ENV in env:
        count = _int("auto", COUNT_ENV, env[COUNT_ENV])
    if count is None:
        raise UsageError(
            f"--shard auto: JOB_COMPLETION_INDEX={index} is set, but not the completions "
            f"count (Kubernetes does not expose it): give --shard auto/N or set {COUNT_ENV}"
        )
    return index, count, f"JOB_COMPLETION_INDEX={index} of {count}"


def _rank(env: Mapping[str, str]) -> tuple[int, int, str]:
    if "RANK" not in env or "WORLD_SIZE" not in env:
        have, lack = ("RANK", "WORLD_SIZE") if "RANK" in env else ("WORLD_SIZE", "RANK")
        raise UsageError(f"--shard auto: {have} is set but not {lack}; give --shard i/N")
    rank = _int("auto", "RANK", env["RANK"])
    size = _int("auto", "WORLD_SIZE", env["WORLD_SIZE"])
    return rank, size, f"RANK={rank} of WORLD_SIZE={size}"


def _int(text: str, name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--shard {text}: {name}={value!r} is not a whole number") from None
