"""The decision a plan is made for: servers for a deadline, the samples that fit in it, the
job's cost, and which of several configurations generates the job fastest.

Every number here is arithmetic on a plan's own forecasts (one server's seconds for N
samples, with their 95% range), so it holds alike for a plan from arithmetic, a run
result or a pilot. Which end of the range each number uses, and why:

* **servers for a deadline** D: ceil(one server's upper end / D). A deadline is a
  promise: plan on the slow end. The counts at the forecast and at the lower end are
  given beside it, so a reader sees how much of the answer is the range.
* **samples that fit** in D on M servers: floor(D × M × N / one server's upper end for
  N), the slow end again, from the largest N planned; the count at the forecast beside.
* **cost**: GPU-hours × price per GPU-hour, GPU-hours = one server's hours × GPUs per
  server. M servers run 1/M as long, so the cost does not depend on M. At the forecast,
  with both ends of the range (a cost is an estimate, not a promise).
* **best**: the shortest job at the forecast is marked *fastest*; with a price, the
  lowest cost at the forecast is marked *cheapest* (it differs when the configurations
  have different GPUs per server). When another configuration's range overlaps the
  fastest's, the measurements cannot tell them apart and the decision says so.

M servers are taken to share the job evenly, one server's time / M (the pilot's own
simulation of M servers is used for the time on M when the plan has it). Servers are
rounded up and samples down, after a relative 1e-9 allowance for floating-point rounding
so that a count that is exact on paper is not pushed one over by it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from genbench.errors import UsageError
from genbench.plan.document import ONE_SERVER
from genbench.settings import Setting

_ROUNDING = 1e-9  # relative: floating-point error, not a margin
_UNIT_S = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")

BASIS = {
    "servers": "servers: one server's time at the range's slow end ÷ deadline, rounded up "
    "(a deadline is a promise); the count at the forecast below it when it differs",
    "fit": "samples that fit: deadline × servers ÷ seconds per sample at the range's slow end "
    "(of the largest count planned), rounded down",
    "cost": "cost: one server's hours × GPUs per server × price per GPU-hour, the same on any "
    "number of servers; its range from the time's",
    "best": "fastest: the shortest job at the forecast; cheapest: the lowest cost at the forecast",
}


def parse_deadline(text: str) -> float:
    """'5d', '36h', '90m', '2d12h', '1.5d' → seconds. Units d, h, m, s, each at most once,
    largest first; a bare number is refused (hours or days?)."""
    s = text.strip().lower().replace(" ", "")
    parts = _PART.findall(s)
    units = [u for _, u in parts]
    if (
        not parts
        or "".join(n + u for n, u in parts) != s
        or units != sorted(set(units), key="dhms".index)
    ):
        raise UsageError(
            f"--deadline {text!r}: expected a duration such as 5d, 36h, 90m or 2d12h "
            "(units d, h, m, s, largest first)"
        )
    seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"--deadline {text!r} must be longer than 0")
    return seconds


@dataclass(frozen=True)
class Deadline:
    text: str
    seconds: float


@dataclass(frozen=True)
class Pricing:
    """The price per GPU-hour and the GPUs per server (one for every configuration, or one
    each), with where each came from."""

    price: Setting
    gpus: Setting  # value: list[int]

    def gpus_for(self, i: int) -> int:
        gpus: list[int] = self.gpus.value
        return gpus[i] if len(gpus) > 1 else gpus[0]


def parse_gpus(text: str | int, configurations: int) -> list[int]:
    """'8' or '8,4' (one per --from, in order) → [8] or [8, 4]."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    try:
        gpus = [int(t) for t in items]
    except ValueError:
        gpus = []
    if not gpus or any(g <= 0 for g in gpus):
        raise UsageError(f"--gpus-per-server {text!r}: expected a whole number above 0, e.g. 8")
    if len(gpus) not in (1, configurations):
        raise UsageError(
            f"--gpus-per-server {text!r}: {len(gpus)} values for {configurations} "
            "configurations: give one for all, or one per --from in order"
        )
    return gpus


@dataclass
class Candidate:
    """One configuration to decide on: its plan, and what its row must say about it."""

    name: str
    plan: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def decide(
    candidates: list[Candidate],
    servers: int,
    deadline: Deadline | None,
    pricing: Pricing | None,
) -> dict[str, Any]:
    """The plan's `decision` section: per configuration and sample count, the job's time
    on one and on M servers with its range, the servers the deadline needs, the cost; the
    samples that fit; and, with several configurations, the best marked."""
    configs = []
    for i, cand in enumerate(candidates):
        gpus = pricing.gpus_for(i) if pricing is not None else None
        price = float(pricing.price.value) if pricing is not None else None
        configs.append(_configuration(cand, servers, deadline, gpus, price))
    decision: dict[str, Any] = {
        "samples": [r["samples"] for r in configs[0]["rows"]] if configs else [],
        "servers": servers,
        "deadline": {"text": deadline.text, "seconds": deadline.seconds} if deadline else None,
        "price": (
            {
                "per_gpu_hour": float(pricing.price.value),
                "from": pricing.price.source,
                "gpus_per_server_from": pricing.gpus.source,
            }
            if pricing
            else None
        ),
        "configurations": configs,
    }
    asked = {"servers": deadline, "fit": deadline, "cost": pricing, "best": len(configs) > 1}
    decision["basis"] = {k: v for k, v in BASIS.items() if asked[k]}
    if deadline is not None and not any(c["has_range"] for c in configs):
        decision["basis"]["servers"] += " (this plan has no range: its slow end is the forecast)"
    if len(configs) > 1:
        decision["best"] = [_best(configs, i) for i in range(len(decision["samples"]))]
    return decision


