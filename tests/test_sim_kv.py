"""The sim's KV cache (docs/sim.md "KV cache"): C* = floor(K / (P + L)) requests never
preempt; more do, and every answer still comes whole, its lost tokens generated again."""

from __future__ import annotations

import asyncio
import urllib.request

import aiohttp
import orjson
import pytest
from tests_helpers import sim_metric

from genbench.sim.kv import KVCache
from genbench.sim.process import SimProcess

# P = 3 words + 4 = 7 prompt tokens, L = 9 output tokens: C* = 128 // 16 = 8
P, L, K = 7, 9, 128
C_STAR = K // (P + L)


class R:
    def __init__(self, seq: int, kv: int) -> None:
        self.seq, self.kv = seq, kv


@pytest.mark.core
def test_victims_are_the_newest_until_the_next_step_fits() -> None:
    kv = KVCache(100)
    batch = [R(0, 30), R(1, 30), R(2, 30)]
    kv.used = 90
    assert kv.victims(batch, 1) == []  # 93 fits
    kv.used = 98
    assert kv.victims(batch, 1) == [batch[2]]  # 101 does not; without the newest, 68 + 2
    assert KVCache(0).victims(batch, 1) == []  # no cache: never


@pytest.mark.core
def test_a_request_alone_is_never_preempted() -> None:
    kv = KVCache(16)
    kv.used = 16
    assert kv.victims([R(0, 16)], 1) == []


async def _burst(url: str, n: int, word: str) -> list[dict]:
    body = {"messages": [{"role": "user", "content": f"{word} b c"}], "max_tokens": 64}
    async with aiohttp.ClientSession() as s:

        async def one(i: int) -> dict:
            b = {**body, "messages": [{"role": "user", "content": f"{word}{i} b c"}]}
            async with s.post(url + "/chat/completions", json=b) as r:
                return orjson.loads(await r.read())

        return list(await asyncio.gather(*(one(i) for i in range(n))))


def test_the_best_concurrency_never_preempts_and_more_does() -> None:
    args = ["--tps", "200", "--per-seq-ms", "0.1", "--ttft-ms", "5", "--output-len",
            f"fixed:{L}", "--kv-tokens", str(K)]  # fmt: skip
    with SimProcess(*args) as sim:
        got = asyncio.run(_burst(sim.url, C_STAR, "x"))
        assert all(g["usage"]["completion_tokens"] == L for g in got)
        assert sim_metric(sim.root, "num_preemptions_total") == 0
        got = asyncio.run(_burst(sim.url, 2 * C_STAR, "y"))
        assert all(g["usage"]["completion_tokens"] == L for g in got)  # whole, nothing lost
        preempted = sim_metric(sim.root, "num_preemptions_total")
        assert preempted > 0
        assert sim_metric(sim.root, "kv_redone_tokens_total") > 0
        assert sim_metric(sim.root, "kv_used_tokens") == 0  # all given back
        with urllib.request.urlopen(sim.root + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert (
            f'vllm:num_preemptions_total{{engine="0",model_name="genbench-sim"}} {preempted!r}'
            in text
        )
        assert 'num_gpu_blocks="8"' in text and "vllm:kv_cache_usage_perc" in text
