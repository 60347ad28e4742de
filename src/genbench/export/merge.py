"""`genbench merge`: a sharded output directory read whole, and proved (or re-sharded).

After an array of `generate --shard auto` tasks, each shard's files say only what that
task did. `check` reads every shard of the directory (data files of every scheme, the
errors files) beside the job's input and says whether every input id is there exactly
once; where not, which ids are missing (and the shard, so the command, that finishes
them), failed (`--retry-errors`), doubled (a directory written under two schemes before
they were recorded), or not in the input at all. `merge_into` writes every id once, the
first copy, into a new directory of M shards: the documented way to change a job's shard
scheme (generate/store/scheme.py refuses a run of another scheme in place).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from genbench.atomic import fsync_dir, publish_dir, write_atomic
from genbench.errors import ExitCode, InputFileError, OutputError, UsageError
from genbench.fmt import counted as _n
from genbench.generate.input.reader import ShardSpec, scan
from genbench.generate.input.shard import stable_hash
from genbench.generate.store import seal as sealed
from genbench.generate.store.durable import scan_errors
from genbench.generate.store.jobfile import model_names
from genbench.generate.store.layout import (
    JOB_GLOB,
    LOCK_GLOB,
    SCHEME_FILE,
    STATE_DIR,
    Layout,
    error_files,
)
from genbench.generate.store.lock import OutputLock
from genbench.generate.store.rerun import generate_command, read_job
from genbench.generate.store.rerun import job_flags as rerun_flags
from genbench.generate.store.scheme import describe, from_files, recorded
from genbench.inspect.reader import FileStats, data_files, kind_of, parquet_batches, raw_lines
from genbench.plan.jobfiles import SBATCH

EXAMPLES = 5


@dataclass
class Proof:
    """What `check` found: counts, a few ids of each problem, and the commands that end it."""

    out: Path
    input: Path
    shards: int  # the directory's scheme (1: none)
    rows: int = 0  # data rows read, every copy
    ids: int = 0  # distinct ids in the data
    input_rows: int = 0
    missing: list[str] = field(default_factory=list)  # input ids in no data file, not failed
    failed: list[str] = field(default_factory=list)  # input ids only in an errors file
    doubled: dict[str, int] = field(default_factory=dict)  # id -> copies (> 1)
    extra: int = 0  # ids in the data that the input does not hold
    notes: list[str] = field(default_factory=list)
    schemes: list[int] = field(default_factory=list)  # those its files' names show
    flags: list[str] = field(default_factory=list)  # the job's settings, as generate's flags
    parts: list[sealed.PartCheck] = field(default_factory=list)  # each data part's checksum

    @property
    def changed(self) -> list[sealed.PartCheck]:
        return [c for c in self.parts if c.state == sealed.CHANGED]

    @property
    def exact(self) -> bool:
        return not (self.missing or self.failed or self.doubled or self.changed)

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if self.exact else ExitCode.FAILED

    def lines(self) -> list[str]:
        """The verdict, then one line per problem with the command that ends it."""
        scheme = describe(self.shards)
        if len(self.schemes) > 1:  # written under two schemes before they were recorded
            scheme = "two shard schemes: " + " and ".join(describe(n) for n in self.schemes)
        if self.exact:
            head = (
                f"{self.out}: every input id exactly once: {self.ids:,} of {self.input_rows:,} "
                f"input rows, in {scheme}"
            )
            return [head, *self._extra()]
        if self.changed and not (self.missing or self.failed or self.doubled):
            return [f"{self.out}: NOT proved: a data part's bytes changed since it was sealed "
                    f"({scheme})", *sealed.damage_lines(self.out, self.changed),
                    *self._extra()]  # fmt: skip
        out = [f"{self.out}: NOT every input id exactly once ({scheme}, {self.input_rows:,} "
               f"input rows, {_n(self.ids, 'id')} in the data)"]  # fmt: skip
        if self.missing:
            out.append(f"missing: {_ids(self.missing)}; {self._finish(self.missing)}")
        if self.failed:
            out.append(
                f"failed: {_ids(self.failed)} (in the errors files); rerun their shards "
                f"with --retry-errors: {self._finish(self.failed, '--retry-errors')}"
            )
        if self.doubled:
            copies = sum(self.doubled.values()) - len(self.doubled)
            out.append(
                f"doubled: {_ids(list(self.doubled))} ({copies:,} extra copies; export "
                f"writes the first of each); genbench merge {self.out} --out NEW keeps "
                "every id once in a new directory"
            )
        return out + sealed.damage_lines(self.out, self.changed) + self._extra()

    def _extra(self) -> list[str]:
        out = [sealed.summary(self.parts)] if self.parts else []
        out += [f"note: {n}" for n in self.notes]  # an incomplete last line: a task running?
        if self.extra:
            are = "is" if self.extra == 1 else "are"
            out.append(f"{_n(self.extra, 'id')} in the data {are} not in {self.input} "
                       "(another input?)")  # fmt: skip
        return out

    def _finish(self, ids: list[str], extra: str = "") -> str:
        """The command that finishes `ids`: their shards' generate, resumed, whole (the job's
        settings from its job files; URL: the servers). In an array, the Slurm task ids of
        those shards (0-based: task i runs --shard i+1/N), and the script that resubmits
        them, or where none is here, the command that writes it."""
        base = generate_command(self.input, self.out, [*self.flags, *([extra] if extra else [])])
        if self.shards == 1:
            return f"finish them: {base}"
        owners = sorted({i for i in range(1, self.shards + 1)
                         for rid in ids if ShardSpec(i, self.shards).owns(rid)})  # fmt: skip
        tasks = ",".join(str(i - 1) for i in owners)
        script = next((p for p in (Path(SBATCH), self.out / SBATCH) if p.is_file()), None)
        array = (
            f"sbatch --array={tasks} {script}"
            if script is not None
            else f"no {SBATCH} here: write it with genbench plan --from PLAN_DIR --job-files "
            f"DIR --servers {self.shards}, then sbatch --array={tasks} DIR/{SBATCH}"
        )
        each = "; ".join(f"{base} --shard {i}/{self.shards}" for i in owners)
        return (
            f"finish them: {each}; or, as a Slurm array, resubmit tasks {tasks} (Slurm's "
            f"task ids count from 0: task i runs --shard i+1/{self.shards}): {array}"
        )


def _ids(ids: list[str]) -> str:
    shown = ", ".join(sorted(ids)[:EXAMPLES]) + (", ..." if len(ids) > EXAMPLES else "")
    return f"{len(ids):,} {'id' if len(ids) == 1 else 'ids'} ({shown})"


def _named_input(out: Path) -> tuple[Path, Path] | None:
    """(the input, the job file that names it): the first job file that names one."""
    state = out / STATE_DIR
    for p in sorted(state.glob(JOB_GLOB)) if state.is_dir() else ():
        with contextlib.suppress(OSError, ValueError):
            src = orjson.loads(p.read_bytes()).get("input")
            if src:
                return Path(src), p
    return None


def input_of(out: Path, given: Path | None) -> Path:
    """The job's input: `--input`, else the one its job files name, which must be found
    from here (a job file holds the path as its run was given it, maybe relative)."""
    if not (out / STATE_DIR).is_dir():
        raise UsageError(f"{out}: not a genbench generate output directory (no {STATE_DIR})")
    if given is not None:
        return given
    named = _named_input(out)
    if named is None:
        raise UsageError(f"{out}: its job files name no input: give --input FILE")
    src, job = named
    if not src.is_file():
        raise UsageError(
            f"{out}: the input its job file names ({src}, in {job}) is not found from "
            f"{Path.cwd()}: give --input FILE"
        )
    return src


def running(out: Path) -> list[str]:
    """The shards whose generate holds its lock now (a task still running): their missing
    ids are being written, and the command that finishes them would be refused."""
    found = []
    for p in sorted((out / STATE_DIR).glob(LOCK_GLOB)):
        try:
            if not p.stat().st_size:  # a holder writes its note; a release empties it
                continue
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # held by nobody: not running
        except OSError:
            who = OutputLock(out, out / STATE_DIR, p.name).holder()
            shard = p.name.removeprefix("lock-").replace("of", "/") if "-" in p.name else ""
            what = f"shard {shard}" if shard else "a generate"
            found.append(f"{what} is still running ({who}): merge again when it ends")
        finally:
            os.close(fd)
    return found


def job_flags(out: Path) -> list[str]:
    """The settings of the directory's first job file as generate's flags: a shard run
    without them would be refused (a changed job) or, a shard's first run, differ."""
    doc = read_job(out)
    return rerun_flags(doc) if doc else []


