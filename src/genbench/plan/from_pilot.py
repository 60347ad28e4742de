"""A plan from a pilot (`--prompts`): the job simulated from what the pilot saw, with its
bar, the naive pilot × N/K beside it, storage as generate writes it, and notes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from genbench import fmt
from genbench.generate.wander import SPEED_MAX, unseen_drift
from genbench.plan.bar import (
    CONFIDENCE,
    TARGET_REL_ERROR,
    Reach,
    WallForecast,
    forecast,
    pilot_reach,
    pilot_size_for,
)
from genbench.plan.document import new_plan_doc
from genbench.plan.model import PilotModel
from genbench.plan.pilot import PilotRun
from genbench.plan.storage import (
    JSONL_OVERHEAD_BYTES,
    HiddenStates,
    StorageModel,
    parquet_bytes_per_row,
)
from genbench.plan.units import duration
from genbench.rows import turn_ids
from genbench.stats import acceptance

WANDER_NOTE = 0.02  # a speed part of the range this wide is explained in a note


def plan_from_pilot(
    run: PilotRun,
    concurrency: int,
    samples: Sequence[int],
    servers: int,
    hidden: HiddenStates | None,
    source: dict[str, Any],
    inputs: dict[str, Any],
    boot: int = 100,
    seed: int = 0,
    storage: StorageModel | None = None,
    simulation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan of a pilot: the model learned from its records, the job simulated at each
    sample count (and on M servers), storage measured on its outputs (or `storage`, as a
    re-plan read it back: plan/replan.py), and notes. The bootstrap's simulations of a long
    job are kept in `simulation` (a re-plan's given back: bar.forecast's memo)."""
    model = PilotModel.from_records(run.records, concurrency)
    jobs = [(s, 1) for s in samples] + ([(s, servers) for s in samples] if servers > 1 else [])
    given = inputs.get("speed_drift")  # None: the default (generate.wander.unseen_drift)
    drift = None if given is None else float(given)
    sim = dict(simulation or {})
    every = forecast(model, jobs, boot=boot, seed=seed, drift=drift, memo=sim)
    fc, fc_m = every[: len(samples)], (every[len(samples) :] if servers > 1 else None)
    if storage is None:
        storage = _measured_storage(run, hidden)
    plan = new_plan_doc("pilot", source, inputs)
    plan["model"] = {**model.describe(), "storage_basis": storage.basis}
    k = model.pilot_samples
    worst = max(fc, key=lambda f: f.samples)
    plan["model"]["job_tps"] = worst.output_tokens / worst.seconds
    plan.update(_pilot_size(worst, k, inputs.get("target_error") or TARGET_REL_ERROR,
                            model.pilot_wall_s, drift is None))
    for i, f in enumerate(fc):
        row: dict[str, Any] = {
            "samples": f.samples,
            "tokens": {
                "output": f.output_tokens,
                "output_lo": f.output_lo,
                "output_hi": f.output_hi,
                "thinking": f.thinking_tokens,
                "answer": f.output_tokens - f.thinking_tokens,
                "prompt": f.prompt_tokens,
            },
            "ours": _wall(f),
            "naive_pilot": {
                "method": "pilot wall time × samples / pilot samples",
                **duration(run.wall_s * f.samples / k),
            },
            "storage": storage.row(f.samples, f.output_tokens + f.prompt_tokens),
        }
        if fc_m is not None:
            row["at_servers"] = {"servers": servers, **_wall(fc_m[i])}
        plan["rows"].append(row)
    plan["notes"] = _notes(model, inputs, concurrency, worst, plan["pilot_size_for_target"])
    rows = source.get("prompts_in_file")
    if isinstance(rows, int) and 0 < rows < worst.samples:  # generate sends each row once
        plan["notes"].append(
            f"{source.get('prompts') or 'the prompts file'} holds {rows:,} rows: generate "
            f"sends each once, so a job of {worst.samples:,} samples needs a file of as many "
            "rows (the forecast is for the samples asked)"
        )
    plan["acceptance"] = acceptance([r for r in run.records if r.ok])
    plan["simulation"] = sim
    if plan["acceptance"] is not None:
        plan["notes"].append(
            f"speculative decoding: the forecast rests on the pilot's own speed, at the "
            f"acceptance measured on these prompts ({plan['acceptance']['length']:.2f} tokens "
            "per verify step, pooled), not on a server-wide average (docs/acceptance.md)"
        )
    return plan


