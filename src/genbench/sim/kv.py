"""The sim's KV cache (`--kv-tokens`, docs/sim.md "KV cache"): a capacity in tokens.

A real engine holds each running request's prompt and every token it has generated in its
KV cache; when the next decode step would not fit, it preempts the request admitted last
and computes it again later. That is what makes too many requests in flight slower than
fewer: the knee `run` looks for and `generate -c auto` holds. The sim plays it in tokens
(no blocks), so that the best concurrency of a fixed output length is one formula:

    C* = floor(K / (P + L))      K capacity, P prompt tokens, L output tokens

At C <= C* no request is ever preempted; above it the requests admitted last are, and
each loses the tokens it had generated (they are generated again, silently, when it is
admitted back) and its time in the queue.
"""

from __future__ import annotations

import itertools
from typing import Any

BLOCK_SIZE = 16  # what vllm:cache_config_info says; the sim counts tokens, not blocks


class KVCache:
    """Tokens in use against a capacity (0: no KV cache, the sim's old behaviour)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.preemptions = 0  # vllm:num_preemptions, sglang:num_retracted_requests_total
        self.redone = 0  # tokens generated again after a preemption
        self._seq = itertools.count()

    @property
    def on(self) -> bool:
        return self.capacity > 0

    def fits(self, need: int) -> bool:
        """Can `need` more tokens be held? (Always, without a KV cache.)"""
        return not self.on or self.used + need <= self.capacity

    def usage(self) -> float:
        """The share in use, 0..1 (vllm:kv_cache_usage_perc, sglang:token_usage)."""
        return min(1.0, self.used / self.capacity) if self.on else 0.0

    def hold(self, r: Any, tokens: int) -> None:
        """`r` was admitted: it holds `tokens` (its prompt) and is the newest resident."""
        r.kv, r.seq = tokens, next(self._seq)
        self.used += tokens

    def drop(self, r: Any) -> None:
        """`r` left the cache (finished, gone or preempted)."""
        self.used -= r.kv
        r.kv = 0

    def victims(self, batch: list[Any], step_tokens: int) -> list[Any]:
        """The requests to preempt, newest first, so that the next step's `step_tokens` per
        request fit; a request alone in the batch is never preempted (it could not fit)."""
        if not self.on or self.used + step_tokens * len(batch) <= self.capacity:
            return []
        out: list[Any] = []
        used, n = self.used, len(batch)
        for r in sorted(batch, key=lambda r: r.seq, reverse=True):
            if n <= 1 or used + step_tokens * n <= self.capacity:
                break
            out.append(r)
            used -= r.kv
            n -= 1
        return out
