"""What one `genbench generate` job is asked to do: every setting of its command line in one
value, which the job, its resume and its preflight read, and the part of it that job.json
keeps to compare on resume. Those its options give as typed are declared once (AsTyped),
for the job and the command's options (generate/flags.py GenerateArgs) alike."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, fields
from pathlib import Path
from typing import Any

from genbench.engines.command import EngineCommand
from genbench.engines.supervisor import EngineOptions
from genbench.generate.hidden import CaptureSpec
from genbench.generate.input.shard import ShardSpec
from genbench.generate.recipe import ALL, REPLAY, Recipe
from genbench.generate.servers import ServerSpec
from genbench.transport.thinking import DEFAULT_TAGS


@dataclass
class AsTyped:
    """The settings the job keeps as its options typed them, declared once: `JobConfig` holds
    them, and so does `GenerateArgs`, the command's options (generate/flags.py)."""

    input: Path
    output: Path
    _: KW_ONLY
    model: str | None = None
    skip_invalid: bool = False
    retries: int = 3
    retry_backoff: float = 1.0
    timeout: float = 600.0
    down_timeout: float = 1800.0
    drain: float = 10.0
    retry_errors: bool = False
    force: bool = False
    limit: int | None = None
    keep_raw: bool = False  # also write each answer's text as generated (turn["raw"])
    input_changed: str | None = None  # regenerate | keep: done rows whose request changed
    answers: str = "conversations"  # --answers: conversations | batch | both

    def as_typed(self) -> dict[str, Any]:
        """These settings by name, to build another of them (a JobConfig of the options)."""
        return {f.name: getattr(self, f.name) for f in fields(AsTyped)}


@dataclass
class JobConfig(AsTyped):
    """The job's settings: those kept as typed, and those read from the other options."""

    servers: list[ServerSpec]
    api_key: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    turns: str = ALL  # all | last
    tool_policy: str = REPLAY  # replay | keep: an agentic row's calls (generate/agent.py)
    fmt: str = "jsonl"  # jsonl | parquet | batch (JSONL of OpenAI Batch output lines)
    shard: ShardSpec | None = None
    part_bytes: int = 256 << 20
    max_backoff: float = 60.0
    max_server_losses: int = 8
    connect_timeout: float = 10.0
    on_truncated: str = "keep"  # keep | error
    sync_interval: float = 1.0
    tick: float = 0.5
    think_tags: tuple[str, str] = DEFAULT_TAGS  # thinking inline in content: its tags
    think_dialect: str = "auto"  # --think-dialect: where thinking arrives, or auto
    token_ids: str = "auto"  # --token-ids: auto (where the server gives them), on, off
    engines: list[EngineCommand] = field(default_factory=list)  # --serve: started here
    engine: EngineOptions = field(default_factory=EngineOptions)  # --engine-*
    capture: CaptureSpec | None = None  # --hidden-states: each turn's states (hidden.py)

    def fingerprint(self, model: str) -> dict[str, Any]:
        """The settings job.json keeps: those store.FINGERPRINT_KEYS names are compared on
        resume; token_ids and answers are kept to name a change (generate/store/jobfile.py)."""
        fp = {"model": model, "params": self.params, "turns": self.turns, "format": self.fmt}
        if self.tool_policy != REPLAY:  # the default leaves earlier jobs' fingerprints be
            fp["tool_policy"] = self.tool_policy
        fp["token_ids"], fp["answers"] = self.token_ids, self.answers
        if self.capture is not None:  # other layers are another data set
            fp["hidden_states"] = self.capture.setting()
        return fp

    @property
    def recipe(self) -> Recipe:
        """What shapes the rows' requests (generate/recipe.py)."""
        return Recipe(self.params, self.turns, self.tool_policy)
