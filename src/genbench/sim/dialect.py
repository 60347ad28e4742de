"""Whose server the sim plays: its endpoints, its metric names and labels, its model card.

One `Dialect` per server kind, chosen by `--dialect`; `SimServer.app` takes its routes
and `/metrics` from it, so a new kind is a new table entry, not branches in the server.

* `sim`: genbench's own names (`sim:*`), `/version`, the model card `owned_by`
  genbench-sim.
* `sglang`: what SGLang serves, as read from its source (sgl-project/sglang,
  `python/sglang/srt/entrypoints/http_server.py` at 0025436eab0556737d615b36a4dd3e1e26e82f3d
  and later renames; `python/sglang/srt/metrics/collector.py` at
  00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538; see genbench/check/metric_names.py): `/health` and
  `/health_generate` answering an empty 200 (503 when unhealthy), `/server_info` and its
  older spelling `/get_server_info` (server arguments, scheduler limits, per-rank
  `internal_states`, `version`), `/model_info` and `/get_model_info`, `/flush_cache`, the
  model card `owned_by` sglang, and `/metrics` in SGLang's names: tokenizer counters
  labelled `model_name`, scheduler gauges labelled `model_name`, `engine_type`, `tp_rank`,
  `pp_rank`, `moe_ep_rank`, speculative acceptance as two gauges averaged over the last
  `SPEC_LOG_STEPS` decode steps; usage with `reasoning_tokens` at its top level
  (`python/sglang/srt/entrypoints/openai/usage_processor.py` at
  056c7ec2bdc0f1ddaf4d255a0076501a742c34bc). Without `--kv-tokens` the sim has no KV pool:
  its `sglang:token_usage` is then the share of `--max-batch` slots in use.

Whatever the dialect, `/sim/metrics` serves the sim's own `sim:*` counters (the truth tests
check genbench against) and `/sim/config` its flags; `--no-metrics` removes `/metrics`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web

from genbench import __version__
from genbench.sim.config import SimConfig
from genbench.sim.kv import BLOCK_SIZE


class DialectHost(Protocol):
    """What a dialect reads of the server it speaks for (`genbench.sim.server.SimServer`):
    a protocol, so that the dialect needs nothing from the module that imports it."""

    cfg: SimConfig
    sched: Any  # genbench.sim.scheduler.Scheduler, which imports this module
    counts: dict[str, int]

    def _active(self, kind: str, endpoint: str) -> bool: ...


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# (name without prefix, type, help, [(labels, value)])
MetricLine = tuple[str, str, str, list[tuple[str, float]]]


def render_metrics(prefix: str, rows: list[MetricLine], *more: str) -> web.Response:
    """Prometheus text exposition format, version 0.0.4 (`more`: other prefixes' text)."""
    return web.Response(
        text=metrics_text(prefix, rows) + "".join(more),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


def metrics_text(prefix: str, rows: list[MetricLine]) -> str:
    lines: list[str] = []
    for name, kind, help_, samples in rows:
        lines.append(f"# HELP {prefix}{name} {help_}")
        lines.append(f"# TYPE {prefix}{name} {kind}")
        lines.extend(f"{prefix}{name}{labels} {float(value)!r}" for labels, value in samples)
    return "\n".join(lines) + "\n"


def vllm_kv_rows(srv: DialectHost) -> list[MetricLine]:
    """With --kv-tokens, the default dialect (which plays vLLM's scheduler) also serves
    vLLM's own names for its queue and KV cache, as vLLM's `vllm/v1/metrics/loggers.py`
    names them: what `generate -c auto` and `run`'s knee read first."""
    s, model = srv.sched, _label(srv.cfg.model)
    eng = f'{{engine="0",model_name={model}}}'
    blocks = s.kv.capacity // BLOCK_SIZE  # as it is now (POST /sim/kv changes it)
    cache = (f'{{block_size="{BLOCK_SIZE}",cache_dtype="auto",engine="0",'
             f'num_gpu_blocks="{blocks}",num_cpu_blocks="0"}}')  # fmt: skip
    return [
        ("num_requests_running", "gauge", "Number of requests in model execution batches.",
         [(eng, s.running)]),
        ("num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         [(eng, s.num_waiting())]),
        ("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         [(eng, s.kv.usage())]),
        ("num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
         [(eng, s.kv.preemptions)]),
        ("cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.",
         [(cache, 1)]),
    ]  # fmt: skip


def sim_rows(srv: DialectHost) -> list[MetricLine]:
    """The sim's own counters and gauges (`sim:*`)."""
    s = srv.sched
    success = [(f'{{finish_reason="{k}"}}', v) for k, v in s.m_success.items()]
    return [
        ("num_requests_running", "gauge", "Requests in prefill or decode.", [("", s.running)]),
        ("num_requests_waiting", "gauge", "Requests queued.", [("", s.num_waiting())]),
        ("prompt_tokens_total", "counter", "Prefilled prompt tokens.", [("", s.m_prompt)]),
        ("generation_tokens_total", "counter", "Generated tokens.", [("", s.m_gen)]),
        ("reasoning_tokens_total", "counter", "Generated thinking tokens.", [("", s.m_reason)]),
        ("tool_calls_total", "counter", "Replies that were a tool call.", [("", s.m_tool_calls)]),
        ("request_success_total", "counter", "Requests finished normally.", success),
        ("spec_decode_num_drafts_total", "counter", "Speculative drafts.", [("", s.m_drafts)]),
        ("spec_decode_num_draft_tokens_total", "counter", "Speculative draft tokens.",
         [("", s.m_draft_tokens)]),
        ("spec_decode_num_accepted_tokens_total", "counter", "Accepted draft tokens.",
         [("", s.m_accepted)]),
        ("decode_steps_total", "counter", "Decode steps run.", [("", s.steps)]),
        ("decode_busy_seconds_total", "counter", "Seconds of decode steps, as scheduled: the "
         "time the batch worked, whatever the host's lag.", [("", s.busy_s)]),
        ("decode_resyncs_total", "counter", "Times the decode loop fell too far behind and "
         "resynchronised.", [("", s.resyncs)]),
        ("decode_resync_seconds_total", "counter", "Seconds the decode schedule was shifted "
         "by resynchronising.", [("", s.resync_s)]),
        ("decode_step_lag_seconds_total", "counter", "Sum over decode steps of how late "
         "each step's tokens were written.", [("", s.lag_sum)]),
        ("decode_step_lag_seconds_max", "gauge", "The latest a decode step was written.",
         [("", s.lag_max)]),
        ("first_token_lag_seconds_total", "counter", "Sum over requests of how late the "
         "first token was written after its scheduled time (slow host timers).",
         [("", s.first_lag_sum)]),
        ("kv_used_tokens", "gauge", "Tokens held in the KV cache.", [("", s.kv.used)]),
        ("kv_capacity_tokens", "gauge", "The KV cache's capacity (0: none).",
         [("", s.kv.capacity)]),
        ("num_preemptions_total", "counter", "Requests preempted for the KV cache.",
         [("", s.kv.preemptions)]),
        ("kv_redone_tokens_total", "counter", "Tokens generated again after a preemption.",
         [("", s.kv.redone)]),
        ("requests_total", "counter", "HTTP requests received, by endpoint.",
         [(f'{{endpoint="{k}"}}', v) for k, v in srv.counts.items()]),
    ]  # fmt: skip


def _label(value: str) -> str:
    """A Prometheus label value: JSON's string escapes are the format's own."""
    return orjson.dumps(value).decode()


def sglang_rows(srv: DialectHost) -> list[MetricLine]:
    """What SGLang's tokenizer and scheduler collectors expose, under their labels."""
    s, model = srv.sched, _label(srv.cfg.model)
    tok = f"{{model_name={model}}}"
    sch = f'{{engine_type="unified",model_name={model},moe_ep_rank="0",pp_rank="0",tp_rank="0"}}'
    finished = sum(s.m_success.values())
    # with a KV cache the share of it in use; without, of --max-batch's slots
    usage = s.kv.usage() if s.kv.on else s.running / srv.cfg.max_batch
    kv: list[MetricLine] = [
        ("kv_used_tokens", "gauge", "The number of used KV cache tokens.", [(sch, s.kv.used)]),
        ("max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.",
         [(sch, s.kv.capacity)]),
    ] if s.kv.on else []  # fmt: skip
    return kv + [
        ("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         [(tok, s.m_prompt)]),
        ("generation_tokens_total", "counter", "Number of generation tokens processed.",
         [(tok, s.m_gen)]),
        ("num_requests_total", "counter", "Number of requests processed.", [(tok, finished)]),
        ("num_aborted_requests_total", "counter", "Number of requests aborted.",
         [(tok, s.m_aborted)]),
        ("num_running_reqs", "gauge", "The number of running requests.", [(sch, s.running)]),
        ("num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
         [(sch, s.num_waiting())]),
        ("token_usage", "gauge", "The token usage.", [(sch, usage)]),
        ("spec_accept_length", "gauge", "The average acceptance length of speculative "
         "decoding.", [(sch, s.spec_accept_length)]),
        ("spec_accept_rate", "gauge", "The average acceptance rate of speculative decoding "
         "(`accepted tokens / total draft tokens` in batch).", [(sch, s.spec_accept_rate)]),
        ("num_retracted_requests_total", "counter", "Total number of retracted requests.",
         [(sch, s.kv.preemptions)]),
    ]  # fmt: skip


Usage = Callable[[int, int, int | None], dict[str, Any]]


def sim_usage(prompt: int, completion: int, thinking: int | None) -> dict[str, Any]:
    """OpenAI's shape, thinking under completion_tokens_details (as vLLM)."""
    return {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "completion_tokens_details": {"reasoning_tokens": thinking},
    }  # fmt: skip


def sglang_usage(prompt: int, completion: int, thinking: int | None) -> dict[str, Any]:
    """SGLang's UsageInfo (entrypoints/openai/usage_processor.py): `reasoning_tokens` at the
    top; the details null without prompt caching reported or spec-decode usage enabled."""
    return {
        "prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion, "prompt_tokens_details": None,
        "reasoning_tokens": thinking, "completion_tokens_details": None,
    }  # fmt: skip


class SGLangEndpoints:
    """SGLang's native endpoints, answered from the sim's state."""

    def __init__(self, srv: DialectHost) -> None:
        self.srv = srv

    async def health(self, request: web.Request) -> web.Response:
        """`/health` and `/health_generate`: SGLang answers an empty 200 once a one-token
        generation came back, 503 while starting or when none came in time."""
        srv = self.srv
        srv.counts["health"] += 1
        return web.Response(status=503 if srv._active("unhealthy", "health") else 200)

    def _info(self) -> dict[str, Any]:
        cfg, s = self.srv.cfg, self.srv.sched
        spec = cfg.spec_k > 1
        drafted = s.m_drafts
        return {
            "model_path": cfg.model, "tokenizer_path": cfg.model,
            "served_model_name": cfg.model, "context_length": cfg.max_model_len,
            "max_running_requests": cfg.max_batch, "enable_metrics": cfg.metrics,
            "speculative_algorithm": "EAGLE" if spec else None,
            "speculative_num_steps": cfg.spec_k - 1 if spec else None,
            "speculative_eagle_topk": 1 if spec else None,
            "speculative_num_draft_tokens": cfg.spec_k if spec else None,
            "reasoning_parser": "genbench-sim" if cfg.thinking_tokens else None,
            "max_total_num_tokens": cfg.kv_tokens or cfg.max_batch * cfg.max_model_len,
            "max_req_input_len": cfg.max_model_len - 1,
            "internal_states": [{
                "avg_spec_accept_length": 1.0 + s.m_accepted / drafted if drafted else None,
                "last_gen_throughput": 0.0,
            }],
            "version": f"{__version__}-genbench-sim",
        }  # fmt: skip

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self._info())

    async def model_info(self, request: web.Request) -> web.Response:
        cfg = self.srv.cfg
        return web.json_response(
            {"model_path": cfg.model, "tokenizer_path": cfg.model, "is_generation": True,
             "preferred_sampling_params": None, "weight_version": "default"}
        )  # fmt: skip

    async def flush_cache(self, request: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\n")

    async def tokenize(self, request: web.Request) -> web.Response:
        """`POST /tokenize`: text only, as SGLang's (`prompt`; no `messages`, so no rendered
        chat template to show). The sim's tokens are its words."""
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            body = None
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str):
            msg = "prompt: Field required (a string; /tokenize takes text only)"
            return web.json_response({"object": "error", "message": msg, "code": 400}, status=400)
        tokens = [sum(map(ord, w)) % 50_000 for w in prompt.split()]
        cfg = self.srv.cfg
        return web.json_response(
            {"tokens": tokens, "count": len(tokens), "max_model_len": cfg.max_model_len}
        )


@dataclass(frozen=True)
class Dialect:
    """What one server kind serves beyond the OpenAI routes every dialect shares."""

    owned_by: str  # the model card's owned_by, which check reads first
    prefix: str  # of its metric names
    rows: Callable[[DialectHost], list[MetricLine]]
    usage: Usage  # the usage object of an answer
    # path -> handler built from the server; None removes a shared route; "POST /path": a POST
    routes: Callable[[DialectHost], dict[str, Handler | None]]


def _sim_routes(srv: DialectHost) -> dict[str, Handler | None]:
    return {}


def _sglang_routes(srv: DialectHost) -> dict[str, Handler | None]:
    e = SGLangEndpoints(srv)
    return {
        "/version": None,
        "/health": e.health,
        "/health_generate": e.health,
        "/server_info": e.server_info,
        "/get_server_info": e.server_info,
        "/model_info": e.model_info,
        "/get_model_info": e.model_info,
        "/flush_cache": e.flush_cache,
        "POST /tokenize": e.tokenize,
        "POST /v1/tokenize": e.tokenize,
    }


DIALECTS: dict[str, Dialect] = {
    "sim": Dialect("genbench-sim", "sim:", sim_rows, sim_usage, _sim_routes),
    "sglang": Dialect("sglang", "sglang:", sglang_rows, sglang_usage, _sglang_routes),
    # vLLM's replies (the `reasoning` field, return_token_ids, its tool-call ids, its
    # per-request acceptance flag) on the sim's own endpoints and metric names
    "vllm": Dialect("genbench-sim", "sim:", sim_rows, sim_usage, _sim_routes),
}
