"""One writer, one truth: what two processes, a full disk, an edited input or a corrupt
line do to a `generate` output directory, on real processes against the sim.

What must hold: every id of the *current* input exactly once in the data, each answering
its *current* request (or kept, marked, when the user chose so); a write failure is one
line and exit 12, with nothing written before lost and no `.tmp` left behind.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import genbench
from test_generate import (
    FAST,
    assert_exactly_once,
    cli,
    data_rows,
    error_rows,
    line_count,
    popen,
    prompts,
    request_log,
    wait_for,
    write_rows,
)

from genbench.sim.process import SimProcess

QUICK = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1", "--output-len", "fixed:8")


@pytest.fixture(scope="module")
def quick() -> Iterator[SimProcess]:
    with SimProcess(*QUICK) as p:
        yield p


def gen(inp: Path, out: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return genbench("generate", "-i", str(inp), "-o", str(out), "--url", url, *FAST, *args)


def one_error_line(p: subprocess.CompletedProcess[str]) -> str:
    """The command failed with exactly one error line and no traceback."""
    assert "Traceback" not in p.stderr, p.stderr
    errors = [x for x in p.stderr.splitlines() if x.startswith("genbench: error:")]
    assert len(errors) == 1, p.stderr
    return errors[0]


def no_tmp(out: Path) -> None:
    assert not [p for p in out.rglob("*.tmp")], list(out.rglob("*.tmp"))


def answers(out: Path) -> dict[str, str]:
    """id -> the user text each data row answers."""
    return {str(r["id"]): r["conversations"][0]["content"] for r in data_rows(out)}


# -- one writer -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow() -> Iterator[SimProcess]:
    """Slow enough that a 60-row job at -c 4 runs for seconds."""
    with SimProcess("--tps", "100", "--ttft-ms", "20", "--output-len", "fixed:40") as p:
        yield p


def test_two_generates_started_together_one_runs_the_other_is_refused(slow, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(60))
    args = ("-i", str(inp), "-o", str(out), "--url", slow.url, "-c", "4", *FAST)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = popen(tmp_path / "a", *args), popen(tmp_path / "b", *args)
    codes = sorted([a.wait(120), b.wait(120)])
    assert codes == [0, 2]
    loser = next(d for d, p in ((tmp_path / "a", a), (tmp_path / "b", b)) if p.returncode == 2)
    err = (loser / "stderr.txt").read_text()
    assert "another genbench is writing to it (pid " in err and " on " in err, err
    assert "input:" not in (loser / "stdout.txt").read_text()  # refused before the input
    assert_exactly_once(out, [f"r{i}" for i in range(60)])
    assert len({r.id for r in request_log(out)}) == 60 == len(request_log(out))


def test_a_second_generate_is_refused_and_a_killed_holder_frees_the_lock(slow, quick, tmp_path):
    inp, out, src = tmp_path / "in.jsonl", tmp_path / "out", tmp_path / "src"
    write_rows(inp, prompts(60))
    assert gen(inp, src, quick.url, "--limit", "5").returncode == 0  # a set to inspect
    holder = popen(tmp_path, "-i", str(inp), "-o", str(out), "--url", slow.url, "-c", "2", *FAST)
    try:
        wait_for(lambda: line_count(out) >= 2, 60, "the first job to write rows")
        t = time.monotonic()
        p = gen(inp, out, slow.url)
        assert p.returncode == 2 and time.monotonic() - t < 30
        line = one_error_line(p)
        note = orjson.loads((out / ".genbench" / "lock").read_bytes())
        assert f"pid {holder.pid} on {note['host']}, since {note['started']}" in line
        # inspect --drop writing into it is refused the same way
        q = genbench("inspect", str(src), "--drop", "dup", "--out", str(out))
        assert q.returncode == 2 and f"pid {holder.pid}" in one_error_line(q)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the kernel dropped the lock with its holder: the next run takes it at once
    p = gen(inp, out, slow.url, "-c", "16")
    assert p.returncode == 0, p.stderr
    assert_exactly_once(out, [f"r{i}" for i in range(60)])


def test_the_shards_of_one_job_share_a_directory_each_with_its_own_lock(slow, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(40))
    procs = []
    for i in (1, 2):
        (tmp_path / str(i)).mkdir()
        args = ("-i", str(inp), "-o", str(out), "--url", slow.url, "-c", "4", "--shard", f"{i}/2")
        procs.append(popen(tmp_path / str(i), *args, *FAST))
    assert [p.wait(120) for p in procs] == [0, 0]
    assert {p.name for p in (out / ".genbench").glob("lock*")} == {"lock-1of2", "lock-2of2"}
    assert_exactly_once(out, [f"r{i}" for i in range(40)])


def test_ids_repeated_in_the_data_keep_their_first_copy(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(20))
    assert gen(inp, out, quick.url).returncode == 0
    lines = (out / "data-00000.jsonl").read_bytes().splitlines(keepends=True)
    first = b"".join(lines)
    (out / "data-00001.jsonl").write_bytes(b"".join(lines[2:5]))  # merged by hand
    p = gen(inp, out, quick.url)
    assert p.returncode == 0, p.stderr
    assert "3 rows repeated an id already in the data" in p.stdout
    assert_exactly_once(out, [f"r{i}" for i in range(20)])
    assert (out / "data-00000.jsonl").read_bytes() == first  # the first copies, untouched
    aside = [orjson.loads(x) for x in (out / "replaced.jsonl").read_bytes().splitlines()]
    assert [(a["why"], a["file"]) for a in aside] == [("duplicate", "data-00001.jsonl")] * 3


# -- the input changed between runs ---------------------------------------------------------


def edit(inp: Path, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Row 3's prompt edited, row 5 removed, a row added."""
    rows = [dict(r) for r in rows]
    key = "prompt" if "prompt" in rows[3] else "messages"
    if key == "prompt":
        rows[3]["prompt"] += " (edited)"
    else:
        rows[3]["messages"] = [{"role": "user", "content": "question number 3 (edited)"}]
    del rows[5]
    rows.append({key: rows[0][key]} | ({"id": "added"} if "id" in rows[0] else {}))
    if key == "prompt":
        rows[-1]["prompt"] = "an added row"
    else:
        rows[-1]["messages"] = [{"role": "user", "content": "an added row"}]
    write_rows(inp, rows)
    return rows


