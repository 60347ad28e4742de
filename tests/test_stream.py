"""The stream parser fed byte sequences directly: the sim's own bytes, cut at every point.

No transport is involved: each test captures what the reference sim sends (its SSE body,
its whole JSON body, each fault it injects) and feeds those bytes to `StreamParser` or
`parse_whole` with made-up arrival times, split at every read boundary. What the record
must say is the sim's truth: the text of its non-streamed answer for the same prompt,
and its `usage`.
"""

from __future__ import annotations

import errno
import http.client
import random
import socket
from typing import Any

import orjson
import pytest

from genbench.errors import ErrorKind
from genbench.records import RequestRecord
from genbench.transport.failures import (
    Failure,
    connect_failure,
    error_message_from_body,
    lost_failure,
    status_failure,
    timeout_failure,
)
from genbench.transport.stream import DONE, MORE, STOP, StreamParser, parse_whole

FAST = ("--tps", "2000", "--per-seq-ms", "0.05", "--ttft-ms", "1")
MESSAGES = [{"role": "user", "content": "the parser's prompt"}]
# record fields that hold clock readings: they depend on where the reads end
TIMING = {"t_end", "ttft", "ttft_answer", "ttft_thinking", "chunk_offsets"}


def post(sim: Any, n: int, stream: bool, **params: Any) -> tuple[int, bytes]:
    """The sim's answer as bytes (its HTTP body, de-chunked), read with the stdlib."""
    body = {"model": "genbench-sim", "messages": MESSAGES, "max_tokens": n, "stream": stream}
    body.update(ignore_eos=True, **params)
    if stream:
        body["stream_options"] = {"include_usage": True}
    conn = http.client.HTTPConnection(sim.root.split("://")[1], timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", orjson.dumps(body))
        resp = conn.getresponse()
        try:
            return resp.status, resp.read()
        except http.client.IncompleteRead as e:  # the `truncate` fault: cut off mid-body
            return resp.status, e.partial
    finally:
        conn.close()


def truth(sim: Any, n: int) -> dict[str, Any]:
    """The sim's non-streamed answer for the same prompt: the same tokens, whole."""
    _, body = post(sim, n, stream=False)
    obj = orjson.loads(body)
    msg = obj["choices"][0]["message"]
    reasoning = msg.get("reasoning_content") or msg.get("reasoning") or ""
    return {"text": msg["content"], "reasoning": reasoning, "usage": obj["usage"]}


def parse(body: bytes, cuts: list[int], keep_text: bool = True) -> tuple[RequestRecord, Any]:
    """Feed `body` in pieces ending at `cuts`; each piece arrives at its end's byte offset
    (seconds = bytes, so a chunk's offset says which read completed it)."""
    rec = RequestRecord(id="x")
    p = StreamParser(rec, 0.0, keep_text)
    start, said = 0, MORE
    for end in [*cuts, len(body)]:
        if end > start:
            said = p.feed(body[start:end], float(end))
            start = end
            if said != MORE:
                break
    if said == MORE:
        p.end(float(len(body)))
    return rec, p.finish()


def fields(rec: RequestRecord) -> dict[str, Any]:
    d = {k: v for k, v in rec.to_dict().items() if k not in TIMING}
    d["n_chunks"] = len(rec.chunk_offsets)
    return d


def every_split(body: bytes, keep_text: bool = True) -> list[tuple[RequestRecord, Any]]:
    """Every two-read split, every byte its own read, and 20 random partitions."""
    rng = random.Random(7)
    out = [parse(body, [i], keep_text) for i in range(1, len(body))]
    out.append(parse(body, list(range(1, len(body))), keep_text))
    for _ in range(20):
        k = rng.randint(1, min(40, len(body) - 1))
        out.append(parse(body, sorted(rng.sample(range(1, len(body)), k)), keep_text))
    return out


def assert_same_everywhere(body: bytes) -> tuple[RequestRecord, Failure | None]:
    rec, failure = parse(body, [])
    want = (fields(rec), failure and (failure.kind, failure.message))
    for r, f in every_split(body):
        assert (fields(r), f and (f.kind, f.message)) == want
    return rec, failure


# -- the sim's streams at every read boundary ------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--thinking-tokens", "6", "--reasoning-dialect", "reasoning_content"),
        ("--thinking-tokens", "6", "--reasoning-dialect", "reasoning"),
        ("--spec-k", "4"),
    ],
    ids=["answer", "reasoning_content", "reasoning", "speculative"],
)
def test_every_read_boundary_gives_the_sims_answer(sim_factory, flags):
    sim = sim_factory(*FAST, *flags)
    status, body = post(sim, 20, stream=True)
    assert status == 200
    want = truth(sim, 20)
    rec, failure = assert_same_everywhere(body)
    assert failure is None and rec.ok
    assert (rec.text, rec.reasoning) == (want["text"], want["reasoning"])
    assert rec.completion_tokens == want["usage"]["completion_tokens"] == 20
    assert rec.prompt_tokens == want["usage"]["prompt_tokens"]
    thinking = want["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert rec.reasoning_tokens == thinking
    assert rec.answer_chars == len(rec.text) and rec.thinking_chars == len(rec.reasoning)
    assert rec.finish_reason == "length" and not rec.tokens_estimated
    if "--spec-k" in flags:  # the first token alone from prefill, then 4 per chunk
        assert len(rec.chunk_offsets) == 1 + 19 // 4 + 1 and set(rec.chunk_kinds) == {"a"}
    else:
        assert rec.chunk_kinds == "r" * thinking + "a" * (20 - thinking)


def test_a_chunk_is_timed_by_the_read_that_completes_it(fast_sim):
    """One byte per read, each arriving at its offset: a chunk's time is its last line's
    newline, not the read its first bytes came in."""
    _, body = post(fast_sim, 12, stream=True)
    rec, _ = parse(body, list(range(1, len(body))))
    ends, pos = [], 0
    for line in body.split(b"\n")[:-1]:
        pos += len(line) + 1
        delta = orjson.loads(line[6:])["choices"][0]["delta"] if b'"delta"' in line else {}
        if delta.get("content") or delta.get("reasoning_content"):
            ends.append(float(pos))
    assert rec.chunk_offsets == ends and len(ends) == 12
    assert rec.ttft == ends[0] and rec.t_end == float(body.index(b"[DONE]") + 7)


def test_text_is_kept_only_when_asked(fast_sim):
    _, body = post(fast_sim, 8, stream=True)
    rec, _ = parse(body, [100], keep_text=False)
    assert rec.ok and rec.text is None and rec.reasoning is None and rec.answer_chars > 0


# -- the sim's faults, as bytes --------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "kind", "chunks", "words"),
    [
        ("inband-error:at=5", ErrorKind.INBAND_ERROR, 5, "injected in-band error"),
        ("malformed:at=3", ErrorKind.MALFORMED_CHUNK, 3, "chunk is not JSON"),
        ("truncate:at=7", ErrorKind.INCOMPLETE_STREAM, 7, "stream ended before finish"),
    ],
)
def test_each_fault_of_the_sim_at_every_read_boundary(sim_factory, fault, kind, chunks, words):
    sim = sim_factory(*FAST, "--fault", fault)
    _, body = post(sim, 20, stream=True)
    rec, failure = assert_same_everywhere(body)
    assert failure is not None and failure.kind is kind and words in failure.message
    assert len(rec.chunk_offsets) == len(rec.chunk_kinds) == chunks


