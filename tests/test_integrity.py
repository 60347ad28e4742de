"""A sealed data part's bytes are what was written (#45): `merge` and `inspect` verify every
part against the checksum recorded when it was sealed, name a part whose bytes changed, the
rows it holds and the command that regenerates them, and that command (the job's resume)
sets the changed rows aside and generates them again. Before, bit rot that left a part's
size and mtime as they were was skipped by the resume's fast path, and the row was lost
without a word."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from conftest import genbench
from test_generate import FAST, assert_exactly_once, prompts, write_rows

from genbench.sim.process import SimProcess

QUICK = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1", "--output-len", "fixed:8")


@pytest.fixture(scope="module")
def quick() -> Iterator[SimProcess]:
    with SimProcess(*QUICK) as p:
        yield p


def rot(part: Path, line: int) -> str:
    """Garble one row of `part` in place, its size and mtime kept: the id of the row."""
    st = part.stat()
    lines = part.read_bytes().splitlines(keepends=True)
    victim = orjson.loads(lines[line])["id"]
    lines[line] = lines[line].replace(b'"content"', b'{content"', 1)  # one byte, unreadable
    part.write_bytes(b"".join(lines))
    os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns))
    return victim


def test_a_part_whose_bytes_changed_is_named_with_its_rows_and_regenerated(quick, tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out"
    write_rows(inp, prompts(30))
    args = ("--max-tokens", "8", "--part-size", "4KB")
    res = genbench("generate", "-i", str(inp), "-o", str(out), "--url", quick.url, *FAST, *args)
    assert res.returncode == 0, res.stderr
    parts = sorted(out.glob("data-*.jsonl"))
    assert len(parts) >= 3 and all((out / ".genbench" / f"{p.name}.sum").exists() for p in parts)
    victim = rot(parts[1], 1)
    lines = parts[1].read_bytes().splitlines()
    held = [orjson.loads(x)["id"] for x in lines if b"{content" not in x]
    res = genbench("merge", str(out))
    assert res.returncode == 1, res.stdout
    (line,) = [x for x in res.stdout.splitlines() if x.startswith(parts[1].name)]
    assert "its bytes changed since it was sealed" in line and victim in line
    assert f"it holds {len(held) + 1} rows" in line and held[0] in line
    command = line.split("regenerate them: ", 1)[1]
    res = genbench("inspect", str(out))
    assert res.returncode == 1 and f"{parts[1].name}: its bytes changed" in res.stderr
    # the command as printed, the server's URL given where it says `--url URL`
    argv = shlex.split(command.replace("--url URL", f"--url {quick.url}"))
    assert argv[:2] == ["genbench", "generate"]
    res = genbench(*argv[1:])
    assert res.returncode == 0, res.stderr
    assert f"{parts[1].name}: its bytes changed since it was sealed" in res.stdout
    assert_exactly_once(out, [f"r{i}" for i in range(30)])
    res = genbench("merge", str(out))
    assert res.returncode == 0, res.stdout
    assert f"{len(parts) + 1} of {len(parts) + 1} parts verified (CRC-32)" in res.stdout
