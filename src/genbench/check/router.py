"""Routers: a load balancer in front of the servers, one URL for every client.

sglang-router and vllm-router (Rust, pip wheels) answer the OpenAI API by forwarding each
request to one of their workers. Neither says so in a header; each lists its workers at
`GET /workers` (`{"workers": [{"url": ...}, ...]}`), which no engine serves. Then
sglang-router answers `/get_server_info` with `{"router_manager": ...}` and vllm-router
`/list_workers` with `{"urls": [...]}` (found on sglang-router 0.3.2 and vllm-router
0.1.17; docs/generate.md, "Many servers"). `identify_router` asks those three, with short
timeouts, and stops at the first that says "no".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from genbench.fmt import counted
from genbench.transport.server_kind import TRAITS, ServerKind

# GET a path of the server's root: (status, body); raises on a transport failure
Get = Callable[[str], Awaitable[tuple[int, bytes]]]


async def get_json(get: Get, path: str) -> dict[str, Any] | None:
    """The JSON object a GET of `path` answers with 200; None for anything else."""
    try:
        status, body = await get(path)
        obj = orjson.loads(body) if status == 200 else None
    except Exception:  # a probe that fails just tells us nothing
        return None
    return obj if isinstance(obj, dict) else None


def _workers(obj: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The worker entries of a `/workers` answer, or None when it is not a router's."""
    workers = (obj or {}).get("workers")
    if not isinstance(workers, list):
        return None
    entries = [w for w in workers if isinstance(w, dict) and isinstance(w.get("url"), str)]
    return entries if len(entries) == len(workers) else None


async def identify_router(get: Get) -> tuple[str, dict[str, Any]] | None:
    """(kind, details) when the server is a router: kind 'sglang-router', 'vllm-router' or
    'router'; details hold its workers' URLs and how many it counts healthy."""
    workers = _workers(await get_json(get, "/workers"))
    if workers is None:
        return None
    details: dict[str, Any] = {
        "workers": sorted(w["url"] for w in workers),
        "healthy_workers": sum(1 for w in workers if w.get("is_healthy") is not False),
    }
    if "router_manager" in (await get_json(get, "/get_server_info") or {}):
        return ServerKind.SGLANG_ROUTER, details
    if isinstance((await get_json(get, "/list_workers") or {}).get("urls"), list):
        return ServerKind.VLLM_ROUTER, details
    return ServerKind.ROUTER, details


ONE_WORKERS_METRICS = (
    "they are one worker's, forwarded by the router: run skips them; give run "
    "--metrics-url once per worker's /metrics"
)
ROUTER_KINDS = frozenset(k for k, t in TRAITS.items() if t.router)


def router_notes(kind: str | None, details: dict[str, Any]) -> list[str]:
    """What genbench can and cannot see through a router, in check's words ([] if the
    server is not one)."""
    if kind not in ROUTER_KINDS:
        return []
    return [
        f"through {kind} genbench sees the router's answers, not which worker served each "
        "request; a dead worker shows as a broken stream or the router's 5xx (kind "
        "`upstream`), and the router's /health stays 200",
        "workers' metrics: `run --metrics-url URL` once per worker (the router's /metrics "
        "are not their sum)",
    ]


def workers_line(details: dict[str, Any]) -> str:
    """'2 workers, 2 healthy: URL, URL' for check's server line."""
    workers = details.get("workers") or []
    n = len(workers)
    healthy = details.get("healthy_workers", 0)
    return f"{counted(n, 'worker')}, {healthy} healthy: {', '.join(workers)}"
