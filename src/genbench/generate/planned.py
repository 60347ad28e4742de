"""The plan is the job's settings: what a saved plan decided (`plan/document.plan_settings`
reads it), taken by `generate --plan` unless a flag says otherwise, and each flag that
departs from it said once, before the first request, with what it does to the forecast.

Why here and small: a forecast holds for the configuration it measured. A job that runs
another concurrency, other sampling or another max_tokens than the plan's pilot is being
compared with a forecast for another job, and its end's "the forecast was -15% off" says
nothing about the next plan. `generate --plan` runs the plan's concurrency, so the two
commands paired as README.md pairs them run one configuration; without a plan the job finds
each server's best (`-c auto`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_CONCURRENCY = 32  # requests in flight per server of plan's pilot
AUTO = "auto"  # -c auto: the job finds and holds each server's best concurrency


@dataclass(frozen=True)
class Planned:
    """What a plan decided for the job (None: the plan does not say: a run's forecast has no
    sampling of the job's, the field's arithmetic no concurrency)."""

    path: str
    concurrency: int | None = None  # per server
    servers: int | None = None  # the deadline's need, else the plan's --servers
    params: dict[str, Any] | None = None  # the sampling and max_tokens the pilot sent
    turns: str | None = None
    tool_policy: str | None = None


def resolve_concurrency(given: str | int | None, planned: Planned | None) -> str:
    """The job's requests in flight per server: `-c` where given (a number, or auto), else
    the plan's, else auto (the job finds each server's best: generate/tuner.py)."""
    if given is not None:
        return str(given)
    if planned is not None and planned.concurrency is not None:
        return str(planned.concurrency)
    return AUTO


def resolve(given: str | None, planned: str | None, default: str) -> str:
    """A choice of the job (--turns, --tool-policy): the flag, else the plan's, else the
    default."""
    return given if given is not None else planned if planned is not None else default


def taken(planned: Planned, concurrency: str, servers: int, params: dict[str, Any]) -> str:
    """The one line that says what the plan decided and what this job runs of it: the plan's
    configuration, then "this job runs it as planned", or what it runs instead (each said
    again below, with what it does to the forecast: `departures`), or what it adds where
    the plan set nothing."""
    start = f" from {planned.concurrency}" if concurrency == AUTO and planned.concurrency else ""
    plan_c = planned.concurrency
    fields = [  # (the plan's, the job's): None where the plan sets nothing
        (f"C={plan_c} per server" if plan_c is not None else None,
         f"C={concurrency}{start} per server"),
        (_servers(planned.servers) if planned.servers is not None else None, _servers(servers)),
        (_sampling(planned.params) if planned.params is not None else None,
         _sampling(params) if params or planned.params is not None else None),
    ]  # fmt: skip
    decided = [p for p, _ in fields if p is not None]
    instead = [j for p, j in fields if p is not None and j != p]
    added = [f"{j} (the plan set none)" for p, j in fields if p is None and j is not None]
    if not instead:
        runs = "this job runs it as planned"
    else:
        rest = ", the rest as planned" if len(instead) < len(decided) else ""
        runs = f"this job runs {'; '.join(instead)} instead{rest} (below)"
    if added:
        runs += ", with " + "; ".join(added)
    return "; ".join(decided or ["none set"]) + "; " + runs


def _servers(n: int) -> str:
    return f"{n} server{'s' * (n != 1)}"


def _sampling(params: dict[str, Any]) -> str:
    if not params:
        return "the server's own sampling"
    return ", ".join(f"{k} {_show(v)}" for k, v in sorted(params.items()))


def departures(
    planned: Planned,
    *,
    concurrency: str,
    servers: int,
    params: dict[str, Any],
    turns: str,
    tool_policy: str,
) -> list[str]:
    """One line per setting of the job that departs from the plan's, saying what it does to
    the forecast (empty: the job is the plan's)."""
    out = []
    p = planned
    if p.concurrency is not None and concurrency == AUTO:
        out.append(
            f"-c auto departs from the plan's C={p.concurrency}: the job finds each server's "
            "concurrency, starting at the plan's, so its time and bar are for another load "
            "(the end's verdict too); drop -c to run the plan's"
        )
    elif p.concurrency is not None and int(concurrency) != p.concurrency:
        way = "more" if int(concurrency) > p.concurrency else "fewer"
        out.append(
            f"-c {concurrency} departs from the plan's C={p.concurrency}: {way} requests in "
            f"flight than the forecast measured, so its time and bar are for another load "
            f"(the end's verdict too); drop -c to run the plan's"
        )
    if p.servers is not None and servers != p.servers:
        out.append(
            f"{servers} server{'s' * (servers != 1)} here, the plan decided {p.servers}: the "
            f"forecast shown is taken for {servers} (the plan's time on one server shared "
            f"alike), {'longer' if servers < p.servers else 'shorter'} than the plan's"
        )
    if p.params is not None:
        for key in sorted(set(params) | set(p.params)):
            new, old = params.get(key), p.params.get(key)
            if new != old:
                out.append(_param_departure(key, new, old))
    for flag, new, old in (("--turns", turns, p.turns), ("--tool-policy", tool_policy,
                                                          p.tool_policy)):  # fmt: skip
        if old is not None and new != old:
            out.append(
                f"{flag} {new} departs from the plan's {old}: other requests per row than the "
                "pilot measured, so the forecast is for another job"
            )
    return out


def _param_departure(key: str, new: Any, old: Any) -> str:
    was = f"the plan's {_show(old)}" if old is not None else "the server's default the plan used"
    now = _show(new) if new is not None else "the server's default"
    effect = "the outputs' lengths the forecast rests on may differ: it is for another job"
    if key in ("max_tokens", "max_completion_tokens") and None not in (new, old):
        effect = (
            "outputs may be cut shorter than the pilot's: the forecast may be long"
            if new < old
            else "outputs may run longer than the pilot's: the forecast may be short"
        )
    return f"{key} {now} departs from {was}: {effect}"


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)
