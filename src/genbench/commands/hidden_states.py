"""`genbench hidden-states OUT_DIR`: capture the hidden states of a set generated earlier
(a prefill per generated turn on a vLLM with capture; docs/hidden-states.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from genbench.commands import common
from genbench.commands.console import err, out
from genbench.engines.hs_flags import parse_layers
from genbench.export.afterwards import capture_afterwards
from genbench.transport.endpoint import load_api_key


def hidden_states_cmd(
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="A genbench generate output directory."
    ),
    url: str = typer.Option(
        ..., "--url", metavar="URL", help="A vLLM started with the capture flags."
    ),
    layers: str = typer.Option(
        ..., "--layers", help="The layer ids that vLLM captures (its numbering), e.g. 2,16,29,32."
    ),
    model: str | None = common.MODEL,
    concurrency: int = typer.Option(8, "--concurrency", "-c", help="Prefills in flight."),
    api_key_env: str = common.KEY_ENV,
    api_key_file: Path | None = common.KEY_FILE,
    json: bool = common.JSON,
    states_fp8: bool = typer.Option(
        False, "--states-fp8", help="FP8 files with a scale per token (hs-connectors' format); "
        "genbench's connector writes them."),  # fmt: skip
) -> None:
    """Capture the hidden states of every generated turn a set does not hold yet: one prefill
    of its exact ids each, checked and kept as generate --hidden-states keeps them."""
    console = err if json else out
    doc = common.run_async(capture_afterwards(
        directory, url, parse_layers(layers), model=model, concurrency=concurrency,
        api_key=load_api_key(api_key_env, api_key_file), fp8=states_fp8,
        note=lambda s: console.print(s, markup=False, highlight=False),
    ))  # fmt: skip
    console.print(f"{doc['captured']} turns captured, {doc['already']} already there, "
                  f"{len(doc['failed'])} failed", markup=False, highlight=False)  # fmt: skip
    for line in doc["failed"][:10]:
        console.print(f"  {line}", markup=False, highlight=False)
    if json:
        common.print_json(doc)
    if doc["failed"]:
        raise typer.Exit(1)
