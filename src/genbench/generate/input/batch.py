"""OpenAI Batch API request files read as a job's input.

A Batch request file has one request per line, `{"custom_id", "method", "url", "body"}`:
the format of OpenAI's and other providers' batch endpoints and of `vllm run-batch`.
Each line becomes a row: `custom_id` is its id, `body.messages` its prompt (sent as it
stands: one request per line, `--turns` does not apply), and every other body field
(sampling, `max_tokens`, `tools`, `tool_choice`, `response_format`...) the row's own
params, as a row's `params` are. `model`, `stream` and `stream_options` are the job's
(genbench streams, and asks the servers it was given); `n` above 1 is refused. The answers
go back in Batch shape through generate/store/batch.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from genbench.errors import InputFileError
from genbench.generate.input.files import jsonl_lines

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


def is_batch_file(path: Path) -> bool:
    """Whether the input's first line is a Batch request (JSONL only); a file that cannot
    be read is left to the input scan to say so."""
    if path.suffix in (".parquet", ".pq") or not path.is_file():
        return False
    try:
        first = next(jsonl_lines(path), None)
        return first is not None and is_batch_line(orjson.loads(first[1]))
    except (InputFileError, orjson.JSONDecodeError):
        return False
