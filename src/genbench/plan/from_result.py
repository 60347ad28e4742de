"""A plan from a `genbench run` result (`--from`): the sustained rate's arithmetic, with the
field's burst method beside it and the rate's own bar."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from genbench import fmt
from genbench.errors import UsageError
from genbench.plan.bar import CONFIDENCE, series_halfwidth
from genbench.plan.document import new_plan_doc
from genbench.plan.from_rate import arithmetic
from genbench.plan.storage import (
    JSONL_OVERHEAD_BYTES,
    HiddenStates,
    StorageModel,
    storage_from_tokens,
)
from genbench.plan.units import duration
from genbench.records import RequestRecord, read_records
from genbench.run.knee import plan_note
from genbench.run.result import REQUESTS_FILE
from genbench.stats import steady_window, token_events

FIELD_CONCURRENCY = 32  # the field's burst was measured at C=32
# a sweep whose requests averaged less than this share of the job's tokens per sample did
# not reach the job's length (the slack keeps a natural-length run's own mean from tripping)
REACHED_LENGTH = 0.9


@dataclass
class _RunRates:
    """What a run result gives the forecast: sustained and burst rates by concurrency, the
    sustained rates' bars, and tokens per sample with their thinking share."""

    sustained: dict[int, float]
    burst: dict[int, float]
    bars: dict[int, float]
    tokens_per_sample: float
    tokens_per_sample_basis: str
    thinking_share: float
    field_c: int | None  # the burst concurrency of the field's method (None: no burst)
    thinking_share_basis: str = ""
    climb: dict[str, Any] | None = None  # the run's climb (run/knee.py), when it climbed

    @property
    def best_c(self) -> int:
        """The climb's knee (past it the server preempted or queued), else the fastest C."""
        knee = (self.climb or {}).get("knee")
        return knee if knee in self.sustained else max(self.sustained, key=self.sustained.get)

    def time_at(self, tokens: float, c: int, servers: int = 1) -> dict[str, Any]:
        """Seconds for `tokens` at the sustained rate of C on `servers`, with the rate's bar."""
        seconds = tokens / (self.sustained[c] * servers)
        return {**duration(seconds), **_with_bar(seconds, self.bars.get(c))}

    def ours(self, tokens: float, c: int) -> dict[str, Any]:
        """A row's forecast at the sustained rate of C on one server (ours_best, ours_chosen)."""
        return {"concurrency": c, "tok_per_s": self.sustained[c], **self.time_at(tokens, c)}


def plan_from_result(
    doc: dict[str, Any],
    samples: Sequence[int],
    servers: int,
    concurrency: int | None,
    tokens_per_sample: float | None,
    hidden: HiddenStates | None,
    bytes_per_token: float | None,
    *,
    tokens_basis: str | None = None,
) -> dict[str, Any]:
    """Sustained-rate arithmetic from a `run` result, with the field's burst method beside.
    `tokens_basis` says where a given `tokens_per_sample` came from (default: the flag)."""
    path = doc.get("_path", "result")
    notes: list[str] = []
    rates, bpt = _run_rates(doc, path, concurrency, tokens_per_sample, notes)
    if tokens_basis is not None:
        rates.tokens_per_sample_basis = tokens_basis
    storage = storage_from_tokens(
        rates.tokens_per_sample,
        bytes_per_token or bpt,
        hidden,
        basis=(
            None
            if bytes_per_token or not bpt
            else f"{bpt:.2f} bytes per output token (measured in the run's requests.jsonl) "
            f"+ {JSONL_OVERHEAD_BYTES} bytes per line; prompts not counted"
        ),
        token_ids=bool((doc.get("check") or {}).get("token_ids")),
    )
    target = doc.get("target") or {}
    plan = new_plan_doc(
        "result",
        {
            "kind": "result",
            "path": str(path),
            "url": target.get("url"),
            "model": target.get("model"),
            "server": (target.get("server") or {}).get("kind"),
        },
        {
            "samples": list(samples),
            "servers": servers,
            "concurrency": concurrency,
            "tokens_per_sample": tokens_per_sample,
        },
    )
    plan["model"] = _model(rates, storage.basis)
    plan["model"]["single_stream_tps"] = (doc.get("single_stream") or {}).get("mean_decode_tps")
    sweep_len = _sweep_lengths(doc)
    plan["model"]["sweep_output_tokens_by_concurrency"] = {
        str(c): n for c, n in sorted(sweep_len.items())
    }
    plan["model"]["reach"] = _reach(rates, concurrency, sweep_len)
    plan["rows"] = [_row(rates, s, servers, concurrency, storage) for s in samples]
    said = any("throughput changes with length" in n for n in notes)  # _length_note's, once
    plan["notes"] = notes + [r for r in plan["model"]["reach"] if not (said and "averaged" in r)]
    _acceptance(plan, doc, concurrency if concurrency is not None else rates.best_c)
    return plan


