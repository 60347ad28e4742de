"""`genbench plan`: hours, tokens and bytes of a generation job, with an error bar.

Three ways in, from least to most faithful:

* arithmetic (`--rate`, `--tokens-per-sample`): samples × tokens / rate. It is
  the field's method and is kept exact so that its numbers can be reproduced.
* a `run` result (`--from`): the same arithmetic at the *sustained* rate of the
  best measured concurrency, beside the field's burst-rate extrapolation.
* a pilot on the user's own prompts (`--prompts`): K prompts at the job's
  concurrency, then a simulation of the whole job built from what the pilot saw.

Why simulate instead of multiply: the field's forecasts were 35–45% short
because (1) the tokens per sample were a point guess where the real lengths
are skewed (mean ≈ 1.3 × median), (2) a short burst of equal-length requests
runs faster than a long job with mixed lengths and longer contexts in flight,
and (3) a job has a start-up and a tail where fewer than C requests run. The
simulation carries each of these: it draws output lengths from the pilot's
empirical distribution, runs C workers per server as the load engine does,
and advances decoding with a step time fitted to the pilot as a function of
how many requests decode and how many context tokens they hold, calibrated by
replaying the pilot. The error bar adds a bootstrap over the pilot's requests
(lengths, TTFT, failures), the server's speed over stretches of the pilot, and
the replay's own error. docs/plan.md says what is and is not modelled.

One concern per module: `units` (counts and their display), `storage`, `disk` (the
hidden states' bytes held to the job's free space), `draws` (the pilot's
requests as the simulation draws them), `stepfit` (the server's step time), `walltime` (the
job simulated), `model` (what one pilot says), `generate.wander` (how the server's speed
moved during it, carried over the job: generate's live ETA uses it too), `bar` (the forecast
and its 95% bar), a module per source of a plan (`from_rate`, `from_result`, `pilot` with
`from_pilot`, `configurations` for several results), `decide` (servers for a deadline, cost,
the fastest configuration), `document` (plan.json written and read back), `render` (the
console), and `make` (the command's flags to a plan).

Names are imported from their module on first use, so that `genbench generate`, which
reads plans (`document`), does not load numpy and the pilot's client with them.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "units": "parse_counts duration",
    "from_rate": "arithmetic plan_arithmetic",
    "storage": "ASSUMED_BYTES_PER_TOKEN JSONL_OVERHEAD_BYTES HiddenStates StorageModel "
    "storage_from_tokens parquet_bytes_per_row hidden_states",
    "draws": "Draws chain_next complete_samples worker_gap",
    "stepfit": "StepModel DecodeRows decode_rows fit_step",
    "walltime": "JobSim simulate_job sim_cap job_walls",
    "bar": "CONFIDENCE TARGET_REL_ERROR series_halfwidth length_halfwidth pilot_size_for "
    "WallForecast forecast",
    "genbench.generate.wander": "WANDER_EXPONENT WANDER_HORIZON t_975 lag1 semivariogram "
    "SpeedBar SpeedWander window_gap_variance",
    "model": "REPLAYS SPEED_BATCHES speed_stretches stretch_seconds PilotModel",
    "from_result": "FIELD_CONCURRENCY RATE_WINDOWS rate_halfwidth plan_from_result "
    "measured_concurrency natural_tokens_per_sample",
    "configurations": "plan_from_results same_model run_names",
    "decide": "BASIS Deadline Pricing Candidate parse_deadline parse_gpus",
    "pilot": "PARQUET_ROWS PILOT_ROWS PilotRun PilotInput read_pilot_input turn_count "
    "pilot_stream first_turn_requests PilotSink PilotStop run_pilot",
    "from_pilot": "WANDER_NOTE plan_from_pilot",
    "document": "PLAN_SCHEMA PLAN_SCHEMA_VERSION PLAN_FILE new_plan_doc save_plan JobForecast "
    "read_plan job_forecast",
    "make": "DEFAULT_SAMPLES DEFAULT_PILOT_C PlanArgs make_plan",
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names.split()}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    path = module if module.startswith("genbench.") else f"{__name__}.{module}"
    return getattr(importlib.import_module(path), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
