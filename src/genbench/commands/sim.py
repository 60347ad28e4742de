"""`genbench sim`: the flags of the reference server, validated before anything is bound."""

from __future__ import annotations

import typer

from genbench.sim.config import SimConfig, parse_fault

# whose server the sim plays (genbench/sim/dialect.py)
DIALECT = typer.Option(
    "sim",
    "--dialect",
    help="Whose endpoints and metric names to serve: sim (genbench's own) or sglang "
    "(/server_info, /health_generate, sglang:* metrics; see docs/sim.md).",
)
NO_METRICS = typer.Option(
    False, "--no-metrics", help="Serve no /metrics (like SGLang without --enable-metrics)."
)

TOKEN_IDS = typer.Option(
    "none",
    "--token-ids",
    help="Token ids when a request asks: none (llama.cpp's chat), vllm (return_token_ids, "
    "per chunk) or sglang (the sglext lists; see docs/sim.md).",
)

DRIFT = typer.Option(
    None,
    "--drift",
    metavar="PCT:PERIOD",
    help="Make the speed wander: times 1 + PCT/100 · sin(2π·t/PERIOD + phase from --seed).",
)


def sim(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(8000, "--port", help="Port to bind; 0 picks a free one."),
    model: str = typer.Option("genbench-sim", "--model", help="Model name served and accepted."),
    tps: float = typer.Option(50.0, "--tps", help="Decode tokens/s of a single stream."),
    per_seq_ms: float = typer.Option(
        0.5,
        "--per-seq-ms",
        help="Milliseconds each decoding sequence adds to a decode step (batching cost).",
    ),  # fmt: skip
    ttft_ms: float = typer.Option(
        100.0, "--ttft-ms", help="Prefill time in ms before the first token (after queueing)."
    ),
    prefill_tps: float | None = typer.Option(
        None, "--prefill-tps", help="Also add prompt_tokens / PREFILL_TPS seconds of prefill."
    ),
    max_batch: int = typer.Option(
        256, "--max-batch", help="Requests prefilling or decoding at once; the rest queue."
    ),
    max_model_len: int = typer.Option(
        32768, "--max-model-len", help="Context length: prompt + max_tokens must fit."
    ),
    thinking_tokens: int = typer.Option(
        0, "--thinking-tokens", help="First N output tokens go to the reasoning field."
    ),
    reasoning_dialect: str = typer.Option(
        "reasoning_content",
        "--reasoning-dialect",
        help="Field for thinking text: reasoning_content (SGLang, llama.cpp) or reasoning (vLLM).",
    ),  # fmt: skip
    spec_k: int = typer.Option(
        1, "--spec-k", help="Tokens per decode chunk (speculative decoding, all accepted)."
    ),
    spec_accept: float = typer.Option(
        1.0,
        "--spec-accept",
        help="Draft acceptance probability; < 1 gives 1 + Binomial(K-1, P) tokens per chunk.",
    ),  # fmt: skip
    output_len: str = typer.Option(
        "fixed:256",
        "--output-len",
        help="Natural output length: fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA.",
    ),  # fmt: skip
    seed: int = typer.Option(0, "--seed", help="Seed for output lengths, faults and acceptance."),
    api_key_env: str | None = typer.Option(
        None,
        "--api-key-env",
        help="Name of an env var holding the API key; if set and non-empty, /v1/* need it.",
    ),  # fmt: skip
    fault: list[str] | None = typer.Option(
        None,
        "--fault",
        help="Inject a fault, KIND[:key=value,...]; repeatable. Kinds: refuse, die, http, "
        "stall-first, stall-mid, inband-error, malformed, truncate, no-usage, not-openai, "
        "unhealthy, split, loop, unclosed, empty-answer, inline-think, garble, ignore-prompt; "
        "match=TEXT limits one to requests containing TEXT. See docs/sim.md.",
    ),  # fmt: skip
    dialect: str = DIALECT,
    no_metrics: bool = NO_METRICS,
    drift: str | None = DRIFT,
    tool_calls: str | None = typer.Option(
        None,
        "--tool-calls",
        metavar="N|LO:HI",
        help="Requests with tools: each conversation calls N (or LO..HI, seeded) tools, one "
        "a reply, before it answers. [default: never, unless tool_choice forces a call]",
    ),
    token_ids: str = TOKEN_IDS,
) -> None:
    """Run the reference OpenAI-compatible server with known timing and injectable faults."""
    cfg = SimConfig(
        host=host, port=port, model=model, tps=tps, per_seq_ms=per_seq_ms, ttft_ms=ttft_ms,
        prefill_tps=prefill_tps, max_batch=max_batch, max_model_len=max_model_len,
        thinking_tokens=thinking_tokens, reasoning_dialect=reasoning_dialect, spec_k=spec_k,
        spec_accept=spec_accept, output_len=output_len, seed=seed, api_key_env=api_key_env,
        faults=[parse_fault(f) for f in fault or []], drift=drift, dialect=dialect,
        metrics=not no_metrics, token_ids=token_ids, tool_calls=tool_calls,
    ).validate()  # fmt: skip

    from genbench.sim.server import run
    from genbench.transport.open_files import raise_soft_limit

    raise_soft_limit()  # a server cannot know how many clients will connect: all it may
    run(cfg)
