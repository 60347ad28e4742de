"""OpenAI Batch API files: read as a job's input, and its answers written in Batch shape.

A Batch request file has one request per line, `{"custom_id", "method", "url", "body"}`:
the format of OpenAI's and other providers' batch endpoints and of `vllm run-batch`.
Each line becomes a row: `custom_id` is its id, `body.messages` its prompt (sent as it
stands: one request per line, `--turns` does not apply), and every other body field
(sampling, `max_tokens`, `tools`, `tool_choice`, `response_format`...) the row's own
params, as a row's `params` are. `model`, `stream` and `stream_options` are the job's
(genbench streams, and asks the servers it was given); `n` above 1 is refused.

The answers come back in the Batch output shape, one line per `custom_id`:
`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`, `body`
a `chat.completion` object. With `--answers batch` the data files hold these lines
instead of conversations (their `id` is the `custom_id`, which is what lets the job
resume and write each row once), and the failed rows go to `batch_errors.jsonl` in the
same shape at the end of every run; with `--answers both` the conversations stay and
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

CHAT_URL = "/v1/chat/completions"
JOB_FIELDS = ("model", "stream", "stream_options")  # the job's own, not the row's
MARK = "\x00batch"  # a key no JSON row of another format holds: this row came from a Batch line


class BatchLineError(Exception):
    """A bad Batch line: the problem, and the field in the Batch line's own terms."""

    def __init__(self, problem: str, field: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.field = problem, field


def is_batch_line(obj: Any) -> bool:
    return isinstance(obj, dict) and "custom_id" in obj


def batch_row(obj: dict[str, Any]) -> dict[str, Any]:
    """A Batch request line as a row of genbench's input format (id, messages, params)."""
    cid = obj.get("custom_id")
    if not isinstance(cid, str) or not cid:
        got = "empty text" if cid == "" else type(cid).__name__
        raise BatchLineError(f"expected non-empty text, got {got}", "custom_id")
    method = obj.get("method", "POST")
    if method != "POST":
        raise BatchLineError(f"expected POST, got {method!r}", "method")
    url = obj.get("url", CHAT_URL)
    if url != CHAT_URL:
        raise BatchLineError(f"genbench sends chat completions: expected {CHAT_URL}, got "
                             f"{url!r}", "url")  # fmt: skip
    body = obj.get("body")
    if not isinstance(body, dict):
        got = "nothing" if body is None else type(body).__name__
        raise BatchLineError(f"expected the request object, got {got}", "body")
    if body.get("n") not in (None, 1):
        raise BatchLineError(f"one answer per line: expected 1, got {body['n']!r}", "body.n")
    params = {k: v for k, v in body.items() if k not in (*JOB_FIELDS, "messages", "n")}
    row = {"id": cid, "messages": body.get("messages"), MARK: True}
    if params:
        row["params"] = params
    if row["messages"] is None:
        raise BatchLineError("no messages: expected a list of {role, content}", "body.messages")
    return row


def field_name(field: str | None) -> str | None:
    """A row's field named as the Batch line has it: messages[0] -> body.messages[0]."""
    if field is None:
        return None
    if field == "id":
        return "custom_id"
    if field.startswith("params."):
        return "body." + field.removeprefix("params.")
    return "body" if field == "params" else "body." + field


# -- answers in the Batch output shape ------------------------------------------------------


def completion(row_id: str | int, conversations: list[dict[str, Any]], meta: dict[str, Any]
               ) -> dict[str, Any]:  # fmt: skip
    """The `chat.completion` object of a row's last answer."""
    turn = next((t for t in reversed(conversations) if t.get("role") == "assistant"), {})
    message: dict[str, Any] = {"role": "assistant", "content": turn.get("content") or ""}
    if turn.get("reasoning_content"):
        message["reasoning_content"] = turn["reasoning_content"]
    for key in ("tool_calls",):  # rows that carry the model's tool calls keep them
        if turn.get(key):
            message[key] = turn[key]
    prompt, done = meta.get("prompt_tokens") or 0, meta.get("completion_tokens") or 0
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": done,
                             "total_tokens": prompt + done}  # fmt: skip
    if meta.get("reasoning_tokens"):
        usage["completion_tokens_details"] = {"reasoning_tokens": meta["reasoning_tokens"]}
    return {
        "id": f"chatcmpl-{row_id}",
        "object": "chat.completion",
        "created": int(meta.get("finished_at") or 0),
        "model": meta.get("model") or "",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": meta.get("finish_reason") or "stop"}],  # fmt: skip
        "usage": usage,
    }


def answer_line(row_id: str | int, conversations: list[dict[str, Any]], meta: dict[str, Any]
                ) -> bytes:  # fmt: skip
    """One Batch output line for a row that was answered."""
    body = completion(row_id, conversations, meta)
    return orjson.dumps({
        "id": row_id,
        "custom_id": str(row_id),
        "response": {"status_code": 200, "request_id": f"genbench-{row_id}", "body": body},
        "error": None,
    }) + b"\n"  # fmt: skip


def row_bytes(conv: Any, model: str, fmt: str) -> bytes:
    """A finished row as the data file holds it: a Batch output line in format `batch`
    (`--answers batch`), else the conversations line (`Conversation.line`)."""
    if fmt != "batch":
        return conv.line(model)
    return answer_line(conv.row.output_id, conv.out, conv.meta(model))


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
                    out.write(answer_line(row["id"], row["conversations"], row.get("meta", {})))
                n += 1
        for entry in _rows(errors) if errors.exists() else ():
            if entry.get("id") is not None:
                out.write(error_line(entry))
                n += 1
    return n


def is_batch_file(path: Path) -> bool:
    """Whether the input's first line is a Batch request (JSONL only)."""
    import gzip

    if path.suffix in (".parquet", ".pq") or not path.is_file():
        return False
    opener: Any = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for line in f:
                s = line.strip().removeprefix(b"\xef\xbb\xbf")
                if s:
                    return is_batch_line(orjson.loads(s))
    except (OSError, orjson.JSONDecodeError, EOFError):
        return False
    return False