def test_no_usage_is_estimated_from_chunks(sim_factory):
    sim = sim_factory(*FAST, "--thinking-tokens", "3", "--fault", "no-usage")
    _, body = post(sim, 15, stream=True)
    rec, failure = assert_same_everywhere(body)
    assert failure is None and rec.tokens_estimated
    assert (rec.completion_tokens, rec.reasoning_tokens) == (15, 3)


# -- SSE as the specification allows it ------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return orjson.dumps({"choices": [choice], **extra})


def test_sse_forms_servers_use():
    body = (
        b": keep-alive comment\r\n\r\n"
        b"event: message\r\ndata:" + chunk({"reasoning": "hm"}) + b"\r\n\r\n"
        b"data:   " + chunk({"content": "Hi"}) + b"\n\n"
        b"data: " + chunk({"role": "assistant"}) + b"\n\n"
        b"data: " + chunk({"content": "!"}, "stop") + b"\n\n"
        b'data: {"choices":[],"usage":{"completion_tokens":3,"reasoning_tokens":1}}\n\n'
        b"data: [DONE]"  # no newline before the connection closed
    )
    rec, failure = assert_same_everywhere(body)
    assert failure is None and (rec.text, rec.reasoning) == ("Hi!", "hm")
    assert rec.chunk_kinds == "raa" and (rec.completion_tokens, rec.reasoning_tokens) == (3, 1)


@pytest.mark.parametrize(
    ("body", "kind", "words"),
    [
        (b"data: " + chunk({"content": "a"}) + b"\n\ndata: [DONE]\n\n", "incomplete_stream",
         "[DONE] without a finish_reason"),
        (b"data: [1, 2]\n\n", "malformed_chunk", "not a JSON object"),
        (b'data: {"error": "boom"}\n\n', "inband_error", "boom"),
        (b"data: " + chunk({"content": "a"}, "stop"), None, ""),  # a last line, no newline
    ],
    ids=["done-without-finish", "not-an-object", "error-string", "tail"],
)  # fmt: skip
def test_stream_endings(body, kind, words):
    rec, failure = assert_same_everywhere(body)
    assert (failure.kind if failure else None) == kind
    assert words in (failure.message if failure else "")


