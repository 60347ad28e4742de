"""Server-side truth: the server's own Prometheus counters, scraped around each phase.

A benchmark that disagrees with the engine's counters will not be trusted, so
`run` scrapes `/metrics` before and after every phase and keeps the deltas:
generated and prompt tokens, requests by finish reason, preemptions, and the
speculative-decoding counters (drafts, draft tokens, accepted tokens, per
position). Gauges (KV-cache usage, running and waiting requests) are sampled
during the phase and their peaks kept. SGLang exposes speculative acceptance only
as gauges that are already averages: those are sampled too, their mean kept, and
the summary says the figure came from a gauge. Metric names differ per engine;
`metrics_names.py` maps each engine's names onto one vocabulary.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from genbench.check.metric_names import (
    COUNTERS,
    GAUGES,
    LABELLED,
    MEAN_GAUGES,
    RATIOS,
    dialect_of,
)
from genbench.check.router import ROUTER_KINDS
from genbench.transport.client import ConnectionPool
from genbench.transport.endpoint import Endpoint
from genbench.transport.failures import Failure

__all__ = ["COUNTERS", "GAUGES", "LABELLED", "MetricsScraper", "Snapshot", "parse_prometheus"]

Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse_prometheus(text: str) -> Samples:
    """name -> [(labels, value)] for every sample in Prometheus text exposition format,
    read by prometheus_client's own parser (escapes, histograms, `+Inf`, as Prometheus
    reads them). A line the parser refuses costs that line alone, not the scrape: an
    engine's /metrics with one odd line still gives its counters."""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        families = [f for line in text.splitlines() for f in _line_families(line)]
    out: Samples = defaultdict(list)
    for family in families:
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), float(sample.value)))
    return out


def _line_families(line: str) -> list[Metric]:
    """One line parsed alone (comments carry only a family's type, which no reader asks)."""
    if not line or line[0] == "#":
        return []
    try:
        return list(text_string_to_metric_families(line + "\n"))
    except ValueError:
        return []


@dataclass
class Snapshot:
    samples: Samples
    dialect: str | None = None

    def total(self, name: str) -> float | None:
        """Sum of a metric's samples; `a+b` names the sum of two metrics (None if one lacks)."""
        if "+" in name:
            parts = [self.total(n) for n in name.split("+")]
            return None if any(p is None for p in parts) else sum(p or 0.0 for p in parts)
        rows = self.samples.get(name)
        if not rows:
            return None
        total = sum(v for _, v in rows)
        return total / len(rows) if name in RATIOS else total

    def first(self, names: tuple[str, ...]) -> tuple[str | None, float | None]:
        for n in names:
            v = self.total(n)
            if v is not None:
                return n, v
        return None, None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        acc: dict[str, float] = defaultdict(float)
        for labels, v in self.samples.get(name, []):
            acc[labels.get(label, "")] += v
        return dict(acc)


@dataclass
class MetricsScraper:
    """Scrapes `root/metrics`; silent (returns None) when the server has none. Without a
    `pool` it opens its own (and closes it); `run` gives its load's client that one."""

    ep: Endpoint
    interval: float = 1.0
    available: bool | None = None
    path: str = "/metrics"
    pool: ConnectionPool = None  # type: ignore[assignment]  # set in __post_init__
    _own_pool: bool = False
    _task: asyncio.Task[None] | None = None
    _peaks: dict[str, float] = field(default_factory=dict)
    # MEAN_GAUGES key -> [sum, count] of the non-zero values sampled after the first
    gauge_sums: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pool is None:
            self.pool = ConnectionPool(self.ep.root)
            self._own_pool = True

    async def scrape(self) -> Snapshot | None:
        if self.available is False:
            return None
        try:
            status, _, body = await self.pool.get(self.path, 5.0, self.ep.headers())
        except Failure:
            return None
        if status != 200:
            self.available = False
            return None
        # parsed beside the loop: a large /metrics takes tens of ms, which would otherwise
        # stall every stream's chunk timing in the phase it samples
        samples = await asyncio.to_thread(parse_prometheus, body.decode("utf-8", "replace"))
        self.available = bool(samples)
        return Snapshot(samples, dialect_of(samples)) if samples else None

    def start_sampling(self) -> None:
        self._peaks = {}
        self.gauge_sums = {}
        if self.available is False:
            return
        self._task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        first = True  # taken as the phase starts: a mean gauge still holds the last phase's
        while True:
            snap = await self.scrape()
            if snap is not None:
                for key, names in GAUGES.items():
                    _, v = snap.first(names)
                    if v is not None:
                        self._peaks[key] = max(self._peaks.get(key, v), v)
                if not first:
                    add_mean_gauges(self.gauge_sums, snap)
            first = False
            await asyncio.sleep(self.interval)

    async def stop_sampling(self) -> dict[str, float]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        return dict(self._peaks)

    async def close(self) -> None:
        await self.stop_sampling()
        if self._own_pool:
            await self.pool.close()


