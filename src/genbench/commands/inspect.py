"""`genbench inspect`: is a generated set fit to train a drafter on? (docs/inspect.md)"""

from __future__ import annotations

from pathlib import Path

import typer

from genbench.commands import common
from genbench.commands.console import err, out, reading
from genbench.inspect import SETTINGS_FLAGS, Thresholds, inspect_data, settings_from_flags
from genbench.inspect.clean import parse_drop
from genbench.inspect.detect import DEFAULT_TAGS, DEFECTS
from genbench.inspect.fidelity import DRIFT_SAMPLE
from genbench.inspect.render import print_inspection

D = Thresholds()


DROP = typer.Option(
    None,
    "--drop",
    help=f"Defects to leave out of a clean copy: {','.join(DEFECTS)} (or all). Needs --out.",
)
OUT_DIR = typer.Option(
    None,
    "--out",
    "-o",
    help="Directory for the clean copy (new or empty); the original is only read.",
)
SAVE = typer.Option(
    None,
    "--save",
    help="Where to write inspect.json. [default: DIR/inspect.json, or "
    "FILE.inspect.json beside a file]",
)
MIN_TOKENS = typer.Option(
    D.min_tokens, "--min-tokens", help="Rows with fewer output tokens are too short (short)."
)
LOOP_WINDOW = typer.Option(
    D.loop_window, "--loop-window", help="Loops: chars at the end of a text examined."
)
LOOP_COVER = typer.Option(
    D.loop_cover, "--loop-cover", help="Loops: share of the window the repetition covers."
)
LOOP_REPEATS = typer.Option(
    D.loop_repeats, "--loop-repeats", help="Loops: times the unit repeats at least."
)
DUP_MIN_CHARS = typer.Option(
    D.dup_min_chars, "--dup-min-chars", help="Duplicates: shorter answers are not compared."
)
TAGS = typer.Option(
    ",".join(DEFAULT_TAGS), "--tags", help="Leftover tags: comma-separated strings to find."
)
SERVER_ALPHA = typer.Option(
    0.001, "--server-alpha", help="Servers: p-value below which a difference is not noise."
)
SERVER_EFFECT = typer.Option(
    0.1, "--server-effect", help="Servers: smallest |rank-biserial effect| worth naming."
)
EXAMPLES = typer.Option(5, "--examples", help="Example ids kept per defect.")
URL = typer.Option(
    None,
    "--url",
    help="A server with the job's tokenizer (vLLM: /detokenize, /tokenize): measure the "
    "retokenization drift of the turns with ids.",
)
DRIFT_SAMPLE = typer.Option(
    DRIFT_SAMPLE, "--drift-sample", help="Token fidelity: turns checked with --url."
)


def inspect_cmd(
    path: Path = typer.Argument(
        ..., help="A genbench generate output directory, or one of its JSONL/Parquet files."
    ),
    drop: str | None = DROP,
    out_dir: Path | None = OUT_DIR,
    save: Path | None = SAVE,  # fmt: skip
    min_tokens: int = MIN_TOKENS,
    loop_window: int = LOOP_WINDOW,
    loop_cover: float = LOOP_COVER,
    loop_repeats: int = LOOP_REPEATS,
    dup_min_chars: int = DUP_MIN_CHARS,
    tags: str = TAGS,
    server_alpha: float = SERVER_ALPHA,
    server_effect: float = SERVER_EFFECT,
    examples: int = EXAMPLES,
    hidden_size: int | None = common.HIDDEN_SIZE,
    layers_captured: int | None = common.LAYERS_CAPTURED,
    dtype_bytes: int = common.DTYPE_BYTES,
    url: str | None = URL,
    drift_sample: int = DRIFT_SAMPLE,
    key_env: str = common.KEY_ENV,
    key_file: Path | None = common.KEY_FILE,
    json: bool = common.JSON,
) -> None:
    """Check a generated set: loops, unclosed thinking, empty answers, leftover tags,
    garbled text, short rows, duplicates, an odd server; its storage; a clean copy."""
    flags = dict(locals())  # every option above, by name
    settings = settings_from_flags(**{k: flags[k] for k in SETTINGS_FLAGS})
    common.positive("--drift-sample", drift_sample)
    tokenizer = common.endpoint(url, key_env, key_file) if url else None
    drop_names = parse_drop(drop) if drop is not None else None
    doc = reading(str(path), lambda progress: inspect_data(
        path, settings, drop=drop_names, out=out_dir, save=save, progress=progress,
        tokenizer=tokenizer, drift_sample=drift_sample,
    ))  # fmt: skip
    print_inspection(doc, err if json else out)
    if json:
        common.print_json(doc)
