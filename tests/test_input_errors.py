"""A bad input file is reported whole, in one pass, before any request: every bad line
(the first input_errors.SHOWN printed, the count of all), not one per rerun."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from conftest import genbench
from tests_helpers import closed_port_url

from genbench.errors import UsageError
from genbench.generate.input.errors import SHOWN
from genbench.generate.input.reader import scan


def good(i: int) -> bytes:
    return orjson.dumps({"id": f"r{i}", "messages": [{"role": "user", "content": f"q {i}"}]})


def file_with(path: Path, n: int, bad: dict[int, bytes]) -> Path:
    """n lines, line k (1-based) replaced by bad[k]."""
    path.write_bytes(b"".join(bad.get(k, good(k)) + b"\n" for k in range(1, n + 1)))
    return path


def test_a_broken_line_and_a_later_duplicate_are_both_reported(tmp_path):
    inp = file_with(tmp_path / "in.jsonl", 200, {57: b'{"id": "x", "messages": [', 121: good(3)})
    with pytest.raises(UsageError) as e:
        scan(inp)
    lines = str(e.value).splitlines()
    assert lines[0].startswith(f"{inp}, line 57: not valid JSON"), lines
    assert lines[1] == (f"{inp}, line 121: field 'id': duplicate id 'r3' as line 3; ids must "
                        "be unique")  # fmt: skip
    assert lines[2] == (f"{inp}: 2 bad lines (all shown); nothing was sent. Fix them, or "
                        "--skip-invalid to send the other rows and write these to the errors "
                        "file")  # fmt: skip
    assert len(lines) == 3


def test_one_bad_line_is_said_as_it_always_was(tmp_path):
    inp = file_with(tmp_path / "in.jsonl", 10, {4: good(2)})
    with pytest.raises(UsageError) as e:
        scan(inp)
    assert str(e.value) == (f"{inp}, line 4: field 'id': duplicate id 'r2' as line 2; ids "
                            "must be unique")  # fmt: skip


def test_many_bad_lines_show_the_first_and_count_them_all(tmp_path):
    bad = {k: b'{"id": "x%d", "text": "no prompt"}' % k for k in range(10, 1010, 10)}
    bad |= {k: good(1) for k in range(15, 1015, 100)}  # ten duplicates of r1 among them
    inp = file_with(tmp_path / "in.jsonl", 1100, bad)
    with pytest.raises(UsageError) as e:
        scan(inp)
    lines = str(e.value).splitlines()
    assert len(lines) == SHOWN + 1
    assert lines[-1].startswith(f"{inp}: 110 bad lines (the first {SHOWN} shown)")
    assert [ln.split(",")[1].split(":")[0] for ln in lines[:3]] == [
        " line 10", " line 15", " line 20"]  # fmt: skip
    assert "duplicate id 'r1' as line 1;" in lines[1]


def test_generate_reports_them_all_before_any_request(tmp_path):
    inp = file_with(tmp_path / "in.jsonl", 200, {57: b"{broken", 121: good(3)})
    out = tmp_path / "out"
    p = genbench("generate", "-i", str(inp), "-o", str(out), "--url", closed_port_url(),
                 timeout=60)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert f"genbench: error: {inp}, line 57: not valid JSON" in p.stderr
    assert f"{inp}, line 121: field 'id': duplicate id 'r3' as line 3" in p.stderr
    assert "2 bad lines (all shown)" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()  # nothing written, nothing sent (the URL has no server)
