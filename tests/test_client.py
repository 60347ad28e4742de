"""The streaming client against the reference sim over real loopback HTTP.

The sim's timing is known exactly (docs/sim.md), so the client's records can be
checked against it: TTFT and decode rate within 2%, token counts equal to usage,
and every error kind produced by the fault that causes it.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from tests_helpers import closed_port_url, sim_metric, skip_if_host_wakes_late

from genbench.client import ChatRequest, Client, Timeouts
from genbench.endpoint import Endpoint
from genbench.records import ErrorKind

pytestmark = pytest.mark.asyncio


def first_token_lag(root: str) -> float:
    """The sim's count of seconds its first tokens were written late (slow host timers)."""
    return sim_metric(root, "first_token_lag_seconds_total")


def req(n: int = 100, **params: object) -> ChatRequest:
    return ChatRequest(
        id="t",
        messages=[{"role": "user", "content": "hello there"}],
        max_tokens=n,
        params={"ignore_eos": True, **params},
    )


async def one(
    url: str,
    r: ChatRequest | None = None,
    model: str = "genbench-sim",
    timeouts: Timeouts | None = None,
    keep_text: bool = False,
    key: str | None = None,
):
    async with Client(Endpoint.parse(url, key), model, timeouts=timeouts, keep_text=keep_text) as c:
        return await c.chat(r or req())


async def test_ttft_and_decode_rate_match_the_sims_timing(sim_factory):
    # A shared box can only delay what the client sees, never advance it: every attempt
    # must respect the lower bounds, and the best attempt must be within 2%.
    # The sim reports how late its host's timers wrote each first token, and the client
    # measures how late it wakes from as long an idle wait: both are the host's (a busy VM
    # host wakes an idle vCPU late), and are taken out before the 2% check. The lower
    # bound stays strict.
    skip_if_host_wakes_late(0.300 * 0.02)
    sim = sim_factory("--tps", "200", "--ttft-ms", "300")
    recs, host_lag = [], []
    async with Client(Endpoint.parse(sim.url), "genbench-sim") as c:
        await c.chat(req(2))  # warm the connection and both processes' code paths
        # best of up to 8 (at least 3): a host that wakes late only ever adds
        while len(recs) < 3 or (
            len(recs) < 8
            and min(r.ttft - lag for r, lag in zip(recs, host_lag, strict=True)) > 0.300 * 1.02
        ):
            # the client's side of the same host cost: how late this process wakes from an
            # idle 300 ms, measured just before the request that idles as long
            t = time.perf_counter()
            await asyncio.sleep(0.3)
            wake = max(time.perf_counter() - t - 0.3, 0.0)
            before = first_token_lag(sim.root)
            recs.append(await c.chat(req(300)))
            host_lag.append(first_token_lag(sim.root) - before + wake)
    for rec in recs:
        assert rec.ok, rec.error_message
        assert rec.completion_tokens == 300 and not rec.tokens_estimated
        assert len(rec.chunk_offsets) == 300
        assert rec.finish_reason == "length"
        assert rec.ttft >= 0.300 * 0.998
        assert rec.decode_rate <= 200 * 1.02
    best = min(r.ttft - lag for r, lag in zip(recs, host_lag, strict=True))
    assert best == pytest.approx(0.300, rel=0.02), (recs[0].ttft, host_lag)
    assert max(r.decode_rate for r in recs) == pytest.approx(200, rel=0.02)


async def test_speculative_chunks_count_tokens_from_usage(sim_factory):
    sim = sim_factory("--tps", "400", "--ttft-ms", "10", "--spec-k", "4")
    async with Client(Endpoint.parse(sim.url), "genbench-sim") as c:
        recs = [await c.chat(req(200)) for _ in range(3)]
    for rec in recs:
        assert rec.ok
        assert rec.completion_tokens == 200
        # the first token comes alone from prefill, then 4 tokens per decode step
        assert len(rec.chunk_offsets) == 1 + 50
    # a chunk every step: 4 tokens per 1/400 s step -> 1600 tok/s per request (best of 3)
    assert max(r.decode_rate for r in recs) == pytest.approx(1600, rel=0.03)


@pytest.mark.parametrize("dialect", ["reasoning_content", "reasoning"])
async def test_thinking_is_counted_apart_in_both_dialects(sim_factory, dialect):
    sim = sim_factory(
        "--tps", "500", "--ttft-ms", "10", "--thinking-tokens", "30", "--reasoning-dialect", dialect
    )
    rec = await one(sim.url, req(100), keep_text=True)
    assert rec.ok
    assert rec.reasoning_tokens == 30 and rec.answer_tokens == 70
    assert rec.chunk_kinds == "r" * 30 + "a" * 70
    assert rec.ttft_thinking is not None and rec.ttft_answer is not None
    assert rec.ttft_thinking < rec.ttft_answer
    assert rec.reasoning and rec.text and rec.thinking_chars == len(rec.reasoning)


async def test_no_usage_in_stream_is_estimated_and_marked(sim_factory):
    sim = sim_factory("--tps", "500", "--ttft-ms", "10", "--fault", "no-usage")
    rec = await one(sim.url, req(40))
    assert rec.ok and rec.tokens_estimated
    assert rec.completion_tokens == 40


