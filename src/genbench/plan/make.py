"""`genbench plan` as a function: its flags checked, then a plan document from the field's
arithmetic, a run result, or a pilot on the user's prompts (docs/plan.md)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from genbench import fmt
from genbench.check.preflight import CheckReport, CheckRetries, preflight
from genbench.errors import ExitCode, GenbenchError, ServerDown, UsageError, checked, positive
from genbench.generate.input.params import RequestFlags
from genbench.generate.input.reader import Row
from genbench.generate.input.tools import POLICIES
from genbench.generate.pipeline import Retries
from genbench.generate.planned import DEFAULT_CONCURRENCY
from genbench.generate.recipe import TURNS, Recipe
from genbench.plan import rescale
from genbench.plan.bar import target_of
from genbench.plan.climb import (
    CLIMB_SHARE,
    climb,
    climb_note,
    pilot_level,
    plan_concurrency,
)
from genbench.plan.configurations import plan_from_results
from genbench.plan.decide import Candidate, Deadline, Pricing, decide, parse_deadline, parse_gpus
from genbench.plan.disk import add_disk_check
from genbench.plan.document import add_asked, save_plan
from genbench.plan.from_pilot import plan_from_pilot
from genbench.plan.from_rate import plan_arithmetic
from genbench.plan.from_result import plan_from_result
from genbench.plan.pilot import (
    PilotRun,
    PilotStop,
    draws_of,
    first_turn_requests,
    pilot_stream,
    read_pilot_input,
    run_pilot,
)
from genbench.plan.pilot_doc import PilotSetup, pilot_inputs, pilot_source, stop_reason
from genbench.plan.replan import is_plan, replan
from genbench.plan.storage import HiddenStates, hidden_states, storage_from_tokens
from genbench.plan.units import parse_counts, speed_drift
from genbench.records import RequestRecord
from genbench.run.knee import CLIMB_MAX
from genbench.run.result import REQUESTS_FILE, configuration_dirs, load_result, prepare_out_dir
from genbench.settings import Setting, setting
from genbench.transport import acceptance
from genbench.transport.endpoint import endpoint
from genbench.transport.eventloop import run_async
from genbench.transport.open_files import fit_descriptors
from genbench.transport.thinking import parse_dialect, parse_tags

DEFAULT_SAMPLES = (100_000, 200_000, 500_000, 900_000)
DEFAULT_PILOT_C = DEFAULT_CONCURRENCY  # generate's too: the two commands share it


class PilotWatch(Protocol):
    """What the plan tells while it works (`genbench.plan.render.PlanConsole` shows it): a
    line of news (console markup), and the pilot's requests as they end."""

    def say(self, line: str) -> None: ...

    def pilot_started(self, total: int | None, stop: PilotStop | None) -> None: ...

    def record(self, rec: RequestRecord) -> None: ...

    def pilot_ended(self) -> None: ...


class PilotInterrupted(GenbenchError):
    """The pilot was interrupted (Ctrl-C): its records so far are kept."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, out: Path, stop: BaseException | None = None) -> None:
        super().__init__(
            f"pilot records so far in {out}", getattr(stop, "exit_code", ExitCode.INTERRUPTED)
        )


@dataclass
class PlanArgs(RequestFlags):
    """`genbench plan`'s flags, as given (`from_` is --from, `out_dir` --out)."""

    samples: str | None
    servers: int
    from_: list[Path] | None
    prompts: Path | None
    rate: float | None
    tokens_per_sample: float | None
    concurrency: str | None  # N, or auto (the pilot climbs: plan/climb.py)
    url: str | None
    model: str | None
    api_key_env: str
    api_key_file: Path | None
    pilot: int | None
    target_error: float | None  # percent; None: ±5%, or a re-plan's pilot's
    pilot_min_time: float
    pilot_max_time: float
    # percent, or "default" (generate.wander.unseen_drift); None: not given (a pilot takes
    # the default, a re-plan its pilot's plan's): `speed_drift`
    speed_drift: str | None
    turns: str
    warmup: float
    seed: int
    bootstrap: int
    hidden_size: int | None
    layers_captured: int | None
    dtype_bytes: int
    bytes_per_token: float | None
    timeout: float
    out_dir: Path | None
    deadline: str | None = None
    price: float | None = None
    gpus_per_server: str | None = None
    think_tags: str = "<think>,</think>"
    think_dialect: str = "auto"
    tool_policy: str = "replay"  # as the job's generate --tool-policy
    job_out: Path | None = None  # the job's output directory: its disk's free space


