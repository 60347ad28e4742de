"""`genbench export` on the console: what was written, what was left out and why, and
what to give the trainer."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from genbench.export.formats import SPECFORGE, SPECULATORS, TOKEN_EXACT, TOKENS

# what to give the trainer, per format
GIVE = {
    TOKENS: "SpecForge: data.prompts_path: {out}",
    SPECFORGE: "SpecForge: data.train_data_path: {out} (it re-tokenizes the text)",
    SPECULATORS: "speculators: scripts/prepare_data.py --data {out} --model TARGET --output DIR",
}
# SpecForge's data.max_length when a config does not set it: longer samples are cut
SPECFORGE_MAX_LENGTH = 2048


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
    fmt, rules = doc["format"], doc["rules"]
    unit = "samples" if fmt in TOKEN_EXACT else "conversations"
    console.print(
        f"[bold]genbench export[/] {', '.join(doc['source']['paths'])}: {doc['rows']:,} rows, "
        f"{doc['turns']:,} generated turns -> {doc['written']:,} {unit} "
        f"({doc['turns_written']:,} turns) in {doc['out']} ({fmt})"
    )
    for note in doc["source"]["notes"]:
        console.print(f"[yellow]note:[/] {note}")
    console.print(f"left out: {_reasons(doc['left_out'], rules['min_tokens'])}")
    if doc["written"] == 0:
        console.print(
            "[yellow]note:[/] nothing written: every generated turn was left out (see above; "
            "--keep-cut and --min-tokens change the rules)"
        )
    counted = {k: v for k, v in doc["counted"].items() if v}
    cut_rule = "kept (--keep-cut)" if rules["keep_cut"] else "left out"
    console.print(
        f"counted: {_reasons(counted, rules['min_tokens'])} "
        f"(cut turns {cut_rule}; --min-tokens {rules['min_tokens']})"
    )
    if fmt in TOKEN_EXACT:
        ids = doc["ids"]
        console.print(
            f"ids: {ids['written']:,} written, {ids['supervised']:,} supervised; the longest "
            f"sample has {ids['longest_sample']:,}"
        )
        if fmt == TOKENS and ids["longest_sample"] > SPECFORGE_MAX_LENGTH:
            console.print(
                f"[yellow]note:[/] SpecForge cuts samples at data.max_length "
                f"({SPECFORGE_MAX_LENGTH:,} unless set): set it to "
                f"{ids['longest_sample']:,} to train on every id"
            )
    else:
        sy = doc["system"]
        console.print(
            f"system turn: {sy['sent']:,} as sent, {sy['empty']:,} none sent (an empty one "
            f"written), {sy['none']:,} none sent (SpecForge adds its template's own)"
        )
        if doc["history_turns"]:
            console.print(
                f"[yellow]note:[/] {doc['history_turns']:,} assistant turns came from the input, "
                "not the server (--turns last): set SpecForge's data.train_only_last_turn"
            )
    console.print(GIVE[fmt].format(out=doc["out"]), soft_wrap=True)
    console.print(f"summary: {doc['summary']}")
