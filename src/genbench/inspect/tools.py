"""Tool calls in a generated data set: how many each row made, and the rows a trainer
should look at before it learns from their calls.

Per row (an agentic row: one with `tools`, a call in its turns or generate's `tool_*`
meta): the calls the target generated (`meta.tool_calls`; a data set without it, every
call in its assistant turns), and whether

  * a call's arguments do not parse as a JSON object (`bad_arguments`: cut by
    max_tokens mid-call, or a model that writes broken JSON);
  * the original's results ran out before the target stopped calling
    (`results_ran_out`, generate's `meta.tool_results_ran_out`: the row ends in a call);
  * the row ends in a call cut by max_tokens, left unanswered (`call_cut`, generate's
    `meta.tool_call_cut`);
  * a call names a function the row's `tools` does not declare (`undeclared`);
  * the target called other functions than the original did, in order (`names_differ`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from genbench.fmt import counted
from genbench.generate.input.tools import arguments_parse, declared
from genbench.rows import RowMeta

KINDS = ("bad_arguments", "results_ran_out", "call_cut", "undeclared", "names_differ")


@dataclass
class ToolTally:
    rows: int = 0  # agentic rows
    calls: int = 0  # calls the target generated, over all rows
    call_turns: int = 0
    per_row: Counter[int] = field(default_factory=Counter)  # calls in a row -> rows
    counts: Counter[str] = field(default_factory=Counter)  # KINDS -> rows
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    max_examples: int = 5

    def add(self, obj: dict[str, Any], rid: str | int, file: str, line: int) -> None:
        """One row (as decoded): counted when it is agentic."""
        meta, raw = RowMeta.of(obj), obj.get("meta")
        calls = [
            c
            for t in obj.get("conversations") or ()
            if isinstance(t, dict) and t.get("role") == "assistant"
            for c in t.get("tool_calls") or ()
        ]
        tools = _tools(obj.get("tools"))
        # the key held, even null (a Parquet row holds every key)
        if not calls and tools is None and not (isinstance(raw, dict) and "tool_calls" in raw):
            return
        self.rows += 1
        made = meta.tool_calls if meta.tool_calls is not None else len(calls)
        self.calls += made
        self.call_turns += meta.tool_call_turns or 0
        self.per_row[made] += 1
        found: list[tuple[str, str]] = []
        if calls and not arguments_parse(calls):
            found.append(("bad_arguments", "a call's arguments are not a JSON object"))
        if meta.tool_results_ran_out:
            found.append(("results_ran_out", f"the results ran out after {_calls(made)}"))
        if meta.tool_call_cut:
            found.append(("call_cut", f"its last call (of {_calls(made)}) was cut by max_tokens"))
        if tools is not None:
            names = sorted({_name(c) for c in calls} - declared(tools) - {None})
            if names:
                found.append(("undeclared", f"calls {', '.join(names)}, not in its tools"))
        if meta.tool_names_differ:
            found.append(("names_differ", "called other functions than the original"))
        for kind, detail in found:
            self.counts[kind] += 1
            ex = self.examples.setdefault(kind, [])
            if len(ex) < self.max_examples:
                ex.append({"id": rid, "file": file, "line": line, "detail": detail})

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "calls": self.calls,
            "call_turns": self.call_turns,
            "calls_per_row": {str(k): v for k, v in sorted(self.per_row.items())},
            **{k: self.counts.get(k, 0) for k in KINDS},
            "examples": self.examples,
        }


def _calls(n: int) -> str:
    return counted(n, "call")


def _tools(raw: Any) -> list[dict[str, Any]] | None:
    """The row's tools: a list, or the JSON text a Parquet file holds."""
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(raw, list):
        return None
    return [t for t in raw if isinstance(t, dict) and isinstance(t.get("function"), dict)]


def _name(c: Any) -> str | None:
    fn = c.get("function") if isinstance(c, dict) else None
    return fn.get("name") if isinstance(fn, dict) else None
