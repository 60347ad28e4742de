"""Each engine's Prometheus names, mapped onto genbench's one vocabulary.

Plain data and two small lookups, with no genbench imports, so that `metrics` (which
scrapes) and `check` (which only says whether a server's `/metrics` is there and in
whose names) read the same table.

SGLang's names, kinds and labels were read from SGLang's own source, sgl-project/sglang:
`python/sglang/srt/metrics/collector.py` (commit 00ae9c1590d2d0bb6c0bfff39e312c34ae3dd538),
`docs/references/production_metrics.md` (commit 00b08c497f0735678e084ae5e3dd88ca06b46627)
and the routes of `python/sglang/srt/entrypoints/http_server.py` (commit
0025436eab0556737d615b36a4dd3e1e26e82f3d). What that source says, in short:

* the tokenizer's counters (`prompt_tokens_total`, `generation_tokens_total`,
  `num_requests_total`, `num_aborted_requests_total`, `cached_tokens_total`) carry the
  label `model_name`; the scheduler's gauges and counters carry `model_name`,
  `engine_type`, `tp_rank`, `pp_rank` (and `moe_ep_rank`, `dp_rank` where they apply);
* there is no finished-requests-by-reason counter: `num_requests_total` counts every
  finished request, without its finish reason;
* preemption is called retraction: `sglang:num_retracted_requests_total` (a counter; older
  releases had only the gauge `sglang:num_retracted_reqs`);
* speculative decoding has **no counters**: `sglang:spec_accept_length` (mean tokens per
  verify step, accepted drafts plus the bonus token) and `sglang:spec_accept_rate`
  (accepted / draft tokens) are gauges, each the mean over the scheduler's last decode
  log interval (`--decode-log-interval`, 40 steps by default), 0 when nothing was drafted;
* `/metrics` exists only when the server was started with `--enable-metrics`.
"""

from __future__ import annotations

from collections.abc import Iterable

from genbench.transport.server_kind import TRAITS, traits

# canonical name -> metric names, first found wins (vLLM, SGLang, llama.cpp, genbench sim)
COUNTERS: dict[str, tuple[str, ...]] = {
    "generation_tokens": (
        "vllm:generation_tokens_total",
        "sglang:generation_tokens_total",
        "llamacpp:tokens_predicted_total",
        "sim:generation_tokens_total",
    ),
    "prompt_tokens": (
        "vllm:prompt_tokens_total",
        "sglang:prompt_tokens_total",
        # llama.cpp counts prompt tokens served from its prompt cache apart
        "llamacpp:prompt_tokens_total+llamacpp:prompt_tokens_cached_total",
        "llamacpp:prompt_tokens_total",
        "sim:prompt_tokens_total",
    ),
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total", "sim:spec_decode_num_drafts_total"),
    "spec_draft_tokens": (
        "vllm:spec_decode_num_draft_tokens_total",
        "sim:spec_decode_num_draft_tokens_total",
    ),
    "spec_accepted_tokens": (
        "vllm:spec_decode_num_accepted_tokens_total",
        "sim:spec_decode_num_accepted_tokens_total",
    ),
    # SGLang counts finished requests without a finish reason (see requests_by_finish)
    "requests_finished": ("sglang:num_requests_total",),
    "requests_aborted": ("sglang:num_aborted_requests_total",),
}
LABELLED: dict[str, tuple[tuple[str, str], ...]] = {
    # canonical -> (metric, label whose values split it)
    "requests_by_finish": (
        ("vllm:request_success_total", "finished_reason"),
        ("sim:request_success_total", "finish_reason"),
    ),
    "spec_accepted_per_pos": (("vllm:spec_decode_num_accepted_tokens_per_pos_total", "position"),),
}
# gauges sampled during a phase; their peaks are kept
GAUGES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
    ),
    "running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "llamacpp:requests_processing",
        "sim:num_requests_running",
    ),
    "waiting": (
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "llamacpp:requests_deferred",
        "sim:num_requests_waiting",
    ),
}
# gauges that are already averages (speculative acceptance where an engine has no
# counters): sampled during a phase, their mean over the samples that carry a value is kept
MEAN_GAUGES: dict[str, tuple[str, ...]] = {
    "spec_accept_length": ("sglang:spec_accept_length",),
    "spec_accept_rate": ("sglang:spec_accept_rate",),
}
# ratios: a server with several ranks reports one per rank; their mean, not their sum
RATIOS = frozenset(
    {
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
        "llamacpp:kv_cache_usage_ratio",
        "sglang:spec_accept_length",
        "sglang:spec_accept_rate",
    }
)

# (prefix, kind): the engines whose metric names carry a prefix of their own
DIALECTS = tuple((t.metric_prefix, k) for k, t in TRAITS.items() if t.metric_prefix)
METRICS_OFF_DEFAULT = "run will report no server-side counters"


def dialect_of(names: Iterable[str]) -> str | None:
    """The engine whose prefix the metric names carry (first in DIALECTS order)."""
    present = {n.split(":", 1)[0] + ":" for n in names if ":" in n}
    return next((kind for prefix, kind in DIALECTS if prefix in present), None)


def metrics_off_hint(kind: str | None) -> str:
    return traits(kind).metrics_off or METRICS_OFF_DEFAULT
