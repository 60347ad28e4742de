"""Side files are idempotent: an `--input-changed regenerate` or a repair interrupted
(SIGKILL at several points, a full disk) and rerun leaves each entry of replaced.jsonl,
stale.jsonl and quarantine.jsonl exactly once, on real processes against the sim.

The measured case (issue 33): regenerate killed after replaced.jsonl was written and
before the data file was rewritten, then rerun, held each entry twice.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_generate import assert_exactly_once, line_count, popen, wait_for, write_rows
from test_output_dir import QUICK, Tmpfs, answers, gen, mounted, no_tmp, one_error_line

from genbench.sim.process import SimProcess

ROWS = 200
CHANGED = 100  # the first half is edited between the runs


@pytest.fixture(scope="module")
def quick() -> Iterator[SimProcess]:
    with SimProcess(*QUICK) as p:
        yield p


@pytest.fixture(scope="module")
def slow() -> Iterator[SimProcess]:
    """Slow enough that regenerating 100 rows at -c 2 runs for seconds."""
    with SimProcess("--tps", "200", "--ttft-ms", "20", "--output-len", "fixed:20") as p:
        yield p


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    with mounted(tmp_path, "64m") as fs:
        yield fs


def rows(edited: bool) -> list[dict[str, Any]]:
    pad = " " + "x" * 1500  # rows of ~1.7 KB: a data file's rewrite needs room
    return [
        {"id": f"r{i}", "prompt": f"question {i}{' (edited)' * (edited and i < CHANGED)}{pad}"}
        for i in range(ROWS)
    ]


def a_job_then_edited(inp: Path, out: Path, url: str) -> None:
    write_rows(inp, rows(False))
    assert gen(inp, out, url).returncode == 0
    write_rows(inp, rows(True))


def side_entries(path: Path) -> Counter[tuple[str, str]]:
    """(file, id) of each entry: each must appear once."""
    entries = [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []
    return Counter((e["file"], str(e["row"]["id"])) for e in entries)


def assert_regenerated_once(out: Path) -> None:
    aside = side_entries(out / "replaced.jsonl")
    assert sorted(aside.values()) == [1] * CHANGED, aside.most_common(3)
    assert {rid for _, rid in aside} == {f"r{i}" for i in range(CHANGED)}
    assert_exactly_once(out, [f"r{i}" for i in range(ROWS)])
    now = answers(out)
    assert all("(edited)" in now[f"r{i}"] for i in range(CHANGED))
    assert not (out / "stale.jsonl").exists()
    no_tmp(out)


def ino(path: Path) -> int:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return -1


@pytest.mark.parametrize("kill_at", ["replaced written", "data rewritten", "rows regenerated"])
def test_a_regenerate_killed_and_rerun_leaves_each_replaced_entry_once(
    quick, slow, tmp_path, kill_at
):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    a_job_then_edited(inp, out, quick.url)
    data, replaced = out / "data-00000.jsonl", out / "replaced.jsonl"
    before = ino(data)
    done = {
        "replaced written": lambda: replaced.exists(),
        "data rewritten": lambda: ino(data) not in (before, -1),
        "rows regenerated": lambda: line_count(out) > ROWS - CHANGED,
    }[kill_at]
    job = popen(tmp_path, "-i", str(inp), "-o", str(out), "--url", slow.url, "-c", "2",
                "--input-changed", "regenerate")  # fmt: skip
    try:
        wait_for(lambda: done() or job.poll() is not None, 120, kill_at)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    assert done(), (tmp_path / "stderr.txt").read_text()
    p = gen(inp, out, quick.url, "--input-changed", "regenerate")
    assert p.returncode == 0, p.stderr
    assert_regenerated_once(out)
    again = gen(inp, out, quick.url)
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_a_full_disk_between_the_replaced_file_and_the_rewrite_leaves_each_entry_once(
    quick, tmpfs, tmp_path
):
    """The disk has room for the replaced entries but not for the data file's rewrite:
    exit 12 with the entries written and the rows still in the data; the rerun moves the
    same rows and must not write their entries again."""
    inp, out = tmp_path / "in.jsonl", tmpfs.path / "out"
    a_job_then_edited(inp, out, quick.url)
    lines = (out / "data-00000.jsonl").read_bytes().splitlines(keepends=True)
    moved = sum(len(x) for x in lines if int(orjson.loads(x)["id"][1:]) < CHANGED)
    kept = sum(map(len, lines)) - moved
    room = moved + 200 * CHANGED + 32 * 1024  # the entries and their heads, not the copy
    assert room < moved + kept
    tmpfs.fill()
    filler = tmpfs.path / "filler"
    os.truncate(filler, filler.stat().st_size - room)
    p = gen(inp, out, quick.url, "--input-changed", "regenerate")
    assert p.returncode == 12, p.stdout + p.stderr
    assert "No space left on device" in one_error_line(p)
    assert sorted(side_entries(out / "replaced.jsonl").values()) == [1] * CHANGED
    assert len(answers(out)) == ROWS  # the rows are still there: nothing lost
    no_tmp(out)
    tmpfs.free()
    p = gen(inp, out, quick.url, "--input-changed", "regenerate")
    assert p.returncode == 0, p.stderr
    assert_regenerated_once(out)


def test_keep_killed_and_rerun_lists_each_stale_row_once(quick, slow, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    a_job_then_edited(inp, out, quick.url)
    stale = out / "stale.jsonl"
    write_rows(inp, [*rows(True), {"id": "added", "prompt": "an added row"}])
    job = popen(tmp_path, "-i", str(inp), "-o", str(out), "--url", slow.url, "-c", "1",
                "--input-changed", "keep")  # fmt: skip
    try:
        wait_for(lambda: stale.exists() or job.poll() is not None, 120, "stale.jsonl")
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait()
    for _ in range(2):
        p = gen(inp, out, quick.url, "--input-changed", "keep")
        assert p.returncode == 0, p.stderr
    ids = Counter(orjson.loads(x)["id"] for x in stale.read_bytes().splitlines())
    assert ids == Counter(f"r{i}" for i in range(CHANGED))
    assert_exactly_once(out, [*(f"r{i}" for i in range(ROWS)), "added"])


def test_a_full_disk_between_the_quarantine_and_the_rewrite_leaves_one_entry(
    quick, tmpfs, tmp_path
):
    """A garbled line inside a data file: its quarantine entry fits on the disk, the data
    file's rewrite does not (exit 12); the rerun quarantines the same line, once."""
    inp, out = tmp_path / "in.jsonl", tmpfs.path / "out"
    write_rows(inp, rows(False))
    assert gen(inp, out, quick.url).returncode == 0
    data = out / "data-00000.jsonl"
    lines = data.read_bytes().splitlines(keepends=True)
    lines[50] = b"{" + b"x" * (len(lines[50]) - 2) + b"\n"  # garbled, the same length
    data.write_bytes(b"".join(lines))
    # a part without a seal, whose readable rows are kept (a sealed part's changed batches
    # are set aside whole: test_integrity.py)
    (out / ".genbench" / "data-00000.jsonl.sum").unlink()
    tmpfs.fill()
    filler = tmpfs.path / "filler"
    os.truncate(filler, filler.stat().st_size - 64 * 1024)  # far less than the file's copy
    assert data.stat().st_size > 64 * 1024
    p = gen(inp, out, quick.url)
    assert p.returncode == 12, p.stdout + p.stderr
    assert "No space left on device" in one_error_line(p)
    quarantine = out / "quarantine.jsonl"
    assert len(quarantine.read_bytes().splitlines()) == 1
    no_tmp(out)
    tmpfs.free()
    p = gen(inp, out, quick.url)
    assert p.returncode == 0, p.stderr
    (entry,) = [orjson.loads(x) for x in quarantine.read_bytes().splitlines()]
    assert (entry["file"], entry["offset"]) == (data.name, sum(map(len, lines[:50])))
    assert_exactly_once(out, [f"r{i}" for i in range(ROWS)])


def test_a_full_disk_at_the_batch_output_is_one_line_exit_12(quick, tmpfs, tmp_path):
    """The Batch output is rebuilt at the end of every run: a disk too full for it is one
    line and exit 12 (never a traceback), the data whole, no temporary file left."""
    inp, out = tmp_path / "in.jsonl", tmpfs.path / "out"
    write_rows(inp, rows(False))
    assert gen(inp, out, quick.url, "--answers", "both").returncode == 0
    first = (out / "batch_output.jsonl").read_bytes()
    tmpfs.fill()
    p = gen(inp, out, quick.url, "--answers", "both")
    assert p.returncode == 12, p.stdout + p.stderr
    line = one_error_line(p)
    assert "cannot write batch_output.jsonl" in line and "No space left on device" in line
    assert (out / "batch_output.jsonl").read_bytes() == first  # the old one, whole
    assert_exactly_once(out, [f"r{i}" for i in range(ROWS)])
    no_tmp(out)
