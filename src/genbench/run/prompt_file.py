"""`run --input FILE`: a benchmark's requests taken from a prompt file, as generate reads
it, so that a job's forecast is measured on requests shaped like the job's.

An agentic job does not send chat prompts: its requests carry a tool schema, grow with
every call and result, and a row makes several of them. Each assistant turn of a row
becomes one request here, with the row's original history before it (calls and results
as written) and its `tools`; a chat row gives one request per answered user turn, as
generate's `--turns all` sends them. The requests are cycled in file order. A row's own
`params` go with its requests (over run's, as generate sends them), but for the length
fields: the output length is still `run`'s to force (the lengths of the phases); a row's
`tool_choice` is left out, so that a forced call does not decide what a length phase
generates.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

from genbench.errors import InputFileError
from genbench.generate.input.params import MAX_TOKENS_KEYS, merge
from genbench.generate.input.reader import Row, iter_rows, scan
from genbench.generate.input.tools import is_agentic, wire
from genbench.run.workload import PromptCycle
from genbench.transport.client import ChatRequest

MAX_ROWS = 2000  # rows read from the file: enough variety, little memory


@dataclass
class PromptFile:
    """The file's requests, one per assistant turn of its first MAX_ROWS rows."""

    path: Path
    requests: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # each request's row's group (or file's)
    rows: int = 0
    agentic: int = 0

    def describe(self, natural: bool) -> dict[str, Any]:
        """What result.json says of the workload."""
        return {
            "prompts": "file",
            "natural_length": natural,
            "path": str(self.path),
            "rows": self.rows,
            "agentic_rows": self.agentic,
            "requests": len(self.requests),
            "requests_per_row": round(len(self.requests) / self.rows, 3) if self.rows else None,
        }


def read_prompt_file(path: Path, limit: int = MAX_ROWS) -> PromptFile:
    """The file checked with generate's reader (a bad row fails naming file, line and
    field), then its first `limit` rows turned into requests."""
    res = scan(path, limit=limit)
    pf = PromptFile(path)
    for row in iter_rows(path, res.todo, res.bad_lines, last_line=res.last_line):
        if isinstance(row, Row):
            pf.rows += 1
            pf.agentic += is_agentic(row.messages, row.tools)
            got = _requests(row)
            pf.requests += got
            pf.groups += [row.group or path.stem] * len(got)
    if not pf.requests:
        raise InputFileError(path, None, "empty: no rows with a prompt")
    return pf


# a row's params that run leaves out: each phase sets the output length itself
LENGTH_FIELDS = (*MAX_TOKENS_KEYS, "min_tokens", "ignore_eos", "n_predict")


def _requests(row: Row) -> list[tuple[str, list[dict[str, Any]], dict[str, Any]]]:
    """One request per assistant turn (and one for a row that ends waiting for one)."""
    extra = {k: v for k, v in row.params.items() if k not in LENGTH_FIELDS}
    if row.tools:
        extra["tools"] = row.tools
    msgs, out = row.messages, []
    for i, m in enumerate(msgs):
        last = i + 1 == len(msgs)
        if m["role"] == "assistant" and i and msgs[i - 1]["role"] != "assistant":
            out.append((f"{row.id}-t{len(out)}", [wire(t) for t in msgs[:i]], extra))
        elif last and m["role"] != "assistant":
            out.append((f"{row.id}-t{len(out)}", [wire(t) for t in msgs], extra))
    return out


class FileCycle:
    """An endless, deterministic stream of the file's requests (`PromptCycle`'s shape)."""

    def __init__(self, pf: PromptFile, prefix: str, max_tokens: int, params: dict[str, Any]):
        self.pf, self.prefix, self.max_tokens, self.params = pf, prefix, max_tokens, params
        self._n = count()

    def __iter__(self) -> FileCycle:
        return self

    def __next__(self) -> ChatRequest:
        i = next(self._n)
        j = i % len(self.pf.requests)
        name, messages, extra = self.pf.requests[j]
        params = merge(self.params, extra) if extra else dict(self.params)
        req = ChatRequest(f"{self.prefix}-{i}-{name}", messages, self.max_tokens, params)
        req.group = self.pf.groups[j]
        return req


def cycle_for(
    pf: PromptFile | None, prefix: str, max_tokens: int, params: dict[str, Any]
) -> Iterator[ChatRequest]:
    """A phase's requests: the file's, or the built-in prompts when there is none."""
    if pf is None:
        return PromptCycle(prefix, max_tokens, params)
    return FileCycle(pf, prefix, max_tokens, params)
