"""Request records built in memory for the core tests: no server, no clock.

Times are chosen as binary fractions (halves, quarters) so that sums and differences are
exact in floating point and the tests can state their expected values with `==`.
"""

from __future__ import annotations

from genbench.records import RequestRecord


def rec(
    send: float,
    offsets: tuple[float, ...] | list[float] = (),
    kinds: str | None = None,
    *,
    tokens: int | None = None,
    reasoning: int | None = None,
    prompt: int | None = None,
    end: float | None = None,
    error: str | None = None,
    finish: str | None = "stop",
    rid: str = "r",
    ttft: float | None = None,
    estimated: bool = False,
    extra: dict | None = None,
) -> RequestRecord:
    """A request sent at `send` whose text chunks arrived `offsets` seconds later.

    `kinds` defaults to all answer chunks; `ttft` to the first chunk; `end` to the last
    chunk (or None when nothing streamed)."""
    offsets = list(offsets)
    kinds = "a" * len(offsets) if kinds is None else kinds
    assert len(kinds) == len(offsets)
    first_a = next((o for o, k in zip(offsets, kinds, strict=True) if k == "a"), None)
    first_r = next((o for o, k in zip(offsets, kinds, strict=True) if k == "r"), None)
    if end is None and offsets:
        end = send + offsets[-1]
    return RequestRecord(
        id=rid,
        t_send=send,
        t_end=end,
        ttft=ttft if ttft is not None else (offsets[0] if offsets else None),
        ttft_answer=first_a,
        ttft_thinking=first_r,
        chunk_offsets=offsets,
        chunk_kinds=kinds,
        prompt_tokens=prompt,
        completion_tokens=tokens,
        reasoning_tokens=reasoning,
        tokens_estimated=estimated,
        finish_reason=None if error else finish,
        error_kind=error,
        extra=extra or {},
    )
