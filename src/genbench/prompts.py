"""Read a user's prompt file: JSONL or Parquet, one prompt per line or row.

Three shapes are accepted per line (or Parquet column), because those are what
datasets for generation jobs come in:

* `{"messages": [{"role": "user", "content": "..."}, ...]}` (OpenAI chat),
* `{"conversations": [{"from": "human", "value": "..."}, ...]}` (ShareGPT; `role`/
  `content` inside `conversations` works too),
* `{"prompt": "..."}` (a bare user turn).

A conversation that ends with assistant turns is cut before them: the job
regenerates the answer, so the prompt is everything up to the last user turn.
Every problem is an `InputFileError` naming the file, the line (Parquet: the
row, counted from 1) and the field, so a bad line in a million-line file is
found at once. Blank JSONL lines are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from genbench.errors import InputFileError

PROMPT_FIELDS = ("messages", "conversations", "prompt")
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "model": "assistant",
    "system": "system",
    "tool": "tool",
}
CHAT_ROLES = ("system", "user", "assistant", "tool", "developer", "function")


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt: chat messages ready to send, where it came from, and its id if it had one."""

    messages: list[dict[str, Any]]
    line: int
    id: str | None = None


def read_prompts(path: str | Path) -> list[Prompt]:
    """All prompts of a JSONL or Parquet file; raises InputFileError on the first bad one."""
    p = Path(path)
    if not p.exists():
        raise InputFileError(p, None, "no such file")
    if p.is_dir():
        raise InputFileError(p, None, "is a directory, expected a JSONL or Parquet file")
    rows = _parquet_rows(p) if _is_parquet(p) else _jsonl_rows(p)
    prompts = [prompt_from_row(p, line, row) for line, row in rows]
    if not prompts:
        raise InputFileError(p, None, "no prompts: the file is empty")
    return prompts


def _is_parquet(p: Path) -> bool:
    if p.suffix.lower() in (".parquet", ".pq"):
        return True
    try:
        with open(p, "rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def _jsonl_rows(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        f = open(p, "rb")  # noqa: SIM115 - closed below; a generator keeps it open while read
    except OSError as e:
        raise InputFileError(p, None, f"cannot read it ({e.strerror or e})") from None
    with f:
        for n, raw in enumerate(f, start=1):
            line = raw.strip()
            if not line:
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise InputFileError(p, n, f"not JSON ({e})") from None
            if not isinstance(obj, dict):
                raise InputFileError(
                    p, n, f"expected a JSON object with one of {_fields()}, got {_kind(obj)}"
                )
            yield n, obj


def _parquet_rows(p: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputFileError(
            p, None, "reading Parquet needs pyarrow: pip install 'genbench[parquet]'"
        ) from None
    try:
        pf = pq.ParquetFile(p)
    except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
        raise InputFileError(p, None, f"not a readable Parquet file ({e})") from None
    columns = [c for c in PROMPT_FIELDS if c in pf.schema_arrow.names]
    if not columns:
        raise InputFileError(
            p,
            None,
            f"no prompt column: expected one of {_fields()}, "
            f"found {', '.join(pf.schema_arrow.names) or 'none'}",
        )
    if "id" in pf.schema_arrow.names:
        columns.append("id")
    n = 0
    for batch in pf.iter_batches(columns=columns, batch_size=4096):
        for row in batch.to_pylist():
            n += 1
            yield n, {k: v for k, v in row.items() if v is not None}


def _fields() -> str:
    return ", ".join(f"'{f}'" for f in PROMPT_FIELDS)


def _kind(v: object) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(v), type(v).__name__)


def prompt_from_row(path: Path, line: int, row: dict[str, Any]) -> Prompt:
    """Turn one parsed line or row into a Prompt, or say exactly what is wrong with it."""
    rid = row.get("id")
    pid = str(rid) if rid is not None else None
    if "messages" in row:
        msgs = _chat_messages(path, line, row["messages"], "messages")
    elif "conversations" in row:
        msgs = _chat_messages(path, line, row["conversations"], "conversations")
    elif "prompt" in row:
        text = row["prompt"]
        if isinstance(text, list):
            msgs = _chat_messages(path, line, text, "prompt")
        elif not isinstance(text, str):
            raise InputFileError(path, line, f"expected a string, got {_kind(text)}", "prompt")
        elif not text.strip():
            raise InputFileError(path, line, "is empty", "prompt")
        else:
            msgs = [{"role": "user", "content": text}]
    else:
        keys = ", ".join(sorted(row)) or "none"
        raise InputFileError(path, line, f"no prompt: expected one of {_fields()} (found: {keys})")
    return Prompt(msgs, line, pid)


def _chat_messages(path: Path, line: int, value: object, name: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise InputFileError(path, line, f"expected a list of turns, got {_kind(value)}", name)
    if not value:
        raise InputFileError(path, line, "is an empty list", name)
    msgs: list[dict[str, Any]] = []
    for i, turn in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(turn, dict):
            raise InputFileError(path, line, f"expected an object, got {_kind(turn)}", where)
        if "role" in turn or "content" in turn:
            role, content = turn.get("role"), turn.get("content")
            role_key, content_key = "role", "content"
        elif "from" in turn or "value" in turn:
            raw = turn.get("from")
            role = SHAREGPT_ROLES.get(str(raw).lower()) if isinstance(raw, str) else None
            if role is None:
                raise InputFileError(
                    path,
                    line,
                    f"unknown speaker {raw!r}: expected human, gpt or system",
                    f"{where}.from",
                )
            content, role_key, content_key = turn.get("value"), "from", "value"
        else:
            raise InputFileError(
                path, line, "a turn needs 'role' and 'content' (or 'from' and 'value')", where
            )
        if role not in CHAT_ROLES:
            raise InputFileError(
                path, line, f"unknown role {role!r}: expected user, assistant or system",
                f"{where}.{role_key}",
            )  # fmt: skip
        if not isinstance(content, str | list):
            raise InputFileError(
                path, line, f"expected text, got {_kind(content)}", f"{where}.{content_key}"
            )
        msgs.append({"role": role, "content": content})
    while msgs and msgs[-1]["role"] == "assistant":
        msgs.pop()  # the job regenerates the answer
    if not any(m["role"] == "user" for m in msgs):
        raise InputFileError(path, line, "has no user turn to answer", name)
    return msgs