_NOT_SETTINGS = {"shard", "created", "genbench_version", "input"}


def settings_differ(out: Path) -> str | None:
    """Where the shards' job files hold different settings (a shard run with other flags,
    or --force): one line naming each setting and the shards of each value, else None."""
    docs: dict[str, dict[str, Any]] = {}
    for p in sorted((out / STATE_DIR).glob("job*.json")):
        with contextlib.suppress(OSError, ValueError):
            doc = orjson.loads(p.read_bytes())
            docs[p.name] = {k: v for k, v in doc.items() if k not in _NOT_SETTINGS}
    keys = sorted({k for d in docs.values() for k in d})
    models = model_names([d.get("model") for d in docs.values()])  # as generate compares them
    pairs = list(zip(docs.values(), models, strict=True))
    differ = [k for k in keys if len({orjson.dumps(m if k == "model" else d.get(k),
                                                   option=orjson.OPT_SORT_KEYS)
                                      for d, m in pairs}) > 1]  # fmt: skip
    if not differ:
        return None
    parts = []
    for k in differ:
        by = ", ".join(f"{name} {orjson.dumps(d.get(k)).decode()}" for name, d in docs.items())
        parts.append(f"{k}: {by}")
    return (
        f"the shards ran with different settings ({'; '.join(parts)}): their rows are "
        "not one job's; rerun the odd shards with the job's flags into a new --out"
    )


