"""SGLang's /metrics read into genbench's vocabulary: names, labels and kinds as SGLang's
source has them (genbench/check/metric_names.py names the files and commits read).

The texts below are written in SGLang's exposition format: tokenizer counters labelled
`model_name`, scheduler gauges labelled `engine_type`, `model_name`, `pp_rank`, `tp_rank`,
histograms with `le` buckets, and speculative acceptance as two averaging gauges."""

from __future__ import annotations

import pytest

from genbench.check.metric_names import dialect_of, metrics_off_hint
from genbench.check.server_metrics import Snapshot, parse_prometheus, server_metrics_summary

pytestmark = pytest.mark.core

MODEL = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
RANK = 'engine_type="unified",{m},pp_rank="0",tp_rank="{r}"'


def sglang_text(
    prompt: float, gen: float, finished: float, *, accept_len: float = 0.0,
    accept_rate: float = 0.0, retracted: float = 0.0, ranks: int = 1,
    usage: tuple[float, ...] = (0.25,),
) -> str:  # fmt: skip
    lines = [
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE sglang:prompt_tokens_total counter",
        f"sglang:prompt_tokens_total{{{MODEL}}} {prompt:e}",
        "# TYPE sglang:generation_tokens_total counter",
        f"sglang:generation_tokens_total{{{MODEL}}} {gen:e}",
        "# TYPE sglang:num_requests_total counter",
        f"sglang:num_requests_total{{{MODEL}}} {finished}",
        "# TYPE sglang:num_aborted_requests_total counter",
        f"sglang:num_aborted_requests_total{{{MODEL}}} 1.0",
        "# TYPE sglang:time_to_first_token_seconds histogram",
        f'sglang:time_to_first_token_seconds_bucket{{le="0.1",{MODEL}}} 3.0',
        f'sglang:time_to_first_token_seconds_bucket{{le="+Inf",{MODEL}}} 7.0',
        f"sglang:time_to_first_token_seconds_sum{{{MODEL}}} 1.5",
        f"sglang:time_to_first_token_seconds_count{{{MODEL}}} 7.0",
    ]
    for r in range(ranks):
        lab = "{" + RANK.format(m=MODEL, r=r) + "}"
        lines += [
            f"sglang:num_running_reqs{lab} 5.0",
            f"sglang:num_queue_reqs{lab} 2.0",
            f"sglang:token_usage{lab} {usage[r % len(usage)]}",
            f"sglang:spec_accept_length{lab} {accept_len}",
            f"sglang:spec_accept_rate{lab} {accept_rate}",
            f"sglang:num_retracted_requests_total{lab} {retracted}",
        ]
    return "\n".join(lines) + "\n"


def snap(text: str) -> Snapshot:
    samples = parse_prometheus(text)
    return Snapshot(samples, dialect_of(samples))


def test_labels_and_histograms_parse_in_sglangs_format() -> None:
    s = parse_prometheus(sglang_text(100, 50, 2))
    assert s["sglang:prompt_tokens_total"] == [
        ({"model_name": "meta-llama/Llama-3.1-8B-Instruct"}, 100.0)
    ]
    (labels, value), = s["sglang:token_usage"]  # fmt: skip
    assert labels == {
        "engine_type": "unified", "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "pp_rank": "0", "tp_rank": "0",
    } and value == 0.25  # fmt: skip
    buckets = s["sglang:time_to_first_token_seconds_bucket"]
    assert [b[0]["le"] for b in buckets] == ["0.1", "+Inf"]
    assert dialect_of(s) == "SGLang"


def test_counter_deltas_under_genbenchs_names() -> None:
    before = snap(sglang_text(1000, 400, 3, retracted=1))
    after = snap(sglang_text(1800, 1400, 11, retracted=4))
    out = server_metrics_summary(before, after, {})
    assert out["dialect"] == "SGLang"
    assert out["prompt_tokens"] == 800 and out["generation_tokens"] == 1000
    assert out["requests_finished"] == 8 and out["requests_aborted"] == 0
    assert out["preemptions"] == 3  # SGLang calls a preemption a retraction
    assert "requests_by_finish" not in out  # SGLang counts no finish reasons
    assert "spec_acceptance_rate" not in out  # nothing drafted: both gauges read 0


def test_acceptance_is_the_mean_of_sglangs_gauges_and_says_so() -> None:
    before = snap(sglang_text(0, 0, 0, accept_len=1.5, accept_rate=0.2))
    after = snap(sglang_text(10, 900, 3, accept_len=3.0, accept_rate=0.5))
    # two samples taken during the phase (sums, counts), then the value at its end
    sums = {"spec_accept_length": [2.6 + 3.4, 2.0], "spec_accept_rate": [0.4 + 0.6, 2.0]}
    out = server_metrics_summary(before, after, {}, sums)
    assert out["spec_acceptance_source"] == "gauge" and out["spec_gauge_samples"] == 3
    assert out["spec_mean_acceptance_length"] == pytest.approx((2.6 + 3.4 + 3.0) / 3)
    assert out["spec_acceptance_rate"] == pytest.approx((0.4 + 0.6 + 0.5) / 3)
    assert "spec_drafts" not in out  # no counters pretended
    assert sums["spec_accept_length"] == [6.0, 2.0]  # the scraper's sums are not changed


def test_ratio_gauges_are_averaged_over_ranks_counts_summed() -> None:
    s = snap(sglang_text(0, 0, 0, ranks=2, usage=(0.2, 0.6), accept_len=2.0))
    assert s.first(("sglang:token_usage",))[1] == pytest.approx(0.4)
    assert s.first(("sglang:spec_accept_length",))[1] == pytest.approx(2.0)
    assert s.total("sglang:num_running_reqs") == 10.0


def test_vllm_counters_still_win_and_are_marked_counters() -> None:
    text = (
        "vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 30\n"
        "vllm:spec_decode_num_accepted_tokens_total 15\n"
    )
    zero = snap(text.replace(" 10\n", " 0\n").replace(" 30\n", " 0\n").replace(" 15\n", " 0\n"))
    out = server_metrics_summary(zero, snap(text), {}, {"spec_accept_length": [9.0, 1.0]})
    assert out["spec_acceptance_source"] == "counters"
    assert out["spec_mean_acceptance_length"] == 2.5 and out["spec_acceptance_rate"] == 0.5


def test_how_to_turn_metrics_on_names_each_servers_flag() -> None:
    assert "--enable-metrics" in metrics_off_hint("SGLang")
    assert "--metrics" in metrics_off_hint("llama.cpp")
    assert "proxy" in metrics_off_hint("vLLM")
    assert "no server-side counters" in metrics_off_hint(None)


def test_a_line_the_parser_refuses_costs_that_line_alone() -> None:
    text = sglang_text(100, 50, 2).replace(
        "# TYPE sglang:generation_tokens_total counter", "this is not exposition format"
    )
    s = parse_prometheus(text + 'odd{q="a\\"b"} 7\n')
    assert s["sglang:prompt_tokens_total"][0][1] == 100.0
    assert s["sglang:generation_tokens_total"][0][1] == 50.0
    assert s["odd"] == [({"q": 'a"b'}, 7.0)]  # label escapes read as Prometheus reads them
