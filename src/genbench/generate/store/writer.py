"""The output directory: append-only row files in parts, a done index, the errors file.

Every path of the directory is named by `layout.Layout` (layout.py lists them); the
store writes them, the other packages read them through the layout.

Durability, in the order things happen to a finished row:

1. its line is appended to its part's buffer in memory (the event loop never touches
   the disk, so a slow or throttled disk cannot stall the streams being read);
2. at least every `sync_interval` seconds (or `sync_rows` rows, or `sync_bytes`) a worker
   thread writes each buffer with one write() to its file, opened O_APPEND, fsyncs the
   files (and the directory, after a file was created), and appends the ids to the index;
3. only after that fsync is the row *done*: counted by the progress display and the ETA.

So a crash of any kind loses at most the rows of the last second, which were never
reported done and are generated again. A client killed by SIGKILL leaves whole lines in
practice (the kernel completes a write() unless the kill lands while it copies a
multi-page sync group); a power loss may leave a torn or garbled tail. Either way the next
run cuts an incomplete or unreadable tail off before appending (`scan_jsonl_part`), and
a line that is not a complete row of ours is never counted. The data files are the
truth; the index only makes resume fast, and is trusted only as far as the data file
proves it (readback.py). A full part is fsynced and never written again.

Exactly once: an id is written at most once per run (the engine hands each id out once
and `write_row` refuses a second write), and resume skips every id found in a data
file or the errors file. Parquet: parts are written as JSONL during the job and each
full part is converted (to a temporary name, fsynced, renamed, then the JSONL deleted),
in a separate process so the conversion never stalls the event loop.

The request log is written with the rows, by the same worker thread, but not fsynced:
it is the job's account of itself, not its data.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.atomic import fsync_dir, is_temp, move, write_atomic
from genbench.errors import OutOfDescriptors, OutputError, UsageError, descriptor_advice
from genbench.generate.input.modes import DataFormat
from genbench.generate.request_hash import LazyHashes
from genbench.generate.store import seal as sealed
from genbench.generate.store.batch import row_bytes
from genbench.generate.store.durable import (
    AppendFile,
    Pending,
    Reserve,
    cut_torn_tail,
    flush,
    output_errors,
    scan_errors,
    write_failed,
)
from genbench.generate.store.jobfile import first_change, read_jobs, setting_change
from genbench.generate.store.layout import SCHEME_FILE, SCHEME_LOCK, Layout, is_generate_dir
from genbench.generate.store.lock import OutputLock
from genbench.generate.store.readback import index_keys, scan_jsonl_part
from genbench.records import RecordWriter, RequestRecord
from genbench.redact import redact_doc
from genbench.rows import DataRow, json_default, parquet_ids
from genbench.transport.eventloop import wait_event

SCHEMA = "genbench.generate"
SCHEMA_VERSION = 1
# Settings that change what the data set contains: a resumed job must not mix them.
# (a job.json without tool_policy was made with its default: jobfile.job_setting)
FINGERPRINT_KEYS = ("model", "params", "turns", "format", "tool_policy", "hidden_states")


@dataclass
class Existing:
    """What a previous run left: ids done, keys failed, where to append next."""

    done: dict[str, int] = field(default_factory=dict)  # id -> its input line's key (or 0)
    hashes: LazyHashes = field(default_factory=LazyHashes)  # id -> its request hash
    failed: set[str] = field(default_factory=set)
    parts: list[Path] = field(default_factory=list)
    jsonl_parts: list[Path] = field(default_factory=list)
    next_number: int = 0
    notes: list[str] = field(default_factory=list)
    duplicates: int = 0
    job: dict[str, Any] | None = None
    job_problem: tuple[str, str] | None = None  # job.json missing or unreadable (lostjob.py)


class Store:
    """Owns the output directory for one job (or one `--shard` of it)."""

    def __init__(
        self,
        out: Path,
        *,
        shard_tag: str | None = None,
        fmt: str = "jsonl",
        part_bytes: int = 256 << 20,
        sync_interval: float = 1.0,
        sync_rows: int = 2000,
        sync_bytes: int = 16 << 20,
        on_durable: Callable[[str, list[Pending]], None] | None = None,
    ) -> None:
        self.out = out
        self.layout = lay = Layout(out, shard_tag)
        self.errors_path = lay.errors
        self.state, self.job_path, self.requests_path = lay.state, lay.job, lay.requests
        self.lock = OutputLock(out, self.state, lay.lock_name, (SCHEME_FILE, SCHEME_LOCK))
        self.log: RecordWriter | None = None
        self._dir_fd: int | None = None
        self.reserve = Reserve()
        self._reserve_seen = 0
        # (error?, line, item, (request hash, line key))
        self._waiting: deque[tuple[bool, bytes, Pending, tuple[int, int]]] = deque()
        self.short: str | None = None
        self.fmt = fmt
        self.part_bytes = part_bytes
        self.sync_interval = sync_interval
        self.sync_rows = sync_rows
        self.sync_bytes = sync_bytes
        self.on_durable = on_durable
        self._part_re = lay.part_re()
        self.current: AppendFile | None = None
        self.errors: AppendFile | None = None
        self._closing: list[AppendFile] = []
        self._next_number = 0
        self._written: set[str] = set()
        self._expected: set[str] | None = None
        self._kick = asyncio.Event()
        self._lock = asyncio.Lock()
        self._pending_rows = 0
        self._pending_bytes = 0
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._conversions: list[asyncio.Future[Any]] = []
        self._converting: set[Path] = set()

    # -- resume ---------------------------------------------------------------------------

    def check_directory(self) -> None:
        """Refuse a directory that has files but is not a genbench generate output."""
        if self.out.exists() and not self.out.is_dir():
            raise OutputError(f"--out {self.out}: exists and is a file, not a directory")
        if self.out.is_dir() and not is_generate_dir(self.out):
            others = [p.name for p in self.out.iterdir()]
            if others:
                shown = ", ".join(sorted(others)[:3]) + (", …" if len(others) > 3 else "")
                raise UsageError(
                    f"--out {self.out}: the directory has other files ({shown}) and is not "
                    "a genbench generate output; choose a new or empty directory"
                )

    def load_existing(self, repair: bool = True) -> Existing:
        """Scan what earlier runs wrote; cut torn tails; finish interrupted conversions."""
        ex, lay = Existing(), self.layout
        if not self.out.is_dir():
            return ex
        if self.job_path.exists():
            try:
                ex.job = orjson.loads(self.job_path.read_bytes())
            except orjson.JSONDecodeError as e:
                ex.job, ex.job_problem = None, ("unreadable", f"not JSON: {e}")
            if ex.job is not None and not isinstance(ex.job, dict):
                ex.job, ex.job_problem = None, ("unreadable", "not a JSON object")
        found: dict[int, dict[str, Path]] = {}
        for p in self.out.iterdir():
            m = self._part_re.match(p.name)
            if m:
                found.setdefault(int(m[1]), {})[m[2]] = p
            elif p.name.startswith(lay.prefix + "-") and is_temp(p) and ".parquet" in p.name:
                p.unlink()  # a conversion that did not finish; its JSONL is still there
        for number in sorted(found):
            files = found[number]
            if "parquet" in files:
                if "jsonl" in files:  # converted, but the JSONL was not yet deleted
                    files["jsonl"].unlink()  # its index stays: the line keys of its rows
                    sealed.unseal(files["jsonl"])
                if sealed.check(part := files["parquet"]).state == sealed.CHANGED:
                    ex.notes.append(self._set_aside(part, repair))
                    continue
                ids, hashes = parquet_ids(part)
                keys = index_keys(lay.index(part))  # kept at conversion
                srcs = [keys.get(i, 0) for i in ids]
                ex.parts.append(part)
            else:
                jsonl = files["jsonl"]
                changed = sealed.check(jsonl).state == sealed.CHANGED  # a sealed part: verified
                scan = scan_jsonl_part(jsonl, lay.index(jsonl), repair, lay.quarantine, changed)
                if changed and repair:
                    sealed.seal(jsonl)  # its changed rows set aside: what it holds now
                ids, hashes, srcs = scan.ids, scan.hashes, scan.srcs
                ex.notes.extend(scan.notes)
                ex.parts.append(jsonl)
                ex.jsonl_parts.append(jsonl)
            before = len(ex.done)
            ex.done.update(zip(ids, srcs, strict=True))
            ex.hashes.add(ids, hashes)
            ex.duplicates += len(ids) - (len(ex.done) - before)
        ex.next_number = max(found, default=-1) + 1
        if ex.parts and ex.job is None and ex.job_problem is None:
            ex.job_problem = ("missing", "")
        ex.failed, notes = scan_errors(self.errors_path, repair)
        ex.notes.extend(notes)
        return ex

    def _set_aside(self, part: Path, repair: bool) -> str:
        """A Parquet part whose bytes changed since it was sealed: moved aside (its rows
        are then generated again); what the resume says of it."""
        what = f"{part.name}: its bytes changed since it was sealed (its checksum differs)"
        if not repair:
            return f"{what}; its rows are not counted as done"
        return f"{what}: moved to {sealed.set_aside(part)}; its rows are generated again"

    def set_aside_errors(self) -> Path | None:
        """--retry-errors: move the errors file into the state directory; its rows are
        then neither done nor failed, so they are generated again."""
        if not self.errors_path.exists():
            return None
        self.state.mkdir(parents=True, exist_ok=True)
        dst = self.layout.retried_errors(time.strftime("%Y%m%d-%H%M%S"))
        move(self.errors_path, dst)
        return dst

    def check_job(self, existing: Existing, job: dict[str, Any], force: bool) -> None:
        """A resumed job must be generated with the same model, sampling, turns and format;
        a shard's first run with the same as the shards already in the directory (an array's
        tasks share it: a task resubmitted with other flags would mix two jobs' rows)."""
        if force:
            return
        own = existing.job is not None
        found = [(None, existing.job)] if own else read_jobs(self.layout.sibling_jobs())
        for path, old in found:
            if changed := first_change(old, job, FINGERPRINT_KEYS, sibling=not own):
                name, was, now = setting_change(old, job, changed)
                raise UsageError(
                    f"--out {self.out} holds a job made with different settings ({name} was "
                    f"{was}, now {now}): use a new --out, or --force to continue with the new "
                    "settings"
                ) if path is None else UsageError(
                    f"--out {self.out}: this shard would be generated with other settings than "
                    f"the shard of {path.name} ({name} was {was} there, now {now}): run it "
                    "with that shard's flags, or --force to mix them"
                )

    def begin(self, existing: Existing, job: dict[str, Any]) -> None:
        """Create the directory and job file; choose the part to append to."""
        self.state.mkdir(parents=True, exist_ok=True)
        if existing.job_problem and self.job_path.exists():  # unreadable: kept beside it
            move(self.job_path, self.job_path.with_name(self.job_path.name + ".unreadable"))
        doc = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **job}
        if existing.job and existing.job.get("created"):
            doc["created"] = existing.job["created"]
        write_atomic(self.job_path, orjson.dumps(redact_doc(doc), option=orjson.OPT_INDENT_2))
        fsync_dir(self.out)
        self._dir_fd = os.open(self.out, os.O_RDONLY)  # held: a sync opens no descriptor
        self.reserve = Reserve(3)  # a new part and the errors file, at the descriptor limit
        self._next_number = existing.next_number
        if existing.jsonl_parts:
            last = existing.jsonl_parts[-1]
            small = last.stat().st_size < self.part_bytes
            if last == existing.parts[-1] and small and not sealed.is_sealed(last):
                self.current = AppendFile(last, self.layout.index(last), self.reserve)
                self._next_number = max(self._next_number, self._number(last) + 1)

    def _number(self, p: Path) -> int:
        m = self._part_re.match(p.name)
        assert m is not None
        return int(m[1])

    # -- writing --------------------------------------------------------------------------

    def expect(self, ids: set[str]) -> None:
        """The ids this run may write, each once. The set shrinks as rows are written, so
        the guard costs no memory that grows with the job."""
        self._expected = ids

    def _claim(self, row_id: str) -> bool:
        if self._expected is not None:
            if row_id not in self._expected:
                return False
            self._expected.discard(row_id)
            return True
        if row_id in self._written:
            return False
        self._written.add(row_id)
        return True

    def open_log(self, defaults: dict[str, Any]) -> None:
        """The request log, compact records after a line of this run's `defaults`."""
        cut_torn_tail(self.requests_path)
        self.log = RecordWriter(self.requests_path, compact=True, defaults=defaults, buffered=True)

    def log_request(self, rec: RequestRecord) -> None:
        """One request of the job, to the request log (written with the next sync)."""
        if self.log is not None:
            self.log.write(rec)

    def write_row(
        self, row_id: str, line: bytes, info: Any = None, keys: tuple[int, int] = (0, 0)
    ) -> bool:
        """Append one finished row; False (and nothing written) if the id was written.
        `keys`: its request hash and its input line's key, for the index."""
        if not self._claim(row_id):
            return False
        self._waiting.append((False, line, (row_id, info), keys))
        self._place()
        self._note_pending(len(line))
        return True

    def put(self, key: str, row: DataRow, keys: tuple[int, int] = (0, 0)) -> bool:
        """Append one finished row as typed (under its id as text, `key`): its line in the
        store's format (batch.py), its meta kept for the progress; as `write_row`."""
        return self.write_row(key, row_bytes(row, self.fmt), row.meta, keys)

    def write_error(self, key: str, entry: dict[str, Any], info: Any = None) -> None:
        if self._expected is not None:
            self._expected.discard(key)
        line = orjson.dumps(entry, default=json_default) + b"\n"
        self._waiting.append((True, line, (key, info), (0, 0)))
        self._place()
        self._note_pending(len(line))

    def _place(self) -> None:
        """Waiting lines into their file, opening it (or the next part) as needed. With
        no descriptor left to open one, they wait in memory for the next sync, which
        closes full parts, and `short` says so."""
        while self._waiting:
            error, line, item, keys = self._waiting[0]
            try:
                if error and self.errors is None:
                    self.errors = AppendFile(self.errors_path, None, self.reserve)
                elif not error and (self.current is None or self.current.size >= self.part_bytes):
                    self._rotate()
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE):
                    raise write_failed(self.out, e) from None
                self.short = str(write_failed(self.out, e))
                return
            f = self.errors if error else self.current
            assert f is not None
            f.write(line, item, keys)
            self._waiting.popleft()

    def take_shortage(self) -> str | None:
        """Whether this process ran out of descriptors for the store since last asked."""
        if self.reserve.used > self._reserve_seen:
            self._reserve_seen = self.reserve.used
            self.short = self.short or f"{self.out}: a data file took a descriptor in reserve"
        short, self.short = self.short, None
        return short if short is None or "ulimit" in short else f"{short}: {descriptor_advice()}"

    def _note_pending(self, nbytes: int) -> None:
        self._pending_rows += 1
        self._pending_bytes += nbytes
        if self._pending_rows >= self.sync_rows or self._pending_bytes >= self.sync_bytes:
            self._kick.set()

    def _rotate(self) -> None:
        if self.current is not None:  # closed at the next sync, which frees its descriptors
            self.current.full = True
            self._closing.append(self.current)
            self.current = None
            self._kick.set()
        path = self.layout.part(self._next_number)
        self.current = AppendFile(path, self.layout.index(path), self.reserve)
        self._next_number += 1

    # -- syncing --------------------------------------------------------------------------

    async def run_syncer(self) -> None:
        """Sync every `sync_interval` seconds, or sooner when many rows wait."""
        while True:
            await wait_event(self._kick, self.sync_interval)
            self._kick.clear()
            await self.sync()

    async def sync(self) -> None:
        """Write and fsync what was buffered (in a thread), then report it done."""
        async with self._lock:
            self._place()  # lines that waited for a descriptor: the last sync gave some back
            files = [f for f in (*self._closing, self.current, self.errors) if f is not None]
            groups = [f.take() for f in files if f.pending or f.new or f in self._closing]
            log, data = self.log, self.log.take() if self.log is not None else b""
            if not groups and not data:
                return
            self._pending_rows = self._pending_bytes = 0
            closing = list(self._closing)
            dir_fd = self._dir_fd if any(b.file.new for b in groups) else None

            def work() -> None:
                flush(groups, dir_fd)
                if log is not None:
                    log.write_out(data)
                for f in closing:  # full: never written again (Parquet: sealed converted)
                    if f.full and self.fmt != DataFormat.PARQUET:
                        sealed.seal(f.path)

            try:
                await asyncio.get_running_loop().run_in_executor(None, work)
            except OSError as e:
                raise write_failed(self.out, e) from None
            for b in groups:
                b.file.new = False
                if b.items and self.on_durable is not None:
                    self.on_durable("error" if b.file is self.errors else "row", b.items)
            for f in closing:
                f.close()
                self._closing.remove(f)
                if self.fmt == DataFormat.PARQUET and f.full:
                    self._convert(f.path)
            self.reserve.refill()

    # -- Parquet --------------------------------------------------------------------------

    def _convert(self, path: Path) -> None:
        if path in self._converting:
            return
        dst = path.with_suffix(".parquet")
        try:
            if self._pool is None:
                ctx = multiprocessing.get_context("spawn")
                self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx)
            fut = asyncio.get_running_loop().run_in_executor(
                self._pool, sealed.convert_and_seal, str(path), str(dst)
            )
        except OSError:  # no descriptors to start the converter: the job's end converts it
            return
        self._converting.add(path)

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is None:
                path.unlink(missing_ok=True)  # the index stays: its rows' line keys
                sealed.unseal(path)

        fut.add_done_callback(done)
        self._conversions.append(fut)

    async def close(self, convert_all: bool = False) -> None:
        """Final sync. With `convert_all` (a finished --format parquet job) every JSONL
        part is converted, the last one and any left by earlier runs included; an
        interrupted job keeps its last part as JSONL, to append to on resume."""
        for _ in range(3):  # more than once only for lines that waited for a descriptor
            if self.current is not None:
                self._closing.append(self.current)
                self.current = None
            await self.sync()
            if not self._waiting and self.current is None:
                break
        if self._waiting:
            raise OutOfDescriptors(f"{len(self._waiting)} rows not written to {self.out}")
        with output_errors(self.out):
            for f in (self.errors, self.log):
                if f is not None:
                    f.close()
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None
        self.reserve.close()
        if convert_all and self.fmt == DataFormat.PARQUET:
            for p in self.data_files():
                if p.suffix == ".jsonl":
                    self._convert(p)
        elif convert_all:  # the job is complete: its last parts are written for good too
            last = [p for p in self.data_files() if p.suffix == ".jsonl"]
            with output_errors(self.out):
                await asyncio.get_running_loop().run_in_executor(None, _seal_all, last)
        try:
            if self._conversions:
                results = await asyncio.gather(*self._conversions, return_exceptions=True)
                for r in results:
                    if isinstance(r, OSError):  # a full disk: the JSONL part is kept
                        raise write_failed(self.out, r) from None
                    if isinstance(r, BaseException):
                        raise UsageError(f"converting a part to Parquet failed: {r}") from r
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def data_files(self) -> list[Path]:
        return self.layout.data_files()


def _seal_all(parts: list[Path]) -> None:
    for p in parts:
        if not sealed.is_sealed(p):
            sealed.seal(p)
