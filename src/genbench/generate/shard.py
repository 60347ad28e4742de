"""`--shard i/N`: which ids one of N clients takes, by a hash stable across hosts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from genbench.errors import UsageError


@dataclass(frozen=True)
class ShardSpec:
    """`--shard i/N`: this client takes the ids whose stable hash is i-1 modulo N."""

    index: int  # 1-based
    count: int

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        a, sep, b = text.partition("/")
        try:
            i, n = int(a), int(b)
        except ValueError:
            i = n = 0
        if not sep or n < 1 or not 1 <= i <= n:
            raise UsageError(f"--shard '{text}': expected i/N with 1 <= i <= N, e.g. 1/4")
        return cls(i, n)

    def owns(self, row_id: str) -> bool:
        return self.count == 1 or stable_hash(row_id) % self.count == self.index - 1

    @property
    def tag(self) -> str:
        return f"{self.index}of{self.count}"


def stable_hash(text: str) -> int:
    """64-bit hash that is the same on every host and Python version (unlike `hash`)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
