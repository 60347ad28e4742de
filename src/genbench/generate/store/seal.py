"""A sealed data part's checksum: recorded once the part is written for good, verified by
`merge`, `inspect` and every resume.

A data part is sealed when no row will be appended to it again: a JSONL part when it is
full (`--part-size`, the next part started), a Parquet part once converted, every part of
a job that finished complete, each part `merge --out` writes, each part of `inspect
--drop ... --out`'s clean copy. Its seal,
`.genbench/<part>.sum` (layout.seal_of), keeps its size and CRC-32. A part whose bytes
differ from its seal changed after it was written (bit rot, a bad copy, a hand edit):
`merge` and `inspect` name it, the rows it holds (from its index, else read as they can be)
and the command that regenerates them, which is the job's own resume: a resume verifies
every sealed part it reads and sets the changed rows aside (readback.py) to be generated
again. A part without a seal (written by an older genbench, or still being written) is
"not verified", never refused.

Why CRC-32 (zlib's): it checks for accidents, not for an adversary, and it is the fastest
check the standard library has: 3.98 GB/s of CPU time on one core, blake2b 0.88, SHA-1
1.91, SHA-256 1.79; a 1 GB output verified in 0.46 s of CPU (benchmarks/checksum.py). With
the size beside it, a changed part goes unseen with odds of 1 in 2^32.
"""

from __future__ import annotations

import contextlib
import shlex
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from genbench.atomic import move, write_atomic
from genbench.generate.input.linekey import fast_id
from genbench.generate.store.layout import (
    Layout,
    damaged_place,
    data_tag,
    index_of,
    seal_of,
)
from genbench.generate.store.readback import index_ids
from genbench.generate.store.rerun import HINT_URL, job_flags
from genbench.rows import convert_to_parquet

CHUNK = 8 << 20  # read a part in 8 MB blocks: large enough that CRC-32 sets the pace
VERIFIED, CHANGED, UNSEALED = "verified", "changed", "not verified"
EXAMPLES = 5


def checksum(path: Path) -> tuple[int, int]:
    """(bytes, CRC-32) of a file, read in blocks into one buffer (zlib releases the GIL)."""
    crc = size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc = zlib.crc32(view[:n], crc)
            size += n
    return size, crc


def seal(part: Path) -> None:
    """Record the part's size and checksum: it is never written again."""
    size, crc = checksum(part)
    doc = {"part": part.name, "bytes": size, "crc32": f"{crc:08x}", "sealed_at": time.time()}
    write_atomic(seal_of(part), orjson.dumps(doc) + b"\n")


def reseal(part: Path) -> None:
    """A sealed part rewritten by genbench itself (rows set aside): its new seal."""
    if seal_of(part).exists():
        seal(part)


def unseal(part: Path) -> None:
    seal_of(part).unlink(missing_ok=True)


def is_sealed(part: Path) -> bool:
    return seal_of(part).exists()


def convert_and_seal(src: str, dst: str) -> int:
    """A full JSONL part to Parquet, and the Parquet part sealed (in the converter's
    process, off the job's event loop); the rows written."""
    rows = convert_to_parquet(src, dst)
    seal(Path(dst))
    return rows


@dataclass(frozen=True)
class PartCheck:
    """One part against its seal: verified, changed (with both sizes and sums), or not
    verified (no seal)."""

    part: Path
    state: str
    detail: str = ""


def check(part: Path) -> PartCheck:
    """The part's bytes against its seal (reads the whole part)."""
    try:
        doc = orjson.loads(seal_of(part).read_bytes())
        want_size, want_crc = int(doc["bytes"]), str(doc["crc32"])
    except FileNotFoundError:
        return PartCheck(part, UNSEALED)
    except (OSError, ValueError, KeyError, TypeError):
        return PartCheck(part, CHANGED, "its seal is unreadable")
    size, crc = checksum(part)
    if size == want_size and f"{crc:08x}" == want_crc:
        return PartCheck(part, VERIFIED)
    return PartCheck(part, CHANGED, f"sealed at {want_size:,} bytes, CRC-32 {want_crc}; now "
                                    f"{size:,} bytes, CRC-32 {crc:08x}")  # fmt: skip


def verify(parts: list[Path]) -> list[PartCheck]:
    return [check(p) for p in parts]


def held_ids(part: Path) -> list[str]:
    """The ids a part holds: from its index where it has one (written as the rows were),
    else as many as can be read from the part itself."""
    idx = index_of(part)
    if idx.exists():
        return index_ids(idx)
    if part.suffix == ".parquet":
        try:
            from genbench.rows import parquet_ids

            return parquet_ids(part)[0]
        except Exception:  # noqa: BLE001 - a damaged Parquet file: its ids are unreadable
            return []
    with open(part, "rb") as f:
        return [rid for line in f if (rid := fast_id(line))]


def set_aside(part: Path) -> Path:
    """A resume's answer to a changed Parquet part: the part (and its index) moved into
    `.genbench/damaged/`, so its rows are generated again; where it went."""
    dst = damaged_place(part)
    dst.parent.mkdir(parents=True, exist_ok=True)
    idx = index_of(part)
    if idx.exists():
        move(idx, dst.with_name(idx.name))
    move(part, dst)
    unseal(part)
    return dst


def regenerate_command(out: Path, part: Path) -> str:
    """The command that generates a changed part's rows again: the job's (or the part's
    shard's) resume, which finds the part changed and sets its rows aside first."""
    tag = data_tag(part).lstrip("-") or None
    job: Any = {}
    with contextlib.suppress(OSError, ValueError):
        job = orjson.loads(Layout(out, tag).job.read_bytes())
    src = str(job.get("input") or "INPUT") if isinstance(job, dict) else "INPUT"
    shard = f" --shard {tag.replace('of', '/')}" if tag else ""
    flags = "".join(f" {f}" for f in (job_flags(job) if isinstance(job, dict) else []))
    where = f"-i {shlex.quote(src)} -o {shlex.quote(str(out))}{shard}"
    return f"genbench generate {where} --url {HINT_URL}{flags}"


def ids_shown(ids: list[str]) -> str:
    if not ids:
        return "no row that can be read"
    shown = ", ".join(ids[:EXAMPLES]) + (", ..." if len(ids) > EXAMPLES else "")
    return f"{len(ids):,} {'row' if len(ids) == 1 else 'rows'} ({shown})"


def damage_lines(out: Path, checks: list[PartCheck]) -> list[str]:
    """A line per changed part: the part, how it changed, its rows, the command."""
    return [
        f"{c.part.name}: its bytes changed since it was sealed ({c.detail}); it holds "
        f"{ids_shown(held_ids(c.part))}; regenerate them: {regenerate_command(out, c.part)}"
        for c in checks
        if c.state == CHANGED
    ]


def summary(checks: list[PartCheck]) -> str:
    """One line: how many parts were verified, changed, or could not be."""
    n = {s: sum(c.state == s for c in checks) for s in (VERIFIED, CHANGED, UNSEALED)}
    parts = [f"{n[VERIFIED]:,} of {len(checks):,} {'part' if len(checks) == 1 else 'parts'} "
             "verified (CRC-32)"]  # fmt: skip
    if n[CHANGED]:
        parts.append(f"{n[CHANGED]:,} changed since sealed")
    if n[UNSEALED]:
        parts.append(f"{n[UNSEALED]:,} not verified (no checksum recorded: written before "
                     "genbench sealed its parts, or still being written)")  # fmt: skip
    return "integrity: " + "; ".join(parts)
