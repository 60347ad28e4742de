"""Thinking is told from answer in both reasoning dialects: `delta.reasoning_content`
(SGLang, llama.cpp) and `delta.reasoning` (vLLM). A canned reply from a socket on
127.0.0.1, no model server: the whole exchange takes milliseconds."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from genbench.transport.client import ChatRequest, Client
from genbench.transport.endpoint import Endpoint

pytestmark = pytest.mark.core


def sse(field: str) -> bytes:
    def chunk(delta=None, finish=None, usage=None) -> bytes:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        obj = {"choices": choices, **({"usage": usage} if usage else {})}
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    return (
        chunk({"role": "assistant", "content": ""})  # no text: not a chunk of either kind
        + chunk({field: "Let me"})
        + chunk({field: " think."})
        + chunk({"content": "42"})
        + chunk({}, finish="stop")
        + chunk(
            usage={
                "prompt_tokens": 5,
                "completion_tokens": 7,
                "completion_tokens_details": {"reasoning_tokens": 4},
            }
        )
        + b"data: [DONE]\n\n"
    )


async def serve_once(body: bytes) -> tuple[asyncio.AbstractServer, str]:
    """An HTTP/1.1 server that answers every request with `body` as a chunked event stream."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for h in head.split(b"\r\n"):
                    if h.lower().startswith(b"content-length:"):
                        length = int(h.split(b":")[1])
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                for part in body.split(b"\n\n")[:-1]:
                    data = part + b"\n\n"
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_thinking_is_counted_in_either_dialect(field):
    async def main():
        server, url = await serve_once(sse(field))
        async with server, Client(Endpoint.parse(url), "m", keep_text=True) as client:
            return await client.chat(ChatRequest("q", [{"role": "user", "content": "?"}]))

    r = asyncio.run(main())
    assert r.ok, r.error_message
    assert r.chunk_kinds == "rra"  # two thinking chunks, then the answer
    assert len(r.chunk_offsets) == 3
    assert (r.thinking_chars, r.answer_chars) == (13, 2)  # "Let me think." and "42"
    assert (r.reasoning, r.text) == ("Let me think.", "42")
    assert r.ttft_thinking == r.ttft == r.chunk_offsets[0]
    assert r.ttft_answer == r.chunk_offsets[2]
    assert (r.prompt_tokens, r.completion_tokens, r.reasoning_tokens) == (5, 7, 4)
    assert r.answer_tokens == 3
    assert r.finish_reason == "stop" and r.tokens_estimated is False
