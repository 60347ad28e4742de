"""A plan's forecast as text: where it came from, the figures it used, its time per sample
count with its bar, tokens and storage, and its notes.

The HTML report draws a plan from this (`report.forecast`), not from plan.json's raw keys:
a reader wants "421.6 h (413.1 – 430.4 h) at 1,758 tok/s", not
`ours_best.seconds 1,517,698`. The decision (servers, cost, configurations) is shaped by
`plan.tables`; this is the rest of what `genbench plan` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from genbench import fmt
from genbench.plan.document import ONE_SERVER
from genbench.plan.render import _bar_parts, _how, _model_check
from genbench.plan.tables import DecisionTable

# the parts of a bar plan.json may hold, in words (a part not named here shows its key)
PARTS = {
    "length": "the mean output length",
    "speed": "the server's speed",
    "misfit": "the model's misfit on the pilot",
}


@dataclass
class BarMark:
    """One sample count's forecast, its 95% range, and the field's number beside it."""

    samples: int
    seconds: float
    lo_s: float | None
    hi_s: float | None
    other: tuple[str, float] | None  # (what, seconds): the field's arithmetic or naive


@dataclass
class Forecast:
    what: str  # one sentence: the source of the forecast
    figures: list[tuple[str, str, str]]  # (label, value, detail): the numbers it used
    time: DecisionTable
    bar: list[str]  # what the bar covers and what it is made of
    tokens: DecisionTable
    notes: list[str]
    marks: list[BarMark] = field(default_factory=list)


def entry(doc: dict[str, Any], row: dict[str, Any]) -> dict[str, Any] | None:
    """The row's forecast on one server: the one `generate --plan` reads."""
    keys = ONE_SERVER.get(str(doc.get("mode")), ())
    return next((row[k] for k in keys if isinstance(row.get(k), dict)), None)


def forecast(doc: dict[str, Any]) -> Forecast:
    """The plan as text, whatever its mode (pilot, result, arithmetic)."""
    mode = doc.get("mode")
    what, figures = {"pilot": _pilot_head, "result": _result_head}.get(
        str(mode), _arithmetic_head
    )(doc)
    return Forecast(
        what=what,
        figures=figures,
        time=_time_table(doc),
        bar=_bar_lines(doc),
        tokens=_tokens_table(doc),
        notes=[str(n) for n in doc.get("notes") or []],
        marks=_marks(doc),
    )


def _src(doc: dict[str, Any]) -> str:
    src = doc.get("source") or {}
    return f"{src.get('model') or 'the model'} on {src.get('server') or 'an unknown server'}"