@dataclass
class _Ask:
    """What the decision is asked: a deadline, a price; and what the plan must say of it."""

    deadline: Deadline | None
    pricing: Pricing | None
    notes: list[str]

    @property
    def wanted(self) -> bool:
        return self.deadline is not None or self.pricing is not None


def make_plan(args: PlanArgs, watch: PilotWatch) -> tuple[dict[str, Any], Path | None]:
    """The plan document, and the plan.json it was saved to (None: the arithmetic's is not
    saved). A bad flag or input is a UsageError before any request is sent."""
    c, climbing = plan_concurrency(args.concurrency)
    if climbing and (args.from_ or not args.prompts):
        raise UsageError("-c auto makes plan's pilot climb to the server's knee: it needs "
                         "--prompts FILE and --url, without --from (a run's own climb is "
                         "`genbench run` without -c)")  # fmt: skip
    args = replace(args, concurrency=c)  # type: ignore[arg-type]  # a number from here on
    if len(args.from_ or []) == 1 and is_plan(args.from_[0]):  # type: ignore[index]
        return _replanned(args, args.from_[0])  # type: ignore[index]
    counts, hidden = _check(args)
    froms = [d for p in args.from_ or [] for d in configuration_dirs(p)]  # run --serve A B
    ask = _ask(args, max(1, len(froms)))
    where: Path | None = None
    if args.rate is not None:
        if args.tokens_per_sample is None:
            raise UsageError("--rate needs --tokens-per-sample: the arithmetic is N × T / rate")
        storage = storage_from_tokens(args.tokens_per_sample, args.bytes_per_token, hidden)
        doc = plan_arithmetic(counts, args.rate, args.tokens_per_sample, args.servers, storage)
    elif len(froms) > 1:
        results = [load_result(p) for p in froms]
        doc = plan_from_results(
            results, counts, args.servers, args.concurrency, args.tokens_per_sample, hidden,
            args.bytes_per_token, ask.deadline, ask.pricing,
        )  # fmt: skip
        where = args.out_dir or Path("genbench-runs") / f"{datetime.now():%Y%m%d-%H%M%S}-plan"
        prepare_out_dir(where)
    elif froms and args.prompts:
        doc, where = _plan_rescaled(args, load_result(froms[0]), counts, hidden, watch)
    elif froms:
        result = load_result(froms[0])
        doc = _from_result(result, args, counts, hidden)
        where = Path(result["_path"]).parent  # beside the run, where its report finds it
        if args.out_dir is not None and args.out_dir.resolve() != where.resolve():
            where = args.out_dir
            prepare_out_dir(where)
    else:
        if not args.url:
            raise UsageError("--prompts needs --url: the server to run the pilot on")
        if args.tokens_per_sample is not None:
            raise UsageError("--tokens-per-sample does not apply to a pilot: it measures them")
        doc, where = _plan_pilot(args, counts, hidden, watch, climbing)
    if ask.wanted and "decision" not in doc:
        doc["decision"] = decide([_candidate(doc)], args.servers, ask.deadline, ask.pricing)
    doc["notes"].extend(ask.notes)
    add_asked(doc)
    add_disk_check(doc, args.job_out)
    return doc, save_plan(doc, where) if where is not None else None


