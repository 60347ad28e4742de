"""On a cluster: one output directory, one shard scheme (generate/store/scheme.py), every id once.

Each mixed scheme a user can reach (a finished job then `--shard`, shards then none, 2
beside 3 at once and one after the other) is refused in one line, exit 2, before any
request: the refused run writes nothing, and the directory holds every id once.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from conftest import genbench
from test_generate import FAST, assert_exactly_once, popen, prompts, write_rows

from genbench.generate.input.shard import ShardSpec
from genbench.generate.store.lock import OutputLock
from genbench.sim.process import SimProcess

QUICK = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1", "--output-len", "fixed:8")
SLOW = ("--tps", "200", "--per-seq-ms", "0.05", "--ttft-ms", "1", "--output-len", "fixed:20")


@pytest.fixture(scope="module")
def quick() -> Iterator[SimProcess]:
    with SimProcess(*QUICK) as p:
        yield p


def gen(inp: Path, out: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return genbench("generate", "-i", str(inp), "-o", str(out), "--url", url, *FAST, *args)


def refusal(p: subprocess.CompletedProcess[str]) -> str:
    """Exit 2, exactly one error line, no traceback."""
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.startswith("genbench: error:")]
    assert len(lines) == 1, p.stderr
    return lines[0]


def nothing_of(out: Path, tag: str) -> None:
    """The refused run left no file of its own: no job file, no request log, no data."""
    assert not list(out.glob(f"data{tag}-*")) and not list(out.glob(f".genbench/*{tag}.json*"))


def scheme_of(out: Path) -> int:
    return orjson.loads((out / ".genbench" / "shards.json").read_bytes())["shards"]


def test_a_finished_job_refuses_a_shard(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(30))
    assert gen(inp, out, quick.url).returncode == 0
    line = refusal(gen(inp, out, quick.url, "--shard", "1/2"))
    assert "written under no shards (one client)" in line and "asks for 2 shards" in line
    assert "this run (--shard 1/2)" in line and "genbench merge" in line
    nothing_of(out, "-1of2")
    assert scheme_of(out) == 1
    assert_exactly_once(out, [f"r{i}" for i in range(30)])


def test_shards_refuse_an_unsharded_run(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(30))
    for s in ("1/2", "2/2"):
        assert gen(inp, out, quick.url, "--shard", s).returncode == 0
    line = refusal(gen(inp, out, quick.url))
    assert "written under 2 shards" in line and "asks for no shards" in line
    assert "this run (no --shard)" in line and "--shard i/2" in line
    assert not (out / ".genbench" / "job.json").exists()
    assert_exactly_once(out, [f"r{i}" for i in range(30)])
    assert gen(inp, out, quick.url, "--shard", "1/1").returncode == 2  # 1/1 is no shards


def test_two_schemes_one_after_the_other(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(30))
    assert gen(inp, out, quick.url, "--shard", "1/2").returncode == 0
    line = refusal(gen(inp, out, quick.url, "--shard", "1/3"))
    assert "2 shards" in line and "3 shards" in line
    nothing_of(out, "-1of3")
    assert gen(inp, out, quick.url, "--shard", "2/2").returncode == 0  # the same scheme: on
    assert_exactly_once(out, [f"r{i}" for i in range(30)])


def test_a_shard_run_with_other_settings_than_its_siblings_is_refused(quick, tmp_path):
    """An array's task resubmitted with other flags would mix two jobs' rows in one data set:
    its first run is refused in one line naming the setting and the sibling, before any
    request; with the siblings' flags it runs, and --force mixes them knowingly."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(30))
    assert gen(inp, out, quick.url, "--shard", "1/3", "--max-tokens", "20").returncode == 0
    line = refusal(gen(inp, out, quick.url, "--shard", "2/3", "--max-tokens", "30"))
    assert "other settings than the shard of job-1of3.json" in line, line
    assert "--max-tokens was 20 there, now 30" in line and "--force" in line
    nothing_of(out, "-2of3")
    assert gen(inp, out, quick.url, "--shard", "2/3", "--max-tokens", "20").returncode == 0
    p = gen(inp, out, quick.url, "--shard", "3/3", "--temperature", "0.5", "--max-tokens", "20",
            "--force")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert_exactly_once(out, [f"r{i}" for i in range(30)])
    assert "different settings" in genbench("merge", str(out)).stdout  # still named there


