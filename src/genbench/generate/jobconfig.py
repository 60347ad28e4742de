"""What one `genbench generate` job is asked to do: every setting of its command line in one
place, which the job, its resume and its preflight read, and the part of it that job.json
keeps to compare on resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genbench.engines.command import EngineCommand
from genbench.engines.supervisor import EngineOptions
from genbench.generate.input.reader import ShardSpec
from genbench.generate.recipe import Recipe
from genbench.generate.servers import ServerSpec
from genbench.transport.thinking import DEFAULT_TAGS


@dataclass
class JobConfig:
    input: Path
    output: Path
    servers: list[ServerSpec]
    api_key: str | None = None
    model: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    turns: str = "all"  # all | last
    tool_policy: str = "replay"  # replay | keep: an agentic row's calls (generate/agent.py)
    fmt: str = "jsonl"  # jsonl | parquet | batch (JSONL of OpenAI Batch output lines)
    shard: ShardSpec | None = None
    shard_bytes: int = 256 << 20
    skip_invalid: bool = False
    retries: int = 3
    retry_backoff: float = 1.0
    max_backoff: float = 60.0
    max_server_losses: int = 8
    timeout: float = 600.0
    connect_timeout: float = 10.0
    down_timeout: float = 1800.0
    drain: float = 10.0
    on_truncated: str = "keep"  # keep | error
    retry_errors: bool = False
    force: bool = False
    limit: int | None = None
    sync_interval: float = 1.0
    tick: float = 0.5
    think_tags: tuple[str, str] = DEFAULT_TAGS  # thinking inline in content: its tags
    think_dialect: str = "auto"  # --think-dialect: where thinking arrives, or auto
    keep_raw: bool = False  # also write each answer's text as generated (turn["raw"])
    token_ids: str = "auto"  # --token-ids: auto (where the server gives them), on, off
    input_changed: str | None = None  # regenerate | keep: done rows whose request changed
    answers: str = "conversations"  # --answers: conversations | batch | both
    engines: list[EngineCommand] = field(default_factory=list)  # --serve: started here
    engine: EngineOptions = field(default_factory=EngineOptions)  # --engine-*

    def fingerprint(self, model: str) -> dict[str, Any]:
        """The settings job.json keeps: those store.FINGERPRINT_KEYS names are compared on
        resume; token_ids and answers are kept to name a change (generate/store/jobfile.py)."""
        fp = {"model": model, "params": self.params, "turns": self.turns, "format": self.fmt}
        if self.tool_policy != "replay":  # the default leaves earlier jobs' fingerprints be
            fp["tool_policy"] = self.tool_policy
        fp["token_ids"], fp["answers"] = self.token_ids, self.answers
        return fp

    @property
    def recipe(self) -> Recipe:
        """What shapes the rows' requests (generate/recipe.py)."""
        return Recipe(self.params, self.turns, self.tool_policy)

    @property
    def shard_tag(self) -> str | None:
        return self.shard.tag if self.shard and self.shard.count > 1 else None

    @property
    def shard_count(self) -> int:
        """The output directory's shard scheme this run asks for (1: none)."""
        return self.shard.count if self.shard else 1

    @property
    def shard_asked(self) -> str:
        """This run's --shard as its user wrote it, for a refusal (generate/store/scheme.py)."""
        if self.shard is None:
            return "no --shard"
        s = self.shard
        return f"--shard auto: {s.source}" if s.source else f"--shard {s.index}/{s.count}"
