"""Reading a JSONL part back on resume: the data over the index, always.

The index (`.genbench/PREFIX-NNNNN.idx`, a line per sync group, the rows fsynced together:
its end offset, ids, request hashes and line keys, a 64-bit hash of its bytes and the
file's mtime once they were on disk) makes resume fast: 1M ids come from it without reading
the data. It is trusted only as far as the data file proves it:

  * its sync groups' ends must go forward, lie within the file and end on a line boundary;
  * when the file's size and mtime are what the last group recorded, nothing touched the
    file since: the index is trusted without reading the data (the fast path);
  * otherwise (a crash between a write and its index entry, a hand edit, a restored
    backup) every group's bytes are hashed and compared, and the file is read line by
    line from the first group whose bytes changed.

Read line by line, an unreadable line with good rows after it (storage corruption, a
hand edit) is moved, with its byte offset, to the quarantine file beside the errors
file, and the rest of the file is kept (rewritten under a temporary name, fsynced and
renamed); its id is then not done and is generated again. Unreadable lines at the end
of the file are a torn tail (a crash mid-write) and are cut, as before. Bit rot that
leaves size and mtime as they were is not seen by the fast path; a sealed part's checksum
sees it (seal.py, verified on every resume), and then every row of a sync group whose hash
changed is moved aside, readable or not (`changed`).
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.atomic import write_atomic, writing
from genbench.generate.input.linekey import fast_id
from genbench.generate.request_hash import from_hex
from genbench.generate.store.durable import digest64, index_entry, write_all
from genbench.rows import RowMeta


@dataclass
class PartScan:
    """What a part holds: its ids in file order, with each row's request hash and
    line key (0 where unknown), where it ends, and what was repaired."""

    ids: list[str]
    valid_bytes: int
    notes: list[str] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    srcs: list[int] = field(default_factory=list)
    quarantined: int = 0


@dataclass
class _SyncGroup:
    start: int
    end: int
    ids: list[str]
    hashes: list[int]
    srcs: list[int]
    digest: int
    mtime: int
    raw: bytes


def _read_index(idx: Path) -> list[_SyncGroup]:
    groups: list[_SyncGroup] = []
    start = 0
    try:
        with open(idx, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break
                try:
                    obj = orjson.loads(line)
                    end, ids = int(obj["end"]), list(obj["ids"])
                    zeros = [0] * len(ids)
                    hashes, srcs = obj.get("req") or zeros, obj.get("src") or zeros
                    digest, mtime = int(obj.get("hash", 0)), int(obj.get("mtime", 0))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    break
                if len(hashes) != len(ids) or len(srcs) != len(ids):
                    break
                groups.append(_SyncGroup(start, end, ids, hashes, srcs, digest, mtime, line))
                start = end
    except FileNotFoundError:
        pass
    return groups


def index_ids(idx: Path) -> list[str]:
    """Every id an index names, in the order its rows were written."""
    return [i for b in _read_index(idx) for i in b.ids]


def index_keys(idx: Path) -> dict[str, int]:
    """id -> line key, from an index (a Parquet part keeps its JSONL's index for them)."""
    return {i: k for b in _read_index(idx) for i, k in zip(b.ids, b.srcs, strict=True) if k}


def rekey_index(idx: Path, learned: dict[str, int], hashes: Any) -> int:
    """Give the rows in `learned` their new line keys in an index (their request was
    checked and is the same: a reformatted input, a deleted index), so the next resume
    takes the fast path for them again; each group's other fields stay. Rows updated."""
    groups = _read_index(idx)
    n = 0
    lines = []
    for b in groups:
        mine = [learned.get(i, 0) for i in b.ids]
        if any(mine):
            n += sum(1 for k in mine if k)
            obj = orjson.loads(b.raw)
            obj["src"] = [k or s for k, s in zip(mine, b.srcs, strict=True)]
            obj["req"] = [f or hashes.get(i, 0) for i, f in zip(b.ids, b.hashes, strict=True)]
            lines.append(orjson.dumps(obj) + b"\n")
        else:
            lines.append(b.raw)
    if n:
        write_atomic(idx, b"".join(lines))
    return n


def line_id(line: bytes) -> tuple[str | None, int]:
    """The id of one data line and its request hash; (None, 0) if unreadable."""
    try:
        obj = orjson.loads(line)
        row_id = obj["id"]
        req_hash = from_hex(RowMeta.of(obj).request)
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None, 0
    if isinstance(row_id, int) and not isinstance(row_id, bool):
        return str(row_id), req_hash  # the input's integer ids are kept as integers
    return (row_id, req_hash) if isinstance(row_id, str) else (None, 0)


def _trusted(path: Path, groups: list[_SyncGroup], st: os.stat_result) -> int:
    """How many groups the data file vouches for (see the module's docstring)."""
    used = 0
    size = st.st_size
    # sync groups while their ends go forward within the file: one that claims bytes the file
    # does not have, and all after it, are not (the index is then rewritten)
    while used < len(groups) and groups[used].start <= groups[used].end <= size:
        used += 1
    if not used:
        return 0
    with open(path, "rb") as f:
        f.seek(groups[used - 1].end - 1)
        if groups[used - 1].end and f.read(1) != b"\n":
            return 0  # not a line boundary: the index is not about this file
        last = groups[used - 1]
        if used == len(groups) and last.end == size and last.mtime == st.st_mtime_ns:
            return used  # nothing wrote to the file since its last group: the fast path
        for i, b in enumerate(groups[:used]):
            if b.digest:  # an index of an older genbench has none: trusted as it was
                f.seek(b.start)
                if digest64(f.read(b.end - b.start)) != b.digest:
                    return i  # the bytes of this group changed: read from its start
    return used


def _changed(path: Path, groups: list[_SyncGroup], size: int) -> tuple[int, list[tuple[int, int]]]:
    """A sealed part whose bytes changed: the first group to read from, and the spans of the
    groups whose bytes changed (a group without a hash, and bytes no group names, count
    as changed: nothing vouches for them)."""
    spans: list[tuple[int, int]] = []
    with open(path, "rb") as f:
        for b in groups:
            f.seek(b.start)
            if b.end > size or not b.digest or digest64(f.read(b.end - b.start)) != b.digest:
                spans.append((b.start, b.end))
    last = groups[-1].end if groups else 0
    if last < size:
        spans.append((last, size))
    first = next((i for i, b in enumerate(groups) if (b.start, b.end) in spans), len(groups))
    return first, spans


def scan_jsonl_part(
    path: Path,
    idx: Path | None,
    repair: bool = True,
    quarantine: Path | None = None,
    changed: bool = False,
) -> PartScan:
    """The ids a JSONL part holds; cut a torn tail and move unreadable lines with good
    rows after them to `quarantine` (when `repair`). `changed`: a sealed part whose bytes
    are not those it was sealed with: every row of a sync group whose bytes changed is moved
    aside too, readable or not (a changed byte may leave valid JSON)."""
    st = path.stat()
    size = st.st_size
    groups = _read_index(idx) if idx is not None else []
    spans: list[tuple[int, int]] = []
    if changed:
        used, spans = _changed(path, groups, size)
    else:
        used = _trusted(path, groups, st)
    keep = groups[:used]
    pos = keep[-1].end if keep else 0
    ids: list[str] = []
    hashes: list[int] = []
    srcs: list[int] = []
    for b in keep:  # extend, not a comprehension: 1M ids in C, not in the interpreter
        ids.extend(b.ids)
        hashes.extend(b.hashes)
        srcs.extend(b.srcs)
    known = {i: s for b in groups[used:] for i, s in zip(b.ids, b.srcs, strict=True) if s}
    tail = _read_lines(path, pos, spans)
    for _, rid, req_hash in tail.good:
        ids.append(rid)
        hashes.append(req_hash)
        srcs.append(known.get(rid, 0))
    notes: list[str] = []
    end = tail.end
    if end < size:
        notes.append(f"{path.name}: cut {size - end} bytes of an incomplete last line")
    if changed:
        notes.append(_changed_note(path, tail.bad, quarantine))
    elif tail.bad:
        notes += [_quarantine_note(path, off, line, quarantine) for off, line in tail.bad]
    scan = PartScan(ids, end, notes, hashes, srcs, len(tail.bad))
    if not repair:
        return scan
    if tail.bad:
        scan.valid_bytes = _rewrite_without(path, pos, end, tail.bad, quarantine)
    elif end < size:
        os.truncate(path, end)
    stale = used < len(groups) or end < size or bool(tail.bad)
    moved = bool(keep) and keep[-1].mtime not in (0, st.st_mtime_ns)  # verified, re-stamp
    if idx is not None and (tail.good or stale or moved):
        _rewrite_index(path, idx, keep, tail, hashes, srcs)
    return scan


def _rewrite_index(
    path: Path, idx: Path, keep: list[_SyncGroup], tail: _Lines, hashes: list[int], srcs: list[int]
) -> None:
    """The trusted groups as they were, and one group for what was read line by line;
    the last group records the file's mtime now, so the next resume takes the fast path."""
    new = path.stat()
    n = len(tail.good)
    if n:
        keys = list(zip(hashes[-n:], srcs[-n:], strict=True))
        rows = [r for _, r, _ in tail.good]
        last = index_entry(new.st_size, rows, keys, tail.digest or 1, new.st_mtime_ns)
        head = b"".join(b.raw for b in keep)
    elif keep:
        head, last = b"".join(b.raw for b in keep[:-1]), _restamp(keep[-1], new.st_mtime_ns)
    else:
        head = last = b""
    write_atomic(idx, head + last)


def _restamp(b: _SyncGroup, mtime: int) -> bytes:
    obj = orjson.loads(b.raw)
    if "mtime" in obj:
        obj["mtime"] = mtime
    return orjson.dumps(obj) + b"\n"


@dataclass
class _Lines:
    good: list[tuple[int, str, int]]  # (offset, id, request hash) of readable rows
    bad: list[tuple[int, bytes]]  # unreadable lines with a good row after them
    end: int  # where the readable part ends: a torn or unreadable tail starts here
    digest: int  # of the good rows' bytes from the start offset, as they will be


def _read_lines(path: Path, pos: int, spans: list[tuple[int, int]] | None = None) -> _Lines:
    """The rows from byte `pos` on, line by line; a line within one of `spans` (bytes that
    changed since the part was sealed) is bad even where it reads as a row."""
    good: list[tuple[int, str, int]] = []
    bad: list[tuple[int, bytes]] = []
    pending: list[tuple[int, bytes]] = []  # unreadable, and no good row after them yet
    end = pos
    h = hashlib.blake2b(digest_size=8)
    with open(path, "rb") as f:
        f.seek(pos)
        for line in f:
            if not line.endswith(b"\n"):
                break
            rid, req_hash = line_id(line)
            if spans and any(a <= pos < b for a, b in spans):
                bad += [*pending, (pos, line)]
                pending = []
                end = pos + len(line)
            elif rid is None:
                pending.append((pos, line))
            else:
                bad += pending
                pending = []
                good.append((pos, rid, req_hash))
                h.update(line)
                end = pos + len(line)
            pos += len(line)
    return _Lines(good, bad, end, int.from_bytes(h.digest(), "big"))


def _changed_note(path: Path, bad: list[tuple[int, bytes]], quarantine: Path | None) -> str:
    ids = [fast_id(line) or "?" for _, line in bad]
    shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
    where = quarantine.name if quarantine is not None else "quarantine"
    return (
        f"{path.name}: its bytes changed since it was sealed (its checksum differs): "
        f"{len(bad):,} {'row' if len(bad) == 1 else 'rows'} of the batches that changed "
        f"({shown}) moved to {where}, to be generated again"
    )


def _quarantine_note(path: Path, off: int, line: bytes, quarantine: Path | None) -> str:
    rid = fast_id(line)
    row = f"its row {rid!r}" if rid else "its row (the id is unreadable too)"
    where = quarantine.name if quarantine is not None else "quarantine"
    return (
        f"{path.name}: an unreadable line at byte {off:,} ({len(line):,} bytes) moved to "
        f"{where}; the rest of the file is kept and {row} is generated again"
    )


def _rewrite_without(
    path: Path, start: int, end: int, bad: list[tuple[int, bytes]], quarantine: Path | None
) -> int:
    """Move the `bad` lines to the quarantine file (fsynced first), then replace the data
    file by a copy without them and without the torn tail from `end`; its new size."""
    if quarantine is not None:
        at = round(time.time(), 3)
        entries = {}
        for off, line in bad:
            key = entry_id(path.name, off, line)
            text = line.rstrip(b"\n").decode("utf-8", "replace")
            entries[key] = orjson.dumps(
                {"file": path.name, "offset": off, "length": len(line), "id": fast_id(line),
                 "text": text, "quarantined_at": at, "entry_id": key}
            ) + b"\n"  # fmt: skip
        append_once(quarantine, entries)
    return drop_lines(path, [(off, len(line)) for off, line in bad], end)


def entry_id(file: str, offset: int, line: bytes) -> str:
    """What names one side-file entry (a line quarantined, a row set aside): the data file,
    where the line was in it and its bytes. A rerun after a crash between the entry and
    the data file's rewrite finds the same line at the same place: the same id."""
    h = hashlib.blake2b(line, digest_size=8)
    h.update(f"{file}\0{offset}".encode())
    return h.hexdigest()


def append_once(path: Path, entries: dict[str, bytes]) -> int:
    """Append the entries (entry_id -> line) the side file does not hold yet, and fsync it:
    before the data file loses them. The entry is written first and the data file
    rewritten after, so a crash (or a full disk) between the two leaves the entry and the
    line both; the rerun moves the line again and must not write its entry twice. A torn
    last line (a crash mid-append) is cut first. Returns the entries written."""
    held = _entry_ids(path)
    new = [line for key, line in entries.items() if key not in held]
    if not new:
        return 0
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        write_all(fd, b"".join(new))
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(new)


def _entry_ids(path: Path) -> set[str]:
    held: set[str] = set()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return held
    whole = data.rfind(b"\n") + 1
    if whole < len(data):
        os.truncate(path, whole)  # a torn last entry: written again below
    for line in data[:whole].splitlines():
        try:
            held.add(str(orjson.loads(line)["entry_id"]))
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue  # an entry from before entry ids, or unreadable: never a match
    return held


def drop_lines(path: Path, drops: list[tuple[int, int]], end: int) -> int:
    """Replace `path` by a copy of its bytes up to `end` without the (offset, length)
    spans in `drops` (sorted): a temporary file, fsynced, renamed. Returns the new size."""
    with open(path, "rb") as src, writing(path) as dst:
        pos = 0
        for off, n in [*drops, (end, 0)]:
            _copy_bytes(src, dst, off - pos)
            src.seek(off + n)
            pos = off + n
        size = dst.tell()
    return size


def _copy_bytes(src: Any, dst: Any, n: int, block: int = 1 << 20) -> None:
    while n > 0:
        chunk = src.read(min(block, n))
        if not chunk:
            break
        dst.write(chunk)
        n -= len(chunk)