def _replanned(args: PlanArgs, path: Path) -> tuple[dict[str, Any], Path]:
    """`--from PLAN_DIR`: the pilot's plan again from its records, nothing sent."""
    counts = parse_counts("--samples", args.samples) if args.samples else list(DEFAULT_SAMPLES)
    for name in ("servers", "bootstrap", "hidden_size", "layers_captured", "dtype_bytes",
                 "price"):  # fmt: skip
        positive("--" + name.replace("_", "-"), getattr(args, name))
    speed_drift(args.speed_drift)  # checked before anything is read or sent
    if args.tokens_per_sample is not None or args.rate is not None:
        raise UsageError("--tokens-per-sample and --rate do not apply to a pilot's plan: its "
                         "records measured them")  # fmt: skip
    ask = _ask(args, 1)
    hidden = hidden_states(args.hidden_size, args.layers_captured, args.dtype_bytes)
    doc, where = replan(path, args, counts, hidden)
    if ask.wanted:
        doc["decision"] = decide([_candidate(doc)], args.servers, ask.deadline, ask.pricing)
    doc["notes"].extend(ask.notes)
    add_asked(doc)
    add_disk_check(doc, args.job_out)
    home = path if path.is_dir() else path.parent
    if where.resolve() != home.resolve():
        prepare_out_dir(where)
    return doc, save_plan(doc, where)


def _from_result(
    result: dict[str, Any], args: PlanArgs, counts: list[int], hidden: HiddenStates | None
) -> dict[str, Any]:
    """The plan from one run result at the flags' servers, concurrency and tokens per sample."""
    return plan_from_result(result, counts, args.servers, args.concurrency,
                            args.tokens_per_sample, hidden, args.bytes_per_token)  # fmt: skip


def _candidate(doc: dict[str, Any]) -> Candidate:
    """The one configuration a plan of one source decides on, named as a person calls it."""
    src = doc.get("source") or {}
    if doc["mode"] == "result":
        name = Path(src.get("path") or "result").parent.name or "result"
    else:
        name = str(src.get("model") or doc["mode"])
    return Candidate(name, doc, list((doc.get("model") or {}).get("reach") or []))


def _ask(args: PlanArgs, configurations: int) -> _Ask:
    """--deadline, and the price per GPU-hour and GPUs per server from the flags or the
    settings file (flags first), checked before anything is measured."""
    deadline = Deadline(args.deadline, parse_deadline(args.deadline)) if args.deadline else None
    price = setting("plan", "price_per_gpu_hour", "--price", args.price)
    gpus = setting("plan", "gpus_per_server", "--gpus-per-server", args.gpus_per_server)
    if price is None:
        if args.gpus_per_server is not None:
            raise UsageError(
                "--gpus-per-server is for the cost: give --price (per GPU-hour) too, or set "
                "price_per_gpu_hour in the settings file (docs/plan.md)"
            )
        return _Ask(deadline, None, [])
    if gpus is None:
        if price.source == "--price":
            raise UsageError(
                "--price is per GPU-hour: give --gpus-per-server G too, or set "
                "gpus_per_server in the settings file (docs/plan.md)"
            )
        note = f"a price per GPU-hour is set ({price.source}) but no GPUs per server: "
        return _Ask(deadline, None, [note + "pass --gpus-per-server for the cost"])
    listed = Setting(parse_gpus(gpus.value, configurations), gpus.source)
    return _Ask(deadline, Pricing(price, listed), [])