def _measured_storage(run: PilotRun, hidden: HiddenStates | None) -> StorageModel:
    """Bytes per sample measured on the pilot's outputs, as generate writes them."""
    jsonl = float(np.mean(run.jsonl_bytes)) if run.jsonl_bytes else JSONL_OVERHEAD_BYTES
    ids = any(t.generated is not None for r in run.rows for t in turn_ids(r))
    return StorageModel(
        jsonl,
        parquet_bytes_per_row(run.rows),
        _storage_basis(len(run.jsonl_bytes) or len(run.rows), len(run.rows))
        + ("; token ids included (the server gives them: generate keeps them)" if ids else ""),
        hidden,
    )


def _storage_basis(outputs: int, parquet: int) -> str:
    """Which outputs the bytes per sample were measured on: JSONL on all of the pilot's,
    Parquet on the ones it kept in memory (pilot.PARQUET_ROWS) where it had more."""
    if parquet < outputs:
        return (f"measured on the pilot's {fmt.counted(outputs, 'output')} (Parquet on the "
                f"first {parquet:,}), as genbench generate writes them (JSONL; Parquet with "
                "zstd)")  # fmt: skip
    return (f"measured on the pilot's {fmt.counted(outputs, 'output')}, as genbench generate "
            "writes them (JSONL; Parquet with zstd)")  # fmt: skip


def _pilot_size(
    worst: WallForecast, k: int, target: float, wall_s: float = 0.0, unseen: bool = False
) -> dict[str, Any]:
    """The pilot size whose bar would be ±5% and ±target (bar.pilot_reach: what a longer
    pilot narrows and what it does not, the default allowance for speed it cannot see
    narrowing as its time grows, up to a pilot as long as the job; the sample's part on
    the upper end of its lengths' spread, `spread_margin`, and what their skew adds to its
    upper side narrowing as 1/K, `skew_share`); None where no pilot
    shorter than the job reaches it, with the floor such a pilot leaves and what is most
    of it (`floor_from`)."""
    p, margin = worst.parts, worst.spread_margin
    if p is None:
        hw = worst.rel_halfwidth * margin
        need = pilot_size_for(hw, k, target)
        return {
            "pilot_size_for_5pct": pilot_size_for(hw, k, TARGET_REL_ERROR),
            "pilot_size_for_target": {"target": target, "requests": need, "samples": need,
                                      "floor": 0.0, "floor_from": None,
                                      "spread_margin": margin},  # fmt: skip
        }

    def reach(goal: float) -> Reach:
        return pilot_reach(p, worst.speed, k, worst.samples, goal, wall_s, worst.seconds,
                           unseen, spread=margin, skew=worst.skew_share)  # fmt: skip

    got = reach(target)
    return {
        "pilot_size_for_5pct": reach(TARGET_REL_ERROR).requests,
        "pilot_size_for_target": {
            "target": target,
            "requests": got.requests,  # samples, in fact
            "samples": got.requests,
            "floor": got.floor,  # the bar of a pilot as long as the job
            "floor_from": None if got.requests is not None else got.floor_from,
            # where none reaches the target, the pilot whose sample part is down to it (a
            # trial's 64 requests left ±29.5% from their sample and were told only that none
            # reaches ±5%, its floor ±7.5% of speed no pilot sees)
            "sample_at": got.sample_at,
            "job_samples": worst.samples,
            # the sample's part taken this much wider: the lengths may spread more than a
            # small pilot saw (bar.spread_margin)
            "spread_margin": margin,
            # the share of the sample's part the lengths' skew adds, which narrows as 1/K
            "skew_share": worst.skew_share,
        },
    }