def prompt_of(r: dict[str, Any]) -> str:
    return r["prompt"] if "prompt" in r else r["messages"][0]["content"]


@pytest.mark.parametrize("derived", [False, True], ids=["explicit ids", "derived ids"])
def test_an_edited_removed_and_added_row_are_refused_then_regenerated(quick, tmp_path, derived):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    rows = [{"prompt": f"question {i}"} for i in range(10)] if derived else prompts(10)
    write_rows(inp, rows)
    assert gen(inp, out, quick.url).returncode == 0
    before = (out / "data-00000.jsonl").read_bytes()
    rows = edit(inp, rows)
    p = gen(inp, out, quick.url)
    assert p.returncode == 2
    line = one_error_line(p)
    if derived:  # an edited row is a new id: its old answer is a row no longer in the input
        assert "2 done rows are no longer in the input" in line
    else:
        assert "1 done row answers a request that has changed since (e.g. 'r3')" in line
        assert "1 done row is no longer in the input (e.g. 'r5')" in line
    assert "--input-changed regenerate" in line and "--input-changed keep" in line
    assert (out / "data-00000.jsonl").read_bytes() == before  # refused: nothing touched
    p = gen(inp, out, quick.url, "--input-changed", "regenerate")
    assert p.returncode == 0, p.stderr
    assert "old answers moved to" in p.stdout
    got = answers(out)
    assert sorted(got.values()) == sorted(prompt_of(r) for r in rows)  # current, once each
    assert len(data_rows(out)) == len(rows)
    aside = [orjson.loads(x) for x in (out / "replaced.jsonl").read_bytes().splitlines()]
    assert sorted(a["row"]["conversations"][0]["content"] for a in aside) == sorted(
        ["question 3", "question 5"] if derived else ["question number 3", "question number 5"]
    )
    assert {a["why"] for a in aside} == (
        {"not in the input"} if derived else {"request changed", "not in the input"}
    )
    again = gen(inp, out, quick.url)
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_keep_leaves_the_old_answers_marked_and_does_not_ask_again(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    rows = prompts(10)
    write_rows(inp, rows)
    assert gen(inp, out, quick.url).returncode == 0
    rows = edit(inp, rows)
    p = gen(inp, out, quick.url, "--input-changed", "keep")
    assert p.returncode == 0, p.stderr
    got = answers(out)
    assert got["r3"] == "question number 3" and "r5" in got and got["added"] == "an added row"
    marks = {m["id"]: m for m in map(orjson.loads, (out / "stale.jsonl").read_bytes().splitlines())}
    assert (marks["r3"]["why"], marks["r5"]["why"]) == ("request changed", "not in the input")
    assert marks["r3"]["answers"] == data_meta(out, "r3")["request"] != marks["r3"]["request_now"]
    assert gen(inp, out, quick.url).returncode == 0  # kept for this request: not asked again
    rows[3]["messages"] = [{"role": "user", "content": "edited twice"}]
    write_rows(inp, rows)
    assert gen(inp, out, quick.url).returncode == 2  # changed again: asked again


def data_meta(out: Path, rid: str) -> dict[str, Any]:
    return next(r["meta"] for r in data_rows(out) if r["id"] == rid)


def test_a_reformatted_input_is_not_a_changed_one(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    rows = prompts(10)
    write_rows(inp, rows)
    assert gen(inp, out, quick.url, "--temperature", "0.5").returncode == 0
    inp.write_text("".join(json.dumps(r, indent=None, separators=(" ,", " : ")) + "\n"
                           for r in reversed(rows)))  # fmt: skip
    idx = out / ".genbench" / "data-00000.idx"
    keys = [k for b in map(orjson.loads, idx.read_bytes().splitlines()) for k in b["src"]]
    p = gen(inp, out, quick.url, "--temperature", "0.5")
    assert p.returncode == 0 and "nothing to do" in p.stdout, p.stderr
    # checked the slow way once, the rows have their new lines' keys for the next resume
    again = [k for b in map(orjson.loads, idx.read_bytes().splitlines()) for k in b["src"]]
    assert len(again) == 10 and not set(again) & set(keys)
    # a row's own sampling is part of its request
    rows[2]["params"] = {"max_tokens": 5}
    write_rows(inp, rows)
    p = gen(inp, out, quick.url, "--temperature", "0.5")
    assert p.returncode == 2 and "(e.g. 'r2')" in one_error_line(p)


# -- corrupt lines inside a data file -------------------------------------------------------


@pytest.mark.parametrize("how", ["same length", "shorter"])
def test_a_garbled_middle_line_is_quarantined_and_only_its_row_regenerated(quick, tmp_path, how):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(40))
    assert gen(inp, out, quick.url).returncode == 0
    data = out / "data-00000.jsonl"
    lines = data.read_bytes().splitlines(keepends=True)
    victim = orjson.loads(lines[20])["id"]
    bad = (b"\x00garbled" * 200)[: len(lines[20]) - 1] if how == "same length" else b"{oops"
    offset = sum(map(len, lines[:20]))
    data.write_bytes(b"".join([*lines[:20], bad + b"\n", *lines[21:]]))
    # a part without a seal (an older genbench's, or one still written): the rows that read
    # are kept (a sealed part's changed batches are set aside whole: test_integrity.py)
    (out / ".genbench" / "data-00000.jsonl.sum").unlink()
    p = gen(inp, out, quick.url)
    assert p.returncode == 0, p.stderr
    assert f"an unreadable line at byte {offset:,} ({len(bad) + 1:,} bytes) moved to" in p.stdout
    assert "quarantine.jsonl; the rest of the file is kept" in p.stdout
    assert "this run: 1 done" in p.stdout  # only the lost row was generated again
    rows = assert_exactly_once(out, [f"r{i}" for i in range(40)])
    kept = data.read_bytes().splitlines(keepends=True)
    assert kept[:39] == lines[:20] + lines[21:]  # the good rows, byte for byte
    assert orjson.loads(kept[39])["id"] == victim and len(rows) == 40
    (q,) = [orjson.loads(x) for x in (out / "quarantine.jsonl").read_bytes().splitlines()]
    assert (q["file"], q["offset"], q["length"]) == ("data-00000.jsonl", offset, len(bad) + 1)
    no_tmp(out)


# -- inputs that are not what they seem -----------------------------------------------------


def test_an_empty_input_and_a_broken_gzip_are_refused_with_file_and_position(capsys, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    code, _, err = cli(capsys, "generate", "-i", str(empty), "-o", str(tmp_path / "o1"),
                       "--url", "http://127.0.0.1:9")  # fmt: skip
    assert code == 2 and f"{empty}: no rows" in err
    assert not (tmp_path / "o1").exists()  # refused: no directory left behind
    whole = gzip.compress(b"".join(orjson.dumps(r) + b"\n" for r in prompts(3000)))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    code, _, err = cli(capsys, "generate", "-i", str(cut), "-o", str(tmp_path / "o2"),
                       "--url", "http://127.0.0.1:9")  # fmt: skip
    assert code == 2, err
    assert f"{cut}: the gzip stream is cut short" in err and "after line " in err
    assert "(byte " in err and "of the text)" in err
    corrupt = tmp_path / "corrupt.jsonl.gz"
    flipped = bytearray(whole)
    for k in range(64):
        flipped[len(whole) // 3 + k] ^= 0x5A
    corrupt.write_bytes(bytes(flipped))
    code, _, err = cli(capsys, "generate", "-i", str(corrupt), "-o", str(tmp_path / "o3"),
                       "--url", "http://127.0.0.1:9")  # fmt: skip
    assert code == 2 and f"{corrupt}: the gzip stream is corrupt" in err, err
    assert "duplicate" not in err and "line 1" not in err.split("gzip")[0]
    fake = tmp_path / "fake.jsonl"
    fake.write_bytes(whole)
    code, _, err = cli(capsys, "generate", "-i", str(fake), "-o", str(tmp_path / "o4"),
                       "--url", "http://127.0.0.1:9")  # fmt: skip
    assert code == 2 and "named as JSON Lines but is gzip-compressed data" in err
    text = tmp_path / "text.parquet"
    text.write_bytes(b'{"id": "a", "prompt": "hi"}\n')
    code, _, err = cli(capsys, "generate", "-i", str(text), "-o", str(tmp_path / "o5"),
                       "--url", "http://127.0.0.1:9")  # fmt: skip
    assert code == 2 and "named .parquet but is text" in err


# -- bookkeeping ----------------------------------------------------------------------------


@pytest.mark.parametrize("retries", [0, 2])
def test_attempts_in_the_errors_file_count_the_requests_sent(sim_factory, tmp_path, retries):
    sim = sim_factory(*QUICK, "--fault", "http:status=500,match=DOOMED")
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, [*prompts(3), {"id": "doomed", "prompt": "DOOMED"}])
    p = gen(inp, out, sim.url, "--retries", str(retries))
    assert p.returncode == 0, p.stderr
    (err,) = error_rows(out)
    sent = [r for r in request_log(out) if r.id == "doomed"]
    assert err["attempts"] == len(sent) == retries + 1


# -- a full disk: a real small tmpfs --------------------------------------------------------


class Tmpfs:
    def __init__(self, path: Path) -> None:
        self.path = path

    def mount(self, size: str, remount: bool = False) -> None:
        opts = ("remount," if remount else "") + f"size={size}"
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(self.path)],
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): disk-full tests skipped")

    def fill(self) -> None:
        """Take every free byte (the file is removed by `free`)."""
        fd = os.open(self.path / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * (1 << 16))
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0")
        finally:
            os.close(fd)

    def free(self) -> None:
        (self.path / "filler").unlink(missing_ok=True)


