"""The client against the reference sim over real loopback HTTP.

The sim's behaviour is known exactly (docs/sim.md): its timing, its text (the same
tokens streamed or whole, so its non-streamed answer, read with the stdlib, is the truth
for a streamed one), its usage, and every fault it injects. The records must agree with
it: TTFT and decode rate within 2%, text and token counts equal, each error kind from
the fault that causes it, at any read boundary. (HTTP framing and the connection pool:
test_http1.py; the parser fed bytes directly: test_stream.py.)
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import time
from typing import Any

import pytest
from sim_truth import FAST, assert_is_the_sims, req, truth, truths
from tests_helpers import closed_port_url, sim_metric, skip_if_host_wakes_late

from genbench.records import ErrorKind, RequestRecord
from genbench.transport.client import ChatRequest, Client, Timeouts
from genbench.transport.endpoint import Endpoint

pytestmark = pytest.mark.asyncio


async def one(url: str, r: ChatRequest | None = None, key: str | None = None, **kw: Any):
    async with Client(Endpoint.parse(url, key), "genbench-sim", **kw) as c:
        return await c.chat(r or req())


# -- what the sim sends, recorded exactly ------------------------------------------------------


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
            before = sim_metric(sim.root, "first_token_lag_seconds_total")
            recs.append(await c.chat(req(300)))
            host_lag.append(sim_metric(sim.root, "first_token_lag_seconds_total") - before + wake)
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


async def test_plain_stream_is_the_sims_answer(sim_factory):
    sim = sim_factory(*FAST)
    rec = await one(sim.url, req(120), keep_text=True)
    assert_is_the_sims(rec, truth(sim.url, req(120)))
    assert rec.completion_tokens == 120 == len(rec.chunk_offsets) and rec.finish_reason == "length"


async def test_speculative_chunks_count_tokens_from_usage(sim_factory):
    sim = sim_factory("--tps", "400", "--ttft-ms", "10", "--spec-k", "4")
    async with Client(Endpoint.parse(sim.url), "genbench-sim", keep_text=True) as c:
        recs = [await c.chat(req(200)) for _ in range(3)]
    for rec in recs:
        assert_is_the_sims(rec, truth(sim.url, req(200)))
        # the first token comes alone from prefill, then 4 tokens per decode step
        assert len(rec.chunk_offsets) == 1 + 50
    # a chunk every step: 4 tokens per 1/400 s step -> 1600 tok/s per request (best of 3),
    # where the sim kept its schedule (on a starved host its steps come late: fewer tok/s)
    best = max(r.decode_rate for r in recs)
    if sim_metric(sim.root, "decode_resync_seconds_total") == 0:
        assert best == pytest.approx(1600, rel=0.03)
    assert 0 < best <= 1600 * 1.03


async def test_speculative_chunks_of_random_size(sim_factory):
    sim = sim_factory(*FAST, "--spec-k", "4", "--spec-accept", "0.6", "--seed", "3")
    rec = await one(sim.url, req(200), keep_text=True)
    assert_is_the_sims(rec, truth(sim.url, req(200)))
    assert len(rec.chunk_offsets) < 200 and rec.chunk_kinds == "a" * len(rec.chunk_offsets)


@pytest.mark.parametrize("dialect", ["reasoning_content", "reasoning"])
async def test_thinking_is_counted_apart_in_both_dialects(sim_factory, dialect):
    sim = sim_factory(*FAST, "--thinking-tokens", "30", "--reasoning-dialect", dialect)
    for keep in (True, False):
        rec = await one(sim.url, req(100), keep_text=keep)
        assert rec.ok
        assert rec.reasoning_tokens == 30 and rec.answer_tokens == 70
        assert rec.chunk_kinds == "r" * 30 + "a" * 70
        assert rec.ttft_thinking is not None and rec.ttft_answer is not None
        # each kind's first chunk (one read may bring both: then the two are equal)
        offsets = rec.chunk_offsets
        assert (rec.ttft_thinking, rec.ttft_answer) == (offsets[0], offsets[30])
        assert rec.ttft_thinking <= rec.ttft_answer
        if keep:
            assert_is_the_sims(rec, truth(sim.url, req(100)))
        else:
            assert rec.text is None and rec.reasoning is None and rec.thinking_chars > 0


async def test_no_usage_in_stream_is_estimated_and_marked(sim_factory):
    sim = sim_factory(*FAST, "--output-len", "uniform:5:40", "--fault", "no-usage")
    for i in range(4):
        r = ChatRequest(f"n{i}", [{"role": "user", "content": f"p {i}"}], 200)
        rec = await one(sim.url, r, keep_text=True)
        assert_is_the_sims(rec, truth(sim.url, r))
        assert rec.tokens_estimated and rec.finish_reason == "stop"
        assert rec.completion_tokens == len(rec.text.split())  # the sim's tokens are words


async def test_non_streaming_mode(sim_factory):
    sim = sim_factory(*FAST, "--thinking-tokens", "5")
    rec = await one(sim.url, req(25), stream=False, keep_text=True)
    assert_is_the_sims(rec, truth(sim.url, req(25)))
    assert rec.completion_tokens == 25 and rec.text and rec.reasoning and not rec.chunk_offsets


# -- each fault of the sim, each error kind ----------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "kind", "whole_kind"),
    [
        ("http:status=503,message=overloaded right now", "http_status", "http_status"),
        ("http:status=429", "http_status", "http_status"),
        ("inband-error:at=5", "inband_error", "http_status"),
        ("malformed:at=3", "malformed_chunk", "malformed_chunk"),
        ("not-openai", "malformed_chunk", "malformed_chunk"),
    ],
)
async def test_content_faults(sim_factory, fault, kind, whole_kind):
    sim = sim_factory(*FAST, "--fault", fault)
    rec = await one(sim.url, req(50))
    assert rec.error_kind == kind and rec.t_end is not None
    if fault.startswith("http"):
        assert rec.http_status == int(fault[12:15])
    if fault.startswith("http:status=503"):
        assert rec.error_message == "HTTP 503: overloaded right now"
    if fault.startswith("inband"):
        assert len(rec.chunk_offsets) == len(rec.chunk_kinds) == 5
        assert rec.error_message == "error event in stream: injected in-band error"
    whole = await one(sim.url, req(50), stream=False)  # and the non-streaming path
    assert whole.error_kind == whole_kind


async def test_stream_ended_without_finish(sim_factory):
    sim = sim_factory(*FAST, "--fault", "truncate:at=7")
    rec = await one(sim.url, req(50))
    assert rec.error_kind in (ErrorKind.INCOMPLETE_STREAM, ErrorKind.DISCONNECTED)
    assert len(rec.chunk_offsets) == len(rec.chunk_kinds) == 7


async def test_connect_refused_and_dns():
    rec = await one(closed_port_url())
    assert rec.error_kind == ErrorKind.CONNECT_REFUSED
    assert rec.http_status is None and rec.t_end is not None
    assert "connection refused" in (rec.error_message or "")
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


async def test_out_of_file_descriptors_is_a_local_limit(sim_factory):
    """EMFILE while connecting is this machine's limit, not the server's: LOCAL_LIMIT."""
    sim = sim_factory(*FAST)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    async with Client(Endpoint.parse(sim.url), "genbench-sim") as c:
        assert (await c.chat(req(3))).ok
        await c.pool.close()  # no idle connection left to reuse
        lowest_free = os.dup(0)  # the next socket would get this number, or a higher one
        os.close(lowest_free)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
        try:
            rec = await c.chat(req(3))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert rec.error_kind == ErrorKind.LOCAL_LIMIT and not rec.error_kind.server_gone
        assert "file descriptors" in rec.error_message and "ulimit -n" in rec.error_message
        assert (await c.chat(req(3))).ok


async def test_read_timeout_when_the_server_stalls(sim_factory):
    sim = sim_factory("--fault", "stall-first:seconds=5")
    rec = await one(sim.url, req(10), timeouts=Timeouts(connect=2, read=0.5))
    assert rec.error_kind == ErrorKind.READ_TIMEOUT and rec.http_status == 200
    assert 0.49 <= rec.e2e < 0.9


async def test_mid_stream_stall_past_the_read_timeout(sim_factory):
    sim = sim_factory(*FAST, "--fault", "stall-mid:seconds=3,at=10")
    rec = await one(sim.url, req(30), timeouts=Timeouts(connect=2, read=0.4))
    assert rec.error_kind == ErrorKind.READ_TIMEOUT
    assert len(rec.chunk_offsets) == len(rec.chunk_kinds) == 10


async def test_total_timeout(sim_factory):
    sim = sim_factory("--tps", "20", "--ttft-ms", "1")
    rec = await one(sim.url, req(100), timeouts=Timeouts(connect=2, read=5, total=0.3))
    assert rec.error_kind == ErrorKind.TOTAL_TIMEOUT
    assert 0.29 <= rec.e2e < 0.6  # a loaded host may fire the timer late, never early
    assert 2 <= len(rec.chunk_offsets) <= 12 and len(rec.chunk_kinds) == len(rec.chunk_offsets)


async def test_api_key_is_sent_and_never_echoed(sim_factory, monkeypatch):
    monkeypatch.setenv("SIM_KEY", "sk-test-very-secret")
    sim = sim_factory(*FAST, "--api-key-env", "SIM_KEY")
    ok = await one(sim.url, req(5), key="sk-test-very-secret")
    assert ok.ok
    bad = await one(sim.url, req(5), key="sk-wrong-key-1234")
    assert bad.error_kind == ErrorKind.HTTP_STATUS and bad.http_status == 401
    assert "sk-wrong-key-1234" not in (bad.error_message or "")
    assert "sk-wrong-key-1234" not in bad.to_json().decode()


async def test_server_killed_mid_stream_then_refused(sim_factory):
    sim = sim_factory("--tps", "100", "--fault", "die:after=1")
    async with Client(Endpoint.parse(sim.url), "genbench-sim") as c:
        streaming = c.new_record(req(500))
        task = asyncio.create_task(c.chat(req(500), record=streaming))
        while not streaming.chunk_offsets and not task.done():
            await asyncio.sleep(0.01)  # wait until the first request is streaming
        killer = await c.chat(req(5))  # the second request kills the server (like an OOM)
        first = await task
        assert first.error_kind in (ErrorKind.DISCONNECTED, ErrorKind.INCOMPLETE_STREAM)
        assert killer.error_kind == ErrorKind.DISCONNECTED
        await asyncio.to_thread(sim.proc.wait, 10)
        after = await c.chat(req(5))
        assert after.error_kind == ErrorKind.CONNECT_REFUSED


async def test_cancelled_mid_stream_is_recorded_and_reraised(sim_factory):
    sim = sim_factory("--tps", "100", "--ttft-ms", "1")
    async with Client(Endpoint.parse(sim.url), "genbench-sim") as c:
        rec = c.new_record(req(500))
        task = asyncio.create_task(c.chat(req(500), record=rec))
        while len(rec.chunk_offsets) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert rec.error_kind == ErrorKind.CANCELLED and rec.t_end is not None
        assert len(rec.chunk_kinds) == len(rec.chunk_offsets) >= 3 and rec.http_status == 200
        n = len(rec.chunk_offsets)
        await asyncio.sleep(0.1)
        assert len(rec.chunk_offsets) == n  # nothing touches the record afterwards
        again = await c.chat(req(5))  # and the client still works
        assert again.ok


# -- any read boundary -------------------------------------------------------------------------


async def test_any_read_boundary_loses_nothing(sim_factory):
    """Byte streams split at random points (down to 1 byte) give the sim's text."""
    sim = sim_factory(*FAST, "--thinking-tokens", "20", "--fault", "split:min=1,max=9")
    reqs = [req(120, i) for i in range(8)]
    for r, want in zip(reqs, truths(sim.url, reqs), strict=True):
        assert_is_the_sims(await one(sim.url, r, keep_text=True), want)