def _notes(
    model: PilotModel,
    inputs: dict[str, Any],
    concurrency: int,
    worst: WallForecast,
    size: dict[str, Any] | None = None,
) -> list[str]:
    """What a reader of the plan must know about this pilot."""
    notes = []
    per = len(model.pool.output) / len(model.pool.heads)
    if per > 1:
        notes.append(
            f"a sample is {per:.2f} requests on average (multi-turn rows, every user turn "
            "answered in order as generate's --turns all does; --turns last: one each; an "
            "agentic row as many as its target's calls need)"
        )
    if abs(model.replay_err) > 0.05:
        notes.append(
            f"the fitted model, calibrated on the pilot's whole time, replays its start (to its "
            f"last send) {model.replay_err:+.1%} off: the server does something the model does "
            "not capture (the bar "
            f"includes it as a part of its own, ±{abs(model.replay_err):.1%}, which no pilot "
            "length removes)"
        )
    notes += _speed_notes(model, inputs, worst, size)
    if inputs.get("pilot_stopped") == "time":
        notes.append(
            "the pilot stopped at --pilot-max-time before the mean output length reached its "
            "target: the bar is wider than asked"
        )
    client = inputs.get("pilot_client") or {}
    if client.get("client_bound"):
        notes.append(
            "genbench's own process was busy during the pilot ("
            + ", ".join(client.get("reasons") or ())
            + "): it read answers and sent the next requests late, so the pilot's speed is "
            "partly this host's and the forecast may be long; plan again on a quieter host "
            "(the job on that host runs as slowly only if it is as busy)"
        )
    if model.pool.fail_rate:
        notes.append(
            f"{model.pool.fail_rate:.1%} of pilot requests failed; the forecast retries them"
        )
    k = model.pilot_samples
    if k * 2 >= worst.samples:
        notes.append(
            f"the pilot's {fmt.counted(k, 'sample')} are {k / worst.samples:.0%} of the job's "
            f"{worst.samples:,}: a job this small costs about what its plan does; run it "
            "and read its live ETA"
        )
    if k < 2 * concurrency:
        notes.append(
            f"the pilot ({fmt.counted(k, 'request')}) is short for C={concurrency}: at least "
            f"{4 * concurrency} gives a steady stretch to measure"
        )
    return notes


def _speed_notes(
    model: PilotModel,
    inputs: dict[str, Any],
    worst: WallForecast,
    size: dict[str, Any] | None = None,
) -> list[str]:
    """How the server's speed moved during the pilot and what the range makes of it, with
    the numbers; and what no pilot sees."""
    w, speed = model.wander, worst.speed
    if speed is None:
        return []
    notes = []
    if w.stretches >= 3 and (speed.noise > WANDER_NOTE or speed.wander > WANDER_NOTE):
        scale = (f"{w.stretch_s:.0f} s" if w.stretch_s >= 1.5 else f"{w.stretch_s:.1f} s"
                 if w.stretch_s >= 0.1 else fmt.ms(w.stretch_s))  # a tiny pilot's: not "0.0 s"
        moved = f"{w.moved:.1%} across the pilot's {scale} stretches"
        why = (
            f"it wandered (lag-1 autocorrelation {w.lag1:.2f}), which a longer job does not "
            "average away"
            if speed.wander >= speed.noise
            else "it scattered without a trend, which averages out"
        )
        h = min(speed.halfwidth, SPEED_MAX)  # on the time: as the bar's breakdown shows it
        held = f", held to ±{SPEED_MAX:.0%}" if speed.halfwidth > SPEED_MAX else ""
        # the speed's whole half-width holds the drift the next note names: one figure, not
        # two a reader adds (a trial read ±37.8% and ±13.6% as two parts)
        with_drift = (f", the ±{speed.drift:.1%} below for speed it cannot see among it"
                      if speed.drift > 0 else "")  # fmt: skip
        notes.append(
            f"the server's speed varied ±{moved}: {why}; the range includes it "
            f"(±{speed.halfwidth:.1%} in speed for {worst.samples:,} samples{with_drift}"
            f"{held}: +{1 / max(1 - h, 0.05) - 1:.1%} / −{1 - 1 / (1 + h):.1%} on the time)"
        )
    wall = model.pilot_wall_s
    pilot = fmt.duration(wall) if wall >= 0.1 else fmt.ms(wall)  # a tiny pilot's: not 0.0 s
    drift = inputs.get("speed_drift")
    if drift is None:  # the default: generate.wander.unseen_drift of the pilot's wall
        notes.append(
            f"the range includes ±{speed.drift:.1%} in speed for {worst.samples:,} samples "
            f"that changes more slowly than the pilot's {pilot} shows (another tenant on the "
            "host, a thermal limit, a restart): genbench's default, 15% × the job's time "
            "over the job's and the pilot's, as the live ETA assumes; "
            f"{_twice(model, inputs, worst, size)}, "
            "--speed-drift 0 leaves it out for a server known to hold its speed, "
            "--speed-drift PCT puts what you know"
        )
    elif drift:
        notes.append(
            f"the range includes --speed-drift {drift:.0%}: drift slower than the pilot's "
            f"{pilot}, which it cannot see"
        )
    else:
        notes.append(
            f"speed that changes more slowly than the pilot's {pilot} (another tenant on "
            "the host, a thermal limit, a restart) is not in the range (--speed-drift 0): "
            + _longer_sees(model, inputs, worst, size)
            + "--speed-drift PCT adds what you know"
        )
    return notes