def _check(args: PlanArgs) -> tuple[list[int], HiddenStates | None]:
    """One source, positive numbers, known choices; the sample counts and hidden states."""
    given = {"--from": args.from_, "--prompts": args.prompts, "--rate": args.rate}
    modes = [m for m, v in given.items() if v]
    if modes == ["--from", "--prompts"]:  # a run's rate at the acceptance of the prompts
        if len(args.from_ or []) > 1 or not args.url:
            raise UsageError(
                "--from RUN with --prompts FILE rescales one speculative run to your prompts' "
                "acceptance: give one --from, and --url (the run's server, for the pilot)"
            )
    elif len(modes) != 1:
        raise UsageError(
            ("choose one of " if modes else "nothing to plan from: give one of ")
            + "--from RESULT, --prompts FILE (a pilot) or --rate TOK_S --tokens-per-sample T"
            + (f" (got {' and '.join(modes)})" if len(modes) > 1 else "")
        )
    counts = parse_counts("--samples", args.samples) if args.samples else list(DEFAULT_SAMPLES)
    for name in (
        "servers", "rate", "tokens_per_sample", "concurrency", "pilot", "max_tokens",
        "bootstrap", "hidden_size", "layers_captured", "dtype_bytes", "bytes_per_token",
        "timeout", "target_error", "pilot_max_time", "price",
    ):  # fmt: skip
        positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.turns not in TURNS:
        raise UsageError(f"--turns must be all or last, got {args.turns!r}")
    if args.tool_policy not in POLICIES:
        raise UsageError(f"--tool-policy must be replay or keep, got {args.tool_policy!r}")
    speed_drift(args.speed_drift)  # checked before anything is read or sent
    if args.warmup < 0:
        raise UsageError(f"--warmup-time must be 0 or more seconds, got {args.warmup}")
    if args.pilot and args.pilot_min_time:  # it would be ignored: a pilot of K stops at K
        raise UsageError(
            f"--pilot-min-time applies to a pilot that stops when its bar is narrow enough; "
            f"--pilot {args.pilot} runs {args.pilot} requests: give one or the other (a "
            "longer fixed pilot: a larger --pilot)"
        )
    if args.pilot_min_time < 0 or args.pilot_min_time > args.pilot_max_time:
        raise UsageError(
            f"--pilot-min-time {args.pilot_min_time:g} must be between 0 and --pilot-max-time "
            f"{args.pilot_max_time:g}"
        )
    return counts, hidden_states(args.hidden_size, args.layers_captured, args.dtype_bytes)


def _plan_pilot(
    args: PlanArgs,
    counts: list[int],
    hidden: HiddenStates | None,
    watch: PilotWatch,
    climbing: bool = False,
) -> tuple[dict[str, Any], Path]:
    """Check the prompts and the server, run the pilot (with `climbing`: at the knee its
    climb found), and plan from what it saw (the plan and the directory it is to be saved
    in)."""
    pilot, check, run = _pilot_run(args, watch, climbing)
    doc = plan_from_pilot(
        run,
        pilot.concurrency,
        counts,
        args.servers,
        hidden,
        pilot_source(pilot, check),
        pilot_inputs(pilot, args, run, counts),
        args.bootstrap,
        args.seed,
    )
    if pilot.climbed is not None:  # the concurrency chosen, and why, first of the notes
        doc["climb"] = pilot.climbed.to_dict()
        doc["notes"].insert(0, climb_note(doc["climb"]))
    return doc, pilot.out


def _plan_rescaled(
    args: PlanArgs,
    result: dict[str, Any],
    counts: list[int],
    hidden: HiddenStates | None,
    watch: PilotWatch,
) -> tuple[dict[str, Any], Path]:
    """`--from RUN --prompts FILE --url URL`: the run's plan at its own rate and at the rate
    rescaled to the tokens per step the pilot measured on the prompts (plan/rescale.py);
    saved beside the pilot's records."""
    unscaled = _from_result(result, args, counts, hidden)
    run_t = rescale.run_tokens_per_step(result)
    if not run_t:  # before the pilot: nothing it measured could be used
        raise UsageError(
            f"{result.get('_path', 'result')}: no request of its sustained phases said its "
            "speculative acceptance (an autoregressive server, or one that does not say it: "
            "docs/acceptance.md), so there is nothing to rescale: plan --from it alone"
        )
    pilot, _, run = _pilot_run(args, watch)
    pilot_t = rescale.tokens_per_step(run.records)
    if pilot_t is None:
        raise GenbenchError(
            f"no pilot request said its speculative acceptance (records in {pilot.out}): "
            "is --url the run's speculative server? (genbench check says)"
        )
    pilot_t["concurrency"] = pilot.concurrency
    scaled, factors = rescale.scaled_result(result, pilot_t, run_t)
    doc = _from_result(scaled, args, counts, hidden)
    rescale.attach(doc, unscaled, pilot_t, run_t, factors)
    doc["source"]["pilot_records"] = str(pilot.out / REQUESTS_FILE)
    return doc, pilot.out