def _acceptance(plan: dict[str, Any], doc: dict[str, Any], c: int) -> None:
    """A speculative run's rate carries the acceptance of the prompts it ran: the plan keeps
    it, and says when those were genbench's built-in prompts, not the job's."""
    phase = next((p for p in doc.get("phases") or () if p.get("kind") == "sustained"
                  and p.get("concurrency") == c), None)  # fmt: skip
    acc = ((phase or {}).get("summary") or {}).get("acceptance")
    if not acc:
        return
    plan["acceptance"] = acc
    if (doc.get("workload") or {}).get("prompts") != "file" and not doc.get("_rescaled"):
        plan["notes"].append(
            f"speculative decoding: this rate carries the acceptance of genbench's built-in "
            f"prompts ({acc['length']:.2f} tokens per verify step at C={c}); the job's prompts "
            "accept as they do: measure them (run --input FILE, or plan --prompts FILE "
            "--url URL, a pilot on your prompts; docs/acceptance.md)"
        )


def _reach(rates: _RunRates, concurrency: int | None, sweep_len: dict[int, float]) -> list[str]:
    """Where the run's sweep fell short of the job: its requests shorter than the job's
    samples, or its best rate at the highest concurrency it tried."""
    c = concurrency if concurrency is not None else rates.best_c
    out: list[str] = []
    mean = sweep_len.get(c)
    if mean is not None and mean < REACHED_LENGTH * rates.tokens_per_sample:
        out.append(
            f"the sweep's requests at C={c} averaged {fmt.count(mean)} output tokens, the "
            f"job's {fmt.count(rates.tokens_per_sample)}: longer outputs decode over longer "
            "contexts, usually slower, so this forecast is likely short"
        )
    if concurrency is None and rates.climb is not None:
        out.append(plan_note(rates.climb, c))
    elif concurrency is None and len(rates.sustained) > 1 and c == max(rates.sustained):
        out.append(
            f"the sustained rate was highest at C={c}, the highest the run measured: "
            "a higher C may be faster still"
        )
    return out


def _sweep_lengths(doc: dict[str, Any]) -> dict[int, float]:
    """Mean output tokens per answered request of each sustained phase, by concurrency."""
    out: dict[int, float] = {}
    for p in doc.get("phases") or []:
        s = p.get("summary") or {}
        if p.get("kind") == "sustained" and p.get("concurrency") and s.get("ok"):
            out[int(p["concurrency"])] = float(s.get("output_tokens") or 0) / int(s["ok"])
    return out


def measured_concurrency(doc: dict[str, Any], concurrency: int) -> tuple[int, str | None]:
    """The measured C to rate the job's `concurrency` at, and what the row must say when it
    is not the job's: the nearest measured below it (a lower C is slower, so the job is not
    made to look faster than measured), else the lowest measured (which may be faster)."""
    sustained = _by_c(doc, "sustained")
    if not sustained or concurrency in sustained:
        return concurrency, None
    below = [c for c in sustained if c < concurrency]
    if below:
        c = max(below)
        if c == max(sustained):
            return c, f"sweep reached C={c} only, not the job's C={concurrency}: rated at C={c}"
        return c, f"C={concurrency} not measured: rated at C={c}, the nearest below"
    c = min(sustained)
    return c, (
        f"sweep's lowest C is {c}, above the job's C={concurrency}: rated at C={c}, "
        "likely faster than the job will run"
    )


