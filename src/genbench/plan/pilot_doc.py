"""A pilot as `plan`'s flags set it up (its server, its rows, its C, when it stops), and
the parts of the plan document that say so: where it measured (`source`) and what it was
asked (`inputs`, which `generate --plan` reads back: plan/document.plan_settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genbench.check.preflight import CheckReport
from genbench.plan.bar import target_of
from genbench.plan.climb import Climbed
from genbench.plan.pilot import PilotInput, PilotRun, PilotStop
from genbench.plan.units import speed_drift
from genbench.run.result import REQUESTS_FILE
from genbench.transport.endpoint import Endpoint


@dataclass
class PilotSetup:
    """One pilot as the flags set it up, before anything is sent."""

    ep: Endpoint
    source: PilotInput
    concurrency: int
    size: int  # the fixed pilot's rows, or the open-ended one's minimum
    stop: PilotStop | None
    params: dict[str, Any]
    out: Path
    climbed: Climbed | None = None  # -c auto: the climb that chose `concurrency`


def pilot_source(pilot: PilotSetup, check: CheckReport) -> dict[str, Any]:
    return {
        "kind": "pilot",
        "prompts": str(pilot.source.path),
        "prompts_in_file": pilot.source.total,
        "url": pilot.ep.base_url,
        "model": check.model,
        "server": check.server.kind,
        "records": str(pilot.out / REQUESTS_FILE),
    }


def pilot_inputs(pilot: PilotSetup, args: Any, run: PilotRun, counts: list[int]) -> dict[str, Any]:
    stop = pilot.stop
    return {
        "samples": counts,
        "servers": args.servers,
        "concurrency": pilot.concurrency,
        "concurrency_from": "climb" if pilot.climbed is not None else "flag",
        "pilot": run.samples,
        "pilot_requests": len(run.records),
        "turns": args.turns,
        "tool_policy": args.tool_policy,
        "pilot_fixed": args.pilot,
        # the bar the plan sizes a pilot for: an open-ended pilot's stopped on it too
        "target_error": stop.target if stop is not None else target_of(args.target_error),
        "pilot_min_time_s": stop.min_s if stop is not None else None,
        "pilot_max_time_s": stop.max_s if stop is not None else None,
        "pilot_stopped": run.stopped,
        "pilot_stopped_at": run.stopped_at,
        "pilot_client": run.client,
        "speed_drift": _drift(args.speed_drift),
        "max_tokens": pilot.params.get("max_tokens"),
        "params": pilot.params,
        "seed": args.seed,
        "bootstrap": args.bootstrap,
        "warmup_s": args.warmup,
    }


def _drift(given: str | None) -> float | None:
    """The plan's --speed-drift: a fraction, or None for genbench's default allowance."""
    drift = speed_drift(given)
    return drift if isinstance(drift, float) else None


def stop_reason(run: PilotRun, stop: PilotStop | None) -> str:
    """Why the pilot stopped, in words ("" for a pilot of fixed size)."""
    reached = run.stopped_at.get("target_reached_s")
    return {
        "target": "the mean length reached its target",
        "min_time": (
            f"--pilot-min-time {stop.min_s:g} s held it past its target"
            + (f", reached at {reached:.0f} s" if reached is not None else "")
            if stop else ""
        ),
        "job": "as many samples as the job has: a longer pilot is no pilot",
        "time": _out_of_time(stop),
        "prompts": "every prompt in the file was sent",
        "size": "",
    }[run.stopped]  # fmt: skip


def _out_of_time(stop: PilotStop | None) -> str:
    """--pilot-max-time's reason; with -c auto, the climb took its share first (a trial
    gave 60 s and read '--pilot-max-time 32.1 s reached')."""
    if stop is None:
        return ""
    if not stop.climb_s:
        return f"--pilot-max-time {stop.max_s:g} s reached"
    return (f"--pilot-max-time reached: the {stop.max_s:.1f} s left of it after the climb's "
            f"{stop.climb_s:.1f} s")
