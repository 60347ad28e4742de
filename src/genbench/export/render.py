"""`genbench export` on the console: what was written, what was left out and why, and
what to give the trainer."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from genbench.export.checks import Repeats
from genbench.export.formats import FORMATS
from genbench.fmt import counted as _n  # `1 row`, `2 rows`


def _reasons(counts: dict[str, int], min_tokens: int) -> str:
    label = {
        "no_ids": "without ids (the server gave none)",
        "mismatch": "whose ids disagree with the server's counts",
        "cut": "cut by max_tokens",
        "short": f"shorter than {min_tokens} tokens",
        "after_left_out": "after a turn left out",
    }
    parts = [f"{n:,} {label[k]}" for k, n in counts.items() if n]
    return ", ".join(parts) or "none"


def print_export(doc: dict[str, Any], console: Console) -> None:
    """What was written, what was left out and why, and what to give the trainer."""
    fmt = FORMATS[doc["format"]]
    unit = "sample" if fmt.token_exact else "conversation"
    console.print(
        f"[bold]genbench export[/] {', '.join(doc['source']['paths'])}: "
        f"{_n(doc['rows'], 'row')}, {_n(doc['turns'], 'generated turn')} -> "
        f"{_n(doc['written'], unit)} ({_n(doc['turns_written'], 'turn')}) in {doc['out']} "
        f"({fmt.name})"
    )
    for note in doc["source"]["notes"]:
        console.print(f"[yellow]note:[/] {note}")
    repeated = Repeats(rows=doc["repeated"]["rows"], examples=doc["repeated"]["examples"])
    if repeated.line():
        console.print(f"[yellow]note:[/] {repeated.line()}")
    console.print(_left_out_and_kept(doc), markup=False, highlight=False)
    if fmt.token_exact:
        ids = doc["ids"]
        console.print(
            f"ids: {ids['written']:,} written, {ids['supervised']:,} supervised; the longest "
            f"sample has {ids['longest_sample']:,}"
        )
        if ids.get("unchecked_samples"):
            console.print(
                f"[yellow]note:[/] {_n(ids['unchecked_samples'], 'sample')} written with ids no "
                "usage checked (meta.token_ids unchecked: the server sent no usage); inspect "
                "--url round-trips them through its tokenizer"
            )
        if fmt.max_length is not None and ids["longest_sample"] > fmt.max_length:
            note = fmt.too_long.format(max=fmt.max_length, longest=ids["longest_sample"])
            console.print(f"[yellow]note:[/] {note}")
    else:
        sy = doc["system"]
        console.print(
            f"system turn: {sy['sent']:,} as sent, {sy['empty']:,} none sent (an empty one "
            f"written), {sy['none']:,} none sent (SpecForge adds its template's own)"
        )
        if doc["history_turns"]:
            console.print(f"[yellow]note:[/] {_history(doc)}")
    console.print(fmt.give.format(out=doc["out"]), soft_wrap=True)
    console.print(f"summary: {doc['summary']}")


def _left_out_and_kept(doc: dict[str, Any]) -> str:
    """Each turn a rule applies to, said once: left out (by the first rule, with the flag
    that keeps it), or written all the same and why. `counted` in the summary is the two
    together, so it is not printed beside them: the same turns would be read twice."""
    left, kept, min_tokens = doc["left_out"], doc.get("kept", {}), doc["rules"]["min_tokens"]
    line = f"left out: {_reasons(left, min_tokens)}"
    keeps = ["--keep-cut"] if left.get("cut") else []
    keeps += ["--min-turn-tokens 0"] if left.get("short") else []
    if keeps:
        line += f" ({' and '.join(keeps)} keep{'s' if len(keeps) == 1 else ''} them)"
    why = {"cut": "--keep-cut", "no_ids": "the text needs none", "mismatch": "the text is kept"}
    said = [f"{_reasons({k: n}, min_tokens)} ({why.get(k, '')})" for k, n in kept.items() if n]
    if said:
        line += f"; written all the same: {', '.join(said)}"
    return line


def _history(doc: dict[str, Any]) -> str:
    """Where the assistant turns genbench did not generate came from, by cause."""
    by = doc.get("history_by_cause") or {"turns_last": doc["history_turns"]}
    causes = []
    if by.get("tool_policy_keep"):
        causes.append(f"{_n(by['tool_policy_keep'], 'original tool call')} (--tool-policy keep)")
    if by.get("turns_last"):
        causes.append(f"{_n(by['turns_last'], 'earlier turn')} kept as written (--turns last)")
    n = doc["history_turns"]
    return (
        f"{_n(n, 'assistant turn')} came from the input, not the server: {', '.join(causes)}; "
        "SpecForge supervises every assistant turn unless data.train_only_last_turn is set"
    )
