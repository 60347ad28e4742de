"""The hidden states of a generate output (`generate --hidden-states` or `genbench
hidden-states`), each generated turn's file checked as it was when it was taken
(generate/hidden.py: whole, the turn's ids, the layers asked, finite), and their bytes held
to the forecast `plan` makes from the hidden size and the layers (docs/hidden-states.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from genbench.generate.hidden import Capture, StatesProblem
from genbench.generate.store.layout import Layout
from genbench.inspect.reader import FileStats, data_files, kind_of, read_rows
from genbench.rows import turn_ids
from genbench.tensors import FP8_SCALE_BYTES

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
EXAMPLES = 5
ID_BYTES = 8  # each file's token_ids, int64


def check_states(path: Path) -> dict[str, Any] | None:
    """What the directory's states are (None: it has none): every turn's file checked, the
    bytes against `tokens × (layers × hidden × dtype bytes + 8)` (FP8: + 4 for the scale),
    the 8 its token id."""
    lay = Layout(path)
    if not path.is_dir() or not lay.layers_file.is_file():
        return None
    info = json.loads(lay.layers_file.read_text(encoding="utf-8"))
    layers = list(info.get("layers") or [])
    cap = Capture(lay, layers)
    found: Counter[str] = Counter()
    examples: list[str] = []
    tokens = nbytes = 0
    for f in data_files(path):
        for _, _row, obj in read_rows(f, FileStats(f, kind_of(f))):
            for t in turn_ids(obj):
                name = t.states or lay.states_name(obj.get("id"), t.turn)
                file = path / name
                found["turns"] += 1
                if not file.exists():
                    found["missing"] += 1
                    continue
                if t.prompt is None or t.generated is None:
                    found["no_ids"] += 1
                    continue
                ids = (t.prompt + t.generated)[:-1]
                try:
                    cap._check(file, ids)
                except StatesProblem as e:
                    found["bad"] += 1
                    if len(examples) < EXAMPLES:
                        examples.append(f"{obj.get('id')}#{t.turn}: {e}")
                    continue
                found["ok"] += 1
                tokens += len(ids)
                nbytes += file.stat().st_size
    per_token = len(layers) * (cap.hidden or 0) * DTYPE_BYTES.get(cap.dtype or "", 0)
    if cap.dtype == "F8_E4M3" and per_token:  # hs-connectors' FP8: a float32 scale a token
        per_token += FP8_SCALE_BYTES
    if per_token:  # and each token's id (int64): 0.8% of an FP8 file of a 256-wide model
        per_token += ID_BYTES
    forecast = tokens * per_token
    return {
        "layers": layers, "numbering": info.get("numbering"), "model": info.get("model"),
        "hidden_size": cap.hidden, "dtype": cap.dtype,
        "turns": found["turns"], "ok": found["ok"], "missing": found["missing"],
        "bad": found["bad"], "no_ids": found["no_ids"], "examples": examples,
        "tokens": tokens, "bytes": nbytes, "bytes_per_token": per_token,
        "forecast_bytes": forecast,
        "off_by": None if not forecast else round(nbytes / forecast - 1, 4),
    }  # fmt: skip
