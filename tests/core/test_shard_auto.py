"""`--shard auto`: the share a task takes from its scheduler's environment, and the one line
a missing or inconsistent environment gets (generate/input/shard.py)."""

from __future__ import annotations

import pytest

from genbench.errors import ExitCode, UsageError
from genbench.generate.input.shard import ShardSpec

pytestmark = pytest.mark.core


def auto(env: dict[str, str], text: str = "auto") -> ShardSpec:
    return ShardSpec.parse(text, env)


def refused(env: dict[str, str], text: str = "auto") -> str:
    with pytest.raises(UsageError) as e:
        auto(env, text)
    assert e.value.exit_code == ExitCode.USAGE and "\n" not in str(e.value)
    return str(e.value)


def slurm(task: int, count: int, low: int = 0, step: int = 1) -> dict[str, str]:
    high = low + (count - 1) * step
    return {
        "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": str(count),
        "SLURM_ARRAY_TASK_MIN": str(low), "SLURM_ARRAY_TASK_MAX": str(high),
        "SLURM_ARRAY_TASK_STEP": str(step),
    }  # fmt: skip


def test_a_slurm_array_task_takes_its_share_counted_from_the_arrays_first_id():
    assert [auto(slurm(t, 3)) for t in (0, 1, 2)] == [ShardSpec(i, 3) for i in (1, 2, 3)]
    assert auto(slurm(5, 4, low=5)) == ShardSpec(1, 4)  # --array=5-8
    assert auto(slurm(8, 4, low=5)) == ShardSpec(4, 4)
    assert auto(slurm(14, 3, low=10, step=2)) == ShardSpec(3, 3)  # --array=10-14:2
    assert auto(slurm(1, 3)).source == "SLURM_ARRAY_TASK_ID=1 of SLURM_ARRAY_TASK_COUNT=3"


def test_the_shares_of_every_task_cover_every_id_once():
    ids = [f"row-{i}" for i in range(300)]
    shares = [auto(slurm(t, 4, low=1)) for t in range(1, 5)]  # --array=1-4
    assert all(sum(s.owns(i) for s in shares) == 1 for i in ids)
    assert "not a task of 4" in refused(slurm(0, 4, low=1))


def test_a_kubernetes_indexed_job_takes_the_count_from_the_flag_or_the_manifest():
    assert auto({"JOB_COMPLETION_INDEX": "0"}, "auto/4") == ShardSpec(1, 4)
    env = {"JOB_COMPLETION_INDEX": "3", "GENBENCH_SHARD_COUNT": "4"}
    assert auto(env) == ShardSpec(4, 4)
    assert auto(env).source == "JOB_COMPLETION_INDEX=3 of 4"
    assert "completions count" in refused({"JOB_COMPLETION_INDEX": "3"})
    assert "says 4 shards" in refused(env, "auto/5")
    assert "not a task of 4" in refused({"JOB_COMPLETION_INDEX": "4"}, "auto/4")


def test_rank_and_world_size():
    assert auto({"RANK": "2", "WORLD_SIZE": "3"}) == ShardSpec(3, 3)
    assert "not WORLD_SIZE" in refused({"RANK": "2"})
    assert "not RANK" in refused({"WORLD_SIZE": "2"})
    assert "no tasks" in refused({"RANK": "0", "WORLD_SIZE": "0"})


def test_a_missing_or_inconsistent_environment_is_one_line():
    assert "no scheduler share in the environment" in refused({})
    assert "SLURM_ARRAY_TASK_COUNT" in refused({"SLURM_ARRAY_TASK_ID": "1"})
    assert "not a whole number" in refused({**slurm(1, 3), "SLURM_ARRAY_TASK_ID": "x"})
    irregular = {**slurm(3, 3), "SLURM_ARRAY_TASK_MAX": "7"}  # --array=0,3,7
    assert "not a range" in refused(irregular)
    assert "says 3 shards" in refused(slurm(0, 3), "auto/2")
    assert "expected i/N" in refused({}, "2/1")


def test_some_tasks_of_the_plans_array_resubmitted_keep_their_shares():
    """`sbatch --array=1,3` (what `genbench merge` names) of the plan's `--shard auto/4`
    script: Slurm counts only the 2 resubmitted tasks, so the task id is the share."""
    subset = {"SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "1",
              "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_STEP": "1"}  # fmt: skip
    for task in (1, 3):
        env = {**subset, "SLURM_ARRAY_TASK_ID": str(task)}
        assert auto(env, "auto/4") == ShardSpec(task + 1, 4)
        assert auto(env, "auto/4").source == f"SLURM_ARRAY_TASK_ID={task} of --shard auto/4"
    one = {**subset, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "1"}  # --array=1
    assert auto(one, "auto/4") == ShardSpec(2, 4)
    assert auto(slurm(2, 4), "auto/4") == ShardSpec(3, 4)  # the whole array, as before
    assert "not a task of 4" in refused({**one, "SLURM_ARRAY_TASK_ID": "4"}, "auto/4")
    assert "says 1 shard (" in refused({"RANK": "0", "WORLD_SIZE": "1"}, "auto/2")
    no_max = {k: v for k, v in slurm(1, 3, step=0).items() if k != "SLURM_ARRAY_TASK_MAX"}
    assert "SLURM_ARRAY_TASK_MAX=unset" in refused(no_max)


def test_a_scheme_file_of_no_shards_is_unreadable_and_says_what_to_do(tmp_path):
    from genbench.errors import OutputError
    from genbench.generate.store.scheme import recorded

    (tmp_path / ".genbench").mkdir()
    for text in ('{"shards": 0}', "garbage"):
        (tmp_path / ".genbench" / "shards.json").write_text(text)
        with pytest.raises(OutputError) as e:
            recorded(tmp_path)
        assert "unreadable" in str(e.value) and "remove it" in str(e.value)
    (tmp_path / ".genbench" / "shards.json").write_text('{"shards": 3}')
    assert recorded(tmp_path) == 3


def test_the_variables_slurm_22_sets_for_each_array_form():
    """As a real Slurm 22.05 set them (sbatch --array=... of `env`): a stepped range and a
    1-based range take their shares; a list, even an evenly spaced one (Slurm says step 1
    for --array=0,2,4), is refused."""
    stepped = {"SLURM_ARRAY_TASK_ID": "10", "SLURM_ARRAY_TASK_COUNT": "8",
               "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "14",
               "SLURM_ARRAY_TASK_STEP": "2"}  # fmt: skip
    assert auto(stepped) == ShardSpec(6, 8)  # --array=0-14:2
    one_based = {**stepped, "SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_MIN": "1",
                 "SLURM_ARRAY_TASK_MAX": "8", "SLURM_ARRAY_TASK_STEP": "1"}  # fmt: skip
    assert auto(one_based) == ShardSpec(8, 8)  # --array=1-8
    spaced = {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3",
              "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "4",
              "SLURM_ARRAY_TASK_STEP": "1"}  # fmt: skip
    assert "not a range" in refused(spaced)  # --array=0,2,4
