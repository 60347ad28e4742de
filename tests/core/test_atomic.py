"""One atomic writer (`atomic.writing`): no rewrite by hand anywhere else in src, and the
writer's promises: the old file or the new one, never half, no temporary file left."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from genbench import atomic

pytestmark = pytest.mark.core

SRC = Path(__file__).resolve().parents[2] / "src" / "genbench"
# a rename over a file, or a temporary name spelled out: only atomic.py does either
HAND_WRITTEN = re.compile(r"os\.replace|os\.rename|\.replace\(tmp|[\"']\.tmp[\"']|\.tmp\b")


def test_no_atomic_rewrite_outside_atomic_py():
    found = [
        f"{p.relative_to(SRC)}:{n}: {line.strip()}"
        for p in sorted(SRC.rglob("*.py"))
        if p.name != "atomic.py" or p.parent != SRC
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if HAND_WRITTEN.search(line)
    ]
    assert not found, "rewrite through genbench.atomic.writing:\n" + "\n".join(found)


def test_the_rule_sees_a_hand_written_rewrite():
    assert HAND_WRITTEN.search('    tmp = out.with_name(out.name + ".tmp")')
    assert HAND_WRITTEN.search("    os.replace(tmp, path)")
    assert not HAND_WRITTEN.search("    with writing(path) as f:")


def test_writing_replaces_the_file_whole(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"old")
    with atomic.writing(path) as f:
        f.write(b"new")
        assert path.read_bytes() == b"old"  # not yet: the old file stays until the end
        assert atomic.temp_path(path).exists()
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_an_error_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b"old")
    with pytest.raises(ValueError), atomic.writing(path) as f:
        f.write(b"half")
        raise ValueError("the writer failed")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_failed_directory_fsync_raises(tmp_path, monkeypatch):
    """The rename may not be durable: the caller must hear of it (it was ignored once)."""
    real = atomic.fsync_path

    def fsync(path: Path) -> None:
        if Path(path).is_dir():
            raise OSError(5, "Input/output error")
        real(path)

    monkeypatch.setattr(atomic, "fsync_path", fsync)
    with pytest.raises(OSError, match="Input/output"), atomic.writing(tmp_path / "a") as f:
        f.write(b"x")


def test_shared_writers_take_their_own_temporary_names(tmp_path):
    path = tmp_path / "model.gguf"
    with atomic.writing(path, shared=True) as a, atomic.writing(path, shared=True) as b:
        assert a.name != b.name and atomic.is_temp(Path(a.name))
        a.write(b"same")
        b.write(b"same")
    assert path.read_bytes() == b"same"
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]
