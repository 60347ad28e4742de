"""`genbench export`: a generated set as the file a drafter trainer reads (docs/generate.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from genbench.commands import common
from genbench.commands.console import err, out, reading
from genbench.errors import UsageError
from genbench.export import Rules, default_out, export_data
from genbench.export.formats import choices_help, get
from genbench.export.render import print_export
from genbench.export.samples import DEFAULT_MIN_TOKENS
from genbench.export.specforge import TOKENS


def export_cmd(
    sources: list[Path] = typer.Argument(
        ...,
        metavar="SOURCE",
        help="A genbench generate output directory, or one of its JSONL/Parquet files; "
        "several go into one file, in order.",
    ),
    fmt: str = typer.Option(
        TOKENS,
        "--format",
        metavar="FORMAT",
        help=choices_help(),
    ),
    out_file: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        metavar="FILE",
        help="File to write. [default: SOURCE.FORMAT.jsonl beside the first SOURCE]",
    ),
    keep_cut: bool = typer.Option(
        False, "--keep-cut", help="Keep turns cut by max_tokens (finish length); left out else."
    ),
    min_tokens: int = typer.Option(
        DEFAULT_MIN_TOKENS,
        "--min-turn-tokens",
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
    chosen = get(fmt)  # one of the formats registered (export/formats.py)
    if min_tokens < 0:
        raise UsageError(f"--min-turn-tokens must be 0 or more, got {min_tokens}")
    if chosen.directory is not None:  # a directory: the hidden states (export/states.py)
        target = out_file or default_out(sources[0], fmt).with_suffix("")
        doc = chosen.directory(sources[0], target, Rules(keep_cut=keep_cut, min_tokens=min_tokens))
        said = (f"{doc['samples']} samples with their hidden states (layers {doc['layers']}, "
                f"{doc['numbering']}) -> {doc['out']}")  # fmt: skip
        (err if json else out).print(said, markup=False, highlight=False)
        if json:
            common.print_json(doc)
        return
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
