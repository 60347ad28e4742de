"""An output row: SpecForge's `conversations` plus genbench's metadata, as one JSONL line
or one Parquet row (a full JSONL shard is converted in a separate process)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from genbench.atomic import replace_durably
from genbench.errors import UsageError

META_FIELDS: tuple[tuple[str, str], ...] = (
    ("server", "string"),
    ("model", "string"),
    ("prompt_tokens", "int64"),
    ("completion_tokens", "int64"),
    ("reasoning_tokens", "int64"),
    ("answer_tokens", "int64"),
    ("tokens_estimated", "bool"),
    ("finish_reason", "string"),
    ("truncated", "bool"),
    ("turns", "int64"),
    ("attempts", "int64"),
    ("ttft_s", "float64"),
    ("latency_s", "float64"),
    ("sent_at", "float64"),
    ("finished_at", "float64"),
)


def row_line(row_id: str | int, conversations: list[dict[str, Any]], meta: dict[str, Any]) -> bytes:
    """One output row: SpecForge's conversations format plus genbench's metadata."""
    return orjson.dumps({"id": row_id, "conversations": conversations, "meta": meta}) + b"\n"


def parquet_schema() -> Any:
    import pyarrow as pa

    turn = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("reasoning_content", pa.string()),
            ("raw", pa.string()),  # generate --keep-raw, where genbench split the thinking
        ]
    )
    meta = pa.struct([(name, pa.type_for_alias(t)) for name, t in META_FIELDS])
    return pa.schema([("id", pa.string()), ("conversations", pa.list_(turn)), ("meta", meta)])


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) or v is None else orjson.dumps(v).decode()


def convert_to_parquet(src: str, dst: str, batch_rows: int = 1000) -> int:
    """JSONL shard -> Parquet, streamed in row groups; atomic; returns the rows written.
    Runs in a separate process. Content that is not text (a list of parts) is stored as
    its JSON text, so the schema stays fixed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = parquet_schema()
    tmp = dst + ".tmp"
    n = 0
    with pq.ParquetWriter(tmp, schema, compression="zstd") as w, open(src, "rb") as f:
        batch: list[dict[str, Any]] = []
        for line in f:
            obj = orjson.loads(line)
            obj["id"] = str(obj["id"])  # one column type: integer ids become text
            for t in obj["conversations"]:
                t["content"] = _text(t.get("content"))
            batch.append(obj)
            if len(batch) >= batch_rows:
                w.write_table(pa.Table.from_pylist(batch, schema=schema))
                n += len(batch)
                batch = []
        if batch:
            w.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    replace_durably(tmp, dst)
    return n


def parquet_ids(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        col = pq.read_table(path, columns=["id"]).column("id")
    except Exception as e:  # pyarrow's own error types
        raise UsageError(f"{path}: cannot read its ids ({e})") from None
    return [str(x) for x in col.to_pylist()]
