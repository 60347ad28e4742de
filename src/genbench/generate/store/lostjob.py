"""An output directory whose `.genbench/job.json` is gone or unreadable: said, and a
changed setting still named.

job.json is what names a changed setting on resume (`jobfile.setting_change`). Without
it, the rows' request hashes (request_hash.py) still tell that a done row's request
changed, not which setting changed it. A request hash is a hash of the whole request, so
it can be tried against candidates: the job's settings with one of them changed (a
sampling field unset, or set to a value of a grid people type: temperature 0.6, top_p
0.95, max_tokens 4096; `--turns` or `--tool-policy` the other way). A candidate that
gives the stored request hash of every sampled row is the setting the rows were made with
(64-bit hashes: a chance match is not a concern). Where none does, the message lists
the settings that could have changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from genbench.generate.input.params import FLAGGED
from genbench.generate.input.reader import Row
from genbench.generate.input.tools import POLICIES
from genbench.generate.recipe import TURNS, Recipe
from genbench.generate.request_hash import request_hash
from genbench.generate.store.jobfile import param_flag, shown
from genbench.generate.store.layout import JOB_FILE

MISSING, UNREADABLE = "missing", "unreadable"
FOUND = "found from the rows' fingerprints"  # how a setting named without job.json is marked
# the sampling fields a flag sets (params.job_params), then common --param ones
SAMPLING = (*FLAGGED, "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
            "seed")  # fmt: skip
COULD_HAVE = "--max-tokens, --temperature, --top-p, --top-k, --thinking, --param, --config, " \
    "--turns, --tool-policy, or the input's rows"  # fmt: skip


def problem_line(out: object, problem: str, detail: str = "", name: str = JOB_FILE) -> str:
    """The one line that says the job file (`name`: a shard's is job-2of4.json) is gone,
    and what that costs."""
    what = "is missing" if problem == MISSING else f"is unreadable ({detail})"
    return (
        f"--out {out}: .genbench/{name} {what}: the settings its rows were made with are "
        "unknown; each done row's request fingerprint is checked against this run's"
    )


def _grid(key: str) -> Iterator[Any]:
    if key in ("top_k", "seed"):
        yield from (-1, *range(0, 201))
    elif key == "max_tokens":
        seen = {1 << n for n in range(4, 18)} | set(range(64, 131073, 64))
        yield from sorted(seen | set(range(1000, 128001, 1000)))
    else:
        yield from (round(i * 0.01, 2) for i in range(0, 201))


def _candidates(recipe: Recipe) -> Iterator[tuple[str, Recipe]]:
    """(the change named, the recipe it was made with) to try, one setting changed."""
    params = recipe.params
    for key in dict.fromkeys((*params, *SAMPLING)):
        flag, now = param_flag(key), params.get(key)
        if key in params:
            rest = {k: v for k, v in params.items() if k != key}
            yield _unset(flag, now), replace(recipe, params=rest)
        if key == "chat_template_kwargs":
            continue
        for v in _grid(key):
            if v != now:
                said = f"{flag} was {v}, now {shown(now)}"
                yield said, replace(recipe, params={**params, key: v})
    kw = params.get("chat_template_kwargs") or {}
    for think in (True, False):
        if kw.get("enable_thinking") is not think:
            was = {**params, "chat_template_kwargs": {**kw, "enable_thinking": think}}
            yield f"--thinking was {'on' if think else 'off'}", replace(recipe, params=was)
    turns = next(t for t in TURNS if t != recipe.turns)
    yield f"--turns was {turns}, now {recipe.turns}", replace(recipe, turns=turns)
    other = next(p for p in POLICIES if p != recipe.tool_policy)
    yield f"--tool-policy was {other}, now {recipe.tool_policy}", replace(recipe, tool_policy=other)


def _unset(flag: str, now: Any) -> str:
    """A setting that was not set, now is: --thinking by its own flag where that is all
    the chat_template_kwargs hold."""
    if isinstance(now, dict) and set(now) == {"enable_thinking"}:
        return f"--thinking was not set, now {'on' if now['enable_thinking'] else 'off'}"
    return f"{flag} was not set, now {shown(now)}"


def attribute(samples: list[tuple[Row, int]], recipe: Recipe) -> str | None:
    """The one setting whose earlier value gives every sampled done row (row, the
    request hash it was made with) its stored hash, in words; None if none does."""
    if not samples:
        return None
    for said, was in _candidates(recipe):
        if all(request_hash(r, was) == old for r, old in samples):
            return f"{said} ({FOUND})"
    return None


def refusal(problem: str, check: Any, name: str = JOB_FILE) -> str:
    """What to say, the job file gone, when done rows answer a request that changed
    (`check`: the scan's `request_hash.RequestCheck`, with its sampled changed rows)."""
    found = attribute(check.samples, check.recipe)
    if found:
        return f".genbench/{name} is {problem}: {found}"
    return (f".genbench/{name} is {problem}, so no setting can be named; any of these "
            f"could have changed: {COULD_HAVE}")  # fmt: skip
