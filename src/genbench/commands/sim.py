"""`genbench sim`: the flags of the reference server, validated before anything is bound."""

from __future__ import annotations

import typer

from genbench.sim.config import SimConfig, parse_fault

# whose server the sim plays (genbench/sim/dialect.py)
DIALECT = typer.Option(
    "sim",
    "--dialect",
    help="Whose server to play: sim (genbench's own), sglang (/server_info, "
    "/health_generate, sglang:* metrics, its ids) or vllm (vLLM's replies: the reasoning "
    "field, return_token_ids; the sim's endpoints; see docs/sim.md).",
)
NO_METRICS = typer.Option(
    False, "--no-metrics", help="Serve no /metrics (like SGLang without --enable-metrics)."
)

TOKEN_IDS = typer.Option(
    "auto",
    "--token-ids",
    help="Token ids when a request asks: none (llama.cpp's chat), vllm (return_token_ids, "
    "per chunk), sglang (the sglext lists; see docs/sim.md) or auto (the dialect's: sim "
    "none, vllm vllm, sglang sglang).",
)

DRIFT = typer.Option(
    None,
    "--drift",
    metavar="PCT:PERIOD",
    help="Make the speed wander: times 1 + PCT/100 · sin(2π·t/PERIOD + phase from --seed).",
)


HOST = typer.Option("127.0.0.1", "--host", help="Address to bind.")
PORT = typer.Option(8000, "--port", help="Port to bind; 0 picks a free one.")
MODEL = typer.Option("genbench-sim", "--model", help="Model name served and accepted.")
TPS = typer.Option(50.0, "--tps", help="Decode tokens/s of a single stream.")
PER_SEQ_MS = typer.Option(
    0.5,
    "--per-seq-ms",
    help="Milliseconds each decoding sequence adds to a decode step (batching cost).",
)
TTFT_MS = typer.Option(
    100.0, "--ttft-ms", help="Prefill time in ms before the first token (after queueing)."
)
PREFILL_TPS = typer.Option(
    None, "--prefill-tps", help="Also add prompt_tokens / PREFILL_TPS seconds of prefill."
)
MAX_BATCH = typer.Option(
    256, "--max-batch", help="Requests prefilling or decoding at once; the rest queue."
)
MAX_MODEL_LEN = typer.Option(
    32768, "--max-model-len", help="Context length: prompt + max_tokens must fit."
)
THINKING_TOKENS = typer.Option(
    0, "--thinking-tokens", help="First N output tokens go to the reasoning field."
)
REASONING_DIALECT = typer.Option(
    "auto",
    "--reasoning-dialect",
    help="Field for thinking text: reasoning_content (SGLang, llama.cpp), reasoning (vLLM) or "
    "auto (the dialect's: vllm reasoning, else reasoning_content).",
)
SPEC_K = typer.Option(
    1,
    "--spec-k",
    help="Tokens per decode chunk at most (speculative decoding: a draft of K-1, "
    "accepted as --spec-accept says).",
)
SPEC_ACCEPT = typer.Option(
    1.0,
    "--spec-accept",
    help="Draft acceptance probability; < 1 gives 1 + Binomial(K-1, P) tokens per chunk.",
)
SPEC_ACCEPT_MATCH = typer.Option(
    None,
    "--spec-accept-match",
    metavar="TEXT:P",
    help="Requests whose messages contain TEXT accept each draft with probability P "
    "(repeatable; the first that matches).",
)
SPEC_METRICS = typer.Option(
    "none",
    "--per-request-spec-decode-metrics",
    help="As vLLM: none, summary or detailed: each response says its acceptance in "
    "metrics.speculative_decoding (the sglang dialect answers return_spec_tokens_details).",
)
OUTPUT_LEN = typer.Option(
    "fixed:256",
    "--output-len",
    help="Natural output length: fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA.",
)
SEED = typer.Option(0, "--seed", help="Seed for output lengths, faults and acceptance.")
API_KEY_ENV = typer.Option(
    None,
    "--api-key-env",
    help="Name of an env var holding the API key; if set and non-empty, /v1/* need it.",
)
FAULT = typer.Option(
    None,
    "--fault",
    help="Inject a fault, KIND[:key=value,...]; repeatable. Kinds: refuse, die, http, "
    "stall-first, stall-mid, inband-error, malformed, truncate, no-usage, bad-acceptance, "
    "no-ids, not-openai, unhealthy, no-tools, split, loop, unclosed, empty-answer, inline-think, "
    "uncounted-think, garble, ignore-prompt; "
    "after=N, until=N and match=TEXT limit one to some requests. See docs/sim.md.",
)
TOOL_CALLS = typer.Option(
    None,
    "--tool-calls",
    metavar="N|LO:HI",
    help="Requests with tools: each conversation calls N tools (LO:HI: a number from LO "
    "to HI, seeded), one a reply, before it answers. [default: never, unless tool_choice "
    "forces a call]",
)
KV_TOKENS = typer.Option(
    0,
    "--kv-tokens",
    help="A KV cache of this many tokens (a multiple of 16): each running request holds its "
    "prompt and what it generated; when full the newest is preempted and generates again. "
    "0: none.",
)


def sim(
    host: str = HOST,
    port: int = PORT,
    model: str = MODEL,
    tps: float = TPS,
    per_seq_ms: float = PER_SEQ_MS,  # fmt: skip
    ttft_ms: float = TTFT_MS,
    prefill_tps: float | None = PREFILL_TPS,
    max_batch: int = MAX_BATCH,
    max_model_len: int = MAX_MODEL_LEN,
    thinking_tokens: int = THINKING_TOKENS,
    reasoning_dialect: str = REASONING_DIALECT,  # fmt: skip
    spec_k: int = SPEC_K,
    spec_accept: float = SPEC_ACCEPT,  # fmt: skip
    spec_accept_match: list[str] | None = SPEC_ACCEPT_MATCH,
    per_request_spec_decode_metrics: str = SPEC_METRICS,
    output_len: str = OUTPUT_LEN,  # fmt: skip
    seed: int = SEED,
    api_key_env: str | None = API_KEY_ENV,  # fmt: skip
    fault: list[str] | None = FAULT,  # fmt: skip
    dialect: str = DIALECT,
    no_metrics: bool = NO_METRICS,
    drift: str | None = DRIFT,
    tool_calls: str | None = TOOL_CALLS,
    token_ids: str = TOKEN_IDS,
    kv_tokens: int = KV_TOKENS,
) -> None:
    """Run the reference OpenAI-compatible server with known timing and injectable faults."""
    cfg = SimConfig(
        host=host, port=port, model=model, tps=tps, per_seq_ms=per_seq_ms, ttft_ms=ttft_ms,
        prefill_tps=prefill_tps, max_batch=max_batch, max_model_len=max_model_len,
        thinking_tokens=thinking_tokens, reasoning_dialect=reasoning_dialect, spec_k=spec_k,
        spec_accept=spec_accept, spec_accept_match=spec_accept_match or [],
        spec_metrics=per_request_spec_decode_metrics, output_len=output_len, seed=seed,
        api_key_env=api_key_env,
        faults=[parse_fault(f) for f in fault or []], drift=drift, dialect=dialect,
        metrics=not no_metrics, token_ids=token_ids, tool_calls=tool_calls,
        kv_tokens=kv_tokens,
    ).validate()  # fmt: skip
    for note in cfg.notes():
        typer.echo(f"genbench sim: note: {note}", err=True)

    from genbench.sim.server import run
    from genbench.transport.open_files import raise_soft_limit

    raise_soft_limit()  # a server cannot know how many clients will connect: all it may
    run(cfg)
