"""`genbench inspect`: is a generated set fit to train a drafter on? (docs/inspect.md)"""

from __future__ import annotations

from typing import Any

import typer

from genbench.commands import common
from genbench.commands.console import err, out, reading
from genbench.inspect import InspectArgs, Thresholds, inspect_data, settings_from_flags
from genbench.inspect.clean import parse_drop
from genbench.inspect.detect import DEFAULT_TAGS, DEFECTS
from genbench.inspect.fidelity import DRIFT_SAMPLE
from genbench.inspect.render import print_inspection

D = Thresholds()

# one per field of InspectArgs (inspect/__init__.py), in --help's order: its typer option,
# or (default, help) for an option spelled as its field is (common.signature)
OPTIONS: dict[str, Any] = {
    "path": typer.Argument(
        ..., help="A genbench generate output directory, or one of its JSONL/Parquet files."
    ),
    "drop": (None, f"Defects to leave out of a clean copy: {','.join(DEFECTS)} (or all). "
             "Needs --out."),
    "out_dir": typer.Option(None, "--out", "-o", metavar="DIR", help="Directory for the "
                            "clean copy (new or empty); the original is only read."),
    "save": (None, "Where to write inspect.json. [default: DIR/inspect.json, or "
             "FILE.inspect.json beside a file; --drop: CLEAN_DIR/inspect.json]", "FILE"),
    "min_tokens": (D.min_tokens, "Rows with fewer output tokens are too short (short)."),
    "loop_window": (D.loop_window, "Loops: chars at the end of a text examined."),
    "loop_cover": (D.loop_cover, "Loops: share of the window the repetition covers."),
    "loop_repeats": (D.loop_repeats, "Loops: times the unit repeats at least."),
    "dup_min_chars": (D.dup_min_chars, "Duplicates: shorter answers are not compared."),
    "tags": (",".join(DEFAULT_TAGS), "Leftover tags: comma-separated strings to find."),
    "server_alpha": (0.001, "Servers: p-value below which a difference is not noise."),
    "server_effect": (0.1, "Servers: smallest |rank-biserial effect| worth naming."),
    "examples": (5, "Example ids kept per defect."),
    "hidden_size": common.HIDDEN_SIZE,
    "layers_captured": common.LAYERS_CAPTURED,
    "dtype_bytes": common.DTYPE_BYTES,
    "url": (None, "A server with the job's tokenizer (vLLM: /detokenize, /tokenize): measure "
            "the retokenization drift of the turns with ids.", "URL"),
    "drift_sample": (DRIFT_SAMPLE, "Token fidelity: turns checked with --url."),
    "key_env": common.KEY_ENV,
    "key_file": common.KEY_FILE,
    "json": common.JSON,
}  # fmt: skip


def inspect_cmd(**options: Any) -> None:
    """Check a generated set: loops, unclosed thinking, empty answers, leftover tags,
    garbled text, short rows, duplicates, an odd server; its storage; a clean copy."""
    a = InspectArgs(**options)
    settings = settings_from_flags(a)  # every threshold checked
    tokenizer = common.endpoint(a.url, a.key_env, a.key_file) if a.url else None
    drop_names = parse_drop(a.drop) if a.drop is not None else None
    doc = reading(str(a.path), lambda progress: inspect_data(
        a.path, settings, drop=drop_names, out=a.out_dir, save=a.save, progress=progress,
        tokenizer=tokenizer, drift_sample=a.drift_sample,
    ))  # fmt: skip
    print_inspection(doc, err if a.json else out)
    if a.json:
        common.print_json(doc)


inspect_cmd.__signature__ = common.signature(InspectArgs, OPTIONS)  # type: ignore[attr-defined]