def test_feed_says_when_to_stop_reading():
    p = StreamParser(RequestRecord(id="x"), 0.0, False)
    assert p.feed(b"data: " + chunk({"content": "a"}) + b"\n", 1.0) == MORE
    assert p.feed(b"\ndata: [DO", 2.0) == MORE
    assert p.feed(b"NE]\n\n", 3.0) == DONE and p.rec.t_end == 3.0
    p = StreamParser(RequestRecord(id="y"), 0.0, False)
    assert p.feed(b"data: {nope\n", 5.0) == STOP and p.rec.t_end == 5.0


# -- the non-streamed answer -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "status", "kind"),
    [
        (None, 200, None),
        ("malformed:at=3", 200, ErrorKind.MALFORMED_CHUNK),
        ("not-openai", 200, ErrorKind.MALFORMED_CHUNK),
        ("inband-error:at=5", 500, ErrorKind.HTTP_STATUS),
        ("http:status=503,message=overloaded right now", 503, ErrorKind.HTTP_STATUS),
    ],
)
def test_whole_bodies_from_the_sim(sim_factory, fault, status, kind):
    sim = sim_factory(*FAST, "--thinking-tokens", "4", *(("--fault", fault) if fault else ()))
    got, body = post(sim, 10, stream=False)
    assert got == status
    rec = RequestRecord(id="x", stream=False, t_send=1.0)
    failure = status_failure(got, body) if got != 200 else parse_whole(rec, body, 1.0, 3.0, True)
    assert (failure.kind if failure else None) == kind
    if kind is None:
        assert rec.text and rec.reasoning and rec.finish_reason == "length"
        assert (rec.completion_tokens, rec.reasoning_tokens) == (10, 4)
        assert rec.ttft == rec.e2e == 2.0 and not rec.tokens_estimated
    if fault and fault.startswith("http"):
        assert failure.message == "HTTP 503: overloaded right now"


def test_whole_body_without_finish_reason_or_usage():
    rec = RequestRecord(id="x", stream=False)
    body = orjson.dumps({"choices": [{"message": {"content": "hi"}}]})
    failure = parse_whole(rec, body, 0.0, 1.0, False)
    assert failure.kind is ErrorKind.INCOMPLETE_STREAM and rec.tokens_estimated
    failure = parse_whole(rec, b'{"error": {"message": "no"}}', 0.0, 1.0, False)
    assert failure.kind is ErrorKind.INBAND_ERROR and "no" in failure.message


# -- what went wrong: the one mapping --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (b'{"error": {"message": "context too long"}}', "context too long"),
        (b'{"error": "plain"}', "plain"),
        (b'{"message": "msg"}', "msg"),
        (b'{"detail": "fastapi says"}', "fastapi says"),
        (b"<html>\n  Bad   Gateway\n</html>", "<html> Bad Gateway </html>"),
    ],
)
def test_error_message_from_body(body, want):
    assert error_message_from_body(body) == want


def test_long_error_bodies_are_cut():
    assert error_message_from_body(b"x" * 1000, limit=10) == "x" * 9 + "…"


@pytest.mark.parametrize(
    ("exc", "kind", "words"),
    [
        (socket.gaierror(-2, "Name or service not known"), ErrorKind.DNS, "cannot resolve"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), ErrorKind.CONNECT_REFUSED,
         "connection refused"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), ErrorKind.CONNECT_REFUSED,
         "No route to host"),
        (TimeoutError(), ErrorKind.CONNECT_TIMEOUT, "timed out"),
        (OSError(errno.EMFILE, "Too many open files"), ErrorKind.LOCAL_LIMIT, "ulimit -n"),
        (OSError(errno.ENFILE, "File table overflow"), ErrorKind.LOCAL_LIMIT, "file descriptors"),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign"), ErrorKind.LOCAL_LIMIT, "local port"),
    ],
    ids=["dns", "refused", "unreachable", "timeout", "emfile", "enfile", "eaddrnotavail"],
)  # fmt: skip
def test_connect_errors_map_to_kinds(exc, kind, words):
    f = connect_failure(exc, "example.org", 8000)
    assert f.kind is kind and words in f.message
    if kind is ErrorKind.LOCAL_LIMIT:
        assert "not a server problem" in f.message and not kind.server_gone


def test_timeouts_and_lost_connections():
    assert timeout_failure(got_head=True).kind is ErrorKind.TOTAL_TIMEOUT
    assert timeout_failure(got_head=False).kind is ErrorKind.CONNECT_TIMEOUT
    f = lost_failure(False, None)
    assert f.kind is ErrorKind.DISCONNECTED and "before responding" in f.message
    f = lost_failure(True, ConnectionResetError("reset"))
    assert "before the response was complete (ConnectionResetError: reset)" in f.message
