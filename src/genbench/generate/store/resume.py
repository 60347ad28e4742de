"""What a run finds before it sends anything: the output directory as earlier runs left
it (repaired), the input checked against it, and what changed between them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from genbench.generate.input.reader import InputScan, scan
from genbench.generate.jobconfig import JobConfig
from genbench.generate.request_hash import LazyHashes, RequestCheck
from genbench.generate.store import changes, lostjob
from genbench.generate.store.durable import output_errors
from genbench.generate.store.jobfile import token_ids_change
from genbench.generate.store.readback import rekey_index
from genbench.generate.store.writer import Existing, Store


class PrepareNotes(Protocol):
    """Where `prepare` says what it found (`genbench.generate.outcome.Listener`)."""

    def note(self, text: str, style: str = "") -> None: ...


@dataclass
class Resume:
    """What a run found before it sent anything, as one value: the directory as earlier runs
    left it (`existing`: shards, the job file; its done ids already let go), the input
    checked against it (`scan`: rows to do, bad rows), the requests' check (`check`: the
    job's salt), and every note said on the way (repairs, settings compared, changed input),
    in order, as (text, style)."""

    existing: Existing
    scan: InputScan
    check: RequestCheck
    notes: list[tuple[str, str]] = field(default_factory=list)


class _Said:
    """The listener, and a copy of what it was told."""

    def __init__(self, listener: PrepareNotes) -> None:
        self.listener = listener
        self.notes: list[tuple[str, str]] = []

    def note(self, text: str, style: str = "") -> None:
        self.notes.append((text, style))
        self.listener.note(text, style)


def prepare(cfg: JobConfig, store: Store, told: PrepareNotes) -> Resume:
    """Local work only: the output directory, then the input. Fails before any request."""
    listener = _Said(told)
    with output_errors(store.out):  # a repair on a full disk: one line, exit 12
        if cfg.retry_errors:
            moved = store.set_aside_errors()
            if moved:
                listener.note(f"--retry-errors: earlier failures moved to {moved}")
        existing = store.load_existing()
    for n in existing.notes:
        listener.note(f"repaired {n}", "yellow")
    if existing.job_problem:  # said once; job.json is written again only if the job goes on
        line = lostjob.problem_line(store.out, *existing.job_problem, store.job_path.name)
        listener.note(line, "yellow")
    if existing.duplicates:  # every id once: the first copy stays
        with output_errors(store.out):
            listener.note(changes.drop_duplicates(store, existing), "yellow")
    # sampling, turns and format now (the served model once the servers answered): a job
    # refused for its settings is not also asked about every row's request
    store.check_job(existing, cfg.fingerprint(cfg.model or _old_model(existing)), cfg.force)
    ids_note = token_ids_change(existing.job, cfg.token_ids, cfg.force)
    if ids_note:
        listener.note(ids_note, "yellow")
    kept = changes.read_kept(store)
    check = RequestCheck(cfg.recipe, existing.hashes, kept)
    res = scan(
        cfg.input,
        existing.done,
        existing.failed,
        shard=cfg.shard,
        skip_invalid=cfg.skip_invalid,
        limit=cfg.limit,
        known_bad=existing.failed,
        check=check,
    )
    policy = cfg.input_changed or ("keep" if cfg.force else None)
    with output_errors(store.out):
        note = changes.settle(store, existing, res, check, policy)
    if note:
        listener.note(note, "yellow")
    if check.learned:  # checked the slow way once: the fast way next time
        with output_errors(store.out):
            for idx in sorted({store.layout.index(p) for p in store.data_files()}):
                rekey_index(idx, check.learned, existing.hashes)
    # 1M done ids are not needed past this point: the run writes only res.todo
    existing.done, existing.hashes, existing.failed = {}, LazyHashes(), set()
    check.hashes, check.kept = LazyHashes(), {}
    return Resume(existing, res, check, listener.notes)


def _old_model(existing: Existing) -> Any:
    return (existing.job or {}).get("model")
