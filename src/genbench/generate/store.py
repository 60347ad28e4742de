"""The output directory: sharded append-only row files, a done index, the errors file.

Layout (PREFIX is `data`, or `data-2of4` under `--shard 2/4`; `errors` likewise):

    DIR/PREFIX-00000.jsonl           finished rows, one JSON object per line, `id` first
    DIR/PREFIX-00000.parquet         the same shard once converted (--format parquet)
    DIR/errors.jsonl                 rows that failed, one per line, with the error kind
    DIR/.genbench/job.json           the settings the job started with (model, sampling)
    DIR/.genbench/PREFIX-00000.idx   which ids that shard holds, up to which byte (advisory)

Durability, in the order things happen to a finished row:

1. its line is appended to its shard's buffer in memory (the event loop never touches
   the disk, so a slow or throttled disk cannot stall the streams being read);
2. at least every `sync_interval` seconds (or `sync_rows` rows, or `sync_bytes`) a worker
   thread writes each buffer with one write() to its file, opened O_APPEND, fsyncs the
   files (and the directory, after a file was created), and appends the ids to the index;
3. only after that fsync is the row *done*: counted by the progress display and the ETA.

So a crash of any kind loses at most the rows of the last second, which were never
reported done and are generated again. A client killed by SIGKILL leaves whole lines in
practice (the kernel completes a write() unless the kill lands while it copies a
multi-page batch); a power loss may leave a torn or garbled tail. Either way the next
run cuts an incomplete or unreadable tail off before appending (`scan_jsonl_shard`), and
a line that is not a complete row of ours is never counted. The data files are the
truth; the index only makes resume fast: an id is trusted from the index only if the
index's byte offset lies within the data file, on a line boundary, and the part of a
shard after the last indexed offset is read line by line. A full shard is fsynced and
never written again.

Exactly once: an id is written at most once per run (the engine hands each id out once
and `write_row` refuses a second write), and resume skips every id found in a data
file or the errors file. Parquet: shards are written as JSONL during the job and each
full shard is converted (to a temporary name, fsynced, renamed, then the JSONL deleted),
in a separate process so the conversion never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import multiprocessing
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from genbench.errors import GenbenchError, OutputError, UsageError

STATE_DIR = ".genbench"
SCHEMA = "genbench.generate"
SCHEMA_VERSION = 1
SHARD_DIGITS = 5
# Settings that change what the data set contains: a resumed job must not mix them.
FINGERPRINT_KEYS = ("model", "params", "turns", "format")

Pending = tuple[str, Any]  # (id, what the caller wants back once it is durable)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Temporary file, fsync, rename, fsync the directory: never half a file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class AppendFile:
    """One append-only JSONL file. Lines are buffered in memory by the event loop and
    written, fsynced and indexed by a worker thread (`flush`), so the loop never waits on
    the disk; then the lines' `pending` items are done."""

    def __init__(self, path: Path, index: Path | None = None) -> None:
        self.path = path
        self.new = not path.exists()
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size  # including lines still buffered
        self.index = index
        self.buf: list[bytes] = []
        self.pending: list[Pending] = []
        self.closed = False
        self.full = False  # rotated: never written again, ready for conversion

    def write(self, line: bytes, item: Pending) -> None:
        self.buf.append(line)
        self.size += len(line)
        self.pending.append(item)

    def take(self) -> Batch:
        batch = Batch(self, self.buf, self.pending, self.size)
        self.buf, self.pending = [], []
        return batch

    def record_index(self, items: list[Pending], end: int) -> None:
        """Append one batch to the index: ids now durable in the data file up to byte `end`."""
        if self.index is None or not items:
            return
        line = orjson.dumps({"end": end, "ids": [i for i, _ in items]}) + b"\n"
        with open(self.index, "ab") as f:
            f.write(line)

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
            self.closed = True


@dataclass
class Batch:
    """Lines taken from a file's buffer, to be written and fsynced together."""

    file: AppendFile
    chunks: list[bytes]
    items: list[Pending]
    end: int  # the file's size once these lines are written


