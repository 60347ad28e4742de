"""The servers a job sends to: which are up, and how a dead one comes back.

A server is taken out the moment it refuses a connection (nothing listens: killed, out
of memory, restarting) or, after a stream broke off or went silent, when its /health
does not answer either. Its workers then wait; the rows it had in flight go back to the
queue and flow to servers that have room. A task polls /health with backoff and puts
the server back in when it answers 200, so a restarted server rejoins by itself.

A router is taken out when it answers that it has no worker left (503 "no available
workers"). Its /health says 200 whatever its workers do, so it is back only when one tiny
request (max_tokens 1, not in the request log) is answered too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genbench.errors import ExitCode, GenbenchError
from genbench.load import Slot
from genbench.records import RequestRecord
from genbench.transport.client import ChatRequest, Client
from genbench.transport.endpoint import Endpoint
from genbench.transport.health import answers
from genbench.transport.token_ids import IdsMode, describe

POLL_FIRST, POLL_MAX = 0.25, 5.0  # seconds between a down server's /health polls, doubling
PROBE_TIMEOUT = 3.0  # for /health to answer
ROUTE_TIMEOUT = 60.0  # for a router's tiny request to be answered


def check_token_ids(mode: str, reports: list[Any], note: Callable[[str, str], None]) -> None:
    """What `--token-ids` makes of the servers that answered their check (`CheckReport`s):
    a note each, how it gives ids or why it gives none. `on` refuses, before any request
    and in one line, a server that gives none (exit 10: its answers lack what the job
    needs)."""
    if mode == IdsMode.OFF:
        return
    for r in reports:
        if mode == IdsMode.ON and r.token_ids is None:
            raise GenbenchError(
                f"{r.url}: --token-ids on, but this server gives no token ids "
                f"({r.token_ids_note or 'it sent none'}); use --token-ids auto to keep the "
                "text and mark the rows",
                ExitCode.BAD_RESPONSE,
            )
    for r in reports:
        note(f"{r.url}: token ids {describe(r.token_ids, r.token_ids_note)}",
             "" if r.token_ids else "yellow")  # fmt: skip


@dataclass(frozen=True)
class ServerSpec:
    url: str
    concurrency: int  # with auto: where the tuner starts (generate/tuner.py)
    auto: bool = False  # -c auto: the job finds and holds the server's best concurrency


class Server(Slot):
    """One server of the pool: a load slot that polls its way back up."""

    def __init__(
        self,
        endpoint: Endpoint,
        client: Client,
        concurrency: int,
        *,
        on_change: Callable[[Server, str], None] | None = None,
        router: bool = False,
    ) -> None:
        super().__init__(client, concurrency, endpoint.base_url)
        self.endpoint, self.router, self.on_change = endpoint, router, on_change
        self._poller: asyncio.Task[None] | None = None
        self._probe: asyncio.Task[bool] | None = None

    def changed(self, what: str) -> None:
        super().changed(what)
        if self.on_change is not None and what:
            self.on_change(self, what)

    def mark_down(self, reason: str, rec: RequestRecord | None = None) -> None:
        """Take the server out and start polling it; a no-op if it is already out."""
        if self.up:
            super().mark_down(reason, rec)
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        delay = POLL_FIRST
        while True:
            await asyncio.sleep(delay)
            if await self.probe() and await self._routes():
                self.mark_up()
                return
            delay = min(delay * 2, POLL_MAX)

    async def probe(self) -> bool:
        """Is /health answering 200? Concurrent callers share one probe."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._health())
        return await asyncio.shield(self._probe)

    async def _routes(self) -> bool:
        """A router's workers answer: one tiny request does (True for a plain server)."""
        if not self.router:
            return True
        req = ChatRequest("probe", [{"role": "user", "content": "Say OK."}], max_tokens=1)
        try:
            async with asyncio.timeout(ROUTE_TIMEOUT):
                rec = await self.client.chat(req, phase="probe")
        except TimeoutError:
            return False
        return rec.ok

    async def _health(self) -> bool:
        # through the client's pool: a dead server's connections have left it already
        return await answers(self.client.pool, self.endpoint, PROBE_TIMEOUT)

    async def close(self) -> None:
        for t in (self._poller, self._probe):
            if t is not None and not t.done():
                t.cancel()
        await self.client.close()
