"""The KV cache on the wire: `/metrics` with vLLM's KV names beside the sim's, and
`POST /sim/kv`, which changes the capacity of a running sim (docs/sim.md "KV cache")."""

from __future__ import annotations

import orjson
from aiohttp import web

from genbench.sim.dialect import (
    DIALECTS,
    DialectHost,
    metrics_text,
    render_metrics,
    vllm_kv_rows,
)

KV_BODY = 'expected {"kv_tokens": N}, N a multiple of 16, on a sim started with --kv-tokens'


def dialect_metrics(srv: DialectHost) -> web.Response:
    """/metrics in the dialect's names; with --kv-tokens the default dialect, which plays
    vLLM's scheduler, adds vLLM's names for its queue and KV cache."""
    d = DIALECTS[srv.cfg.dialect]
    more = ()
    if srv.cfg.kv_tokens and srv.cfg.dialect == "sim":
        more = (metrics_text("vllm:", vllm_kv_rows(srv)),)
    return render_metrics(d.prefix, d.rows(srv), *more)


async def set_kv_tokens(srv: DialectHost, request: web.Request) -> web.Response:
    """A new capacity now: what a server that lost memory (a second model loaded beside it,
    a smaller GPU after a restart) looks like to a job that runs on."""
    try:
        n = orjson.loads(await request.read())["kv_tokens"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        n = None
    if not isinstance(n, int) or isinstance(n, bool) or n < 16 or n % 16 or not srv.cfg.kv_tokens:
        body = {"object": "error", "error": {"message": KV_BODY, "code": 400}}
        return web.json_response(body, status=400)
    srv.sched.set_kv_tokens(n)
    return web.json_response({"kv_tokens": n})
