"""The one streaming pass: every row is read once, examined, and reduced to a few numbers.

What is kept per row, whatever its length: output, thinking and prompt tokens, server,
finish reason, defect bits, line bytes, two 8-byte answer hashes, where it is, and the id
(about 60 bytes plus the id's JSON text). Texts are dropped as soon as the row is
examined. The examples shown for each defect are the first ones met, with their file and
line.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from genbench.inspect.acceptance import AcceptTally
from genbench.inspect.detect import BIT, DEFECTS, Thresholds, answer_keys, examine
from genbench.inspect.distribution import duplicates
from genbench.inspect.fidelity import Fidelity
from genbench.inspect.reader import FileStats, kind_of, read_rows
from genbench.inspect.tools import ToolTally

PARQUET_SAMPLE = 1000  # rows kept (reservoir) to measure Parquet bytes per row of a JSONL set


class RowIds:
    """Every row's id, packed: its JSON text in one bytearray, and where each one ends."""

    def __init__(self) -> None:
        self.blob = bytearray()
        self.ends = array("Q")

    def add(self, rid: str | int) -> None:
        self.blob += orjson.dumps(rid)
        self.ends.append(len(self.blob))

    def __getitem__(self, i: int) -> str | int:
        start = self.ends[i - 1] if i else 0
        return orjson.loads(bytes(self.blob[start : self.ends[i]]))

    def __len__(self) -> int:
        return len(self.ends)

    def repeated(self, max_examples: int) -> dict[str, Any]:
        """Rows whose id an earlier row already had (the shards of a directory written
        under two schemes): counted, a few ids kept; export writes the first of each."""
        blob, seen, start = bytes(self.blob), set(), 0
        rows, examples = 0, []
        for end in self.ends:
            key = blob[start:end]
            start = end
            if key in seen:
                rows += 1
                if len(examples) < max_examples:
                    examples.append(orjson.loads(key))
            else:
                seen.add(key)
        return {"rows": rows, "examples": examples}


@dataclass
class Columns:
    """Per-row numbers, appended in reading order; `arrays()` views them as numpy."""

    completion: array = field(default_factory=lambda: array("i"))
    thinking: array = field(default_factory=lambda: array("i"))  # -1: not reported
    prompt: array = field(default_factory=lambda: array("i"))  # -1: not reported
    server: array = field(default_factory=lambda: array("I"))
    finish: array = field(default_factory=lambda: array("I"))
    nbytes: array = field(default_factory=lambda: array("I"))
    flags: bytearray = field(default_factory=bytearray)
    exact: array = field(default_factory=lambda: array("q"))
    near: array = field(default_factory=lambda: array("q"))
    keyed: bytearray = field(default_factory=bytearray)  # 1: the answer has keys
    estimated: bytearray = field(default_factory=bytearray)  # 1: meta.tokens_estimated

    def arrays(self) -> dict[str, np.ndarray]:
        def view(a: Any, dtype: Any) -> np.ndarray:
            return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype)

        return {
            "completion": view(self.completion, np.int32).astype(np.int64),
            "thinking": view(self.thinking, np.int32).astype(np.int64),
            "prompt": view(self.prompt, np.int32).astype(np.int64),
            "server": view(self.server, np.uint32),
            "finish": view(self.finish, np.uint32),
            "nbytes": view(self.nbytes, np.uint32).astype(np.uint64),
            "flags": view(self.flags, np.uint8).copy(),  # dup bits are added later
            "exact": view(self.exact, np.int64),
            "near": view(self.near, np.int64),
            "keyed": view(self.keyed, np.uint8).astype(bool),
            "estimated": view(self.estimated, np.uint8).astype(bool),
        }


@dataclass
class Example:
    id: str | int
    file: str
    line: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "file": self.file, "line": self.line, "detail": self.detail}