async def test_non_streaming_mode(fast_sim):
    async with Client(
        Endpoint.parse(fast_sim.url), "genbench-sim", stream=False, keep_text=True
    ) as c:
        rec = await c.chat(req(25))
    assert rec.ok and rec.completion_tokens == 25 and rec.text


async def test_connect_refused():
    rec = await one(closed_port_url())
    assert rec.error_kind == ErrorKind.CONNECT_REFUSED


async def test_unknown_host_is_dns():
    rec = await one("http://no-such-host.invalid:8000/v1", timeouts=Timeouts(connect=5))
    assert rec.error_kind == ErrorKind.DNS


async def test_connect_timeout_when_the_listen_queue_is_full():
    # A loopback listener that never accepts: once its backlog is full, SYNs are dropped.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        await asyncio.sleep(0)  # let the kernel settle the handshakes
        rec = await one(f"http://127.0.0.1:{port}/v1", timeouts=Timeouts(connect=0.5, read=5))
        assert rec.error_kind in (ErrorKind.CONNECT_TIMEOUT, ErrorKind.READ_TIMEOUT)
    finally:
        for s in fillers:
            s.close()
        srv.close()


async def test_read_timeout_when_the_server_stalls(sim_factory):
    sim = sim_factory("--fault", "stall-first:seconds=5")
    rec = await one(sim.url, timeouts=Timeouts(connect=2, read=0.5))
    assert rec.error_kind == ErrorKind.READ_TIMEOUT


async def test_http_status_carries_the_servers_message(sim_factory):
    sim = sim_factory("--fault", "http:status=503,message=overloaded right now")
    rec = await one(sim.url)
    assert rec.error_kind == ErrorKind.HTTP_STATUS and rec.http_status == 503
    assert "overloaded right now" in (rec.error_message or "")


async def test_inband_error_event(sim_factory):
    sim = sim_factory("--tps", "500", "--fault", "inband-error:at=5")
    rec = await one(sim.url)
    assert rec.error_kind == ErrorKind.INBAND_ERROR
    assert len(rec.chunk_offsets) == 5


async def test_malformed_chunk(sim_factory):
    sim = sim_factory("--tps", "500", "--fault", "malformed:at=3")
    rec = await one(sim.url)
    assert rec.error_kind == ErrorKind.MALFORMED_CHUNK


async def test_stream_ended_without_finish(sim_factory):
    sim = sim_factory("--tps", "500", "--fault", "truncate:at=7")
    rec = await one(sim.url)
    assert rec.error_kind in (ErrorKind.INCOMPLETE_STREAM, ErrorKind.DISCONNECTED)
    assert len(rec.chunk_offsets) == 7


async def test_server_killed_mid_stream_then_refused(sim_factory):
    sim = sim_factory("--tps", "100", "--fault", "die:after=1")
    ep = Endpoint.parse(sim.url)
    async with Client(ep, "genbench-sim") as c:
        streaming = c.new_record(req(500))
        task = asyncio.create_task(c.chat(req(500), record=streaming))
        while not streaming.chunk_offsets and not task.done():
            await asyncio.sleep(0.01)  # wait until the first request is streaming
        killer = await c.chat(req(5))  # the second request kills the server (like an OOM)
        first = await task
        assert first.error_kind in (ErrorKind.DISCONNECTED, ErrorKind.INCOMPLETE_STREAM)
        assert killer.error_kind is not None
        sim.proc.wait(timeout=10)
        after = await c.chat(req(5))
        assert after.error_kind == ErrorKind.CONNECT_REFUSED


async def test_any_read_boundary_loses_nothing(sim_factory):
    """Byte streams split at random points (down to 1 byte) give the same text, no failures."""
    fast = ("--tps", "2000", "--per-seq-ms", "0.1", "--ttft-ms", "1", "--thinking-tokens", "20")
    plain = sim_factory(*fast)
    split = sim_factory(*fast, "--fault", "split:min=1,max=9")
    for i in range(8):
        r = ChatRequest(
            id=f"s{i}",
            messages=[{"role": "user", "content": f"prompt {i}"}],
            max_tokens=120,
            params={"ignore_eos": True},
        )
        a = await one(plain.url, r, keep_text=True)
        b = await one(split.url, r, keep_text=True)
        assert a.ok and b.ok, (a.error_message, b.error_message)
        assert (b.text, b.reasoning) == (a.text, a.reasoning)
        assert b.completion_tokens == a.completion_tokens == 120


async def test_api_key_is_sent_and_never_echoed(sim_factory, monkeypatch):
    monkeypatch.setenv("SIM_KEY", "sk-test-very-secret")
    sim = sim_factory("--api-key-env", "SIM_KEY")
    ok = await one(sim.url, req(5), key="sk-test-very-secret")
    assert ok.ok
    bad = await one(sim.url, req(5), key="sk-wrong-key-1234")
    assert bad.error_kind == ErrorKind.HTTP_STATUS and bad.http_status == 401
    assert "sk-wrong-key-1234" not in (bad.error_message or "")
    assert "sk-wrong-key-1234" not in bad.to_json().decode()