def _longer_sees(
    model: PilotModel, inputs: dict[str, Any], worst: WallForecast, size: dict[str, Any] | None
) -> str:
    """The longer pilot that would see more of the speed's slow changes: the one the bar's
    target asks for where it asks one, else twice this one; none asked of a pilot over
    half its job."""
    if asked := _asked(model, worst, size):
        target = _target_pilot(model, inputs, asked, size)
        return f"a longer pilot, of {target}, sees more of it, and "
    if 2 * model.pilot_samples > worst.samples:
        return ""
    return f"a longer pilot ({_longer(model, inputs)}: twice this one) sees more of it, and "


def _asked(model: PilotModel, worst: WallForecast, size: dict[str, Any] | None) -> int | None:
    """The pilot the bar's target asks for (its samples), where the plan shows it: a bar
    wider than the target, a pilot longer than this one that reaches it. A note that
    suggests a longer pilot names this one, not another (None: none asked)."""
    need = (size or {}).get("requests")
    if not need or worst.rel_halfwidth <= (size or {}).get("target", TARGET_REL_ERROR):
        return None
    return int(need) if need > model.pilot_samples else None


def _target_pilot(
    model: PilotModel, inputs: dict[str, Any], need: int, size: dict[str, Any] | None
) -> str:
    """The target's pilot as the bar's line names it, and the flag for it: a fixed pilot's
    size, an open-ended one's time (its size at this pilot's pace: `_longer`)."""
    goal = (size or {}).get("target", TARGET_REL_ERROR)
    return (f"about {need:,} requests, the ±{goal:.0%} target's above "
            f"({_longer(model, inputs, need / model.pilot_samples)})")  # fmt: skip


def _twice(
    model: PilotModel,
    inputs: dict[str, Any],
    worst: WallForecast,
    size: dict[str, Any] | None = None,
) -> str:
    """What a longer pilot would make the default allowance, and the flag for one: the
    pilot the bar's target asks for where it asks one (`_asked`), else one twice as long;
    none asked of a pilot already over half its job (twice it would outrun the job)."""
    now = unseen_drift(worst.seconds, model.pilot_wall_s)

    def would(wall: float) -> str:  # the allowance a pilot of `wall` seconds leaves
        new = unseen_drift(worst.seconds, wall)
        if f"{new:.1%}" != f"{now:.1%}":
            return f"would make it ±{new:.1%} and see more of the server's own wander"
        # a pilot of seconds against a job of hours: 'would make it ±15.0%' read as a change
        return (f"would leave it ±{new:.1%} (the job is {worst.seconds / wall:,.0f} times "
                "as long) but see more of the server's own wander")  # fmt: skip

    if asked := _asked(model, worst, size):
        wall = model.pilot_wall_s * asked / model.pilot_samples
        return f"a pilot of {_target_pilot(model, inputs, asked, size)}, {would(wall)}"
    if 2 * model.pilot_samples > worst.samples:
        return (f"this pilot is {model.pilot_samples / worst.samples:.0%} of the job already: "
                "a longer one would narrow it little")  # fmt: skip
    return f"a pilot twice as long ({_longer(model, inputs)}) {would(2 * model.pilot_wall_s)}"


def _longer(model: PilotModel, inputs: dict[str, Any], times: float = 2.0) -> str:
    """The flag for a pilot `times` this one's length (twice): a fixed pilot's size (--pilot
    K, where --pilot-min-time does nothing), else its time."""
    if inputs.get("pilot_fixed"):
        return f"--pilot {math.ceil(times * model.pilot_samples)}"
    t = math.ceil(times * model.pilot_wall_s)
    cap = inputs.get("pilot_max_time_s")
    return f"--pilot-min-time {t}" + (f" --pilot-max-time {t}" if cap and t > cap else "")


def _wall(f: WallForecast) -> dict[str, Any]:
    return {
        **duration(f.seconds),
        "lo_s": f.lo_s,
        "hi_s": f.hi_s,
        "confidence": CONFIDENCE,
        "rel_halfwidth": f.rel_halfwidth,
        "length_halfwidth": f.length_halfwidth,
        **({"parts": asdict(f.parts)} if f.parts is not None else {}),
        **({"speed": asdict(f.speed)} if f.speed is not None else {}),
    }
