"""`run --repeat N` (and `--versus URL`): the whole run N times on each server, the
servers alternating, each repeat a complete run in DIR/repeat-i (docs/compare-and-report.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genbench.errors import UsageError
from genbench.run.benchmark import RunListener, RunState, execute_run
from genbench.run.result import REQUESTS_FILE, RESULT_FILE
from genbench.run.runconfig import RunConfig
from genbench.transport.endpoint import Endpoint

REPEAT_DIR = "repeat-{}"


def check_repeat_dirs(side_dirs: list[Path], repeats: int) -> None:
    """Refuse before anything runs when a repeat's directory already holds a run."""
    for d in side_dirs:
        for path in (d, *(d / REPEAT_DIR.format(i) for i in range(1, repeats + 1))):
            if (path / RESULT_FILE).exists() or (path / REQUESTS_FILE).exists():
                raise UsageError(f"--out {path}: already holds a run (result.json); choose another")
        if d.exists() and not d.is_dir():
            raise UsageError(f"--out {d}: exists and is not a directory")


async def execute_repeats(
    targets: list[tuple[str, Endpoint, Path]],
    model: str | None,
    cfg: RunConfig,
    repeats: int,
    listener: RunListener,
    target_extra: dict[str, Any] | None = None,
) -> list[list[RunState]]:
    """The whole run `repeats` times on each (label, endpoint, directory) target.

    Repeat i of a target goes to DIR/repeat-i, a complete run (preflight, warm-up, every
    phase) that any reader takes as one; `compare` and `report` take DIR as one side and
    measure the drift between runs from the spread of its repeats. With several targets the
    repeats alternate (A B A B ...), so a drift of the host over the session hits every
    target alike instead of the one measured last."""
    check_repeat_dirs([d for _, _, d in targets], repeats)
    labels = [label for label, _, _ in targets]
    states: list[list[RunState]] = [[] for _ in targets]
    for i in range(1, repeats + 1):
        for k, (label, ep, side_dir) in enumerate(targets):
            who = f" · {label} {ep.base_url}" if len(targets) > 1 else ""
            listener.note(f"repeat {i} of {repeats}{who}")
            extra = {
                "repeat": {
                    "index": i,
                    "count": repeats,
                    "side": label,
                    "alternated_with": [x for x in labels if x != label],
                }
            }
            out = side_dir / REPEAT_DIR.format(i)
            state = await execute_run(ep, model, cfg, out, listener, target_extra, doc_extra=extra)
            states[k].append(state)
    return states