def _pilot_run(args: PlanArgs, watch: PilotWatch, climbing: bool = False
               ) -> tuple[PilotSetup, CheckReport, PilotRun]:  # fmt: skip
    """The pilot as the flags set it up, the server's check, and what the pilot saw."""
    params = args.params()
    stop = None
    if not args.pilot:
        stop = PilotStop(
            target=target_of(args.target_error), min_s=args.pilot_min_time,
            max_s=args.pilot_max_time,
        )
    concurrency = args.concurrency or DEFAULT_PILOT_C
    assert args.url and args.prompts
    ep = endpoint(args.url, args.api_key_env, args.api_key_file)
    fit_descriptors(CLIMB_MAX if climbing else concurrency, 1, "--concurrency")
    # generate's reader: a file generate refuses fails here, with the same message, before
    # the server is touched
    source = read_pilot_input(args.prompts, args.seed)
    size = args.pilot or max(200, 8 * concurrency)
    if stop is not None:  # never longer than the job: its largest sample count
        stop.max_requests = max(parse_counts("--samples", args.samples) if args.samples
                                else DEFAULT_SAMPLES)  # fmt: skip
        stop.min_requests = min(size, source.total, stop.max_requests)
    out = args.out_dir or Path("genbench-runs") / f"{datetime.now():%Y%m%d-%H%M%S}-plan"
    pilot = PilotSetup(ep, source, concurrency, size, stop, params, out)
    tags, dialect = checked(parse_tags, args.think_tags), checked(parse_dialect, args.think_dialect)
    r = Retries()  # the pilot's requests' (pilot.py): its test request retries as they do
    retries = CheckRetries(r.retries, r.backoff, r.max_backoff)
    check = run_async(preflight(ep, args.model, timeout=args.timeout, think_tags=tags,
                                think_dialect=dialect, retries=retries))  # fmt: skip
    if not check.ok:
        raise GenbenchError(f"preflight failed: {check.diagnosis}", check.exit_code)
    prepare_out_dir(out)
    if climbing:
        _climb(pilot, args, check, watch)
    run = _run(pilot, args, check, watch)
    return pilot, check, run


def warmup_rows(rows: Sequence[Row], concurrency: int) -> list[Row]:
    """4·C prompts for the warm-up, from the end of the pilot's (already random) order,
    which it sends last if at all: a server's prefix cache must not hold the prompts the
    pilot then measures (with a file of K + 4·C rows or more, a pilot of K sends none)."""
    return [rows[-1 - i % len(rows)] for i in range(4 * concurrency)]


