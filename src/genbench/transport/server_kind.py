"""What kind of server answers, and what each kind gives: one enum (its value the name
check prints and result.json keeps) and one table of traits beside it, as `ErrorKind` has.
check tells the kind (check/identity.py, check/router.py); the token ids and the
acceptance a request asks for, check's hints and run's exact-length fields are read from
the table. A kind more is one member and one row."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ServerKind(StrEnum):
    VLLM = "vLLM"
    SGLANG = "SGLang"
    LLAMACPP = "llama.cpp"
    TGI = "TGI"
    SIM = "genbench-sim"
    SGLANG_ROUTER = "sglang-router"
    VLLM_ROUTER = "vllm-router"
    ROUTER = "router"  # a router of no kind genbench knows


@dataclass(frozen=True)
class Traits:
    owned_by: str | None = None  # what its /v1/models says in `owned_by`
    ids: str | None = None  # the dialect it gives token ids in (transport/token_ids.py)
    no_ids: bool = False  # it gives none (a kind with neither is asked apart, to find out)
    acceptance: str | None = None  # the dialect a request asks acceptance in (acceptance.py)
    acceptance_on: str | None = None  # how to have it say acceptance per request
    metric_prefix: str | None = None  # its /metrics names' prefix (check/metric_names.py)
    metrics_off: str | None = None  # what to do when it serves no /metrics
    exact_length: str | None = None  # the field that forces an output's length (ignore_eos aside)
    router: bool = False  # it forwards to workers (check/router.py)


TRAITS: dict[ServerKind, Traits] = {
    ServerKind.VLLM: Traits(
        "vllm", "vllm", acceptance_on="start vLLM with --per-request-spec-decode-metrics "
        "summary (vLLM >= 0.32, speculative decoding on)", metric_prefix="vllm:",
        metrics_off="vLLM always serves /metrics: a proxy in front of it may hide the path",
        exact_length="min_tokens",
    ),
    ServerKind.SGLANG: Traits(
        "sglang", "sglang", acceptance="sglang", acceptance_on="genbench asks with "
        "return_spec_tokens_details; SGLang says it only with speculative decoding on "
        "(--speculative-algorithm)", metric_prefix="sglang:", metrics_off="SGLang serves "
        "/metrics only when started with --enable-metrics: restart it with --enable-metrics "
        "to get the server's own counters in run", exact_length="min_tokens",
    ),
    # its chat endpoint returns no ids (server-context.cpp, return_tokens)
    ServerKind.LLAMACPP: Traits(
        "llamacpp", no_ids=True, metric_prefix="llamacpp:", metrics_off="llama-server "
        "serves /metrics only when started with --metrics: restart it with --metrics to get "
        "the server's own counters in run", exact_length="n_predict",
    ),
    ServerKind.TGI: Traits("tgi"),
    ServerKind.SIM: Traits("genbench-sim", "vllm", metric_prefix="sim:"),
    ServerKind.SGLANG_ROUTER: Traits(
        ids="sglang", acceptance="sglang", router=True, metrics_off="sglang-router serves "
        "its own metrics on its --prometheus-port, not its workers': give run --metrics-url "
        "once per worker's /metrics",
    ),
    ServerKind.VLLM_ROUTER: Traits(ids="vllm", router=True),
    ServerKind.ROUTER: Traits(router=True),
}  # fmt: skip
UNKNOWN = Traits()  # a server check could not name


def traits(kind: str | None) -> Traits:
    """The traits of a kind as check reports it (text: the enum's value), or UNKNOWN's."""
    return TRAITS.get(kind, UNKNOWN) if kind else UNKNOWN  # type: ignore[call-overload]