def natural_tokens_per_sample(docs: Sequence[dict[str, Any]]) -> tuple[float, str] | None:
    """Tokens per sample pooled over runs of natural lengths (every request of every run
    weighs alike), with its basis; None unless every run let the model stop on its own."""
    ok = out = 0
    for doc in docs:
        if not (doc.get("config") or {}).get("natural"):
            return None
        n, o, _ = _phase_sums(doc)
        ok, out = ok + n, out + o
    if not ok:
        return None
    return out / ok, f"mean output length of the runs' {ok} natural-length requests, pooled"


def _run_rates(
    doc: dict[str, Any],
    path: str,
    concurrency: int | None,
    tokens_per_sample: float | None,
    notes: list[str],
) -> tuple[_RunRates, float | None]:
    """The run's rates and the bytes per token its requests.jsonl measured; a UsageError
    naming the field when the run cannot give a forecast."""
    sustained = _by_c(doc, "sustained")
    status = doc.get("status")
    if not sustained and status not in (None, "complete"):
        # the run stopped before its sustained phases: say that, not "no sustained phase"
        said = doc.get("status_message") or "no message"
        how = "was cut short"
        if status == "running":
            how = "has not finished (still going, or killed)"
        raise UsageError(
            f"{path}: the run {how} before any sustained phase (field 'status' is "
            f"{status}: {said}): run it again to the end, then plan from it"
        )
    if status not in (None, "complete"):
        notes.append(
            f"the run {'has not finished' if status == 'running' else 'stopped early'} "
            f"(status {status}): rated from the levels it finished"
        )
    if not sustained:
        raise UsageError(
            f"{path}: field 'sweep.sustained' has no steady rate: plan needs a sustained "
            "phase (genbench run --shape sustained, or the default burst,sustained)"
        )
    if concurrency is not None and concurrency not in sustained:
        have = ", ".join(str(c) for c in sorted(sustained))
        raise UsageError(
            f"--concurrency {concurrency}: {path} measured sustained load only at C = {have}"
        )
    ok, out, think = _phase_sums(doc)
    if tokens_per_sample is not None:
        tps, basis = tokens_per_sample, "given: --tokens-per-sample"
    elif bool((doc.get("config") or {}).get("natural")) and ok:
        tps = out / ok
        basis = f"mean output length of the run's {ok} natural-length requests"
        notes.append(
            "tokens per sample measured on the run's built-in prompts, not yours: "
            "pass --tokens-per-sample, or forecast from a pilot (--prompts)"
        )
    else:
        raise UsageError(
            f"{path}: the run forced every output to a fixed length (field 'config.natural' "
            "is false), so it did not measure tokens per sample: give your samples' mean "
            "output tokens (thinking included), genbench plan --from "
            f"{Path(path).parent} --tokens-per-sample T, or measure them on your prompts: "
            "genbench plan --prompts FILE --url URL"
        )
    burst = _by_c(doc, "burst")
    bpt, bars = _read_requests(Path(path), _sustained_phases(doc))
    rates = _RunRates(
        sustained, burst, bars, tps, basis, think / out if out else 0.0, _field_c(burst, notes)
    )
    rates.climb = doc.get("climb")
    _length_note(doc, tps, notes)
    rates.thinking_share_basis = _thinking_basis(doc, ok, out, think, tps)
    return rates, bpt


LENGTH_TOLERANCE = 0.25  # tokens per sample this far from the sweep's length get a note


def sweep_length(doc: dict[str, Any]) -> float | None:
    """Mean output tokens of the requests the sustained rates were measured on."""
    ok, out, _ = _phase_sums(doc, "sustained")
    if ok and out:
        return out / ok
    cfg = (doc.get("config") or {}).get("sweep_tokens")
    return float(cfg) if isinstance(cfg, int | float) and cfg > 0 else None


def _length_note(doc: dict[str, Any], tps: float, notes: list[str]) -> None:
    """Throughput falls as outputs grow (longer contexts decode slower): a rate measured at
    one length forecasts a job of much longer (or shorter) samples with a bias."""
    measured = sweep_length(doc)
    if not measured or abs(tps / measured - 1) <= LENGTH_TOLERANCE:
        return
    natural = bool((doc.get("config") or {}).get("natural"))
    how = "natural-length outputs of, on average," if natural else "outputs forced to"
    direction = "optimistic" if tps > measured else "pessimistic"
    notes.append(
        f"the sustained rates were measured on {how} {fmt.count(measured)} tokens, and "
        f"this job's samples are {fmt.count(tps)} tokens "
        f"({fmt.pct(tps / measured - 1, signed=True)}): throughput "
        f"changes with length, so the times are likely {direction}; measure at the job's "
        f"length (genbench run --sweep-tokens {round(tps)}) or forecast from a pilot "
        "(--prompts)"
    )


