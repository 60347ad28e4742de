"""`genbench inspect`: is a generated set fit to train a drafter on? (docs/inspect.md)"""

from __future__ import annotations

from pathlib import Path

import orjson
import typer

from genbench.commands import common
from genbench.commands.console import err, out
from genbench.inspect import SETTINGS_FLAGS, Thresholds, inspect_data, settings_from_flags
from genbench.inspect.clean import parse_drop
from genbench.inspect.detect import DEFAULT_TAGS
from genbench.inspect.fidelity import DRIFT_SAMPLE
from genbench.inspect.render import print_inspection

D = Thresholds()


def inspect_cmd(
    path: Path = typer.Argument(
        ..., help="A genbench generate output directory, or one of its JSONL/Parquet files."
    ),
    drop: str | None = typer.Option(
        None,
        "--drop",
        help="Defects to leave out of a clean copy: loops,unclosed,empty,tags,garbled,short,dup "
        "(or all). Needs --out.",
    ),
    out_dir: Path | None = typer.Option(
        None,
        "--out",
        "-o",
        help="Directory for the clean copy (new or empty); the original is only read.",
    ),
    save: Path | None = typer.Option(
        None,
        "--save",
        help="Where to write inspect.json. [default: DIR/inspect.json, or "
        "FILE.inspect.json beside a file]",
    ),  # fmt: skip
    min_tokens: int = typer.Option(
        D.min_tokens, "--min-tokens", help="Rows with fewer output tokens are too short (short)."
    ),
    loop_window: int = typer.Option(
        D.loop_window, "--loop-window", help="Loops: chars at the end of a text examined."
    ),
    loop_cover: float = typer.Option(
        D.loop_cover, "--loop-cover", help="Loops: share of the window the repetition covers."
    ),
    loop_repeats: int = typer.Option(
        D.loop_repeats, "--loop-repeats", help="Loops: times the unit repeats at least."
    ),
    dup_min_chars: int = typer.Option(
        D.dup_min_chars, "--dup-min-chars", help="Duplicates: shorter answers are not compared."
    ),
    tags: str = typer.Option(
        ",".join(DEFAULT_TAGS), "--tags", help="Leftover tags: comma-separated strings to find."
    ),
    server_alpha: float = typer.Option(
        0.001, "--server-alpha", help="Servers: p-value below which a difference is not noise."
    ),
    server_effect: float = typer.Option(
        0.1, "--server-effect", help="Servers: smallest |rank-biserial effect| worth naming."
    ),
    examples: int = typer.Option(5, "--examples", help="Example ids kept per defect."),
    hidden_size: int | None = typer.Option(
        None, "--hidden-size", help="Hidden-state storage: the target model's hidden size."
    ),
    layers_captured: int | None = typer.Option(
        None, "--layers-captured", help="Hidden-state storage: layers kept per token."
    ),
    dtype_bytes: int = typer.Option(2, "--dtype-bytes", help="Hidden-state storage: bytes/value."),
    url: str | None = typer.Option(
        None,
        "--url",
        help="A server with the job's tokenizer (vLLM: /detokenize, /tokenize): measure the "
        "retokenization drift of the turns with ids.",
    ),
    drift_sample: int = typer.Option(
        DRIFT_SAMPLE, "--drift-sample", help="Token fidelity: turns checked with --url."
    ),
    key_env: str = common.KEY_ENV,
    key_file: Path | None = common.KEY_FILE,
    json: bool = common.JSON,
) -> None:
    """Check a generated set: loops, unclosed thinking, empty answers, leftover tags,
    garbled text, short rows, duplicates, an odd server; its storage; a clean copy."""
    flags = dict(locals())  # every option above, by name
    settings = settings_from_flags(**{k: flags[k] for k in SETTINGS_FLAGS})
    tokenizer = common.endpoint(url, key_env, key_file) if url else None
    drop_names = parse_drop(drop) if drop is not None else None
    if err.is_terminal:
        with err.status(f"reading {path}") as status:
            doc = inspect_data(
                path, settings, drop=drop_names, out=out_dir, save=save,
                progress=lambda n: status.update(f"reading {path}: {n:,} rows"),
                tokenizer=tokenizer, drift_sample=drift_sample,
            )  # fmt: skip
    else:
        doc = inspect_data(
            path, settings, drop=drop_names, out=out_dir, save=save,
            tokenizer=tokenizer, drift_sample=drift_sample,
        )  # fmt: skip
    if json:
        print_inspection(doc, err)
        typer.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    else:
        print_inspection(doc, out)
