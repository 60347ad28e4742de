"""What kind of server answers: an engine (vLLM, SGLang, llama.cpp, TGI, the sim) told by
its `owned_by` or by the one endpoint only it serves, its version and context length, or a
router in front of several (check/router.py). Each probe that fails just tells nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from genbench.check.router import get_json, identify_router
from genbench.transport.client import ConnectionPool
from genbench.transport.endpoint import Endpoint
from genbench.transport.server_kind import TRAITS, ServerKind


@dataclass
class ServerInfo:
    kind: str | None = None  # vLLM, SGLang, llama.cpp, TGI, genbench-sim
    version: str | None = None
    max_model_len: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


OWNED_BY_KIND = {t.owned_by: k for k, t in TRAITS.items() if t.owned_by}


async def get_body(
    pool: ConnectionPool, ep: Endpoint, url: str, timeout: float
) -> tuple[int, bytes]:
    status, _, body = await pool.get(url, timeout, ep.headers())
    return status, body


async def identify(
    pool: ConnectionPool, ep: Endpoint, first_model: dict[str, Any], timeout: float = 3.0
) -> ServerInfo:
    """What the server says of itself: kind from `owned_by` or probes, version where exposed."""
    info = ServerInfo(kind=OWNED_BY_KIND.get(str(first_model.get("owned_by", "")).lower()))
    mml = first_model.get("max_model_len")
    if isinstance(mml, int):
        info.max_model_len = mml

    async def get(path: str) -> tuple[int, bytes]:
        return await get_body(pool, ep, ep.root + path, timeout)

    # a router forwards the probes below to a worker: ask for it first
    if routed := await identify_router(get):
        info.kind, details = routed
        info.details.update(details)
        return info
    probes = [
        (ServerKind.VLLM, "/version"),
        (ServerKind.LLAMACPP, "/props"),
        (ServerKind.SGLANG, "/server_info"),  # SGLang's newer spelling
        (ServerKind.SGLANG, "/get_server_info"),  # the older one (now deprecated, still served)
        (ServerKind.TGI, "/info"),
        (ServerKind.SIM, "/version"),
    ]
    if info.kind:
        probes = [p for p in probes if p[0] == info.kind] or probes
    asked: set[str] = set()  # a path two kinds share (/version) is asked once: at most 5 GETs
    for kind, path in probes:
        if path in asked:
            continue
        asked.add(path)
        obj = await get_json(get, path)  # a probe that fails just tells us nothing
        if obj is None:
            continue
        _read_identity(info, kind, path, obj)
        if info.kind:
            break
    return info


def _read_identity(info: ServerInfo, kind: str, path: str, obj: dict[str, Any]) -> None:
    if path == "/version" and "version" in obj:
        info.kind = info.kind or (ServerKind.SIM if obj.get("server") == ServerKind.SIM else kind)
        info.version = str(obj["version"])
    elif path == "/props" and ("default_generation_settings" in obj or "build_info" in obj):
        info.kind = info.kind or ServerKind.LLAMACPP
        info.version = str(obj.get("build_info") or "") or None
        n_ctx = (obj.get("default_generation_settings") or {}).get("n_ctx")
        if isinstance(n_ctx, int):
            info.max_model_len = info.max_model_len or n_ctx
        if "total_slots" in obj:
            info.details["total_slots"] = obj["total_slots"]
    elif path.endswith("server_info") and "version" in obj:
        if isinstance(obj.get("server_args"), dict):  # an older shape: the arguments nested
            obj = {**obj["server_args"], **obj}
        if "model_path" not in obj:
            return
        info.kind = info.kind or ServerKind.SGLANG
        info.version = str(obj.get("version") or "") or None
        _read_sglang(info, obj)
    elif path == "/info" and "model_id" in obj:
        info.kind = info.kind or ServerKind.TGI
        info.version = str(obj.get("version") or "") or None


# what check keeps of SGLang's /server_info: its server arguments (flattened into the
# answer) and rank 0's internal state
SGLANG_DETAILS = (
    "model_path",
    "speculative_algorithm",
    "speculative_num_draft_tokens",
    "reasoning_parser",
    "max_running_requests",
    "context_length",
    "enable_metrics",
)


def _read_sglang(info: ServerInfo, obj: dict[str, Any]) -> None:
    for key in SGLANG_DETAILS:
        if obj.get(key) is not None:
            info.details[key] = obj[key]
    ctx = obj.get("context_length")
    if isinstance(ctx, int) and not info.max_model_len:
        info.max_model_len = ctx
    states = obj.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        accept = states[0].get("avg_spec_accept_length")
        if isinstance(accept, int | float):
            info.details["avg_spec_accept_length"] = accept
