"""HTTP/1.1 and the connection pool: de-framing at every read boundary, every framing a
server may use, keep-alive reuse, one pool shared by clients and GETs.

The de-framer is fed the sim's own response bytes, and the same body re-framed with
Content-Length or read-to-close; benchmarks/stamp_server.py serves those framings for
real. What the records must say is the server's truth (tests/sim_truth.py).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sim_truth import FAST, assert_is_the_sims, req, truth
from tests_helpers import closed_port_url

from genbench.check.server_metrics import MetricsScraper, server_metrics_summary
from genbench.load import run_phase
from genbench.records import ErrorKind, RequestRecord
from genbench.transport.client import ChatRequest, Client, ConnectionPool
from genbench.transport.connection import Exchange
from genbench.transport.endpoint import Endpoint
from genbench.transport.failures import Failure
from genbench.transport.stream import StreamParser

pytestmark = pytest.mark.asyncio

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def raw_response(url: str, r: ChatRequest) -> bytes:
    """The sim's whole HTTP response (status line, headers, chunked body) as bytes."""
    host, port = url.split("://")[1].split("/")[0].split(":")
    body = json.dumps({"model": "genbench-sim", "messages": r.messages, "stream": True,
                       "max_tokens": r.max_tokens, **r.params}).encode()  # fmt: skip
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head + body)
        out = b""
        while not out.endswith(b"\r\n0\r\n\r\n"):
            out += s.recv(65536)
    return out


def reframed(raw: bytes, framing: str) -> bytes:
    """The same response with its body sent with Content-Length, or until the close."""
    head, _, chunked = raw.partition(b"\r\n\r\n")
    body, rest = b"", chunked
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if not size:
            break
        body, rest = body + rest[:size], rest[size + 2 :]
    head = head.replace(b"Transfer-Encoding: chunked", b"X-Was: chunked")
    if framing == "length":
        head += b"\r\nContent-Length: %d" % len(body)
    return b"HTTP/1.1 100 Continue\r\n\r\n" + head + b"\r\n\r\n" + body


async def deframe(raw: bytes, cuts: list[int]) -> tuple[Exchange, RequestRecord]:
    rec = RequestRecord(id="x")
    ex = Exchange(StreamParser(rec, 0.0, True), asyncio.get_running_loop().create_future())
    start = 0
    for end in [*cuts, len(raw)]:
        ex.feed(raw[start:end], float(end))
        start = end
    if not ex.finished:
        ex.lost(None)  # the server closes: the end of a read-to-close body
    return ex, rec


@pytest.mark.parametrize("framing", ["chunked", "length", "eof"])
async def test_http_framing_at_every_read_boundary(sim_factory, framing):
    """The de-framer fed the sim's own response bytes, cut at every position."""
    sim = sim_factory(*FAST, "--thinking-tokens", "3")
    r = req(8)
    raw = raw_response(sim.url, r)
    if framing != "chunked":
        raw = reframed(raw, framing)
    want = truth(sim.url, r)
    for cuts in [[], list(range(1, len(raw))), *([i] for i in range(1, len(raw)))]:
        ex, rec = await deframe(raw, cuts)
        assert ex.failure is None and ex.status == 200 and ex.streamed
        assert ex.parser.finish() is None
        assert (rec.text, rec.reasoning, rec.completion_tokens) == (
            want["text"], want["reasoning"], 8)  # fmt: skip
        assert ex.reusable == (framing != "eof")


# -- the connection pool -----------------------------------------------------------------------


async def test_keep_alive_pool_under_run_phase(sim_factory):
    sim = sim_factory(*FAST)
    async with Client(Endpoint.parse(sim.url), "genbench-sim") as c:
        reqs = iter([req(20, i) for i in range(200)])
        run = await run_phase(c, reqs, concurrency=16, phase="p", max_requests=200)
        assert len(run.records) == 200 and all(r.ok for r in run.records)
        assert all(r.completion_tokens == 20 for r in run.records)
        assert len(c.pool._all) <= 16  # connections were reused, not one per request