def test_the_model_is_compared_by_its_name_only_where_it_was_loaded_from_a_directory(
    sim_factory, tmp_path
):
    """Shards whose engines loaded one model from each node's own copy (`/scratch/a/m`,
    `/scratch/b/m`, or the hub's `org-a/m`) are one job; another org's model of the same
    name (`org-a/m`, `org-b/m`) is refused for a shard's first run, and a plain resume
    compares the model whole, as it always did."""
    sims = {m: sim_factory(*QUICK, "--model", m)
            for m in ("/scratch/a/m", "/scratch/b/m", "org-a/m", "org-b/m")}  # fmt: skip
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(12))
    copies = tmp_path / "copies"
    assert gen(inp, copies, sims["/scratch/a/m"].url, "--shard", "1/3").returncode == 0
    p = gen(inp, copies, sims["/scratch/b/m"].url, "--shard", "2/3")
    assert p.returncode == 0, p.stderr
    p = gen(inp, copies, sims["org-a/m"].url, "--shard", "3/3")
    assert p.returncode == 0, p.stderr
    p = genbench("merge", str(copies))  # merge compares the models as generate did
    assert p.returncode == 0 and "different settings" not in p.stdout, p.stdout
    orgs = tmp_path / "orgs"
    assert gen(inp, orgs, sims["org-a/m"].url, "--shard", "1/2").returncode == 0
    line = refusal(gen(inp, orgs, sims["org-b/m"].url, "--shard", "2/2"))
    assert "model was org-a/m there, now org-b/m" in line, line
    nothing_of(orgs, "-2of2")
    one = tmp_path / "one"
    write_rows(inp, prompts(6))
    assert gen(inp, one, sims["org-a/m"].url).returncode == 0
    write_rows(inp, prompts(12))
    line = refusal(gen(inp, one, sims["org-b/m"].url))
    assert "different settings (model was org-a/m, now org-b/m)" in line, line


def test_two_schemes_started_at_once_one_is_refused(sim_factory, tmp_path):
    slow = sim_factory(*SLOW)
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(40))
    procs = {}
    for s in ("1/2", "1/3"):
        d = tmp_path / s.replace("/", "of")
        d.mkdir()
        args = ("-i", str(inp), "-o", str(out), "--url", slow.url, "-c", "4", "--shard", s)
        procs[s] = (d, popen(d, *args, *FAST))
    codes = {s: p.wait(120) for s, (_, p) in procs.items()}
    assert sorted(codes.values()) == [0, 2], codes  # the first to record its scheme wins
    won = next(s for s, c in codes.items() if c == 0)
    lost = next(s for s, c in codes.items() if c == 2)
    err = (procs[lost][0] / "stderr.txt").read_text()
    assert err.count("genbench: error:") == 1 and "Traceback" not in err
    assert f"this run (--shard {lost})" in err
    nothing_of(out, "-" + lost.replace("/", "of"))
    assert scheme_of(out) == int(won[-1])
    n = int(won[-1])
    for i in range(2, n + 1):  # the winner's scheme finishes the job
        assert gen(inp, out, slow.url, "-c", "8", "--shard", f"{i}/{n}").returncode == 0
    assert_exactly_once(out, [f"r{i}" for i in range(40)])


# -- the merge that proves itself -----------------------------------------------------------


def merge(*args: str) -> subprocess.CompletedProcess[str]:
    return genbench("merge", *args)