@dataclass
class Scan:
    """What the pass found, before any statistics."""

    files: list[FileStats]
    cols: Columns
    ids: RowIds
    servers: list[str]
    finishes: list[str]
    examples: dict[str, list[Example]]
    sample: list[Any]  # decoded rows, for the Parquet size estimate of a JSONL set
    where: array = field(default_factory=lambda: array("Q"))  # (file index << 40) | line
    fidelity: Fidelity | None = None  # the token ids' counts (inspect/fidelity.py)
    tools: ToolTally = field(default_factory=ToolTally)  # agentic rows' calls
    accept: AcceptTally = field(default_factory=AcceptTally)  # speculative acceptance

    @property
    def rows(self) -> int:
        return len(self.ids)

    def location(self, i: int) -> tuple[str, int]:
        w = self.where[i]
        return self.files[w >> 40].path.name, w & ((1 << 40) - 1)

    def mark_duplicates(self, a: dict[str, np.ndarray], max_examples: int) -> dict[str, Any]:
        """Set the dup bit of every row whose answer an earlier row already gave; return
        the counts, and examples naming the row each one copies."""
        dup_exact, _ = duplicates(a["exact"], a["keyed"])
        dup_near, first = duplicates(a["near"], a["keyed"])
        a["flags"][dup_near] |= BIT["dup"]
        examples = []
        for i in np.flatnonzero(dup_near)[:max_examples]:
            how = "exactly" if dup_exact[i] else "up to case and whitespace"
            file, line = self.location(int(i))
            other = self.ids[int(first[i])]
            examples.append(
                Example(self.ids[int(i)], file, line, f"same answer as {other} ({how})")
            )
        self.examples["dup"] = examples
        return {
            "rows_checked": int(a["keyed"].sum()),
            "exact": int(dup_exact.sum()),
            "near_only": int(dup_near.sum() - (dup_exact & dup_near).sum()),
            "first_of": first,
        }


def _index(names: dict[str, int], name: str) -> int:
    i = names.get(name)
    if i is None:
        i = names[name] = len(names)
    return i


def scan(
    files: list[Path],
    th: Thresholds,
    max_examples: int = 5,
    progress: Callable[[int], None] | None = None,
    drift_sample: int = 0,
    same_server: dict[str, str] | None = None,
) -> Scan:
    """Read every row of `files` once; examine it; keep its numbers (and `drift_sample`
    turns' ids, for the tokenizer's round trip). `same_server`: a server's other URLs, each
    to the one it is counted under (reader.py engine_servers)."""
    same = same_server or {}
    fid = Fidelity(th.min_tokens, drift_sample)
    cols, ids = Columns(), RowIds()
    servers: dict[str, int] = {}
    finishes: dict[str, int] = {}
    examples: dict[str, list[Example]] = {d: [] for d in DEFECTS}
    stats: list[FileStats] = []
    sample: list[Any] = []
    where = array("Q")
    tools = ToolTally(max_examples=max_examples)
    accept = AcceptTally()
    rng = random.Random(0)
    n = 0
    for fi, path in enumerate(files):
        fs = FileStats(path, kind_of(path))
        stats.append(fs)
        jsonl = fs.kind == "jsonl"
        for line, row, obj in read_rows(path, fs):
            bits, details = examine(row, th)
            fid.add(obj)
            tools.add(obj, row.id, path.name, line)
            accept.add(obj)
            for name, detail in details:
                if len(examples[name]) < max_examples:
                    examples[name].append(Example(row.id, path.name, line, detail))
            ids.add(row.id)
            where.append((fi << 40) | line)
            cols.completion.append(row.completion_tokens)
            cols.thinking.append(-1 if row.reasoning_tokens is None else row.reasoning_tokens)
            cols.estimated.append(row.estimated)
            cols.prompt.append(-1 if row.prompt_tokens is None else row.prompt_tokens)
            cols.server.append(_index(servers, same.get(row.server, row.server)))
            cols.finish.append(_index(finishes, row.finish_reason or "none"))
            cols.nbytes.append(row.nbytes)
            cols.flags.append(bits)
            keys = answer_keys(row, th)
            exact, near = (0, 0) if keys is None else keys
            cols.exact.append(exact)
            cols.near.append(near)
            cols.keyed.append(keys is not None)
            if jsonl:  # reservoir sample: every row equally likely to be kept
                if len(sample) < PARQUET_SAMPLE:
                    sample.append(obj)
                elif (j := rng.randrange(n + 1)) < PARQUET_SAMPLE:
                    sample[j] = obj
            n += 1
            if progress is not None and not n & 0xFFF:
                progress(n)
    return Scan(
        stats, cols, ids, list(servers), list(finishes), examples, sample, where, fid, tools,
        accept,
    )  # fmt: skip