def scheme_of(out: Path) -> int:
    """The directory's scheme: recorded, else read from its files (the largest N)."""
    found = recorded(out)
    return found if found is not None else max(from_files(out), default=1)


def rows_of(
    out: Path, notes: list[str], skip: frozenset[Path] = frozenset()
) -> Iterator[tuple[str, bytes]]:
    """(id, the row as one JSON line) of every data file of every shard, in name order
    (but those in `skip`: parts whose bytes changed since they were sealed)."""
    for path in data_files(out):
        if path in skip:
            continue
        stats = FileStats(path, kind_of(path))
        if stats.kind == "parquet":
            for batch in parquet_batches(path, columns=None):
                for obj in batch.to_pylist():
                    yield _id(obj, path), orjson.dumps(obj) + b"\n"
        else:
            for n, line in raw_lines(path, stats):
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise InputFileError(path, n, "not valid JSON") from None
                yield _id(obj, path, n), line if line.endswith(b"\n") else line + b"\n"
        notes.extend(stats.notes)


def _id(obj: Any, path: Path, n: int | None = None) -> str:
    rid = obj.get("id", obj.get("custom_id")) if isinstance(obj, dict) else None
    if rid is None:
        raise InputFileError(path, n, "a row without an id", "id")
    return str(rid)


def check(out: Path, input: Path | None = None) -> Proof:
    """Every shard of `out` read beside the job's input: every input id exactly once?"""
    src = input_of(out, input)
    proof = Proof(out, src, scheme_of(out), schemes=sorted(from_files(out)))
    differ = settings_differ(out)
    if differ:
        proof.notes.append(differ)
    proof.notes += running(out)
    proof.flags = job_flags(out)
    proof.parts = sealed.verify(data_files(out))
    changed = frozenset(c.part for c in proof.changed)
    counts: Counter[str] = Counter()
    for rid, _ in rows_of(out, proof.notes, changed):
        counts[rid] += 1
    proof.rows, proof.ids = counts.total(), len(counts)
    proof.doubled = {k: v for k, v in counts.items() if v > 1}
    failed: set[str] = set()
    for p in error_files(out):
        keys, _ = scan_errors(p, repair=False)
        failed |= keys - counts.keys()
    res = scan(src, counts.keys(), skip_invalid=True)  # todo: the input's ids not in the data
    proof.input_rows = res.rows + len(res.bad)
    if res.bad:  # counted above, never generated: say so beside "every input id"
        b = res.bad[0]
        proof.notes.append(
            f"{_n(len(res.bad), 'input row')} of {src} cannot be sent (line {b.line}: "
            f"{b.describe()}{', ...' if len(res.bad) > 1 else ''}): no run generates "
            "them; generate --skip-invalid writes them to the errors file"
        )
    held = {i for c in proof.changed for i in sealed.held_ids(c.part)}  # said with their part
    proof.missing = sorted(res.todo - failed - held)
    proof.failed = sorted(res.todo & failed)
    proof.extra = len(counts) - res.done
    return proof


