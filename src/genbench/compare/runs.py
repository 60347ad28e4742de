"""Runs as compare and report read them: result.json, its requests.jsonl, labels, colours.

Both commands take run directories or result.json paths given by a person, so
loading goes through `load_result` (one-line errors for a missing file, a file
that is not a genbench result, a newer schema) and a damaged requests.jsonl is
reported the same way instead of as a traceback. Records are optional: a
result copied without its requests.jsonl still compares and reports, with less.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson

from genbench.errors import UsageError
from genbench.records import RequestRecord, read_records
from genbench.run.result import REQUESTS_FILE, load_result, repeat_dirs

# Tableau 10: distinct, colour-blind tolerant, readable on white. Run i always gets colour i.
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#9c755f",
    "#ff9da7",
    "#bab0ac",
)

# What makes two runs measure the same thing. Concurrency levels and request counts may
# differ (compare shows what both have); these may not, or the numbers answer different
# questions.
WORKLOAD_FIELDS: tuple[tuple[str, str], ...] = (
    ("config", "lengths"),
    ("config", "sweep_tokens"),
    ("config", "natural"),
    ("workload", "prompts"),
    ("workload", "prompt_names"),
    ("workload", "natural_length"),
    ("workload", "path"),  # run --input FILE: the file, and the requests read from it
    ("workload", "requests"),
)


@dataclass
class Run:
    """One loaded run: its result document, a short label and a colour."""

    doc: dict[str, Any]
    path: Path  # the result.json
    label: str = ""
    color: str = PALETTE[0]
    _records: list[RequestRecord] | None = field(default=None, repr=False)
    # A side of a comparison may be several repeats of one measurement: the first repeat
    # stands for the side (its label, colour, timelines) and lists them all here.
    repeats: list[Run] = field(default_factory=list, repr=False)
    source: Path | None = None  # the side as given, when it is not this run's directory

    @property
    def repeat_runs(self) -> list[Run]:
        """Every repeat of the side this run stands for; just itself for a single run."""
        return self.repeats or [self]

    @property
    def dir(self) -> Path:
        return self.path.parent

    @property
    def phases(self) -> list[dict[str, Any]]:
        return [p for p in self.doc.get("phases") or [] if isinstance(p, dict)]

    def phase(self, name: str) -> dict[str, Any] | None:
        return next((p for p in self.phases if p.get("name") == name), None)

    def kind(self, kind: str) -> list[dict[str, Any]]:
        """Phases of one kind (single, burst, sustained), in the order they ran."""
        return [p for p in self.phases if p.get("kind") == kind]

    def sweep_phase(self, kind: str, concurrency: int) -> dict[str, Any] | None:
        return next((p for p in self.kind(kind) if p.get("concurrency") == concurrency), None)

    def single_phase(self, length: int) -> dict[str, Any] | None:
        return next((p for p in self.kind("single") if p.get("max_tokens") == length), None)

    @property
    def has_records(self) -> bool:
        return (self.dir / REQUESTS_FILE).exists()

    @cached_property
    def records_by_phase(self) -> dict[str, list[RequestRecord]]:
        """Records of requests.jsonl grouped by phase name; empty when the file is absent."""
        p = self.dir / REQUESTS_FILE
        if not p.exists():
            return {}
        try:
            recs = read_records(p)
        except (orjson.JSONDecodeError, TypeError) as e:
            raise UsageError(f"{p}: not a genbench requests file ({e})") from None
        except OSError as e:
            raise UsageError(f"{p}: cannot read it ({e.strerror or e})") from None
        out: dict[str, list[RequestRecord]] = defaultdict(list)
        for r in recs:
            out[r.phase].append(r)
        return dict(out)

    def records(self, phase_name: str) -> list[RequestRecord]:
        return self.records_by_phase.get(phase_name, [])

    @property
    def model(self) -> str:
        return str((self.doc.get("target") or {}).get("model") or "?")

    @property
    def server(self) -> str:
        s = (self.doc.get("target") or {}).get("server") or {}
        return " ".join(str(x) for x in (s.get("kind"), s.get("version")) if x) or "unknown server"

    @property
    def plan(self) -> Any | None:
        """The forecast written next to the result (plan.json), when there is one."""
        p = self.dir / "plan.json"
        if not p.exists():
            return None
        try:
            return orjson.loads(p.read_bytes())
        except (orjson.JSONDecodeError, OSError):
            return None


def load_sides(specs: list[str] | list[Path]) -> list[Run]:
    """One Run per side, standing for all of the side's repeats (`Run.repeats`).

    A side is a run directory or result.json; a directory of repeats (`repeat-1`,
    `repeat-2`, ... as `run --repeat` writes them); or several of those joined by commas.
    Sides are labelled by their directory name (a comma list by what its names share) and
    coloured by position; a side's repeats take its colour and its label with their index."""
    sides: list[Run] = []
    for i, spec in enumerate(specs):
        paths = _side_paths(str(spec))
        runs = [Run(doc, Path(doc.pop("_path"))) for doc in map(load_result, paths)]
        first = runs[0]
        first.color = PALETTE[i % len(PALETTE)]
        if len(runs) > 1 or len(paths) > 1 or Path(spec) != Path(paths[0]):
            first.repeats = runs
            first.source = Path(spec)
        first.label = _side_label(str(spec), runs)
        for k, r in enumerate(runs[1:], start=2):
            r.color, r.label = first.color, f"{first.label} r{k}"
        sides.append(first)
    seen: dict[str, int] = {}
    for side in sides:
        base = side.label
        seen[base] = seen.get(base, 0) + 1
        if seen[base] > 1:
            side.label = f"{base}#{seen[base]}"
            for k, r in enumerate(side.repeats[1:], start=2):
                r.label = f"{side.label} r{k}"
    return sides


