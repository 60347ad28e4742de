"""An input edited between runs: every id of the current input, once, answering its
current request.

The input scan (`input.scan` with a `request_hash.RequestCheck`) finds the done rows whose
request changed since they were made (an edited prompt, a row's new params, new job
settings under `--force`) and the done rows the input no longer has (a removed row; a
row without an id whose content changed, since its id is derived from the content). By
default the job is refused, in one line, before anything is written or sent. Then:

  * `--input-changed regenerate`: the old answers are taken out of the data files
    (rewritten atomically) into `replaced.jsonl` (each line: why, the file it was in,
    the row as it was), never mixed with the data; the changed rows are generated again;
  * `--input-changed keep`: they stay, and `stale.jsonl` lists each (why, the
    request hash it answers, the one the input asks now); a later resume does not ask
    again about a row kept for the request it asks then.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from genbench.atomic import write_atomic, writing
from genbench.errors import UsageError
from genbench.generate.input.linekey import fast_id
from genbench.generate.input.reader import InputScan
from genbench.generate.request_hash import RequestCheck, from_hex, to_hex
from genbench.generate.store import lostjob
from genbench.generate.store.durable import index_entry
from genbench.generate.store.readback import append_once, drop_lines, entry_id, line_id
from genbench.generate.store.seal import reseal
from genbench.generate.store.writer import Existing, Store

CHANGED, GONE = "request changed", "not in the input"
POLICIES = ("regenerate", "keep")
EXAMPLES = 3


@dataclass
class Changes:
    changed: list[tuple[str, int, int]]  # (id, its request hash now, line key)
    removed: list[str]

    def __bool__(self) -> bool:
        return bool(self.changed or self.removed)

    def describe(self) -> str:
        parts = []
        if self.changed:
            ids = [c[0] for c in self.changed]
            parts.append(f"{_rows(len(ids))} a request that has changed since ({_examples(ids)})")
        if self.removed:
            n = len(self.removed)
            are = "is" if n == 1 else "are"
            parts.append(
                f"{n:,} done row{'s' * (n != 1)} {are} no longer in the input "
                f"({_examples(self.removed)})"
            )
        return " and ".join(parts)


def _rows(n: int) -> str:
    return f"{n:,} done row answers" if n == 1 else f"{n:,} done rows answer"


def _examples(ids: list[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:EXAMPLES])
    return "e.g. " + shown + (", …" if len(ids) > EXAMPLES else "")


def read_kept(store: Store) -> dict[str, tuple[int, int]]:
    """The rows `--input-changed keep` kept: id -> (request hash kept for, 0 if gone; key)."""
    kept: dict[str, tuple[int, int]] = {}
    path = store.layout.stale
    if not path.exists():
        return kept
    for line in path.read_bytes().splitlines():
        try:
            e = orjson.loads(line)
            kept[str(e["id"])] = (from_hex(e.get("request_now")), int(e.get("key") or 0))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return kept


def settle(
    store: Store, existing: Existing, res: InputScan, check: RequestCheck, policy: str | None
) -> str | None:
    """Apply the policy to what the scan found; the note to show, or None. Raises the
    one-line refusal without a policy."""
    ch = Changes(check.changes, res.removed)
    if not ch:
        return None
    if policy is None:
        lost = existing.job_problem  # no job.json to name a setting: the request hashes try
        why = ""
        if lost and ch.changed:
            why = f"{lostjob.refusal(lost[0], check, store.job_path.name)}; "
        # a setting named from the request hashes: the plain fix is to set it as it was
        back = "rerun with that setting as it was, or " if lostjob.FOUND in why else "rerun "
        raise UsageError(
            f"--out {store.out}: {why}{ch.describe()}: {back}with --input-changed regenerate "
            f"(their old answers go to {store.layout.replaced.name} and the changed rows are "
            f"generated again) or --input-changed keep (kept as they are, listed in "
            f"{store.layout.stale.name})"
        )
    if policy == "keep":
        _keep(store, existing, res, check, ch)
        return (
            f"--input-changed keep: {ch.describe()}; kept as they are, listed in "
            f"{store.layout.stale}"
        )
    why = {c[0]: CHANGED for c in ch.changed} | dict.fromkeys(ch.removed, GONE)
    moved = set_aside(store, existing, why)
    kept = {k: v for k, v in check.kept.items() if k not in why}
    _write_kept(store, kept, existing)
    again = f"; the {len(ch.changed):,} changed are generated again" if ch.changed else ""
    return (
        f"--input-changed regenerate: {ch.describe()}; {moved:,} old answers moved to "
        f"{store.layout.replaced}{again}"
    )


def _keep(
    store: Store, existing: Existing, res: InputScan, check: RequestCheck, ch: Changes
) -> None:
    kept = dict(check.kept)
    for rid, req_hash, key in ch.changed:
        kept[rid] = (req_hash, key)
        res.todo.discard(rid)
    res.done += len(ch.changed)
    for rid in ch.removed:
        kept[rid] = (0, 0)
    _write_kept(store, kept, existing)


def _write_kept(store: Store, kept: dict[str, tuple[int, int]], existing: Existing) -> None:
    path = store.layout.stale
    if not kept:
        path.unlink(missing_ok=True)
        return
    lines = []
    for rid, (req_hash, key) in kept.items():
        entry: dict[str, Any] = {"id": rid, "why": CHANGED if req_hash else GONE}
        entry["answers"] = to_hex(existing.hashes[rid]) if existing.hashes.get(rid) else None
        entry["request_now"] = to_hex(req_hash) if req_hash else None
        entry["key"] = key
        lines.append(orjson.dumps(entry) + b"\n")
    write_atomic(path, b"".join(lines))


def set_aside(
    store: Store, existing: Existing, why: dict[str, str], first: set[str] | None = None
) -> int:
    """Take the rows `why` names out of every data file, into the replaced file; the
    number moved. With `first`, the first copy of each (in the order the parts were
    written) stays, and is added to `first`. Each file: the old rows appended (fsynced)
    first, then the file replaced by a copy without them, then its index rewritten."""
    moved = 0
    for part in existing.parts:
        if part.suffix == ".parquet":
            moved += _set_aside_parquet(store, part, why, first)
        else:
            moved += _set_aside_jsonl(store, existing, part, why, first)
    return moved


def drop_duplicates(store: Store, existing: Existing) -> str:
    """Ids in the data more than once (files merged by hand, two writers the lock could
    not keep apart): the first copy stays, the others go to the replaced file."""
    dups = _duplicate_ids(existing)
    moved = set_aside(store, existing, dict.fromkeys(dups, "duplicate"), set())
    return (
        f"{moved:,} rows repeated an id already in the data ({_examples(sorted(dups))}: files "
        f"merged by hand?); the first copy of each is kept, the others moved to "
        f"{store.layout.replaced}"
    )


def _duplicate_ids(existing: Existing) -> set[str]:
    seen: set[str] = set()
    dups: set[str] = set()
    for ids, _ in existing.hashes.parts:
        for i in ids:
            if i in seen:
                dups.add(i)
            seen.add(i)
    return dups


def _drop(rid: str | None, why: dict[str, str], first: set[str] | None) -> bool:
    if rid is None or rid not in why:
        return False
    if first is None or rid in first:
        return True
    first.add(rid)
    return False


def _aside_line(reason: str, file: str, where: int, row: bytes) -> tuple[str, bytes]:
    """(entry_id, the replaced file's line): why, the file, and the row as it was."""
    key = entry_id(file, where, row)
    at = round(time.time(), 3)
    head = orjson.dumps({"why": reason, "file": file, "set_aside_at": at, "entry_id": key})
    return key, head[:-1] + b',"row":' + row.rstrip(b"\n") + b"}\n"


def _set_aside_jsonl(
    store: Store, existing: Existing, part: Path, why: dict[str, str], first: set[str] | None
) -> int:
    drops: list[tuple[int, int]] = []
    aside: dict[str, bytes] = {}
    ids: list[str] = []
    pos = 0
    with open(part, "rb") as f:
        for line in f:
            rid = fast_id(line) or line_id(line)[0]
            if _drop(rid, why, first):
                assert rid is not None
                drops.append((pos, len(line)))
                key, entry = _aside_line(why[rid], part.name, pos, line)
                aside[key] = entry
            elif rid is not None:
                ids.append(rid)
            pos += len(line)
    if not drops:
        return 0
    append_once(store.layout.replaced, aside)
    drop_lines(part, drops, pos)
    reseal(part)
    st = part.stat()
    with open(part, "rb") as f:
        digest = int.from_bytes(hashlib.file_digest(f, _blake8).digest(), "big") or 1
    keys = [(existing.hashes.get(i, 0), existing.done.get(i, 0)) for i in ids]
    entry = index_entry(st.st_size, ids, keys, digest, st.st_mtime_ns) if ids else b""
    write_atomic(store.layout.index(part), entry)
    return len(drops)


def _blake8() -> Any:
    return hashlib.blake2b(digest_size=8)  # digest64's hash, over a whole file


def _set_aside_parquet(
    store: Store, part: Path, why: dict[str, str], first: set[str] | None
) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(part)
    ids = [str(x) for x in table.column("id").to_pylist()]
    gone = [_drop(i, why, first) for i in ids]
    if not any(gone):
        return 0
    where = [i for i, g in enumerate(gone) if g]
    rows = table.filter(pa.array(gone)).to_pylist()
    aside = dict(
        _aside_line(why[str(r["id"])], part.name, i, orjson.dumps(r))
        for i, r in zip(where, rows, strict=True)
    )
    append_once(store.layout.replaced, aside)
    with writing(part) as f:
        pq.write_table(table.filter(pa.array([not g for g in gone])), f, compression="zstd")
    reseal(part)
    return len(rows)
