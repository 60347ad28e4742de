"""What to send: built-in prompts for benchmarks and the fields that force an output length."""

from __future__ import annotations

from itertools import count, cycle
from typing import Any

from genbench.transport.client import ChatRequest
from genbench.transport.server_kind import traits

# Diverse on purpose: code, science explanation, technical guide, reasoning, prose, data.
BUILTIN_PROMPTS: list[tuple[str, str]] = [
    (
        "code",
        "Write a complete, well-commented Python module that implements an LRU cache with "
        "time-based expiry, thread safety, and statistics, followed by a thorough set of "
        "unit tests and an explanation of each design decision.",
    ),
    (
        "science",
        "Explain in depth how photosynthesis converts light into chemical energy: the "
        "light-dependent reactions, the Calvin cycle, the role of each pigment and "
        "enzyme, and how plants adapt the process to hot and dry climates.",
    ),
    (
        "guide",
        "Write a detailed technical guide to deploying a PostgreSQL database in "
        "production: hardware sizing, configuration parameters, replication, backups, "
        "monitoring, security hardening, and a step-by-step upgrade procedure.",
    ),
    (
        "math",
        "Solve step by step: a tank is filled by two pipes in 6 and 9 hours and drained by "
        "a third in 12 hours. All three open at noon; at 3 pm the drain is closed. When is "
        "the tank full? Then generalise the method and prove it correct.",
    ),
    (
        "story",
        "Write a long short story about a lighthouse keeper who discovers that the ships "
        "she guides are arriving from the future, with vivid description and dialogue.",
    ),
    (
        "data",
        "Design the schema, indexes and queries for an analytics system that ingests one "
        "billion click events per day, and explain the trade-offs of each choice.",
    ),
]

WARMUP_PROMPT = "Reply with one short sentence."


def messages(prompt: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": prompt}]


def forced_length_params(server_kind: str | None, max_tokens: int) -> dict[str, Any]:
    """Fields asking the server to generate exactly `max_tokens` tokens (ignore end-of-sequence).

    vLLM and SGLang read `ignore_eos` and `min_tokens`; llama.cpp reads `ignore_eos` and
    `n_predict`. Other servers may ignore them: `run` checks the lengths it got and says so."""
    field = traits(server_kind).exact_length
    return {"ignore_eos": True, **({field: max_tokens} if field else {})}


class PromptCycle:
    """An endless, deterministic stream of requests over the built-in prompts."""

    def __init__(
        self,
        prefix: str,
        max_tokens: int,
        params: dict[str, Any],
        prompts: list[tuple[str, str]] | None = None,
    ) -> None:
        self._prompts = cycle(prompts or BUILTIN_PROMPTS)
        self._n = count()
        self.prefix, self.max_tokens, self.params = prefix, max_tokens, params

    def __iter__(self) -> PromptCycle:
        return self

    def __next__(self) -> ChatRequest:
        name, text = next(self._prompts)
        i = next(self._n)
        return ChatRequest(
            id=f"{self.prefix}-{i}-{name}",
            messages=messages(text),
            max_tokens=self.max_tokens,
            params=dict(self.params),
            group=name,
        )
