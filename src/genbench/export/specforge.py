"""SpecForge's two files.

* `specforge-tokens`: its pre-tokenized rows (`data.prompts_path`): one line per generated
  turn, `input_ids` = the prompt ids the server saw + the ids it generated, `loss_mask` 0
  over the prompt and 1 over the generated ids, `id` = `ROW#TURN`.
* `specforge`: its conversations file (`data.train_data_path`): one line per row, `id` and
  `conversations` only (every other column would reach the chat template as a keyword; an
  agentic row's `tools` does, as the template's `tools`), the system turn made explicit, the
  thinking as `reasoning_content`, a call's `tool_calls` and a result's `tool_call_id` kept.
  The trainer re-tokenizes it; the token formats are what the target generated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from genbench.export.formats import Format, TextRow, register
from genbench.export.samples import Sample
from genbench.rows import RowMeta

TOKENS, SPECFORGE = "specforge-tokens", "specforge"
MAX_LENGTH = 2048  # SpecForge's data.max_length when a config does not set it


def token_line(s: Sample, meta: RowMeta) -> bytes:
    """A SpecForge pre-tokenized row."""
    return orjson.dumps({"id": s.id, **s.ids()}) + b"\n"


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    out = {"role": m.get("role"), "content": m.get("content") or ""}
    if m.get("role") == "assistant" and m.get("reasoning_content"):
        out["reasoning_content"] = m["reasoning_content"]
    for key in ("tool_calls", "tool_call_id", "name"):  # an agentic row's calls and results
        if m.get(key):
            out[key] = m[key]
    return out


def text_row(
    row: Mapping[str, Any], samples: list[Sample], left: set[int], empty_system: bool
) -> TextRow:
    """The row as a SpecForge conversation, cut before its first generated turn that is left
    out (`left`: those turns' indices; a later turn's prompt held it, so it cannot stay)."""
    conv = [m for m in row.get("conversations") or [] if isinstance(m, Mapping)]
    stop = min(left) if left else len(conv)
    keep = conv[:stop]
    while keep and keep[-1].get("role") != "assistant":
        keep.pop()  # a question whose answer is left out teaches nothing
    generated = {s.turn for s in samples}
    turns = sum(1 for i in range(len(keep)) if i in generated)
    if turns == 0:
        return TextRow(None, 0, "none", 0)
    past = [m for i, m in enumerate(keep) if m.get("role") == "assistant" and i not in generated]
    keep_policy = RowMeta.of(row).tool_policy == "keep"
    kept_calls = sum(1 for m in past if m.get("tool_calls")) if keep_policy else 0
    msgs = [_message(m) for m in keep]
    system = "sent" if msgs[0]["role"] == "system" else "none"
    if system == "none" and empty_system:
        msgs.insert(0, {"role": "system", "content": ""})
        system = "empty"
    out: dict[str, Any] = {"id": str(row.get("id")), "conversations": msgs}
    tools = row.get("tools")
    if tools:  # the template's `tools` keyword: an agentic row's schema (Parquet: its text)
        out["tools"] = orjson.loads(tools) if isinstance(tools, str) else tools
    return TextRow(orjson.dumps(out) + b"\n", turns, system, len(past), kept_calls)


register(Format(
    TOKENS, "SpecForge's pre-tokenized rows: the ids the server generated",
    "SpecForge: data.prompts_path: {out}", sample=token_line, max_length=MAX_LENGTH,
    too_long="SpecForge cuts samples at data.max_length ({max:,} unless set): set it to "
    "{longest:,} to train on every id",
))  # fmt: skip
register(Format(
    SPECFORGE, "its conversations file, re-tokenized by the trainer",
    "SpecForge: data.train_data_path: {out} (it re-tokenizes the text)", row=text_row,
))  # fmt: skip
