"""`inspect.json`: what one inspection found, as a versioned document (like result.json).

docs/inspect.md lists its fields. `build` turns a Scan into the document; `load_inspect`
is how the report reads one back, refusing files that are not inspections or are of a
newer schema with one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from genbench.errors import UsageError
from genbench.fmt import counted
from genbench.inspect.detect import BIT, DEFECTS, Thresholds
from genbench.inspect.distribution import describe, odd_servers
from genbench.inspect.scan import Scan
from genbench.run.result import document_head, has_schema, read_document

if TYPE_CHECKING:
    from genbench.plan import HiddenStates

SCHEMA = "genbench.inspect"
SCHEMA_VERSION = 1
INSPECT_FILE = "inspect.json"
DUP_METHOD = (
    "exact: 64-bit hash of the answer; near: the same after case folding and collapsing "
    "whitespace. MinHash/LSH (paraphrase-level near duplicates) was measured and left out: "
    "see docs/inspect.md"
)


@dataclass(frozen=True)
class Settings:
    """Everything a user can change about an inspection."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    server_alpha: float = 0.001
    server_effect: float = 0.1
    examples: int = 5
    hidden: HiddenStates | None = None

    def describe(self) -> dict[str, Any]:
        hidden = self.hidden
        return {
            **self.thresholds.describe(),
            "server_alpha": self.server_alpha,
            "server_effect": self.server_effect,
            "examples": self.examples,
            "hidden_size": hidden.hidden_size if hidden else None,
            "layers_captured": hidden.layers if hidden else None,
            "dtype_bytes": hidden.dtype_bytes if hidden else None,
        }


@dataclass
class Analysis:
    """The per-row arrays the clean copy needs once the document is built."""

    flags: np.ndarray  # defect bits per row, dup included
    first_of: np.ndarray  # for a duplicate: the index of the row it copies, else -1
    arrays: dict[str, np.ndarray]


def _share(a: dict[str, np.ndarray]) -> np.ndarray:
    """Thinking tokens / output tokens per row; NaN where the server did not say."""
    comp = a["completion"].astype(np.float64)
    reas = a["thinking"].astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = reas / comp
    share[(a["thinking"] < 0) | (a["completion"] <= 0)] = np.nan
    return share


def _group(a: dict[str, np.ndarray], share: np.ndarray, mask: np.ndarray | None) -> dict[str, Any]:
    def pick(x: np.ndarray) -> np.ndarray:
        return x if mask is None else x[mask]

    comp, reas = pick(a["completion"]), pick(a["thinking"])
    known = reas >= 0
    return {
        "rows": int(comp.size),
        "output_tokens": describe(comp, cdf=True),
        "thinking_tokens": describe(reas[known]),
        "answer_tokens": describe(comp[known] - reas[known]),
        "thinking_share": describe(pick(share), cdf=True),
        # rows whose counts genbench estimated (thinking the server did not count)
        "estimated_rows": int(pick(a["estimated"]).sum()),
    }


def _by(names: list[str], col: np.ndarray, fn: Any) -> dict[str, Any]:
    return {name: fn(col == i) for i, name in enumerate(names)}


def _defects(sc: Scan, a: dict[str, np.ndarray], flags: np.ndarray) -> dict[str, Any]:
    n = max(sc.rows, 1)
    out = {}
    for name in DEFECTS:
        hit = (flags & BIT[name]) != 0
        count = int(hit.sum())
        out[name] = {
            "rows": count,
            "share": count / n,
            "rule": DEFECTS[name].rule,
            "examples": [e.to_dict() for e in sc.examples[name]],
            "by_server": _counts(sc.servers, a["server"][hit]),
            "by_finish_reason": _counts(sc.finishes, a["finish"][hit]),
        }
    return out


def _counts(names: list[str], col: np.ndarray) -> dict[str, int]:
    c = np.bincount(col.astype(np.int64), minlength=len(names)) if col.size else []
    return {name: int(c[i]) for i, name in enumerate(names) if len(c) and c[i]}


def _servers(sc: Scan, a: dict[str, np.ndarray], share: np.ndarray, s: Settings) -> dict[str, Any]:
    out: dict[str, Any] = {
        "count": len(sc.servers),
        "alpha": s.server_alpha,
        "min_effect": s.server_effect,
        "test": "Mann-Whitney U, each server against the others' rows (normal approximation "
        "with tie correction); effect: rank-biserial r = 2U/(n1 n2) - 1",
        "tests": {},
        "odd": [],
        "notes": [],
    }
    if len(sc.servers) < 2:
        out["notes"].append("one server: nothing to compare")
        return out
    metrics = {"output_tokens": a["completion"].astype(np.float64), "thinking_share": share}
    for metric, values in metrics.items():
        first, named = odd_servers(values, a["server"], sc.servers, s.server_alpha, s.server_effect)
        out["tests"][metric] = first
        for t in named:
            i = sc.servers.index(t["server"])
            mine = values[(a["server"] == i) & ~np.isnan(values)]
            rest = values[(a["server"] != i) & ~np.isnan(values)]
            out["odd"].append(
                {
                    "server": t["server"],
                    "metric": metric,
                    "p": t["p"],
                    "effect": t["effect"],
                    "rows": t["rows"],
                    "median": float(np.median(mine)),
                    "median_others": float(np.median(rest)) if rest.size else None,
                    "pair": bool(t.get("pair")),
                }
            )
        if any(t.get("pair") for t in named):
            out["notes"].append(
                f"{metric}: two servers differ; with two a difference cannot be pinned on one, "
                "so both are named"
            )
    small = [n for i, n in enumerate(sc.servers) if int((a["server"] == i).sum()) < 20]
    if small:
        out["notes"].append(f"not compared (fewer than 20 rows): {', '.join(small)}")
    return out


