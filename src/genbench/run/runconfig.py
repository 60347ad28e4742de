"""`genbench run`'s settings, checked before any request (the flags read in flags.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from genbench.errors import UsageError
from genbench.transport.thinking import DEFAULT_TAGS

SHAPES = ("burst", "sustained")


@dataclass
class RunConfig:
    lengths: list[int] = field(default_factory=lambda: [1024, 2048, 4096])
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 8, 16, 32, 64])
    # no -c (or -c auto) on a server: double from 1 until the knee (run/knee.py), not the list
    climb: bool = True
    climb_max: int = 4096
    shapes: list[str] = field(default_factory=lambda: list(SHAPES))
    sweep_tokens: int = 1024
    requests_per_slot: int = 3
    duration: float | None = None
    prompts_per_length: int = 3
    warmup: int = 2
    warmup_tokens: int = 64
    natural: bool = False
    temperature: float | None = None  # None: the server's (plan's and generate's default)
    timeout: float = 600.0
    skip: list[str] = field(default_factory=list)  # phases to skip: warmup, single, sweep
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request
    thinking: bool | None = None  # chat_template_kwargs.enable_thinking; None: the server's
    think_tags: list[str] = field(default_factory=lambda: list(DEFAULT_TAGS))
    think_dialect: str = "auto"  # --think-dialect
    metrics_urls: list[str] = field(default_factory=list)  # --metrics-url: workers', summed
    prompts: str | None = None  # --input: a prompt file's requests, not the built-in prompts

    def validate(self) -> None:
        if not self.lengths and "single" not in self.skip:
            raise UsageError("--lengths is empty: expected e.g. 1024,2048,4096")
        for n in self.lengths:
            if n <= 0:
                raise UsageError(f"--lengths: {n} is not a positive token count")
        for c in self.concurrency:
            if c <= 0:
                raise UsageError(f"--concurrency: {c} is not a positive number of requests")
        for s in self.shapes:
            if s not in SHAPES:
                raise UsageError(f"--shape: '{s}' is not one of {', '.join(SHAPES)}")
        for name, v in (
            ("--sweep-tokens", self.sweep_tokens),
            ("--timeout", self.timeout),
            ("--requests-per-slot", self.requests_per_slot),
            ("--prompts-per-length", self.prompts_per_length),
        ):
            if v <= 0:
                raise UsageError(f"{name} must be positive, got {v}")
        if self.duration is not None and self.duration < 1:
            raise UsageError(f"--duration {self.duration}: a steady window needs at least 1 s")
        if self.warmup_tokens <= 0:
            raise UsageError(f"--warmup-tokens must be positive, got {self.warmup_tokens}")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be 0 or more, got {self.warmup}")