def merge_into(source: Path, out: Path, shards: int) -> dict[str, Any]:
    """Every id of `source` once (the first copy, in file order) into the new directory
    `out`, under `shards` shards (1: none); its job files copied with their new shard."""
    if shards < 1:
        raise UsageError(f"--shards {shards}: must be 1 or more")
    if not (source / STATE_DIR).is_dir():
        raise UsageError(f"{source}: not a genbench generate output directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        what = "is not empty" if out.is_dir() else "is not a directory"
        raise UsageError(f"--out {out}: exists and {what}; give a new directory")
    if out.resolve().is_relative_to(source.resolve()):
        raise UsageError(f"--out {out}: inside {source}; give a directory outside it")
    if changed := [c for c in sealed.verify(data_files(source)) if c.state == sealed.CHANGED]:
        raise UsageError("; ".join(sealed.damage_lines(source, changed)) + "; then merge again")
    try:  # written beside, then renamed: a generate of NEW never sees it half made
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.merging-", dir=out.parent))
    except OSError as e:
        raise OutputError(f"--out {out}: cannot write to it: {e.strerror or e}") from None
    try:
        (tmp / STATE_DIR).mkdir()
        done = {**_write(source, tmp, shards), "out": str(out)}
        if out.is_dir():
            out.rmdir()  # empty (checked above); a file put there since fails the rename
        publish_dir(tmp, out)
    except OSError as e:
        raise OutputError(f"--out {out}: cannot write to it: {e.strerror or e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone once renamed
    return done


def _write(source: Path, out: Path, shards: int) -> dict[str, Any]:
    specs = [ShardSpec(i, shards) for i in range(1, shards + 1)]
    layouts = [Layout(out, None if shards == 1 else s.tag) for s in specs]
    files = [open(lay.part(0), "wb") for lay in layouts]  # noqa: SIM115
    seen: set[str] = set()
    notes = [n for n in [settings_differ(source)] if n]  # the copies carry the first's
    skipped = 0
    try:
        for rid, line in rows_of(source, notes):
            if rid in seen:
                skipped += 1
                continue
            seen.add(rid)
            files[0 if shards == 1 else _owner(rid, shards)].write(line)
    finally:
        for f in files:
            f.flush()
            os.fsync(f.fileno())
            f.close()
    for lay in layouts:
        sealed.seal(lay.part(0))  # written whole: never appended to
    _job_files(source, out, specs)
    doc = {"shards": shards, "recorded": datetime.now(UTC).isoformat(), "merged_from": str(source)}
    write_atomic(out / STATE_DIR / SCHEME_FILE, orjson.dumps(doc) + b"\n")
    fsync_dir(out)
    failed = len(error_files(source))
    return {"source": str(source), "out": str(out), "shards": shards, "ids": len(seen),
            "skipped_copies": skipped, "errors_files_left": failed,
            "notes": notes}  # fmt: skip


def _owner(rid: str, shards: int) -> int:
    return stable_hash(rid) % shards  # as ShardSpec.owns: shard i takes hash % N == i - 1


def _job_files(source: Path, out: Path, specs: list[ShardSpec]) -> None:
    """The source's job settings, once per new shard (what each resume compares)."""
    jobs = sorted((source / STATE_DIR).glob(JOB_GLOB))
    if not jobs:
        return
    doc = orjson.loads(jobs[0].read_bytes())
    for s in specs:
        tag = s.tag if s.count > 1 else None
        doc["shard"] = tag
        write_atomic(Layout(out, tag).job, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
