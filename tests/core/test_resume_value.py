"""A resume as one value: what the run found before it sent anything (the directory as
earlier runs left it, the input checked against it, the job's request check) and every
note said on the way, in the order the listener heard them."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from test_readback import JOB, written

from genbench.generate.jobconfig import JobConfig
from genbench.generate.store.resume import prepare
from genbench.generate.store.writer import Store

pytestmark = pytest.mark.core


class Heard:
    def __init__(self) -> None:
        self.notes: list[tuple[str, str]] = []

    def note(self, text: str, style: str = "") -> None:
        self.notes.append((text, style))


def test_the_resume_holds_what_it_found_and_what_it_said(tmp_path: Path):
    out = tmp_path / "out"
    data, _, _ = written(out, batches=2, per=3)  # r0..r5 done
    with data.open("ab") as f:
        f.write(b'{"id": "torn", "conv')  # a crash mid-line: repaired, and said
    (out / ".genbench" / "job.json").write_bytes(orjson.dumps({**JOB, "input": "in.jsonl"}))
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"".join(orjson.dumps({"id": f"r{i}", "prompt": "p"}) + b"\n"
                             for i in range(8)) + b'{"id": "bad"}\n')  # fmt: skip
    # the shard's fingerprints are made up: every done row answers a changed request
    cfg = JobConfig(input=inp, output=out, servers=[], skip_invalid=True, input_changed="keep")
    heard = Heard()
    found = prepare(cfg, Store(out), heard)
    assert found.notes == heard.notes and len(found.notes) == 2
    assert found.notes[0][0].startswith("repaired") and "stale.jsonl" in found.notes[1][0]
    assert sorted(found.scan.todo) == ["r6", "r7"]
    assert (found.scan.rows, found.scan.done, len(found.scan.bad)) == (8, 6, 1)
    assert found.check.salt is not None and found.existing.job is not None
    assert found.existing.done == {}  # let go: the run writes only the rows to do