async def test_shared_pool_between_clients_and_gets(sim_factory):
    sim = sim_factory(*FAST)
    pool = ConnectionPool(sim.url)
    ep = Endpoint.parse(sim.url)
    try:
        for _ in range(2):
            async with Client(ep, "genbench-sim", session=pool) as c:
                assert (await c.chat(req(5))).ok
        status, headers, body = await pool.get(sim.root + "/health", 5.0, ep.headers())
        assert status == 200 and json.loads(body) == {"status": "ok"}
        assert headers["content-type"].startswith("application/json")
        status, _, body = await pool.get("/v1/models", 5.0)
        assert status == 200 and json.loads(body)["data"][0]["id"] == "genbench-sim"
        status, _, body = await pool.get("/no/such/path?x=1", 5.0)
        assert status == 404
        assert len(pool._all) == 1  # one connection served every request
    finally:
        await pool.close()


async def test_metrics_scraper_shares_the_loads_pool(sim_factory):
    sim = sim_factory(*FAST)
    ep = Endpoint.parse(sim.url)
    scraper = MetricsScraper(ep)
    try:
        before = await scraper.scrape()
        async with Client(ep, "genbench-sim", session=scraper.pool) as c:
            recs = [await c.chat(req(30, i)) for i in range(3)]
        after = await scraper.scrape()
        assert before is not None and after is not None and after.dialect == "genbench-sim"
        summary = server_metrics_summary(before, after, {})
        assert summary["generation_tokens"] == sum(r.completion_tokens for r in recs) == 90
        assert len(scraper.pool._all) == 1  # the scrapes and the requests on one connection
    finally:
        await scraper.close()
    assert not scraper.pool._all


async def test_get_failures_are_failures_with_kinds():
    pool = ConnectionPool(closed_port_url())
    with pytest.raises(Failure) as refused:
        await pool.get("/health", 2.0)
    assert refused.value.kind is ErrorKind.CONNECT_REFUSED
    srv = socket.socket()  # connects (the kernel accepts into the backlog), never answers
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    silent = ConnectionPool(f"http://127.0.0.1:{srv.getsockname()[1]}")
    try:
        t = time.perf_counter()
        with pytest.raises(Failure) as timed_out:
            await silent.get("/health", 0.3)
        assert timed_out.value.kind is ErrorKind.CONNECT_TIMEOUT
        assert 0.29 <= time.perf_counter() - t < 2 and not silent._all
    finally:
        await silent.close()
        srv.close()


# -- the framings the sim never uses -----------------------------------------------------------


@pytest.fixture
def stamp_server():
    """benchmarks/stamp_server.py: a second real server, for the framings the sim never
    uses (Content-Length, read-to-close) and for many SSE messages per read."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> str:
        cmd = [sys.executable, str(BENCH / "stamp_server.py"), "--port", "0", *args]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        procs.append(p)
        assert p.stdout is not None
        line = p.stdout.readline().decode()
        assert "listening on" in line, line
        return line.split("listening on ")[1].strip()

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


def stamp_truth(n: int, thinking: int) -> dict[str, Any]:
    """What the stamp server answers: its word list from the start, the first `thinking`
    words as reasoning (benchmarks/stamp_server.py, `Render`)."""
    sys.path.insert(0, str(BENCH))
    from stamp_server import WORDS

    words = [WORDS[i % len(WORDS)].decode() for i in range(n)]
    return {"text": "".join(words[thinking:]), "reasoning": "".join(words[:thinking]),
            "finish_reason": "length", "usage": None, "thinking": thinking}  # fmt: skip


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
async def test_every_http_framing(stamp_server, args):
    url = stamp_server(*args)
    thinking = 7 if "--thinking" in args else 0
    async with Client(Endpoint.parse(url), "stamp", keep_text=True) as c:
        for n in (1, 3, 300):
            rec = await c.chat(req(n))
            assert_is_the_sims(rec, stamp_truth(n, min(n, thinking)))
            assert rec.completion_tokens == n == len(rec.chunk_offsets)
    async with Client(Endpoint.parse(url), "stamp") as c:  # keep-alive reuse, or not
        for _ in range(2):
            recs = await asyncio.gather(*(c.chat(req(50, i)) for i in range(20)))
            assert all(r.ok and r.completion_tokens == 50 for r in recs)
        assert len(c.pool._all) == (0 if "eof" in args else 20)