def _climb(pilot: PilotSetup, args: PlanArgs, check: CheckReport, watch: PilotWatch) -> None:
    """-c auto: the climb (plan/climb.py) on the pilot's rows; the pilot then runs at the C
    it chose, for what is left of --pilot-max-time."""
    recipe = Recipe(pilot.params, args.turns, args.tool_policy)
    level = pilot_level(pilot.ep, check.model or "", recipe, args.timeout,
                        think=check.think_mode(), token_ids=check.token_ids,
                        accept=acceptance.ask_for(check.server.kind))  # fmt: skip
    budget = CLIMB_SHARE * args.pilot_max_time
    watch.say(f"[bold]genbench plan[/] climb: doubling C from 1 on {pilot.ep.base_url} until "
              f"the server's knee (at most {budget:g} s)")  # fmt: skip
    rows = pilot_stream(pilot.source.rows, args.seed + 2)
    try:
        got = run_async(climb(pilot.ep, rows, level, budget, watch.say))
    except (KeyboardInterrupt, asyncio.CancelledError) as e:
        raise PilotInterrupted(pilot.out, e) from None
    except ServerDown as e:
        raise GenbenchError(f"{e} in the pilot's climb", e.exit_code) from None
    watch.say(f"  {climb_note(got.to_dict())}")
    pilot.climbed, pilot.concurrency = got, got.chosen
    pilot.size = args.pilot or max(200, 8 * got.chosen)
    if pilot.stop is not None:
        pilot.stop.min_requests = min(pilot.size, pilot.source.total)
        pilot.stop.max_s = max(pilot.stop.min_s, args.pilot_max_time - got.wall_s)
        pilot.stop.climb_s = got.wall_s


def _run(pilot: PilotSetup, args: PlanArgs, check: CheckReport, watch: PilotWatch) -> PilotRun:
    """The warm-up and the pilot, on the server as `check` found it (its model, its thinking
    dialect, its token ids and acceptance), its progress told to `watch`."""
    rows, stop, c = pilot.source.rows, pilot.stop, pilot.concurrency
    stream = pilot_stream(rows, args.seed)
    # open-ended: until the bar is reached, at most every row once; fixed: K draws
    items = itertools.islice(stream, len(rows) if stop is not None else pilot.size)
    recipe = Recipe(pilot.params, args.turns, args.tool_policy)
    warm = first_turn_requests(warmup_rows(rows, c), recipe, "warm")
    warm_s = 0.0 if pilot.climbed is not None else args.warmup  # the climb's load warmed it
    size = (
        f"until ±{stop.target:.0%} (≥ {stop.min_requests}"
        + (f", ≥ {stop.min_s:g} s" if stop.min_s else "")
        + f", ≤ {stop.max_s:g} s) of {pilot.source.total:,} rows"
        if stop is not None
        else draws_of(pilot.size, pilot.source.total)
    )
    watch.say(
        f"[bold]genbench plan[/] pilot: {size} from "
        f"{args.prompts} at C={c} on {pilot.ep.base_url} → {pilot.out}"
        + (f" (after {warm_s:g} s of warm-up)" if warm_s else "")
    )
    watch.pilot_started(pilot.size if stop is None else None, stop)
    try:
        run = run_async(
            run_pilot(
                pilot.ep,
                check.model or "",
                items,
                c,
                pilot.out,
                watch.record,
                timeout=args.timeout,
                warmup=warm,
                warmup_s=warm_s,
                stop=stop,
                recipe=recipe,
                think=check.think_mode(),
                token_ids=check.token_ids,
                accept=acceptance.ask_for(check.server.kind),
            )
        )
    except (KeyboardInterrupt, asyncio.CancelledError) as e:
        raise PilotInterrupted(pilot.out, e) from None
    except ServerDown as e:
        raise GenbenchError(f"{e}; pilot records so far in {pilot.out}", e.exit_code) from None
    finally:  # on an error too: the progress bar is gone before the error is printed
        watch.pilot_ended()
    if not any(r.ok for r in run.records):
        kinds = sorted({r.error_kind or "?" for r in run.records})
        raise GenbenchError(f"every pilot request failed ({', '.join(kinds)}); see {pilot.out}")
    why = stop_reason(run, stop)
    watch.say(
        f"  pilot done: {fmt.counted(len(run.records), 'request')} in {run.wall_s:.1f} s"
        + (f" ({why})" if why else "")
        + "; simulating the job …"
    )
    return run