def _pilot_head(doc: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    m, src = doc.get("model") or {}, doc.get("source") or {}
    n = int(m.get("pilot_requests") or 0)
    rows = src.get("prompts_in_file")
    what = (
        f"A pilot of {fmt.counted(n, 'request')} at C={m.get('concurrency')} on {_src(doc)}, "
        f"from {src.get('prompts')}"
        + (f" ({fmt.counted(int(rows), 'row')})" if isinstance(rows, int) else "")
        + f": {fmt.duration(m.get('pilot_wall_s'))}, {fmt.pct(m.get('fail_rate'))} failed; "
        "the job simulated from what it measured."
    )
    out, think = m.get("output_tokens") or {}, (m.get("thinking_tokens") or {}).get("mean")
    steady = m.get("pilot_steady_tps")
    figures = [
        ("output tokens per sample", fmt.count(out.get("mean")),
         f"mean; p50 {fmt.count(out.get('p50'))}, p90 {fmt.count(out.get('p90'))}, max "
         f"{fmt.count(out.get('max'))}; thinking {fmt.count(think or 0)} of it{_how(m)}"),
        ("server", fmt.rate(m.get("job_tps")),
         f"over the simulated job at C={m.get('concurrency')}"
         + (f"; the pilot's steady window {fmt.rate(steady)}" if steady else "")),
    ]  # fmt: skip
    rep = m.get("replay")
    if rep:
        # the console's words (plan.render), so the calibrated figure the misfit is
        # measured on is shown here too
        said = (_model_check(rep) if rep.get("simulated_s") is not None
                else f"against {fmt.duration(rep.get('actual_s'))} measured")  # fmt: skip
        figures.append(("model check", fmt.pct(rep.get("error"), signed=True), said))
    return what, figures


def _result_head(doc: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    m, src = doc.get("model") or {}, doc.get("source") or {}
    what = (
        f"From the run {src.get('path')} ({_src(doc)}): its sustained rate × the tokens per "
        "sample."
    )
    rows = [r for r in doc.get("rows") or [] if isinstance(r, dict)]
    first = entry(doc, rows[0]) if rows else None
    c = (first or {}).get("concurrency", m.get("best_concurrency"))
    rates = m.get("sustained_tps_by_concurrency") or {}
    figures = [
        ("tokens per sample", fmt.count(m.get("tokens_per_sample")),
         str(m.get("tokens_per_sample_basis") or "")),
        ("sustained rate", fmt.rate((first or {}).get("tok_per_s")),
         f"at C={c}; measured " + ", ".join(f"C={k} {fmt.rate(v, '')}" for k, v in rates.items())),
        ("thinking share", fmt.pct(m.get("thinking_share")),
         str(m.get("thinking_share_basis") or "")),
    ]  # fmt: skip
    f = m.get("field") or {}
    if f.get("concurrency"):
        figures.append(
            ("the field's rate", fmt.rate(f.get("tok_per_s")), f"burst at C={f['concurrency']}")
        )
    return what, figures


def _arithmetic_head(doc: dict[str, Any]) -> tuple[str, list[tuple[str, str, str]]]:
    i = doc.get("inputs") or {}
    what = (
        f"The field's arithmetic: samples × {fmt.count(i.get('tokens_per_sample'))} tokens / "
        f"{fmt.rate(i.get('tok_per_s'))}, with no error bar."
    )
    figures = [
        ("tokens per sample", fmt.count(i.get("tokens_per_sample")), "given"),
        ("rate", fmt.rate(i.get("tok_per_s")), "given, one server"),
    ]
    return what, figures


def _other(doc: dict[str, Any], row: dict[str, Any]) -> tuple[str, float] | None:
    """The field's number for the row, beside ours: its burst arithmetic, or pilot × N/K."""
    f = row.get("field")
    if isinstance(f, dict) and f.get("seconds"):
        return f"the field: burst at C={f.get('concurrency')}", float(f["seconds"])
    n = row.get("naive_pilot")
    if isinstance(n, dict) and n.get("seconds"):
        return "naive: pilot × N/K", float(n["seconds"])
    return None


def _time_table(doc: dict[str, Any]) -> DecisionTable:
    rows = [r for r in doc.get("rows") or [] if isinstance(r, dict)]
    ranged = any((entry(doc, r) or {}).get("lo_s") is not None for r in rows)
    servers = int((doc.get("inputs") or {}).get("servers") or 1)
    others = [_other(doc, r) for r in rows]
    c = _concurrency(doc, rows)
    # a days column where every row is under a day is left out: its time says it in s-h
    days_one = not all(fmt.under_a_day((entry(doc, r) or {}).get("seconds")) for r in rows)
    days_at = not all(fmt.under_a_day(_seconds(r.get("at_servers"))) for r in rows)
    head = ["samples", "time on 1 server" + (f"\nat C={c}" if c else "")]
    head += ["95% range", "±"] if ranged else []
    head += ["days on 1 server" if servers > 1 else "days"] if days_one else []
    head += [f"time on {servers} servers"] if servers > 1 else []
    head += [f"days on {servers} servers"] if servers > 1 and days_at else []
    head += [others[0][0], "vs ours"] if others and others[0] else []
    body = []
    for row, other in zip(rows, others, strict=True):
        e = entry(doc, row) or {}
        cells = [fmt.count(row.get("samples")), fmt.duration(e.get("seconds"))]
        if ranged:
            lo, hi = e.get("lo_s"), e.get("hi_s")
            has = lo is not None and hi is not None
            cells += [fmt.duration_range(lo, hi) if has else "—", _pm(e) if has else "—"]
        if days_one:
            cells.append(fmt.days(e.get("seconds")))
        if servers > 1:
            at = row.get("at_servers")
            cells.append(_at_servers(at))
            if days_at:
                cells.append(fmt.days(at.get("seconds")) if isinstance(at, dict) else "—")
        if other:
            cells += [fmt.duration(other[1]), _vs(other[1], e.get("seconds"))]
        body.append(cells)
    return DecisionTable("Time", head, body, (), [])


def _seconds(at: Any) -> Any:
    return at.get("seconds") if isinstance(at, dict) else None


def _concurrency(doc: dict[str, Any], rows: list[dict[str, Any]]) -> Any:
    e = entry(doc, rows[0]) if rows else None
    return (e or {}).get("concurrency") or (doc.get("model") or {}).get("concurrency")


def _pm(e: dict[str, Any]) -> str:
    hw = e.get("rel_halfwidth")
    return f"±{hw:.1%}" if isinstance(hw, int | float) else "—"


def _vs(theirs: float, ours: Any) -> str:
    if not isinstance(ours, int | float) or not ours:
        return "—"
    return fmt.pct(theirs / ours - 1, signed=True)


def _at_servers(at: Any) -> str:
    if not isinstance(at, dict):
        return "—"
    text = fmt.duration(at.get("seconds"))
    if at.get("lo_s") is not None and at.get("hi_s") is not None:
        text += f" ({fmt.duration_range(at['lo_s'], at['hi_s'])})"
    return text


def bar_parts(e: dict[str, Any]) -> list[tuple[str, float]]:
    """The parts of a row's bar plan.json holds, each alone (they do not add up: they
    combine as independent errors do), in words."""
    out = []
    for key, v in e.items():
        if key.endswith("_halfwidth") and key != "rel_halfwidth" and isinstance(v, int | float):
            name = key.removesuffix("_halfwidth")
        elif isinstance(v, dict) and isinstance(v.get("halfwidth"), int | float):
            name, v = key, v["halfwidth"]
        else:
            continue
        out.append((PARTS.get(name, name.replace("_", " ")), float(v)))
    return out


def _bar_lines(doc: dict[str, Any]) -> list[str]:
    """What the bar is: its width at the widest row, its parts, its basis, the pilot size
    for a narrower one."""
    rows = [
        (r, e)
        for r in doc.get("rows") or []
        if isinstance(r, dict) and (e := entry(doc, r)) and e.get("lo_s") is not None
    ]
    if not rows:
        return ["no error bar: the arithmetic takes its rate and tokens per sample as exact"]
    row, e = max(rows, key=lambda re: re[1].get("rel_halfwidth") or 0.0)
    conf = e.get("confidence", 0.95)
    at = fmt.counted(int(row.get("samples") or 0), "sample")
    tgt = doc.get("pilot_size_for_target") or {}
    if isinstance(e.get("parts"), dict) and "floor" in tgt:  # a pilot's bar, as printed
        pilot = (doc.get("model") or {}).get("pilot_samples")
        drift = bool((e.get("speed") or {}).get("drift"))
        said = _bar_parts(e["rel_halfwidth"], e["parts"], tgt, pilot, drift)
        return [f"at {at}: {said}", *_basis(doc)]
    line = f"the {conf:.0%} range is {_pm(e)} at {at}"
    parts = bar_parts(e)
    if parts:
        line += "; its parts, each alone: " + ", ".join(f"±{fmt.pct(v)} from {w}" for w, v in parts)
    lines = [line, *_basis(doc)]
    need = tgt.get("requests", doc.get("pilot_size_for_5pct"))
    goal = tgt.get("target", 0.05)
    if isinstance(need, int) and (e.get("rel_halfwidth") or 0.0) > goal:
        lines.append(
            f"±{goal:.0%} needs a pilot of about {fmt.counted(need, 'request')} (--pilot {need})"
        )
    return lines


def _basis(doc: dict[str, Any]) -> list[str]:
    basis = (doc.get("model") or {}).get("bar_basis")
    return [f"the range: {basis}"] if basis else []


def _tok(row: dict[str, Any], key: str) -> Any:
    return (row.get("tokens") or {}).get(key)


def _tokens_table(doc: dict[str, Any]) -> DecisionTable:
    rows = [r for r in doc.get("rows") or [] if isinstance(r, dict)]
    cols: list[tuple[str, Any]] = [("output tokens", lambda r: fmt.tokens(_tok(r, "output")))]
    if any(_tok(r, "output_lo") is not None for r in rows):
        cols.append(("95% range", lambda r: fmt.tokens(_tok(r, "output_lo")) + " – "
                     + fmt.tokens(_tok(r, "output_hi"))))  # fmt: skip
    for key in ("thinking", "answer", "prompt"):
        if any(_tok(r, key) for r in rows):
            cols.append((f"{key} tokens", lambda r, k=key: fmt.tokens(_tok(r, k))))
    for key, head in (("jsonl_bytes", "JSONL"), ("parquet_bytes", "Parquet"),
                      ("hidden_state_bytes", "hidden states"),
                      ("hidden_state_bytes_fp8", "… in FP8")):  # fmt: skip
        if any((r.get("storage") or {}).get(key) is not None for r in rows):
            cols.append((head, lambda r, k=key: fmt.nbytes((r.get("storage") or {}).get(k))))
    body = [[fmt.count(r.get("samples")), *(cell(r) for _, cell in cols)] for r in rows]
    basis = (doc.get("model") or {}).get("storage_basis")
    return DecisionTable(
        "Tokens and storage",
        ["samples", *(h for h, _ in cols)],
        body,
        (),
        [f"storage: {basis}"] if basis else [],
    )


def _marks(doc: dict[str, Any]) -> list[BarMark]:
    out = []
    for row in doc.get("rows") or []:
        e = entry(doc, row) if isinstance(row, dict) else None
        if e and isinstance(e.get("seconds"), int | float) and e["seconds"] > 0:
            n, secs = int(row.get("samples") or 0), float(e["seconds"])
            out.append(BarMark(n, secs, e.get("lo_s"), e.get("hi_s"), _other(doc, row)))
    return out