def _configuration(
    cand: Candidate,
    servers: int,
    deadline: Deadline | None,
    gpus: int | None,
    price: float | None,
) -> dict[str, Any]:
    plan = cand.plan
    src = plan.get("source") or {}
    rows = [_row(plan, r, servers, deadline, gpus, price) for r in plan.get("rows") or []]
    if not rows:
        raise UsageError(f"{cand.name}: the plan has no forecast to decide from")
    conf: dict[str, Any] = {
        "name": cand.name,
        "source": src.get("path") or src.get("kind"),
        "model": src.get("model"),
        **_rates(plan),
        "gpus_per_server": gpus,
        "has_range": "hi_s" in _entry(plan, plan["rows"][0]),
        "notes": list(cand.notes),
        "rows": rows,
    }
    if deadline is not None:
        big = max(rows, key=lambda r: r["samples"])
        # samples = deadline × servers / (seconds per sample), seconds per sample = time / N
        budget = deadline.seconds * servers * big["samples"]
        conf["fit"] = {
            "servers": servers,
            "samples": _floor(budget / big["hi_s"]),
            "at_forecast": _floor(budget / big["seconds"]),
            "from_samples": big["samples"],
        }
    return conf


def _entry(plan: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The row's forecast for one server, whatever source made the plan."""
    keys = ONE_SERVER.get(plan.get("mode") or "", ())
    entry = next((row[k] for k in keys if isinstance(row.get(k), dict)), None)
    if entry is None or not isinstance(entry.get("seconds"), int | float):
        raise UsageError(f"plan mode {plan.get('mode')!r}: a row without a forecast in seconds")
    return entry


def _row(
    plan: dict[str, Any],
    row: dict[str, Any],
    servers: int,
    deadline: Deadline | None,
    gpus: int | None,
    price: float | None,
) -> dict[str, Any]:
    one = _entry(plan, row)
    sec = float(one["seconds"])
    lo, hi = float(one.get("lo_s", sec)), float(one.get("hi_s", sec))
    out: dict[str, Any] = {"samples": row["samples"], "seconds": sec, "lo_s": lo, "hi_s": hi}
    at = row.get("at_servers")
    if servers == 1:
        m_sec, m_lo, m_hi = sec, lo, hi
    elif isinstance(at, dict) and at.get("servers") == servers and "seconds" in at:
        m_sec = float(at["seconds"])
        m_lo, m_hi = float(at.get("lo_s", m_sec)), float(at.get("hi_s", m_sec))
    else:  # the job shared evenly: one server's time / M
        m_sec, m_lo, m_hi = sec / servers, lo / servers, hi / servers
    out["at_servers"] = {"servers": servers, "seconds": m_sec, "lo_s": m_lo, "hi_s": m_hi}
    if deadline is not None:
        need = max(1, _ceil(hi / deadline.seconds))
        out["servers_needed"] = {
            "servers": need,
            "at_forecast": max(1, _ceil(sec / deadline.seconds)),
            "at_lower_end": max(1, _ceil(lo / deadline.seconds)),
            "hi_s_on_them": hi / need,
        }
    if gpus is not None and price is not None:
        gpu_h = {k: v / 3600 * gpus for k, v in (("forecast", sec), ("lo", lo), ("hi", hi))}
        out["gpu_hours"] = gpu_h
        out["cost"] = {k: v * price for k, v in gpu_h.items()}
    return out


def _rates(plan: dict[str, Any]) -> dict[str, Any]:
    """The rate the plan's forecast rests on, at which concurrency, and single-stream speed
    when the source measured it (the field's number, beside the one that matters)."""
    m, i = plan.get("model") or {}, plan.get("inputs") or {}
    mode = plan.get("mode")
    if mode == "result":
        c = i.get("concurrency") or m.get("best_concurrency")
        rate = (m.get("sustained_tps_by_concurrency") or {}).get(str(c))
        single = m.get("single_stream_tps")
        return {"concurrency": c, "tok_per_s": rate, "single_stream_tps": single}
    if mode == "pilot":
        return {"concurrency": m.get("concurrency"), "tok_per_s": m.get("job_tps"),
                "single_stream_tps": None}  # fmt: skip
    return {"concurrency": None, "tok_per_s": i.get("tok_per_s"), "single_stream_tps": None}


def _best(configs: list[dict[str, Any]], i: int) -> dict[str, Any]:
    rows = [(c["name"], c["rows"][i]) for c in configs]
    fastest, f_row = min(rows, key=lambda nr: nr[1]["seconds"])
    best: dict[str, Any] = {"samples": f_row["samples"], "fastest": fastest, "cheapest": None}
    if all("cost" in r for _, r in rows):
        best["cheapest"] = min(rows, key=lambda nr: nr[1]["cost"]["forecast"])[0]
    best["overlap"] = [name for name, r in rows if name != fastest and r["lo_s"] <= f_row["hi_s"]]
    return best


def _ceil(x: float) -> int:
    return math.ceil(x - _ROUNDING * abs(x))


def _floor(x: float) -> int:
    return math.floor(x + _ROUNDING * abs(x))