def _thinking_basis(doc: dict[str, Any], ok: int, out: int, think: int, tps: float) -> str:
    """How the thinking share was had, in words: it is applied to the job's length as is."""
    if not out:
        return "no output tokens measured"
    if not think:
        return f"no thinking tokens in the run's {fmt.counted(ok, 'request')}"
    natural = bool((doc.get("config") or {}).get("natural"))
    where = (
        f"the run's {fmt.counted(ok, 'natural-length request')} on its built-in prompts"
        if natural
        else f"the run's {fmt.counted(ok, 'request')} at forced lengths, cut before the model "
        "finished: "
        "a whole answer's share may differ"
    )
    how = {"estimate": " (thinking estimated by chunks: the server did not count it)",
           "tokenizer": " (thinking counted by the server's /tokenize: its usage did not)",
           }.get((doc.get("thinking") or {}).get("tokens_from") or "", "")  # fmt: skip
    return (
        f"{fmt.count(think)} thinking of {fmt.count(out)} output tokens{how} in {where}; "
        f"applied as is to {fmt.count(tps)} tokens per sample"
    )


def _field_c(burst: dict[int, float], notes: list[str]) -> int | None:
    """The field measured its burst at C=32: that, or the nearest the run has."""
    if not burst:
        notes.append("the run has no burst phase: no field column")
        return None
    if FIELD_CONCURRENCY in burst:
        return FIELD_CONCURRENCY
    field_c = min(burst, key=lambda c: (abs(c - FIELD_CONCURRENCY), -c))
    notes.append(f"no burst at C={FIELD_CONCURRENCY} in the run: field column uses C={field_c}")
    return field_c


def _model(rates: _RunRates, storage_basis: str) -> dict[str, Any]:
    return {
        "tokens_per_sample": rates.tokens_per_sample,
        "tokens_per_sample_basis": rates.tokens_per_sample_basis,
        "thinking_share": rates.thinking_share,
        "thinking_share_basis": rates.thinking_share_basis,
        "sustained_tps_by_concurrency": {str(c): r for c, r in sorted(rates.sustained.items())},
        "best_concurrency": rates.best_c,
        "rate_halfwidth_by_concurrency": {str(c): h for c, h in sorted(rates.bars.items())},
        "bar_basis": (
            f"the sustained rate's 95% bar only: its steady window cut into {RATE_WINDOWS} "
            "stretches (Student t); tokens per sample taken as exact, no start-up or tail"
        ),
        "field": {
            "method": "burst tok/s at C=32 × tokens per sample from the prompts used",
            "concurrency": rates.field_c,
            "tok_per_s": rates.burst.get(rates.field_c) if rates.field_c else None,
            "tokens_per_sample": rates.tokens_per_sample,
        },
        "storage_basis": storage_basis,
    }


def _row(
    rates: _RunRates, s: int, servers: int, concurrency: int | None, storage: StorageModel
) -> dict[str, Any]:
    """One sample count: ours at the best C (and the chosen one, and on M servers), and the
    field's burst arithmetic beside it."""
    tokens = s * rates.tokens_per_sample
    share = rates.thinking_share
    best = rates.best_c
    row: dict[str, Any] = {
        "samples": s,
        "tokens": {"output": tokens, "thinking": tokens * share, "answer": tokens * (1 - share)},
        "ours_best": rates.ours(tokens, best),
        "storage": storage.row(s, tokens),
    }
    if concurrency is not None:
        row["ours_chosen"] = rates.ours(tokens, concurrency)
    if servers > 1:
        c_used = concurrency if concurrency is not None else best
        row["at_servers"] = {
            "servers": servers,
            "concurrency": c_used,
            **rates.time_at(tokens, c_used, servers),
        }
    if rates.field_c is not None:
        burst = rates.burst[rates.field_c]
        f = arithmetic(s, rates.tokens_per_sample, burst, 1)
        row["field"] = {
            "concurrency": rates.field_c,
            "tok_per_s": burst,
            "tokens": f["tokens"],
            **duration(f["seconds"]),
        }
    return row


