"""A job's answers written in OpenAI Batch output shape (its input side: input/batch.py).

One line per `custom_id`: `{"id", "custom_id", "response": {"status_code", "request_id",
"body"}, "error"}`, `body` a `chat.completion` object. With `--answers batch` the data files
hold these lines instead of conversations (their `id` is the `custom_id`, which is what lets
the job resume and write each row once), and the failed rows go to `batch_errors.jsonl` in
the same shape at the end of every run; with `--answers both` the conversations stay and
`batch_output.jsonl` is written beside them from the data and errors files at the end of
every run, interrupted ones included, so it always holds each finished `custom_id` once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from genbench.atomic import writing
from genbench.errors import OutputError
from genbench.generate.store.layout import Layout
from genbench.rows import DataRow, RowMeta


def completion(row: DataRow) -> dict[str, Any]:
    """The `chat.completion` object of a row's last answer."""
    turn = next((t for t in reversed(row.conversations) if t.get("role") == "assistant"), {})
    message: dict[str, Any] = {"role": "assistant", "content": turn.get("content") or ""}
    if turn.get("reasoning_content"):
        message["reasoning_content"] = turn["reasoning_content"]
    if turn.get("tool_calls"):  # rows that carry the model's tool calls keep them
        message["tool_calls"] = turn["tool_calls"]
    meta = row.meta
    prompt, done = meta.prompt_tokens or 0, meta.completion_tokens or 0
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": done,
                             "total_tokens": prompt + done}  # fmt: skip
    if meta.reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": meta.reasoning_tokens}
    return {
        "id": f"chatcmpl-{row.id}",
        "object": "chat.completion",
        "created": int(meta.finished_at or 0),
        "model": meta.model or "",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": meta.finish_reason or "stop"}],  # fmt: skip
        "usage": usage,
    }


def answer_line(row: DataRow) -> bytes:
    """One Batch output line for a row that was answered."""
    return orjson.dumps({
        "id": row.id,
        "custom_id": str(row.id),
        "response": {"status_code": 200, "request_id": f"genbench-{row.id}",
                     "body": completion(row)},
        "error": None,
    }) + b"\n"  # fmt: skip


def row_bytes(row: DataRow, fmt: str) -> bytes:
    """A finished row as the data file holds it: a Batch output line in format `batch`
    (`--answers batch`), else the conversations line."""
    return answer_line(row) if fmt == "batch" else row.line()


def error_line(entry: dict[str, Any]) -> bytes:
    """One Batch output line for a row that failed (an errors-file entry)."""
    status = entry.get("http_status")
    return orjson.dumps({
        "id": entry.get("id"),
        "custom_id": str(entry.get("id")),
        "response": None if status is None else {"status_code": status, "request_id": None,
                                                 "body": None},
        "error": {"code": entry.get("error_kind"), "message": entry.get("error")},
    }) + b"\n"  # fmt: skip


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        for batch in pq.ParquetFile(path).iter_batches(batch_size=2048):
            yield from batch.to_pylist()
        return
    with open(path, "rb") as f:
        for line in f:
            if line.endswith(b"\n"):
                yield orjson.loads(line)


def write_answers(lay: Layout, answers: str) -> tuple[Path, int] | None:
    """At the end of a run, from what the directory holds now (one file per --shard):
    --answers both: batch_output.jsonl, every finished row; --answers batch (the data files
    are the output): batch_errors.jsonl, the failed rows in Batch shape, when there are.
    (the file, its lines), or None when the run leaves none."""
    if answers == "conversations" or not lay.out.is_dir():
        return None
    if answers == "batch" and not lay.errors.exists():
        return None
    dest = lay.batch_output if answers == "both" else lay.batch_errors
    data = lay.data_files() if answers == "both" else []
    try:
        return dest, write_batch_output(data, lay.errors, dest)
    except OSError as e:  # the data is whole; only this file of it is not (rerun writes it)
        why = e.strerror or e
        raise OutputError(f"--out {lay.out}: cannot write {dest.name} ({why})") from None


def write_batch_output(data_files: list[Path], errors: Path, dest: Path) -> int:
    """`dest` rebuilt from the job's data and errors files, atomically: one line per
    finished row. The store holds each id once, so the file does too. Returns its lines."""
    n = 0
    with writing(dest) as out:
        for p in data_files:
            for row in _rows(p):
                if "custom_id" in row:  # --answers batch: already in shape
                    out.write(orjson.dumps(row) + b"\n")
                else:
                    read = DataRow(row["id"], row["conversations"], RowMeta.of(row))
                    out.write(answer_line(read))
                n += 1
        for entry in _rows(errors) if errors.exists() else ():
            if entry.get("id") is not None:
                out.write(error_line(entry))
                n += 1
    return n