def flush(batches: list[Batch], dir_too: bool, directory: Path) -> None:
    """In a worker thread: write each batch with one write() per file, fsync, then index.
    The index is appended only after the data it names is on disk."""
    for b in batches:
        if b.chunks:
            _write_all(b.file.fd, b"".join(b.chunks))
    for b in batches:
        os.fsync(b.file.fd)
    if dir_too:
        fsync_dir(directory)
    for b in batches:
        b.file.record_index(b.items, b.end)


@dataclass
class ShardScan:
    ids: list[str]
    valid_bytes: int
    notes: list[str] = field(default_factory=list)


def _read_index(idx: Path) -> list[tuple[int, list[str]]]:
    batches: list[tuple[int, list[str]]] = []
    try:
        with open(idx, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break
                try:
                    obj = orjson.loads(line)
                    batches.append((int(obj["end"]), list(obj["ids"])))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    break
    except FileNotFoundError:
        pass
    return batches


def scan_jsonl_shard(path: Path, idx: Path | None, repair: bool = True) -> ShardScan:
    """The ids a JSONL shard holds; cut a torn or unreadable tail (when `repair`)."""
    size = path.stat().st_size
    covered, ids = 0, []
    batches = _read_index(idx) if idx is not None else []
    # trust batches while their ends go forward within the file: one that claims bytes the
    # file does not have, and all after it, are not (the index is then rewritten below)
    used = 0
    while used < len(batches) and covered <= batches[used][0] <= size:
        covered, batch_ids = batches[used]
        ids.extend(batch_ids)
        used += 1
    notes: list[str] = []
    with open(path, "rb") as f:
        if covered:
            f.seek(covered - 1)
            if f.read(1) != b"\n":  # not a line boundary: the index is not about this file
                covered, ids, used = 0, [], 0
        f.seek(covered)
        pos = covered
        tail = 0
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                obj = orjson.loads(line)
                row_id = obj["id"]
                if isinstance(row_id, int) and not isinstance(row_id, bool):
                    row_id = str(row_id)  # the input's integer ids are kept as integers
                elif not isinstance(row_id, str):
                    raise TypeError
            except (orjson.JSONDecodeError, KeyError, TypeError):
                break
            ids.append(row_id)
            pos += len(line)
            tail += 1
    if pos < size:
        notes.append(f"{path.name}: cut {size - pos} bytes of an incomplete last line")
        if repair:
            os.truncate(path, pos)
    if idx is not None and repair and (tail or used < len(batches) or pos < size):
        write_atomic(idx, orjson.dumps({"end": pos, "ids": ids}) + b"\n" if ids else b"")
    return ShardScan(ids, pos, notes)


def parquet_ids(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        col = pq.read_table(path, columns=["id"]).column("id")
    except Exception as e:  # pyarrow's own error types
        raise UsageError(f"{path}: cannot read its ids ({e})") from None
    return [str(x) for x in col.to_pylist()]


def scan_errors(path: Path, repair: bool = True) -> tuple[set[str], list[str]]:
    """Keys of rows in the errors file: the id, or 'line:N' for a row without one."""
    keys: set[str] = set()
    notes: list[str] = []
    if not path.exists():
        return keys, notes
    size = path.stat().st_size
    pos = 0
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                break
            pos += len(line)
            if isinstance(obj, dict):
                rid = obj.get("id")
                keys.add(str(rid) if rid is not None else f"line:{obj.get('line')}")
    if pos < size:
        notes.append(f"{path.name}: cut {size - pos} bytes of an incomplete last line")
        if repair:
            os.truncate(path, pos)
    return keys, notes


# -- the row format -------------------------------------------------------------------------

META_FIELDS: tuple[tuple[str, str], ...] = (
    ("server", "string"),
    ("model", "string"),
    ("prompt_tokens", "int64"),
    ("completion_tokens", "int64"),
    ("reasoning_tokens", "int64"),
    ("answer_tokens", "int64"),
    ("tokens_estimated", "bool"),
    ("finish_reason", "string"),
    ("truncated", "bool"),
    ("turns", "int64"),
    ("attempts", "int64"),
    ("ttft_s", "float64"),
    ("latency_s", "float64"),
    ("sent_at", "float64"),
    ("finished_at", "float64"),
)


def row_line(row_id: str | int, conversations: list[dict[str, Any]], meta: dict[str, Any]) -> bytes:
    """One output row: SpecForge's conversations format plus genbench's metadata."""
    return orjson.dumps({"id": row_id, "conversations": conversations, "meta": meta}) + b"\n"


def parquet_schema() -> Any:
    import pyarrow as pa

    turn = pa.struct(
        [("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string())]
    )
    meta = pa.struct([(name, pa.type_for_alias(t)) for name, t in META_FIELDS])
    return pa.schema([("id", pa.string()), ("conversations", pa.list_(turn)), ("meta", meta)])


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) or v is None else orjson.dumps(v).decode()


def convert_to_parquet(src: str, dst: str, batch_rows: int = 1000) -> int:
    """JSONL shard -> Parquet, streamed in row groups; atomic; returns the rows written.
    Runs in a separate process. Content that is not text (a list of parts) is stored as
    its JSON text, so the schema stays fixed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    tmp = dst + ".tmp"
    n = 0
    with pq.ParquetWriter(tmp, schema, compression="zstd") as w, open(src, "rb") as f:
        batch: list[dict[str, Any]] = []
        for line in f:
            obj = orjson.loads(line)
            obj["id"] = str(obj["id"])  # one column type: integer ids become text
            for t in obj["conversations"]:
                t["content"] = _text(t.get("content"))
            batch.append(obj)
            if len(batch) >= batch_rows:
                w.write_table(pa.Table.from_pylist(batch, schema=schema))
                n += len(batch)
                batch = []
        if batch:
            w.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dst)
    fsync_dir(Path(dst).parent)
    return n


# -- the directory --------------------------------------------------------------------------


@dataclass
class Existing:
    """What a previous run left: ids done, keys failed, where to append next."""

    done: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    shards: list[Path] = field(default_factory=list)
    jsonl_shards: list[Path] = field(default_factory=list)
    next_number: int = 0
    notes: list[str] = field(default_factory=list)
    duplicates: int = 0
    job: dict[str, Any] | None = None


class Store:
    """Owns the output directory for one job (or one `--shard` of it)."""

    def __init__(
        self,
        out: Path,
        *,
        shard_tag: str | None = None,
        fmt: str = "jsonl",
        shard_bytes: int = 256 << 20,
        sync_interval: float = 1.0,
        sync_rows: int = 2000,
        sync_bytes: int = 16 << 20,
        on_durable: Callable[[str, list[Pending]], None] | None = None,
    ) -> None:
        self.out = out
        self.prefix = "data" + (f"-{shard_tag}" if shard_tag else "")
        self.errors_path = out / ("errors" + (f"-{shard_tag}" if shard_tag else "") + ".jsonl")
        self.job_path = out / STATE_DIR / ("job" + (f"-{shard_tag}" if shard_tag else "") + ".json")
        self.state = out / STATE_DIR
        self.fmt = fmt
        self.shard_bytes = shard_bytes
        self.sync_interval = sync_interval
        self.sync_rows = sync_rows
        self.sync_bytes = sync_bytes
        self.on_durable = on_durable
        self._shard_re = re.compile(
            rf"^{re.escape(self.prefix)}-(\d{{{SHARD_DIGITS}}})\.(jsonl|parquet)$"
        )
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
        self.rows_written = 0
        self.converted: list[Path] = []

    # -- resume ---------------------------------------------------------------------------

    def shard_path(self, number: int, ext: str = "jsonl") -> Path:
        return self.out / f"{self.prefix}-{number:0{SHARD_DIGITS}d}.{ext}"

    def index_path(self, shard: Path) -> Path:
        return self.state / (shard.stem + ".idx")

    def check_directory(self) -> None:
        """Refuse a directory that has files but is not a genbench generate output."""
        if self.out.exists() and not self.out.is_dir():
            raise UsageError(f"--output {self.out}: exists and is not a directory")
        if self.out.is_dir() and not (self.out / STATE_DIR).is_dir():
            others = [p.name for p in self.out.iterdir()]
            if others:
                shown = ", ".join(sorted(others)[:3]) + (", …" if len(others) > 3 else "")
                raise UsageError(
                    f"--output {self.out}: the directory has other files ({shown}) and is not "
                    "a genbench generate output; choose a new or empty directory"
                )

    def load_existing(self, repair: bool = True) -> Existing:
        """Scan what earlier runs wrote; cut torn tails; finish interrupted conversions."""
        ex = Existing()
        if not self.out.is_dir():
            return ex
        if self.job_path.exists():
            try:
                ex.job = orjson.loads(self.job_path.read_bytes())
            except orjson.JSONDecodeError:
                ex.job = None
        found: dict[int, dict[str, Path]] = {}
        for p in self.out.iterdir():
            m = self._shard_re.match(p.name)
            if m:
                found.setdefault(int(m[1]), {})[m[2]] = p
            elif p.name.startswith(self.prefix + "-") and p.name.endswith(".parquet.tmp"):
                p.unlink()  # a conversion that did not finish; its JSONL is still there
        for number in sorted(found):
            files = found[number]
            if "parquet" in files:
                if "jsonl" in files:  # converted, but the JSONL was not yet deleted
                    files["jsonl"].unlink()
                    self.index_path(files["jsonl"]).unlink(missing_ok=True)
                ids = parquet_ids(files["parquet"])
                ex.shards.append(files["parquet"])
            else:
                scan = scan_jsonl_shard(files["jsonl"], self.index_path(files["jsonl"]), repair)
                ids = scan.ids
                ex.notes.extend(scan.notes)
                ex.shards.append(files["jsonl"])
                ex.jsonl_shards.append(files["jsonl"])
            before = len(ex.done)
            ex.done.update(ids)
            ex.duplicates += len(ids) - (len(ex.done) - before)
        ex.next_number = max(found, default=-1) + 1
        ex.failed, notes = scan_errors(self.errors_path, repair)
        ex.notes.extend(notes)
        return ex

    def set_aside_errors(self) -> Path | None:
        """--retry-errors: move the errors file into the state directory; its rows are
        then neither done nor failed, so they are generated again."""
        if not self.errors_path.exists():
            return None
        self.state.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        dst = self.state / f"{self.errors_path.stem}-retried-{stamp}.jsonl"
        os.replace(self.errors_path, dst)
        fsync_dir(self.out)
        return dst

    def check_job(self, existing: Existing, job: dict[str, Any], force: bool) -> None:
        """A resumed job must be generated with the same model, sampling, turns and format."""
        old = existing.job
        if old is None or force:
            return
        changed = [k for k in FINGERPRINT_KEYS if old.get(k) != job.get(k)]
        if changed:
            k = changed[0]
            raise UsageError(
                f"--output {self.out} holds a job made with different settings ({k} was "
                f"{_show(old.get(k))}, now {_show(job.get(k))}): use a new --output, or "
                "--force to continue with the new settings"
            )

    def begin(self, existing: Existing, job: dict[str, Any]) -> None:
        """Create the directory and job file; choose the shard to append to."""
        self.state.mkdir(parents=True, exist_ok=True)
        doc = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **job}
        if existing.job and existing.job.get("created"):
            doc["created"] = existing.job["created"]
        write_atomic(self.job_path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        fsync_dir(self.out)
        self._next_number = existing.next_number
        if existing.jsonl_shards:
            last = existing.jsonl_shards[-1]
            if last == existing.shards[-1] and last.stat().st_size < self.shard_bytes:
                self.current = AppendFile(last, self.index_path(last))
                self._next_number = max(self._next_number, self._number(last) + 1)

    def _number(self, p: Path) -> int:
        m = self._shard_re.match(p.name)
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

    def write_row(self, row_id: str, line: bytes, info: Any = None) -> bool:
        """Append one finished row; False (and nothing written) if the id was written."""
        if not self._claim(row_id):
            return False
        try:
            if self.current is None or self.current.size >= self.shard_bytes:
                self._rotate()
            assert self.current is not None
            self.current.write(line, (row_id, info))
        except OSError as e:
            raise _write_failed(self.out, e) from None
        self.rows_written += 1
        self._note_pending(len(line))
        return True

    def write_error(self, key: str, entry: dict[str, Any], info: Any = None) -> None:
        if self._expected is not None:
            self._expected.discard(key)
        try:
            if self.errors is None:
                self.errors = AppendFile(self.errors_path)
            line = orjson.dumps(entry, default=str) + b"\n"
            self.errors.write(line, (key, info))
        except OSError as e:
            raise _write_failed(self.out, e) from None
        self._note_pending(len(line))

    def _note_pending(self, nbytes: int) -> None:
        self._pending_rows += 1
        self._pending_bytes += nbytes
        if self._pending_rows >= self.sync_rows or self._pending_bytes >= self.sync_bytes:
            self._kick.set()

    def _rotate(self) -> None:
        if self.current is not None:
            self.current.full = True
            self._closing.append(self.current)
            self._kick.set()
        path = self.shard_path(self._next_number)
        self._next_number += 1
        self.current = AppendFile(path, self.index_path(path))

    # -- syncing --------------------------------------------------------------------------

    async def run_syncer(self) -> None:
        """Sync every `sync_interval` seconds, or sooner when many rows wait."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.sync_interval)
            self._kick.clear()
            await self.sync()

    async def sync(self) -> None:
        """Write and fsync what was buffered (in a thread), then report it done."""
        async with self._lock:
            files = [f for f in (*self._closing, self.current, self.errors) if f is not None]
            batches = [f.take() for f in files if f.pending or f.new or f in self._closing]
            if not batches:
                return
            self._pending_rows = self._pending_bytes = 0
            closing = list(self._closing)
            new_files = any(b.file.new for b in batches)
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(None, flush, batches, new_files, self.out)
            except OSError as e:
                raise _write_failed(self.out, e) from None
            for b in batches:
                b.file.new = False
                if b.items and self.on_durable is not None:
                    self.on_durable("error" if b.file is self.errors else "row", b.items)
            for f in closing:
                f.close()
                self._closing.remove(f)
                if self.fmt == "parquet" and f.full:
                    self._convert(f.path)

    # -- Parquet --------------------------------------------------------------------------

    def _convert(self, path: Path) -> None:
        if path in self._converting:
            return
        self._converting.add(path)
        if self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            self._pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx)
        dst = path.with_suffix(".parquet")
        fut = asyncio.get_running_loop().run_in_executor(
            self._pool, convert_to_parquet, str(path), str(dst)
        )

        def done(f: asyncio.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is None:
                path.unlink(missing_ok=True)
                self.index_path(path).unlink(missing_ok=True)
                self.converted.append(dst)

        fut.add_done_callback(done)
        self._conversions.append(fut)

    async def close(self, convert_all: bool = False) -> None:
        """Final sync. With `convert_all` (a finished --format parquet job) every JSONL
        shard is converted, the last one and any left by earlier runs included; an
        interrupted job keeps its last shard as JSONL, to append to on resume."""
        if self.current is not None:
            self._closing.append(self.current)
            self.current = None
        await self.sync()
        if self.errors is not None:
            self.errors.close()
        if convert_all and self.fmt == "parquet":
            for p in self.data_files():
                if p.suffix == ".jsonl":
                    self._convert(p)
        try:
            if self._conversions:
                results = await asyncio.gather(*self._conversions, return_exceptions=True)
                for r in results:
                    if isinstance(r, BaseException):
                        raise UsageError(f"converting a shard to Parquet failed: {r}") from r
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def data_files(self) -> list[Path]:
        return sorted(p for p in self.out.iterdir() if self._shard_re.match(p.name))


def _write_failed(out: Path, e: OSError) -> GenbenchError:
    return OutputError(
        f"cannot write to {out}: {e.strerror or e}. Rows written before are kept; "
        "fix the cause (e.g. free disk space) and rerun the same command to resume"
    )


def _show(v: Any) -> str:
    return orjson.dumps(v).decode() if not isinstance(v, str) else v