def test_the_merge_names_missing_and_failed_ids_and_the_shards_that_finish_them(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(30))
    for s in ("1/3", "2/3"):
        assert gen(inp, out, quick.url, "--shard", s).returncode == 0
    third = sorted(f"r{i}" for i in range(30) if ShardSpec(3, 3).owns(f"r{i}"))
    (out / "errors-3of3.jsonl").write_text(json.dumps({"id": third[0], "error": "x"}) + "\n")
    p = merge(str(out))
    assert p.returncode == 1, p.stderr
    assert f"missing: {len(third) - 1} ids" in p.stdout and "--shard 3/3" in p.stdout
    assert "resubmit tasks 2 (Slurm's task ids count from 0" in p.stdout
    assert "--shard 1/3" not in p.stdout
    # no array script here: the command that writes it, then the task to resubmit
    assert "no genbench-array.sbatch here: write it with genbench plan --from PLAN_DIR " \
        "--job-files DIR --servers 3, then sbatch --array=2 DIR/genbench-array.sbatch" in p.stdout
    assert f"failed: 1 id ({third[0]})" in p.stdout and "--retry-errors" in p.stdout
    (out / "errors-3of3.jsonl").unlink()
    # the command it named, run as printed (the server filled in): the job's settings in it
    named = p.stdout.split("finish them: ", 1)[1].split(";", 1)[0]
    assert named.endswith("--shard 3/3") and "--url URL" in named, named
    cmd = shlex.split(named.replace("--url URL", f"--url {quick.url}"))
    assert genbench(*cmd[1:]).returncode == 0, named
    p = merge(str(out), "--json")
    assert p.returncode == 0, p.stderr
    assert "every input id exactly once: 30 of 30 input rows, in 3 shards" in p.stderr
    doc = json.loads(p.stdout)
    assert (doc["exact"], doc["ids"], doc["rows"], doc["missing"]) == (True, 30, 30, [])