def storage(
    sc: Scan, a: dict[str, np.ndarray], mask: np.ndarray | None, hidden: HiddenStates | None
) -> dict[str, Any]:
    """Bytes of the set (measured) and of its hidden states, with plan's arithmetic: the
    rows' own bytes per row and prompt + output tokens, through plan's StorageModel."""
    from genbench.plan import StorageModel, parquet_bytes_per_row  # plan's imports are heavy
    from genbench.rows import turn_ids

    def pick(x: np.ndarray) -> np.ndarray:
        return x if mask is None else x[mask]

    rows = int(pick(a["completion"]).size)
    if rows == 0:
        return {"rows": 0}
    jsonl_files = [f for f in sc.files if f.kind == "jsonl"]
    parquet_files = [f for f in sc.files if f.kind == "parquet"]
    jsonl_bps = float(pick(a["nbytes"]).sum()) / rows
    if parquet_files and not jsonl_files:
        pq_rows = sum(f.rows for f in parquet_files)
        parquet_bps: float | None = sum(f.bytes for f in parquet_files) / max(pq_rows, 1)
        basis = (
            "Parquet: the files' bytes per row; JSONL: each row as generate writes it "
            "(re-serialised); hidden-state tokens: prompt + output tokens of every row"
        )
    else:
        parquet_bps = parquet_bytes_per_row(sc.sample)
        basis = (
            "JSONL: the rows' own line bytes; Parquet: "
            + (
                f"{counted(len(sc.sample), 'row')} sampled and written as generate does (zstd)"
                if parquet_bps
                else "not measured (needs pyarrow)"
            )
            + "; hidden-state tokens: prompt + output tokens of every row"
        )
    if any(t.generated is not None for r in sc.sample for t in turn_ids(r)):
        basis += "; the rows' token ids (prompt and generated) are in their bytes"
    prompt = pick(a["prompt"])
    output = int(pick(a["completion"]).sum())
    prompt_tokens = int(prompt[prompt >= 0].sum())
    model = StorageModel(jsonl_bps, parquet_bps, basis, hidden)
    out = {
        "rows": rows,
        "tokens": {
            "output": output,
            "prompt": prompt_tokens,
            "hidden_state": output + prompt_tokens,
        },
        **model.row(rows, output + prompt_tokens),
        "basis": basis,
    }
    if (prompt < 0).any():
        out["note"] = f"{int((prompt < 0).sum()):,} rows have no prompt_tokens: counted as 0"
    return out


def build(source: Path, sc: Scan, s: Settings) -> tuple[dict[str, Any], Analysis]:
    a = sc.cols.arrays()
    dups = sc.mark_duplicates(a, s.examples)
    flags = a["flags"]
    share = _share(a)
    doc: dict[str, Any] = {
        **document_head(SCHEMA, SCHEMA_VERSION, created_first=True),
        "source": {
            "path": str(source),
            "files": [
                {"name": f.path.name, "kind": f.kind, "rows": f.rows, "bytes": f.bytes}
                for f in sc.files
            ],
            "notes": [note for f in sc.files for note in f.notes],
        },
        "settings": s.describe(),
        "rows": sc.rows,
        "repeated_ids": sc.ids.repeated(s.examples),
        "rows_with_defects": int((flags != 0).sum()),
        "distributions": {
            "overall": _group(a, share, None),
            "by_server": _by(sc.servers, a["server"], lambda m: _group(a, share, m)),
            "by_finish_reason": _by(sc.finishes, a["finish"], lambda m: _group(a, share, m)),
        },
        "defects": _defects(sc, a, flags),
        "duplicates": {k: v for k, v in dups.items() if k != "first_of"} | {"method": DUP_METHOD},
        "servers": _servers(sc, a, share, s),
        "storage": storage(sc, a, None, s.hidden),
        "fidelity": sc.fidelity.describe() if sc.fidelity is not None else None,
    }
    if sc.tools.rows:
        doc["tools"] = sc.tools.to_dict()
    if sc.accept.rows:
        doc["acceptance"] = sc.accept.to_dict() | {"of": sc.rows}
    return doc, Analysis(flags, dups["first_of"], a)


def inspect_path(path: str | Path) -> Path:
    """Accept an inspect.json or a directory holding one."""
    p = Path(path)
    return p / INSPECT_FILE if p.is_dir() else p


def is_inspection(path: str | Path) -> bool:
    """Is this (a directory with) an inspect.json rather than a run's result.json?"""
    return has_schema(path, INSPECT_FILE, SCHEMA)


def load_inspect(path: str | Path) -> dict[str, Any]:
    p = inspect_path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such file or inspect directory")
    return read_document(p, SCHEMA, SCHEMA_VERSION, "inspection")
