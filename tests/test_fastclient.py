"""`FastClient` against the reference sim: the same records as `Client`, at any read boundary.

Parity is checked field by field on real loopback HTTP: both clients send the same
request to the same kind of server and their records must agree on everything but the
clock readings (and the wording of transport errors, which each transport says its own
way; the error kind must agree).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tests_helpers import closed_port_url

from genbench.client import ChatRequest, Client, Timeouts
from genbench.endpoint import Endpoint
from genbench.fastclient import ConnectionPool, FastClient
from genbench.load import run_phase
from genbench.records import ErrorKind, RequestRecord

pytestmark = pytest.mark.asyncio

FAST = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1")
# clock readings: differ between any two runs
TIMING = {"sent_at", "t_send", "t_end", "ttft", "ttft_answer", "ttft_thinking", "chunk_offsets"}


def req(n: int = 100, i: int = 0, **params: Any) -> ChatRequest:
    return ChatRequest(
        id=f"t{i}",
        messages=[{"role": "user", "content": f"hello there {i}"}],
        max_tokens=n,
        params={"ignore_eos": True, **params},
    )


def comparable(rec: RequestRecord, with_message: bool = True) -> dict[str, Any]:
    d = {k: v for k, v in rec.to_dict().items() if k not in TIMING and k != "server"}
    d["n_offsets"] = len(rec.chunk_offsets)
    d["has"] = [x is not None for x in (rec.ttft, rec.ttft_answer, rec.ttft_thinking)]
    if not with_message:
        d.pop("error_message")
    return d


async def one(cls: type[Client], url: str, r: ChatRequest, **kw: Any) -> RequestRecord:
    key = kw.pop("key", None)
    async with cls(Endpoint.parse(url, key), "genbench-sim", **kw) as c:
        return await c.chat(r)


async def both(url: str, r: ChatRequest | None = None, **kw: Any) -> tuple[Any, Any]:
    r = r or req()
    a = await one(Client, url, r, **kw)
    b = await one(FastClient, url, r, **kw)
    return a, b


async def same(url: str, r: ChatRequest | None = None, **kw: Any) -> RequestRecord:
    a, b = await both(url, r, **kw)
    assert comparable(b) == comparable(a)
    return b


async def test_plain_stream_matches_client(sim_factory):
    sim = sim_factory(*FAST)
    rec = await same(sim.url, req(120), keep_text=True)
    assert rec.ok and rec.completion_tokens == 120 and rec.finish_reason == "length"
    assert rec.text and rec.answer_chars == len(rec.text)


@pytest.mark.parametrize("dialect", ["reasoning_content", "reasoning"])
async def test_thinking_matches_client_in_both_dialects(sim_factory, dialect):
    sim = sim_factory(*FAST, "--thinking-tokens", "30", "--reasoning-dialect", dialect)
    for keep in (True, False):
        rec = await same(sim.url, req(100), keep_text=keep)
        assert rec.reasoning_tokens == 30 and rec.chunk_kinds == "r" * 30 + "a" * 70


async def test_speculative_chunks_match_client(sim_factory):
    sim = sim_factory(*FAST, "--spec-k", "4", "--spec-accept", "0.6", "--seed", "3")
    a = await one(Client, sim.url, req(200))
    b = await one(FastClient, sim.url, req(200))
    # acceptance is random per step, so the chunking differs between the two requests;
    # what must agree is everything the record derives from usage and the text
    assert a.ok and b.ok
    assert b.completion_tokens == a.completion_tokens == 200
    assert len(b.chunk_offsets) < 200 and b.chunk_kinds == "a" * len(b.chunk_offsets)
    sim2 = sim_factory(*FAST, "--spec-k", "4")
    rec = await same(sim2.url, req(200), keep_text=True)
    assert len(rec.chunk_offsets) == 1 + 50


async def test_natural_stop_and_no_usage_match_client(sim_factory):
    sim = sim_factory(*FAST, "--output-len", "uniform:5:40", "--fault", "no-usage")
    for i in range(4):
        r = ChatRequest(f"n{i}", [{"role": "user", "content": f"p {i}"}], 200)
        rec = await same(sim.url, r, keep_text=True)
        assert rec.ok and rec.tokens_estimated and rec.finish_reason == "stop"


async def test_non_streaming_matches_client(sim_factory):
    sim = sim_factory(*FAST, "--thinking-tokens", "5")
    rec = await same(sim.url, req(25), stream=False, keep_text=True)
    assert rec.ok and rec.completion_tokens == 25 and rec.text and rec.reasoning


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("http:status=503,message=overloaded right now", ErrorKind.HTTP_STATUS),
        ("http:status=429", ErrorKind.HTTP_STATUS),
        ("inband-error:at=5", ErrorKind.INBAND_ERROR),
        ("malformed:at=3", ErrorKind.MALFORMED_CHUNK),
        ("not-openai", ErrorKind.MALFORMED_CHUNK),
    ],
)
async def test_content_faults_match_client_exactly(sim_factory, fault, kind):
    sim = sim_factory(*FAST, "--fault", fault)
    rec = await same(sim.url, req(50))
    assert rec.error_kind == kind
    await same(sim.url, req(50), stream=False)  # the non-streaming path agrees too


async def test_truncated_stream_matches_client(sim_factory):
    sim = sim_factory(*FAST, "--fault", "truncate:at=7")
    a, b = await both(sim.url, req(50))
    assert comparable(b, with_message=False) == comparable(a, with_message=False)
    assert b.error_kind in (ErrorKind.INCOMPLETE_STREAM, ErrorKind.DISCONNECTED)
    assert len(b.chunk_offsets) == 7


async def test_read_timeout_when_the_server_stalls(sim_factory):
    sim = sim_factory("--fault", "stall-first:seconds=5")
    t = Timeouts(connect=2, read=0.5)
    a, b = await both(sim.url, req(10), timeouts=t)
    assert a.error_kind == b.error_kind == ErrorKind.READ_TIMEOUT
    assert comparable(b) == comparable(a)
    assert 0.49 <= b.e2e < 0.9


async def test_mid_stream_stall_past_the_read_timeout(sim_factory):
    sim = sim_factory(*FAST, "--fault", "stall-mid:seconds=3,at=10")
    a, b = await both(sim.url, req(30), timeouts=Timeouts(connect=2, read=0.4))
    assert a.error_kind == b.error_kind == ErrorKind.READ_TIMEOUT
    assert comparable(b) == comparable(a)
    assert len(b.chunk_offsets) == 10


async def test_total_timeout(sim_factory):
    sim = sim_factory("--tps", "20", "--ttft-ms", "1")
    t = Timeouts(connect=2, read=5, total=0.3)
    a, b = await both(sim.url, req(100), timeouts=t)
    assert a.error_kind == b.error_kind == ErrorKind.TOTAL_TIMEOUT
    assert 0.29 <= b.e2e < 0.6  # a loaded host may fire the timer late, never early
    assert 2 <= len(b.chunk_offsets) <= 12 and len(b.chunk_kinds) == len(b.chunk_offsets)


async def test_connect_refused_and_dns():
    url = closed_port_url()
    a, b = await both(url)
    assert a.error_kind == b.error_kind == ErrorKind.CONNECT_REFUSED
    assert b.http_status is None and b.t_end is not None
    t = Timeouts(connect=5)
    a, b = await both("http://no-such-host.invalid:8000/v1", timeouts=t)
    assert a.error_kind == b.error_kind == ErrorKind.DNS


async def test_api_key_is_sent_and_never_echoed(sim_factory, monkeypatch):
    monkeypatch.setenv("SIM_KEY", "sk-test-very-secret")
    sim = sim_factory(*FAST, "--api-key-env", "SIM_KEY")
    ok = await same(sim.url, req(5), key="sk-test-very-secret")
    assert ok.ok
    bad = await same(sim.url, req(5), key="sk-wrong-key-1234")
    assert bad.error_kind == ErrorKind.HTTP_STATUS and bad.http_status == 401
    assert "sk-wrong-key-1234" not in bad.to_json().decode()


async def test_server_killed_mid_stream_then_refused(sim_factory):
    sim = sim_factory("--tps", "100", "--fault", "die:after=1")
    async with FastClient(Endpoint.parse(sim.url), "genbench-sim") as c:
        streaming = c.new_record(req(500))
        task = asyncio.create_task(c.chat(req(500), record=streaming))
        while not streaming.chunk_offsets and not task.done():
            await asyncio.sleep(0.01)
        killer = await c.chat(req(5))
        first = await task
        assert first.error_kind in (ErrorKind.DISCONNECTED, ErrorKind.INCOMPLETE_STREAM)
        assert killer.error_kind == ErrorKind.DISCONNECTED
        await asyncio.to_thread(sim.proc.wait, 10)
        after = await c.chat(req(5))
        assert after.error_kind == ErrorKind.CONNECT_REFUSED


async def test_cancelled_mid_stream_is_recorded_and_reraised(sim_factory):
    sim = sim_factory("--tps", "100", "--ttft-ms", "1")
    async with FastClient(Endpoint.parse(sim.url), "genbench-sim") as c:
        rec = c.new_record(req(500))
        task = asyncio.create_task(c.chat(req(500), record=rec))
        while len(rec.chunk_offsets) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert rec.error_kind == ErrorKind.CANCELLED and rec.t_end is not None
        assert len(rec.chunk_kinds) == len(rec.chunk_offsets) >= 3
        n = len(rec.chunk_offsets)
        await asyncio.sleep(0.1)
        assert len(rec.chunk_offsets) == n  # nothing touches the record afterwards
        again = await c.chat(req(5))  # and the client still works
        assert again.ok


async def test_one_byte_reads_lose_nothing(sim_factory):
    """`split:min=1,max=1`: every byte of the HTTP body is its own write (and, mostly, read)."""
    args = (*FAST, "--thinking-tokens", "15", "--reasoning-dialect", "reasoning")
    plain = sim_factory(*args)
    split = sim_factory(*args, "--fault", "split:min=1,max=1")
    ep_plain, ep_split = Endpoint.parse(plain.url), Endpoint.parse(split.url)
    async with (
        Client(ep_plain, "genbench-sim", keep_text=True) as ref,
        FastClient(ep_split, "genbench-sim", keep_text=True) as fast,
    ):
        for i in range(40):
            r = ChatRequest(f"s{i}", [{"role": "user", "content": f"prompt {i}"}], 40 + i)
            r.params = {"ignore_eos": True}
            a, b = await asyncio.gather(ref.chat(r), fast.chat(r))
            assert b.ok, b.error_message
            assert comparable(b) == comparable(a)


async def test_random_read_boundaries_under_concurrency(sim_factory):
    args = (*FAST, "--thinking-tokens", "10")
    plain = sim_factory(*args)
    split = sim_factory(*args, "--fault", "split:min=1,max=300")
    ep_plain, ep_split = Endpoint.parse(plain.url), Endpoint.parse(split.url)
    reqs = [
        ChatRequest(f"c{i}", [{"role": "user", "content": f"q {i}"}], 60, {"ignore_eos": True})
        for i in range(120)
    ]
    async with (
        Client(ep_plain, "genbench-sim", keep_text=True) as ref,
        FastClient(ep_split, "genbench-sim", keep_text=True) as fast,
    ):
        want = await asyncio.gather(*(ref.chat(r) for r in reqs))
        sem = asyncio.Semaphore(32)

        async def go(r: ChatRequest) -> RequestRecord:
            async with sem:
                return await fast.chat(r)

        got = await asyncio.gather(*(go(r) for r in reqs))
    assert [comparable(b) for b in got] == [comparable(a) for a in want]


async def test_keep_alive_pool_under_run_phase(sim_factory):
    sim = sim_factory(*FAST)
    async with FastClient(Endpoint.parse(sim.url), "genbench-sim") as c:
        reqs = iter([req(20, i) for i in range(200)])
        run = await run_phase(c, reqs, concurrency=16, phase="p", max_requests=200)
        pool = c.pool
        assert len(run.records) == 200 and all(r.ok for r in run.records)
        assert all(r.completion_tokens == 20 for r in run.records)
        assert len(pool._all) <= 16  # connections were reused, not one per request


async def test_shared_pool_between_clients(sim_factory):
    sim = sim_factory(*FAST)
    pool = ConnectionPool(sim.url)
    ep = Endpoint.parse(sim.url)
    try:
        for _ in range(2):
            async with FastClient(ep, "genbench-sim", session=pool) as c:
                assert (await c.chat(req(5))).ok
        assert len(pool._all) == 1
    finally:
        await pool.close()


@pytest.fixture
def stamp_server():
    """benchmarks/stamp_server.py: a second real server, for the framings the sim never
    uses (Content-Length, read-to-close) and for many SSE messages per read."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "stamp_server.py"
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> str:
        p = subprocess.Popen(
            [sys.executable, str(script), "--port", "0", *args], stdout=subprocess.PIPE
        )
        procs.append(p)
        assert p.stdout is not None
        line = p.stdout.readline().decode()
        assert "listening on" in line, line
        return line.split("listening on ")[1].strip()

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


@pytest.mark.parametrize(
    "args",
    [
        ("--mode", "bulk", "--framing", "length"),
        ("--mode", "bulk", "--framing", "chunked"),
        ("--mode", "bulk", "--framing", "eof"),
        ("--mode", "tokens", "--tps", "2000", "--thinking", "7"),
    ],
    ids=["content-length", "chunked-bulk", "read-to-close", "tokens"],
)
async def test_every_http_framing_matches_client(stamp_server, args):
    url = stamp_server(*args)
    for n in (1, 3, 300):
        rec = await same(url, req(n), keep_text=True)
        assert rec.ok and rec.completion_tokens == n == len(rec.chunk_offsets)
    async with FastClient(Endpoint.parse(url), "stamp") as c:  # keep-alive reuse, or not
        for _ in range(2):
            recs = await asyncio.gather(*(c.chat(req(50, i)) for i in range(20)))
            assert all(r.ok and r.completion_tokens == 50 for r in recs)
        assert len(c.pool._all) == (0 if "eof" in args else 20)
