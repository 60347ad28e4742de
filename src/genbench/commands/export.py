"""`genbench export`: a generated set as the file a drafter trainer reads (docs/generate.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from genbench.commands import common
from genbench.commands.console import err, out, reading
from genbench.errors import UsageError
from genbench.export import FORMATS, Rules, default_out, export_data
from genbench.export.formats import TOKENS
from genbench.export.render import print_export
from genbench.export.samples import DEFAULT_MIN_TOKENS
from genbench.export.states import STATE_FORMATS, export_states


def export_cmd(
    sources: list[Path] = typer.Argument(
        ...,
        help="A genbench generate output directory, or one of its JSONL/Parquet files; "
        "several go into one file, in order.",
    ),
    fmt: str = typer.Option(
        TOKENS,
        "--format",
        help="specforge-tokens (SpecForge's pre-tokenized rows: the ids the server generated), "
        "specforge (its conversations file, re-tokenized by the trainer), speculators "
        "(vllm-project/speculators' rows); with the hidden states (generate --hidden-states), "
        "into a directory: speculators-states or specforge-states (docs/hidden-states.md).",
    ),
    out_file: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="File to write. [default: SOURCE.FORMAT.jsonl beside the first SOURCE]",
    ),
    keep_cut: bool = typer.Option(
        False, "--keep-cut", help="Keep turns cut by max_tokens (finish length); left out else."
    ),
    min_tokens: int = typer.Option(
        DEFAULT_MIN_TOKENS,
        "--min-tokens",
        help="Turns with fewer generated tokens are short and left out (0 keeps them).",
    ),
    empty_system: bool = typer.Option(
        True,
        "--empty-system/--no-empty-system",
        help="specforge: a row sent without a system turn gets an empty one, so SpecForge "
        "adds none of its own.",
    ),
    json: bool = common.JSON,
) -> None:
    """Write a generated set as one file a drafter trainer reads: SpecForge's token rows or
    conversations, or speculators' rows; cut and short turns left out and counted."""
    if min_tokens < 0:
        raise UsageError(f"--min-tokens must be 0 or more, got {min_tokens}")
    if fmt in STATE_FORMATS:  # a directory of the hidden states (export/states.py)
        doc = export_states(sources[0], fmt, out_file or default_out(sources[0], fmt).with_suffix(
            ""), Rules(keep_cut=keep_cut, min_tokens=min_tokens))  # fmt: skip
        said = (f"{doc['samples']} samples with their hidden states (layers {doc['layers']}, "
                f"{doc['numbering']}) -> {doc['out']}")  # fmt: skip
        (err if json else out).print(said, markup=False, highlight=False)
        if json:
            common.print_json(doc)
        return
    if fmt not in FORMATS:
        every = (*FORMATS, *STATE_FORMATS)
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(every)}")
    target = out_file or default_out(sources[0], fmt)
    source = sources if len(sources) > 1 else sources[0]
    where = ", ".join(map(str, sources))
    rules = Rules(keep_cut=keep_cut, min_tokens=min_tokens)
    doc = reading(where, lambda progress: export_data(
        source, fmt, target, rules, empty_system=empty_system, progress=progress
    ))  # fmt: skip
    print_export(doc, err if json else out)
    if json:
        common.print_json(doc)