@contextlib.contextmanager
def mounted(tmp_path: Path, size: str) -> Iterator[Tmpfs]:
    """A tmpfs of `size` under tmp_path for the test's while (skipped without root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root: disk-full tests skipped")
    fs = Tmpfs(tmp_path / "fs")
    fs.path.mkdir()
    fs.mount(size)
    try:
        yield fs
    finally:
        subprocess.run(["umount", "-l", str(fs.path)], capture_output=True)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    with mounted(tmp_path, "4m") as fs:
        yield fs


def snapshot(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.glob("data*") if p.is_file()}


def test_disk_full_at_start_is_one_line_exit_12(quick, tmpfs, tmp_path):
    inp = tmp_path / "in.jsonl"
    write_rows(inp, prompts(20))
    tmpfs.fill()
    p = gen(inp, tmpfs.path / "out", quick.url)
    assert p.returncode == 12
    assert "No space left on device" in one_error_line(p)
    no_tmp(tmpfs.path)


def test_disk_full_mid_job_keeps_every_row_written_then_resumes(quick, tmpfs, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmpfs.path / "out"
    rows = [{"id": f"r{i}", "prompt": f"question {i} " + "x" * 1500} for i in range(400)]
    write_rows(inp, rows)
    tmpfs.mount("256k", remount=True)
    p = gen(inp, out, quick.url, "-c", "8")
    assert p.returncode == 12
    assert "No space left on device" in one_error_line(p) and "rerun" in p.stderr
    no_tmp(out)
    written = [r["id"] for r in data_rows_allowing_torn_tail(out)]
    assert 0 < len(written) < 400 and len(set(written)) == len(written)
    tmpfs.mount("64m", remount=True)
    p = gen(inp, out, quick.url, "-c", "8")
    assert p.returncode == 0, p.stderr
    assert_exactly_once(out, [f"r{i}" for i in range(400)])
    assert set(written) <= set(answers(out))


def data_rows_allowing_torn_tail(out: Path) -> list[dict[str, Any]]:
    """The rows of every data file; a torn last line (the write the disk refused) is not
    one, and is cut by the next run."""
    rows = []
    for p in sorted(out.glob("data*.jsonl")):
        for line in p.read_bytes().splitlines(keepends=True):
            if line.endswith(b"\n"):
                rows.append(orjson.loads(line))
    return rows


def test_disk_full_during_the_resume_scan_changes_nothing(quick, tmpfs, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmpfs.path / "out"
    write_rows(inp, prompts(50))
    assert gen(inp, out, quick.url).returncode == 0
    (out / ".genbench" / "data-00000.idx").unlink()  # the scan must write a new one
    before = snapshot(out)
    tmpfs.fill()
    p = gen(inp, out, quick.url)
    assert p.returncode == 12, p.stderr
    assert "No space left on device" in one_error_line(p)
    assert snapshot(out) == before
    no_tmp(out)
    tmpfs.free()
    p = gen(inp, out, quick.url)
    assert p.returncode == 0 and "nothing to do" in p.stdout
    assert (out / ".genbench" / "data-00000.idx").exists()


def test_disk_full_during_inspect_drop_leaves_no_tmp(quick, tmpfs, tmp_path):
    inp, src = tmp_path / "in.jsonl", tmp_path / "src"
    write_rows(inp, prompts(50))
    assert gen(inp, src, quick.url).returncode == 0
    before = snapshot(src)
    tmpfs.mount("12k", remount=True)
    clean = tmpfs.path / "clean"
    p = genbench("inspect", str(src), "--drop", "dup", "--out", str(clean))
    assert p.returncode == 12, p.stdout + p.stderr
    assert "No space left on device" in one_error_line(p) and "original is untouched" in p.stderr
    no_tmp(tmpfs.path)
    assert snapshot(src) == before


def test_a_read_only_file_system_and_a_path_that_is_a_file_are_exit_12(quick, tmpfs, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmpfs.path / "out"
    write_rows(inp, prompts(10))
    assert gen(inp, out, quick.url).returncode == 0
    write_rows(inp, prompts(20))
    before = snapshot(out)
    tmpfs.mount("4m,ro", remount=True)
    p = gen(inp, out, quick.url)
    assert p.returncode == 12 and "Read-only file system" in one_error_line(p)
    assert snapshot(out) == before
    tmpfs.mount("4m,rw", remount=True)
    afile = tmpfs.path / "afile"
    afile.write_text("not a directory")
    for where in (afile, afile / "out"):
        p = gen(inp, where, quick.url)
        assert p.returncode == 12 and "a file" in one_error_line(p), p.stderr


def test_parquet_shards_are_rewritten_without_the_old_answers(quick, tmp_path):
    pytest.importorskip("pyarrow")
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    rows = [{"id": f"r{i}", "prompt": f"question {i} " + "x" * 300} for i in range(30)]
    write_rows(inp, rows)
    args = ("--format", "parquet", "--part-size", "4k")
    assert gen(inp, out, quick.url, *args).returncode == 0
    assert len(list(out.glob("data-*.parquet"))) > 2
    rows[7]["prompt"] = "question 7, edited"
    write_rows(inp, rows)
    assert gen(inp, out, quick.url, *args).returncode == 2
    p = gen(inp, out, quick.url, *args, "--input-changed", "regenerate")
    assert p.returncode == 0, p.stderr
    got = answers(out)
    assert len(data_rows(out)) == 30 and got["r7"] == "question 7, edited"
    (aside,) = [orjson.loads(x) for x in (out / "replaced.jsonl").read_bytes().splitlines()]
    assert aside["row"]["id"] == "r7" and aside["file"].endswith(".parquet")
    assert gen(inp, out, quick.url, *args).returncode == 0


def test_an_output_of_an_older_genbench_without_fingerprints_resumes_as_before(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(10))
    assert gen(inp, out, quick.url).returncode == 0
    data, idx = out / "data-00000.jsonl", out / ".genbench" / "data-00000.idx"
    old = []
    for line in data.read_bytes().splitlines():
        row = orjson.loads(line)
        del row["meta"]["request"]
        old.append(orjson.dumps(row) + b"\n")
    data.write_bytes(b"".join(old))
    idx.write_bytes(orjson.dumps({"end": data.stat().st_size, "ids": [f"r{i}" for i in range(10)]}))
    (out / ".genbench" / "data-00000.jsonl.sum").unlink()  # an older genbench sealed none
    write_rows(inp, [*prompts(10)[:3], {"id": "r3", "prompt": "edited"}, *prompts(10)[4:]])
    p = gen(inp, out, quick.url)  # rows without a fingerprint cannot be compared: trusted
    assert p.returncode == 0 and "nothing to do" in p.stdout, p.stderr
