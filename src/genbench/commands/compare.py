"""`genbench compare`: runs side by side, ratios to the first, differences inside noise marked."""

from __future__ import annotations

import typer

from genbench.commands import common
from genbench.commands.console import out
from genbench.compare.render import print_comparison
from genbench.compare.rule import ALLOWANCE, compare
from genbench.compare.runs import load_sides
from genbench.errors import UsageError


def parse_pct(flag: str, text: str) -> float:
    """'10', '10%' or '0.1%' as a fraction."""
    try:
        v = float(text.strip().removesuffix("%"))
    except ValueError:
        raise UsageError(f"{flag} {text!r}: expected a percentage, e.g. 10") from None
    if not 0 <= v < 100:
        raise UsageError(f"{flag} {text!r}: expected a percentage in [0, 100)")
    return v / 100


def compare_cmd(
    runs: list[str] = typer.Argument(
        ...,
        metavar="RUN",
        help="Sides to compare, the first the baseline: a run directory or result.json, a "
        "directory of repeats (run --repeat), or several runs of one side joined by commas.",
    ),
    force: bool = typer.Option(
        False, "--force", help="Compare runs of different workloads (lengths, prompts, ...)."
    ),
    allowance: str = typer.Option(
        f"{ALLOWANCE * 100:g}",
        "--allowance",
        metavar="PCT",
        help="One run per side: differences under PCT% show ≈, as the drift between runs is "
        "unmeasured.",
    ),
    json: bool = common.JSON,
) -> None:
    """Compare runs: the same metrics side by side with ratios to the first, and the noise."""
    frac = parse_pct("--allowance", allowance)
    cmp = compare(load_sides(runs), force=force, allowance=frac)
    if json:
        common.print_json(cmp.to_dict())
        return
    print_comparison(cmp, out)
