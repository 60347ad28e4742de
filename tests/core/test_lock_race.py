"""The shards of one job started at once: each takes its own lock in a directory none of
them has made yet. Whoever makes the directory first, the others share it (CI saw a
second shard exit 12, "a path on the way is a file", when its mkdir lost the race)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

from genbench.errors import GenbenchError
from genbench.generate.store.lock import OutputLock

pytestmark = pytest.mark.core

SHARDS = 6
ROUNDS = 25


def _take(out: str, name: str, barrier, results) -> None:  # type: ignore[no-untyped-def]
    lock = OutputLock(Path(out), Path(out) / ".genbench", name)
    barrier.wait()  # every process at the starting line: the mkdirs race
    try:
        lock.acquire()
        results.put((name, "ok"))
        barrier.wait()  # all hold their locks before any lets go
        lock.release(remove_empty=False)
    except GenbenchError as e:
        results.put((name, str(e)))
        barrier.abort()


def test_shards_started_at_once_all_take_their_locks(tmp_path):
    ctx = mp.get_context("fork")
    for r in range(ROUNDS):
        out = tmp_path / f"out{r}"
        barrier, results = ctx.Barrier(SHARDS), ctx.Queue()
        names = [f"lock-{i}of{SHARDS}" for i in range(1, SHARDS + 1)]
        procs = [ctx.Process(target=_take, args=(str(out), n, barrier, results)) for n in names]
        for p in procs:
            p.start()
        got = dict(results.get(timeout=60) for _ in names)
        for p in procs:
            p.join(60)
        assert got == {n: "ok" for n in names}, (r, got)
        assert {p.name for p in (out / ".genbench").iterdir()} == set(names)


def test_a_run_that_removed_the_directory_it_made_does_not_fail_the_next(tmp_path):
    out = tmp_path / "out"
    first = OutputLock(out, out / ".genbench", "lock-1of2")
    first.acquire()
    first.release()  # nothing written: what it made is gone again
    assert not out.exists()
    second = OutputLock(out, out / ".genbench", "lock-2of2")
    second.acquire()
    assert second.created == [out, out / ".genbench"]
    second.release()


def test_a_file_on_the_way_is_still_one_line(tmp_path):
    (tmp_path / "out").write_text("x")
    lock = OutputLock(tmp_path / "out", tmp_path / "out" / ".genbench")
    with pytest.raises(GenbenchError, match="a path on the way is a file"):
        lock.acquire()
    under = tmp_path / "out" / "deeper" / "job"  # a missing parent is made; a file is not
    with pytest.raises(GenbenchError, match="a path on the way is a file"):
        OutputLock(under, under / ".genbench").acquire()


def test_an_output_directory_is_made_with_its_parents_and_removed_with_them(tmp_path):
    """plan's next: line says `-o out/job`; there was no out/ yet and generate said
    'cannot write to it: No such file or directory'. Its parents are made as `mkdir -p`
    does, and a run that wrote nothing removes them again."""
    out = tmp_path / "out" / "plans" / "job"
    lock = OutputLock(out, out / ".genbench", "lock")
    lock.acquire()
    assert lock.created == [tmp_path / "out", tmp_path / "out" / "plans", out,
                            out / ".genbench"]  # fmt: skip
    lock.release()
    assert not (tmp_path / "out").exists() and tmp_path.is_dir()
    keep = OutputLock(out, out / ".genbench", "lock")
    keep.acquire()
    (out / "data-00000.jsonl").write_text("{}\n")  # something written: all of it stays
    keep.release()
    assert (out / "data-00000.jsonl").is_file()