async def test_one_byte_reads_lose_nothing(sim_factory):
    """`split:min=1,max=1`: every byte of the HTTP body is its own write (and, mostly, read)."""
    args = (*FAST, "--thinking-tokens", "15", "--reasoning-dialect", "reasoning")
    sim = sim_factory(*args, "--fault", "split:min=1,max=1")
    reqs = [req(40 + i, i) for i in range(40)]
    async with Client(Endpoint.parse(sim.url), "genbench-sim", keep_text=True) as c:
        for r, want in zip(reqs, truths(sim.url, reqs), strict=True):
            assert_is_the_sims(await c.chat(r), want)


async def test_random_read_boundaries_under_concurrency(sim_factory):
    sim = sim_factory(*FAST, "--thinking-tokens", "10", "--fault", "split:min=1,max=300")
    reqs = [req(60, i) for i in range(120)]
    want = truths(sim.url, reqs)
    async with Client(Endpoint.parse(sim.url), "genbench-sim", keep_text=True) as c:
        sem = asyncio.Semaphore(32)

        async def go(r: ChatRequest) -> RequestRecord:
            async with sem:
                return await c.chat(r)

        got = await asyncio.gather(*(go(r) for r in reqs))
    for rec, w in zip(got, want, strict=True):
        assert_is_the_sims(rec, w)
