"""A pass-through HTTP proxy on 127.0.0.1 that holds the requests a test names, so a job
is stopped mid-way by an event the test controls instead of by how fast a loaded machine
runs.

Everything it forwards reaches the real server unchanged (the body, the headers, the
streamed answer chunk by chunk). A request whose body holds `hold_marker` while the gate
is shut is never forwarded: it waits, in flight for the client, until the proxy stops (a
client killed meanwhile leaves nothing at the server). Requests that arrive after `open()`
pass. Used by tests/test_hidden_states_vllm.py: the rows' later turns are held, so the
rows before them are written and the held ones are in flight when genbench is killed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from aiohttp import web

HOP = {
    "host",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
}


class HoldingProxy:
    def __init__(self, upstream_root: str, hold_marker: bytes) -> None:
        self.upstream, self.marker = upstream_root.rstrip("/"), hold_marker
        self.shut, self.held = True, 0
        self.root = ""
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None

    def open(self) -> None:
        """Requests from now on pass (those already held stay held)."""
        self.shut = False

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if self.shut and self.marker in body:
            self.held += 1
            await asyncio.Future()  # held until the proxy stops
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        url = self.upstream + request.rel_url.path_qs
        async with self._session.request(
            request.method,
            url,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None),
        ) as up:
            resp = web.StreamResponse(
                status=up.status,
                headers={k: v for k, v in up.headers.items() if k.lower() not in HOP},
            )
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    async def _serve(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.root = f"http://127.0.0.1:{port}"
        started.set()
        await self._stop.wait()
        await runner.cleanup()
        await self._session.close()

    @contextmanager
    def running(self) -> Iterator[HoldingProxy]:
        started = threading.Event()
        thread = threading.Thread(
            target=self._loop.run_until_complete, args=(self._serve(started),), daemon=True
        )
        thread.start()
        assert started.wait(30), "the holding proxy did not start"
        try:
            yield self
        finally:
            self._loop.call_soon_threadsafe(self._stop.set)  # type: ignore[union-attr]
            thread.join(30)
