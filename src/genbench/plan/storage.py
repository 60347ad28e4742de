"""What the job's output weighs: JSONL and Parquet bytes per sample, and the target
model's hidden states when they are kept for drafter training."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import orjson

from genbench.errors import UsageError
from genbench.tensors import FP8_SCALE_BYTES

ASSUMED_BYTES_PER_TOKEN = 4.0  # English text with a Llama-style tokenizer, when nothing measured
JSONL_OVERHEAD_BYTES = 400  # id, generate's metadata and JSON punctuation per output line
# a kept token id in JSONL, its digits and a comma, when no output was measured (a pilot
# measures the rows as written, ids and all): 4.9 (32K vocabulary) to 5.5 (152K) bytes
# measured on model-like ids, 7 for uniform 6-digit ones (benchmarks/token_ids_encoding.py)
ASSUMED_ID_BYTES = 6.0


@dataclass(frozen=True)
class HiddenStates:
    """Target-model hidden states kept for offline drafter training (EAGLE-3, DFlash)."""

    hidden_size: int
    layers: int
    dtype_bytes: int = 2

    def bytes_for(self, tokens: float) -> float:
        return tokens * self.hidden_size * self.layers * self.dtype_bytes

    def fp8_bytes_for(self, tokens: float) -> float:
        """In hs-connectors' FP8 format (speculators' `FP8Transfer` reads it): a byte a value
        and a float32 scale per token, about half of bf16's bytes."""
        return tokens * (self.hidden_size * self.layers + FP8_SCALE_BYTES)


@dataclass(frozen=True)
class StorageModel:
    """Bytes per sample of the job's output, and how that figure was obtained."""

    jsonl_bytes_per_sample: float
    parquet_bytes_per_sample: float | None
    basis: str
    hidden: HiddenStates | None = None

    def row(self, samples: int, hidden_tokens: float) -> dict[str, Any]:
        return {
            "jsonl_bytes_per_sample": self.jsonl_bytes_per_sample,
            "jsonl_bytes": samples * self.jsonl_bytes_per_sample,
            "parquet_bytes_per_sample": self.parquet_bytes_per_sample,
            "parquet_bytes": (
                samples * self.parquet_bytes_per_sample if self.parquet_bytes_per_sample else None
            ),
            "hidden_state_tokens": hidden_tokens if self.hidden else None,
            "hidden_state_bytes": self.hidden.bytes_for(hidden_tokens) if self.hidden else None,
            "hidden_state_bytes_fp8": (
                self.hidden.fp8_bytes_for(hidden_tokens) if self.hidden else None
            ),
        }


def storage_from_tokens(
    tokens_per_sample: float,
    bytes_per_token: float | None,
    hidden: HiddenStates | None,
    basis: str | None = None,
    token_ids: bool = False,
) -> StorageModel:
    """Without outputs to measure: text bytes from a bytes-per-token figure, plus a fixed
    per-line overhead; the prompt is not counted (it was not seen). With `token_ids` (the
    server gives them, so generate keeps them) each output token's id too."""
    bpt = bytes_per_token or ASSUMED_BYTES_PER_TOKEN
    why = basis or (
        f"{bpt:g} bytes per output token ("
        + ("given" if bytes_per_token else "assumed")
        + f") + {JSONL_OVERHEAD_BYTES} bytes per line; prompts not counted"
    )
    if token_ids:
        bpt += ASSUMED_ID_BYTES
        why += f"; + {ASSUMED_ID_BYTES:g} bytes per output token for its id (assumed; the "
        why += "server gives ids, generate keeps them)"
    return StorageModel(tokens_per_sample * bpt + JSONL_OVERHEAD_BYTES, None, why, hidden)


def parquet_bytes_per_row(rows: list[dict[str, Any]]) -> float | None:
    """Write the rows as one zstd Parquet file in memory, in generate's schema when it is
    there; None without pyarrow."""
    if not rows:
        return None
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        from genbench.rows import parquet_schema

        schema = parquet_schema()
    except Exception:  # generate absent or changed: let pyarrow infer the schema
        schema = None

    def text(v: Any) -> str:
        return v if isinstance(v, str) else orjson.dumps(v).decode()

    flat = [
        {
            **r,
            "id": str(r["id"]),
            "conversations": [{**t, "content": text(t["content"])} for t in r["conversations"]],
            **({"tools": text(r["tools"])} if r.get("tools") is not None else {}),
        }
        for r in rows
    ]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(flat, schema=schema), buf, compression="zstd")
    return buf.tell() / len(rows)


def hidden_states(size: int | None, layers: int | None, dtype_bytes: int) -> HiddenStates | None:
    """From --hidden-size and --layers-captured: both or neither."""
    if size is None and layers is None:
        return None
    if size is None or layers is None:
        raise UsageError("hidden-state storage needs both --hidden-size and --layers-captured")
    return HiddenStates(size, layers, dtype_bytes)