def _phase_sums(doc: dict[str, Any], kind: str | None = None) -> tuple[int, int, int]:
    """Requests answered, output and thinking tokens over the run's measured phases (its
    phases of `kind` alone, when given)."""
    ok = out = think = 0
    for p in doc.get("phases") or []:
        if p.get("kind") == "warmup" or (kind is not None and p.get("kind") != kind):
            continue
        s = p.get("summary") or {}
        ok += int(s.get("ok") or 0)
        out += int(s.get("output_tokens") or 0)
        think += int(s.get("thinking_tokens") or 0)
    return ok, out, think


def _by_c(doc: dict[str, Any], shape: str) -> dict[int, float]:
    table = ((doc.get("sweep") or {}).get(shape) or {}).get("by_concurrency") or {}
    out: dict[int, float] = {}
    for k, v in table.items():
        try:
            c = int(k)
        except (TypeError, ValueError):
            continue
        if isinstance(v, int | float) and v > 0:
            out[c] = float(v)
    return out


def _sustained_phases(doc: dict[str, Any]) -> dict[int, str]:
    return {
        int(p["concurrency"]): p["name"]
        for p in doc.get("phases") or []
        if p.get("kind") == "sustained" and p.get("concurrency") and p.get("name")
    }


def _read_requests(
    result_path: Path, phases: dict[int, str]
) -> tuple[float | None, dict[int, float]]:
    """From the run's requests.jsonl, in one pass: output bytes per token (None when it
    has none) and the steady-rate half-width of each sustained phase (`rate_halfwidth`).
    Nothing when the file is missing or unreadable."""
    req = result_path.parent / REQUESTS_FILE
    if not req.exists():
        return None, {}
    chars = tokens = 0
    by_phase: dict[str, list[RequestRecord]] = {name: [] for name in phases.values()}
    try:
        for r in read_records(req):
            if r.ok and r.completion_tokens:
                chars += r.answer_chars + r.thinking_chars
                tokens += r.completion_tokens
            if r.phase in by_phase:
                by_phase[r.phase].append(r)
    except (OSError, ValueError):
        return None, {}
    bars: dict[int, float] = {}
    for c, name in phases.items():
        hw = rate_halfwidth(by_phase[name], c) if by_phase[name] else None
        if hw is not None:
            bars[c] = hw
    return (chars / tokens if tokens and chars else None), bars


RATE_WINDOWS = 10  # the steady window is cut into this many stretches for the rate's bar


def rate_halfwidth(records: Sequence[RequestRecord], concurrency: int) -> float | None:
    """Relative 95% half-width of a sustained phase's steady rate: its steady window is cut
    into stretches of equal time and the rate's standard error taken across them
    (`series_halfwidth`). A server that drifts within the window widens it. None when the
    window is missing or too short to cut."""
    win = steady_window(records, concurrency, None)
    if win is None:
        return None
    start, end = win
    edges = np.linspace(start, end, RATE_WINDOWS + 1)
    tokens = np.zeros(RATE_WINDOWS)
    for r in records:
        if r.ok:
            for t, n, _ in token_events(r):
                if start <= t < end:
                    tokens[
                        min(int(np.searchsorted(edges, t, side="right")) - 1, RATE_WINDOWS - 1)
                    ] += n
    if tokens.sum() <= 0 or np.count_nonzero(tokens) < RATE_WINDOWS // 2:
        return None
    return series_halfwidth(tokens.tolist())


def _with_bar(seconds: float, rate_hw: float | None) -> dict[str, Any]:
    """Time at a rate known to ±rate_hw: the rate's bar, inverted."""
    if rate_hw is None:
        return {}
    hw = min(rate_hw, 0.95)
    return {
        "lo_s": seconds / (1 + hw),
        "hi_s": seconds / (1 - hw),
        "confidence": CONFIDENCE,
        "rel_halfwidth": 1 / (1 - hw) - 1,
    }
