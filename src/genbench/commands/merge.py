"""`genbench merge`: every shard of an output directory read whole and proved, or merged
into a new directory of another shard scheme (docs/cluster.md)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import typer
from rich.markup import escape

from genbench.commands import common
from genbench.commands.console import err, out
from genbench.errors import UsageError
from genbench.export.merge import check, input_of, merge_into


def merge_cmd(
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="A genbench generate output directory: every shard of it is read."
    ),
    input: Path | None = typer.Option(
        None,
        "--input",
        "-i",
        "--prompts",
        metavar="FILE",
        help="The job's prompt file. [default: the one its job files name]",
    ),
    into: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        metavar="DIR",
        help="Write every id once (its first copy) into this new directory, then prove it.",
    ),
    shards: int = typer.Option(
        1, "--shards", help="With --out: the new directory's shards (1: none; N: --shard i/N)."
    ),
    json: bool = common.JSON,
) -> None:
    """Prove a sharded job complete: every input id exactly once, or which are missing,
    failed or doubled and the command that finishes them; --out re-shards a copy."""
    console = err if json else out
    if into is None and shards != 1:
        raise UsageError(f"--shards {shards}: re-shards into a new directory: give --out NEW")
    src = input_of(directory, input)  # before anything is written
    merged = merge_into(directory, into, shards) if into is not None else None
    proof = check(into or directory, src)
    if merged is not None:
        n = merged["skipped_copies"]
        skipped = f", {n:,} later {'copy' if n == 1 else 'copies'} left out" if n else ""
        console.print(f"merged {directory} → {into}: {merged['ids']:,} ids{skipped}")
        for note in merged["notes"]:
            console.print(escape(f"note: {directory}: {note}"))
    for line in proof.lines():
        console.print(escape(line))
    if json:
        doc = {**asdict(proof), "exact": proof.exact, "merged": merged}
        common.print_json(doc, default=str)
    raise typer.Exit(proof.exit_code)