def test_a_directory_of_two_schemes_is_found_doubled_and_merged_into_one(quick, tmp_path):
    """A directory from before schemes were recorded, written unsharded and then by two
    shards: generate refuses it, the merge counts each doubled id, export writes each once,
    and `merge --out NEW --shards 2` makes a directory the 2 shards resume."""
    inp, out, other = tmp_path / "in.jsonl", tmp_path / "out", tmp_path / "other"
    write_rows(inp, prompts(24))
    assert gen(inp, out, quick.url, "--limit", "10").returncode == 0
    for s in ("1/2", "2/2"):
        assert gen(inp, other, quick.url, "--shard", s).returncode == 0
    for p in other.glob("data-*"):
        shutil.copy(p, out / p.name)
    (out / ".genbench" / "shards.json").unlink()  # as an older genbench left it
    line = refusal(gen(inp, out, quick.url, "--shard", "1/2"))
    assert "two shard schemes (no shards (one client) and 2 shards" in line
    p = merge(str(out))
    assert p.returncode == 1 and "doubled: 10 ids (" in p.stdout and "10 extra copies" in p.stdout
    assert "(two shard schemes: no shards (one client) and 2 shards (--shard i/2)," in p.stdout
    i = genbench("inspect", str(out), "--save", str(tmp_path / "inspect.json"))
    assert "34 rows in" in i.stdout and "10 rows repeat an id read before" in i.stdout, i.stdout
    flat = " ".join(i.stdout.split())  # rich may wrap the long line
    assert f"genbench merge {out} names them, and with --out NEW writes a copy" in flat
    assert json.loads((tmp_path / "inspect.json").read_text())["repeated_ids"]["rows"] == 10
    x = tmp_path / "x.jsonl"
    e = genbench("export", str(out), "--format", "specforge", "--min-tokens", "0", "-o", str(x))
    assert e.returncode == 0, e.stderr
    exported = [json.loads(line)["id"] for line in x.read_text().splitlines()]
    assert sorted(exported) == sorted(f"r{i}" for i in range(24))  # each id once
    new = tmp_path / "new"
    p = merge(str(out), "--out", str(new), "--shards", "2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "24 ids, 10 later copies left out" in p.stdout and "exactly once" in p.stdout
    assert scheme_of(new) == 2
    assert_exactly_once(new, [f"r{i}" for i in range(24)])
    for s in ("1/2", "2/2"):
        r = gen(inp, new, quick.url, "--shard", s)
        assert r.returncode == 0 and "every row is already done" in r.stdout, r.stdout
    assert refusal(gen(inp, new, quick.url)).count("2 shards") == 1


def hand_made(out: Path, params: list[dict[str, int]]) -> list[str]:
    """A directory of len(params) shards, as its tasks left it (job files naming the input
    relatively, each with its own params): every id of in.jsonl once."""
    n = len(params)
    ids = [f"r{i}" for i in range(12)]
    write_rows(out.parent / "in.jsonl", prompts(12))
    (out / ".genbench").mkdir(parents=True)
    (out / ".genbench" / "shards.json").write_text(json.dumps({"shards": n}))
    for i, ps in enumerate(params, 1):
        job = {"params": ps, "input": "in.jsonl", "shard": f"{i}of{n}", "format": "jsonl"}
        (out / ".genbench" / f"job-{i}of{n}.json").write_text(json.dumps(job))
        mine = [r for r in ids if ShardSpec(i, n).owns(r)]
        write_rows(out / f"data-{i}of{n}-00000.jsonl", [{"id": r} for r in mine])
    return ids


def test_merge_refuses_in_one_line_before_writing_and_names_shards_of_other_settings(tmp_path):
    """The input the job files name is found from the job's directory, else one line names
    the job file; --shards without --out, an --out that is a file or inside the source are
    refused before anything is written; shards run with other flags are named."""
    out = tmp_path / "out"
    ids = hand_made(out, [{"max_tokens": 20}, {}])
    p = genbench("merge", "out", cwd=tmp_path)
    assert p.returncode == 0 and "every input id exactly once: 12 of 12" in p.stdout, p.stderr
    assert 'different settings (params: job-1of2.json {"max_tokens":20}, job-2of2.json {})' \
        in p.stdout
    with (tmp_path / "in.jsonl").open("a") as f:
        f.write('{"id": "bad"}\n')  # counted among the input rows, never generated: said so
    p = genbench("merge", "out", cwd=tmp_path)
    assert p.returncode == 0 and "12 of 13 input rows" in p.stdout, p.stdout
    assert "note: 1 input row of in.jsonl cannot be sent (line 13: no prompt" in p.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    line = refusal(genbench("merge", str(out), cwd=elsewhere))
    assert "the input its job file names (in.jsonl, in " in line and "give --input" in line
    assert "re-shards into a new directory" in refusal(merge(str(out), "--shards", "3"))
    (tmp_path / "file").write_text("x")
    line = refusal(genbench("merge", "out", "--out", "file", "--shards", "3", cwd=tmp_path))
    assert "exists and is not a directory" in line
    line = refusal(genbench("merge", "out", "--out", "out/sub", cwd=tmp_path))
    assert "inside out" in line and not (out / "sub").exists()
    p = genbench("merge", "out", "--out", "new", "--shards", "3", cwd=tmp_path)
    assert p.returncode == 0 and "note: out: the shards ran with different settings" in p.stdout
    assert_exactly_once(tmp_path / "new", ids)
    assert not list(tmp_path.glob(".new.merging-*"))  # written beside, then renamed
    p = genbench("merge", "out", "--out", "no/such/new", cwd=tmp_path)
    assert p.returncode == 12 and "Traceback" not in p.stderr, p.stderr
    assert "--out no/such/new: cannot write to it" in p.stderr


def test_merge_names_a_shard_still_running(tmp_path):
    """A task still writing holds its shard's lock (here this test process holds it):
    the merge says so, beside the missing ids it is writing; a released lock is not named."""
    out = tmp_path / "out"
    job = {"max_tokens": 20, "stop": ["x y"]}
    hand_made(out, [job, job])
    (out / "data-2of2-00000.jsonl").unlink()
    with OutputLock(out, out / ".genbench", "lock-2of2"):
        p = genbench("merge", "out", cwd=tmp_path)
        assert p.returncode == 1 and "missing: " in p.stdout
        assert f"note: shard 2/2 is still running (pid {os.getpid()} on " in p.stdout, p.stdout
        # the command that finishes them carries the job's settings (else a new shard's
        # first run would differ, a resumed one be refused)
        assert """--url URL --max-tokens 20 --param 'stop=["x y"]' --shard 2/2""" \
            in p.stdout
    p = genbench("merge", "out", cwd=tmp_path)
    assert "still running" not in p.stdout


# -- --shard auto and the plan's job files ---------------------------------------------------


def test_shard_auto_under_a_kubernetes_indexed_job_takes_its_share(quick, tmp_path, monkeypatch):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(30))
    env = {"JOB_COMPLETION_INDEX": "1", "GENBENCH_SHARD_COUNT": "3"}
    for var in ("SLURM_ARRAY_TASK_ID", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)  # the test's own may be a Slurm task's
    args = ("generate", "-i", str(inp), "-o", str(out), "--url", quick.url, "--shard", "auto")
    p = genbench(*args, *FAST, env=env)
    assert p.returncode == 0, p.stderr
    assert "(shard 2/3, from JOB_COMPLETION_INDEX=1 of 3)" in p.stdout
    share = [f"r{i}" for i in range(30) if ShardSpec(2, 3).owns(f"r{i}")]
    assert_exactly_once(out, share)
    assert list(out.glob("data-2of3-*.jsonl"))
    assert scheme_of(out) == 3
    p = genbench(*args, *FAST, env={"JOB_COMPLETION_INDEX": "1"})  # no completions count
    line = refusal(p)
    assert "JOB_COMPLETION_INDEX=1 is set, but not the completions count" in line