def _side_paths(spec: str) -> list[Path]:
    """The run directories (or result.json files) of one side."""
    parts = [spec] if Path(spec).exists() or "," not in spec else spec.split(",")
    out: list[Path] = []
    for part in (p.strip() for p in parts):
        if not part:
            raise UsageError(f"{spec!r}: an empty name in a comma-separated side")
        out.extend(repeat_dirs(part) or [Path(part)])
    return out


def _side_label(spec: str, runs: list[Run]) -> str:
    """A directory of repeats: its name; a comma list: what its names share (`fast-1,fast-2`
    is `fast`; repeats of one directory its name), else the first name with `+N`; a single
    run: its directory name (`a r2` for a repeat, OUT/a/repeat-2)."""
    if len(runs) > 1 and "," in spec and not Path(spec).exists():
        parents = {r.dir.parent.resolve() for r in runs}
        if all(_repeat_index(r.dir) for r in runs) and len(parents) == 1:
            return parents.pop().name
        names = [_dir_label(r.dir) for r in runs]
        common = os.path.commonprefix(names).rstrip("-_.#0123456789 ")
        return common or f"{names[0]}+{len(names) - 1}"
    if repeat_dirs(spec):
        return Path(spec).resolve().name or str(spec)
    return _dir_label(runs[0].dir)


def _repeat_index(d: Path) -> int | None:
    index = d.name.removeprefix("repeat-")
    return int(index) if d.name.startswith("repeat-") and index.isdigit() else None


def _dir_label(d: Path) -> str:
    """A run's directory name; a repeat's is its side's and its index: `a r2`."""
    k = _repeat_index(d)
    if k is not None:
        return f"{d.resolve().parent.name} r{k}"
    return d.name or str(d)


def _get(doc: dict[str, Any], section: str, key: str) -> Any:
    return (doc.get(section) or {}).get(key)


def workload_differences(runs: list[Run]) -> list[str]:
    """What differs between each run and the first, as short phrases ('' when nothing)."""
    base = runs[0]
    diffs = []
    for run in runs[1:]:
        for section, key in WORKLOAD_FIELDS:
            a, b = _get(base.doc, section, key), _get(run.doc, section, key)
            if a != b:
                diffs.append(
                    f"{section}.{key} {_show(a)} in {base.label} vs {_show(b)} in {run.label}"
                )
    return diffs


def _show(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ",".join(str(x) for x in v) + "]"
    return str(v).lower() if isinstance(v, bool) else str(v)


def concurrencies(runs: list[Run], kind: str) -> list[int]:
    """Concurrency levels of `kind` phases found in any run, ascending."""
    return sorted(
        {int(p["concurrency"]) for r in runs for p in r.kind(kind) if p.get("concurrency")}
    )


def lengths(runs: list[Run]) -> list[int]:
    return sorted({int(p["max_tokens"]) for r in runs for p in r.kind("single")})