def scraper_for(
    ep: Endpoint, urls: list[str], kind: str | None, details: dict[str, Any], target: dict[str, Any]
) -> MetricsScraper:
    """The workers' /metrics summed when --metrics-url names them (`urls`); else the
    server's own, except behind a router with several workers, whose /metrics is not their
    sum (vllm-router forwards it to one of them): none is scraped then, and `target` (the
    result's) says why."""
    if urls:
        return SummedScraper(ep, urls=tuple(urls))
    workers = details.get("workers") or []
    if kind in ROUTER_KINDS and len(workers) > 1:
        target["server_metrics"] = (
            f"not scraped: a router in front of {len(workers)} workers; "
            "--metrics-url once per worker sums theirs"
        )
        return MetricsScraper(ep, available=False)  # scrapes nothing
    return MetricsScraper(ep)


def metrics_target(url: str) -> tuple[Endpoint, str]:
    """A `--metrics-url`: the server (no API key: it may be another host than --url's)
    and the path, /metrics when the URL names none."""
    ep = Endpoint.parse(url)
    path = urlsplit(url.strip()).path.rstrip("/")
    return ep, path if path and path != "/v1" else "/metrics"


@dataclass
class SummedScraper(MetricsScraper):
    """Several servers' /metrics summed (the workers behind a router, `--metrics-url`): a
    counter's delta is the sum of theirs, a gauge's peak the peak of the sum. A scrape
    missing one of them gives nothing rather than a partial sum."""

    urls: tuple[str, ...] = ()
    _parts: list[MetricsScraper] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        for url in self.urls:
            ep, path = metrics_target(url)
            self._parts.append(MetricsScraper(ep, path=path))

    async def scrape(self) -> Snapshot | None:
        snaps = await asyncio.gather(*(p.scrape() for p in self._parts))
        if not snaps or any(s is None for s in snaps):
            self.available = False if all(p.available is False for p in self._parts) else None
            return None
        merged: Samples = defaultdict(list)
        for snap in snaps:
            assert snap is not None
            for name, rows in snap.samples.items():
                merged[name].extend(rows)
        self.available = True
        return Snapshot(dict(merged), dialect_of(merged))

    async def close(self) -> None:
        await super().close()
        for p in self._parts:
            await p.close()


def add_mean_gauges(sums: dict[str, list[float]], snap: Snapshot) -> None:
    """Add a snapshot's MEAN_GAUGES values to their running sums; a zero (nothing was
    drafted in the server's interval) is no sample."""
    for key, names in MEAN_GAUGES.items():
        _, v = snap.first(names)
        if v:
            acc = sums.setdefault(key, [0.0, 0.0])
            acc[0] += v
            acc[1] += 1


def server_metrics_summary(
    before: Snapshot,
    after: Snapshot,
    peaks: dict[str, float],
    gauge_sums: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    """Counter deltas, derived speculative-decoding figures, and gauge peaks.

    Where the engine counts no drafts (SGLang), acceptance comes from its own averaging
    gauges: the mean of their values sampled during the phase (`gauge_sums`, from
    `MetricsScraper.gauge_sums`) and at its end, with `spec_acceptance_source` "gauge"."""
    out: dict[str, Any] = {"dialect": after.dialect}
    for key, names in COUNTERS.items():
        name, a = after.first(names)
        if name is None or a is None:
            continue
        b = before.total(name) or 0.0
        out[key] = a - b
    for key, specs in LABELLED.items():
        for name, label in specs:
            if name in after.samples:
                a_by, b_by = after.by_label(name, label), before.by_label(name, label)
                out[key] = {k: v - b_by.get(k, 0.0) for k, v in sorted(a_by.items())}
                break
    drafts, draft_tok = out.get("spec_drafts"), out.get("spec_draft_tokens")
    accepted = out.get("spec_accepted_tokens")
    if drafts and draft_tok and accepted is not None:
        out["spec_acceptance_rate"] = accepted / draft_tok
        out["spec_mean_acceptance_length"] = 1.0 + accepted / drafts
        out["spec_acceptance_source"] = "counters"
        per_pos = out.get("spec_accepted_per_pos")
        if per_pos:
            out["spec_acceptance_by_position"] = {k: v / drafts for k, v in per_pos.items()}
    else:
        _gauge_acceptance(out, after, gauge_sums or {})
    for key, v in peaks.items():
        out[f"{key}_peak"] = v
    return out


def _gauge_acceptance(
    out: dict[str, Any], after: Snapshot, gauge_sums: dict[str, list[float]]
) -> None:
    sums = {k: list(v) for k, v in gauge_sums.items()}
    add_mean_gauges(sums, after)
    length, rate = sums.get("spec_accept_length"), sums.get("spec_accept_rate")
    if not length:
        return
    out["spec_mean_acceptance_length"] = length[0] / length[1]
    if rate:
        out["spec_acceptance_rate"] = rate[0] / rate[1]
    out["spec_acceptance_source"] = "gauge"
    out["spec_gauge_samples"] = int(length[1])


def compare_tokens(summary: Any, server: dict[str, Any] | None) -> list[str]:
    """A note when the client's token total and the server's counter disagree."""
    if not server or server.get("generation_tokens") is None:
        return []
    theirs = server["generation_tokens"]
    ours = summary.output_tokens
    if summary.failed or abs(theirs - ours) < 0.5:
        return []
    return [
        f"token count differs from the server's counter: client {ours:,}, server "
        f"{theirs:,.0f} (other traffic on the server, or usage not reported?)"
    ]