def test_the_plan_writes_a_slurm_array_and_a_valid_indexed_job_manifest(tmp_path):
    yaml = pytest.importorskip("yaml")
    jobs = tmp_path / "jobs"
    p = genbench("plan", "--rate", "100", "--tokens-per-sample", "1000", "--samples", "100K",
                 "--deadline", "36h", "--max-tokens", "4096", "--job-files", str(jobs))  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "job files for 8 tasks (8 servers: what the deadline 36h needs" in p.stdout
    doc = yaml.safe_load((jobs / "genbench-indexed-job.yaml").read_text())
    spec = doc["spec"]
    assert (doc["apiVersion"], doc["kind"]) == ("batch/v1", "Job")
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 8, 8)
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"  # a restarted pod keeps its index
    c = pod["containers"][0]
    assert c["image"] == "FILL_IN_IMAGE"
    assert {"name": "GENBENCH_SHARD_COUNT", "value": "8"} in c["env"]
    assert "--shard auto" in c["args"][0] and "--max-tokens 4096" in c["args"][0]
    assert '--serve "$GENBENCH_SERVE"' in c["args"][0]  # each pod starts its engine
    serve = {"name": "GENBENCH_SERVE", "value": "vllm serve FILL_IN_MODEL_PATH --port {port}"}
    assert serve in c["env"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "FILL_IN_PVC"
    script = (jobs / "genbench-array.sbatch").read_text()
    for line in ("#SBATCH --array=0-7", "#SBATCH --requeue", "--partition=FILL_IN_PARTITION",
                 "FLAGS=(--max-tokens 4096)", "--shard auto/8 "):  # fmt: skip
        assert line in script
    assert subprocess.run(["bash", "-n", str(jobs / "genbench-array.sbatch")]).returncode == 0
    p = genbench("plan", "--rate", "100", "--tokens-per-sample", "10", "--samples", "10",
                 "--job-files", str(jobs / "genbench-array.sbatch"))  # fmt: skip
    assert p.returncode == 12 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().endswith("genbench-array.sbatch: is a file; give a directory")


def test_a_clean_copy_of_a_sharded_job_resumes_shard_by_shard(quick, tmp_path):
    """inspect --drop --out copies each shard's job file and the scheme: each shard resumes
    into the copy under its own settings (it had copied job.json only, which a sharded job
    has not: every shard's resume said its job file was missing)."""
    inp, out, clean = tmp_path / "in.jsonl", tmp_path / "out", tmp_path / "clean"
    write_rows(inp, prompts(20))
    for s in ("1/2", "2/2"):
        assert gen(inp, out, quick.url, "--shard", s).returncode == 0
    p = genbench("inspect", str(out), "--drop", "all", "--out", str(clean))
    assert p.returncode == 0, p.stdout + p.stderr
    state = {q.name for q in (clean / ".genbench").iterdir()}
    assert {"job-1of2.json", "job-2of2.json", "shards.json"} <= state, state
    assert scheme_of(clean) == 2
    for s in ("1/2", "2/2"):
        p = gen(inp, clean, quick.url, "--shard", s)
        assert p.returncode == 0 and "is missing" not in p.stdout, p.stdout + p.stderr
    assert refusal(gen(inp, clean, quick.url)).count("2 shards") == 1
    assert_exactly_once(clean, [f"r{i}" for i in range(20)])
