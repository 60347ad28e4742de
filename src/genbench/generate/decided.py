"""What a job derives from its config, once, before it runs: the job (job.py) reads it and
never works it out again. Each server's endpoint, its URL parsed with the key; the shard,
every rule of it here (the files' tag, None for a job of one shard; the share job.json
records as asked, `--shard 1/1` too; the scheme the directory settles on); and what the job
says of the token ids it keeps none of (the mode itself is the flags': generate/flags.py);
the input as job.json names it, absolute, so a command printed from it runs from anywhere."""

from __future__ import annotations

import os
from dataclasses import dataclass

from genbench.generate.input.modes import DataFormat
from genbench.generate.jobconfig import JobConfig
from genbench.transport.endpoint import Endpoint

BATCH_IDS = ("token ids: not kept (the Batch shape of --answers batch has no place for them; "
             "--answers both keeps them)")  # fmt: skip


@dataclass(frozen=True)
class Decided:
    endpoints: tuple[Endpoint, ...]  # one per cfg.servers, in their order
    files_tag: str | None  # the shard's tag in the output's file names (layout.py)
    share: str | None  # the shard job.json records: the share asked, of one too
    shard_count: int  # the output directory's shard scheme this run asks for (1: none)
    shard_asked: str  # this run's --shard as its user wrote it, for a refusal (scheme.py)
    ids_said: str | None  # said once at the start: why no token ids are kept
    input: str  # the input's path, absolute (symbolic links kept as given)

    @classmethod
    def of(cls, cfg: JobConfig) -> Decided:
        s = cfg.shard
        asked = "no --shard" if s is None else (
            f"--shard auto: {s.source}" if s.source else f"--shard {s.index}/{s.count}"
        )  # fmt: skip
        return cls(
            endpoints=tuple(Endpoint.parse(spec.url, cfg.api_key) for spec in cfg.servers),
            files_tag=s.tag if s and s.count > 1 else None,
            share=s.tag if s else None,
            shard_count=s.count if s else 1,
            shard_asked=asked,
            ids_said=BATCH_IDS if cfg.fmt == DataFormat.BATCH else None,
            input=os.path.abspath(cfg.input),
        )
