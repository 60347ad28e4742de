"""vllm-project/speculators' "speculator format" (what its response-regeneration script
writes and `speculators prepare-data --data` passes through): SpecForge's pre-tokenized
sample, plus `primary_id` (the row) and `metadata`."""

from __future__ import annotations

import orjson

from genbench.export.formats import Format, register
from genbench.export.samples import Sample
from genbench.rows import RowMeta

SPECULATORS = "speculators"


def speculators_line(s: Sample, meta: RowMeta) -> bytes:
    """A speculators-format row; `metadata` keeps one type per field, for a datasets column."""
    info = {"turn": s.turn, "finish_reason": s.finish_reason, "server": meta.server or "",
            "model": meta.model or ""}  # fmt: skip
    row = {"id": s.id, "primary_id": str(s.row_id), **s.ids(), "metadata": info}
    return orjson.dumps(row) + b"\n"


register(Format(
    SPECULATORS, "vllm-project/speculators' rows",
    "speculators: speculators prepare-data --data {out} --model TARGET --output DIR",
    sample=speculators_line,
))  # fmt: skip
