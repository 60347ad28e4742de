"""`generate --metrics-port`: the job's live state as Prometheus metrics on `/metrics`.

A job runs for days on a cluster whose servers are already watched in Prometheus and
Grafana; this puts the job beside them. The numbers are the ones the live panel shows
(`Progress.snapshot`, refreshed every tick) and the request records the job logs, served
through `prometheus_client` (its text format, its HTTP server in a thread of its own), so
a scrape never waits on the job's event loop and the job never waits on a scrape.

Rows are counted done when durable, as the panel counts them: `genbench_rows_done_total`
is the rows on disk, earlier runs of the job included, never a row a power loss could
take back. The names follow Prometheus' conventions (`genbench_` prefix, base units in
the name, counters ending in `_total`); docs/generate.md lists them with a Grafana query
and an alert rule.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, disable_created_metrics, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from genbench import __version__
from genbench.errors import UsageError
from genbench.generate.outcome import Listener
from genbench.records import RequestRecord

LOOPBACK = "127.0.0.1"


class JobCollector(Collector):
    """The latest snapshot as metric families, built at scrape time (the scrape thread
    reads a dict the job replaces whole each tick, never one it is changing)."""

    def __init__(self) -> None:
        self.snap: dict[str, Any] = {}
        self.info: dict[str, str] = {"version": __version__}
        self.last_done_at: float | None = None

    def collect(self) -> Iterator[Any]:
        snap = self.snap
        yield InfoMetricFamily("genbench_job", "The job: input, output, genbench version.",
                               value=dict(self.info))  # fmt: skip
        if not snap:
            return
        yield from _rows(snap, self.last_done_at)
        yield from _rates(snap)
        yield from _eta(snap)
        yield from _servers(snap.get("servers") or [])
        yield from _engines(snap.get("engines") or [])


def _gauge(name: str, doc: str, value: Any) -> Iterator[GaugeMetricFamily]:
    if value is not None:
        yield GaugeMetricFamily(name, doc, value=float(value))


def _rows(snap: dict[str, Any], last_done_at: float | None) -> Iterator[Any]:
    yield from _gauge("genbench_rows", "Rows of the job (this shard), done or not.", snap["total"])
    yield CounterMetricFamily("genbench_rows_done", "Rows durably written, earlier runs "
                              "included.", value=snap["done"])  # fmt: skip
    yield CounterMetricFamily("genbench_rows_failed", "Rows in the errors file, earlier runs "
                              "included.", value=snap["failed"])  # fmt: skip
    yield CounterMetricFamily("genbench_rows_truncated", "Rows of this run cut by max_tokens.",
                              value=snap["truncated_this_run"])  # fmt: skip
    yield from _gauge("genbench_rows_remaining", "Rows neither done nor failed.", snap["remaining"])
    yield from _gauge("genbench_elapsed_seconds", "Seconds since this run started.",
                      snap["elapsed_s"])  # fmt: skip
    yield from _gauge("genbench_last_row_done_timestamp_seconds", "When the rows done count "
                      "last grew (Unix time).", last_done_at)  # fmt: skip
    tokens = CounterMetricFamily("genbench_tokens", "Generated tokens of this run's durable "
                                 "rows, by kind.", labels=["kind"])  # fmt: skip
    thinking = snap.get("thinking_tokens") or 0
    tokens.add_metric(["thinking"], thinking)
    tokens.add_metric(["answer"], (snap.get("tokens") or 0) - thinking)
    yield tokens


def _rates(snap: dict[str, Any]) -> Iterator[Any]:
    yield from _gauge("genbench_rows_per_second", "Rows ended per second, recent window.",
                      snap.get("rows_per_s"))  # fmt: skip
    if snap.get("tokens_per_s") is None:
        return
    g = GaugeMetricFamily("genbench_tokens_per_second", "Tokens per second, recent window, by "
                          "kind.", labels=["kind"])  # fmt: skip
    g.add_metric(["thinking"], snap.get("thinking_tokens_per_s") or 0.0)
    g.add_metric(["answer"], snap.get("answer_tokens_per_s") or 0.0)
    yield g


def _eta(snap: dict[str, Any]) -> Iterator[Any]:
    yield from _gauge("genbench_eta_seconds", "Seconds left, as the panel's ETA (rows left at "
                      "the rate between clusters of completions).", snap.get("eta_s"))  # fmt: skip
    yield from _gauge("genbench_eta_low_seconds", "Low end of the ETA's 95% range.",
                      snap.get("eta_lo_s"))  # fmt: skip
    yield from _gauge("genbench_eta_high_seconds", "High end of the ETA's 95% range.",
                      snap.get("eta_hi_s"))  # fmt: skip
    yield from _gauge("genbench_all_servers_down_seconds", "Seconds every server has been down.",
                      snap.get("all_down_s"))  # fmt: skip
    plan = snap.get("plan")
    if not plan:
        return
    yield from _gauge("genbench_plan_seconds", "The plan's forecast of this run's wall time.",
                      plan.get("seconds"))  # fmt: skip
    yield from _gauge("genbench_plan_low_seconds", "Low end of the plan's 95% bar.",
                      plan.get("lo_s"))  # fmt: skip
    yield from _gauge("genbench_plan_high_seconds", "High end of the plan's 95% bar.",
                      plan.get("hi_s"))  # fmt: skip
    yield from _gauge("genbench_plan_on_course_seconds", "Where the run is headed: elapsed "
                      "plus the ETA.", plan.get("on_course_s"))  # fmt: skip
    if plan.get("verdict") is not None:
        doc = "1 for the projection against the plan's bar: inside, unsure or outside."
        g = GaugeMetricFamily("genbench_plan_verdict", doc, labels=["verdict"])
        for v in ("inside", "unsure", "outside"):
            g.add_metric([v], float(plan["verdict"] == v))
        yield g


SERVER_GAUGES = (  # (name, help, snapshot key)
    ("genbench_server_in_flight", "Requests in flight.", "in_flight"),
    ("genbench_server_streams", "Streams the server is given now.", "concurrency"),
    ("genbench_server_down_seconds", "Seconds down (0 while up).", "down_s"),
    ("genbench_server_rows_per_second", "Rows ended per second, recent window.", "rows_per_s"),
    ("genbench_server_tokens_per_second", "Tokens per second, recent window.", "tokens_per_s"),
)


def _servers(servers: list[dict[str, Any]]) -> Iterator[Any]:
    up = GaugeMetricFamily("genbench_server_up", "1 while the server is up.", labels=["server"])
    downs = CounterMetricFamily("genbench_server_downs", "Times the server went down.",
                                labels=["server"])  # fmt: skip
    for s in servers:
        up.add_metric([s["url"]], float(s["state"] == "up"))
        downs.add_metric([s["url"]], s.get("downs") or 0)
    yield up
    yield downs
    for name, doc, key in SERVER_GAUGES:
        g = GaugeMetricFamily(name, doc, labels=["server"])
        for s in servers:
            v = s.get(key)
            g.add_metric([s["url"]], float(v or 0.0))
        yield g


def _engines(engines: list[dict[str, Any]]) -> Iterator[Any]:
    """--serve: each engine up or not, its restarts by cause, its downtime."""
    if not engines:
        return
    up = GaugeMetricFamily("genbench_engine_up", "1 while the engine genbench started is up.",
                           labels=["engine", "server"])  # fmt: skip
    restarts = CounterMetricFamily("genbench_engine_restarts", "Restarts of the engine, by the "
                                   "cause of its death.", labels=["engine", "cause"])  # fmt: skip
    down = CounterMetricFamily("genbench_engine_down_seconds", "Seconds the engine was down.",
                               labels=["engine"])  # fmt: skip
    for e in engines:
        up.add_metric([e["engine"], e["url"]], float(e["up"]))
        for cause, n in (e.get("restarts_by_cause") or {}).items():
            restarts.add_metric([e["engine"], cause], n)
        down.add_metric([e["engine"]], e.get("down_s") or 0.0)
    yield up
    yield restarts
    yield down


class MetricsExporter(Listener):
    """A job listener that serves what it hears on `/metrics` while the job runs."""

    def __init__(self, host: str = LOOPBACK, port: int = 0) -> None:
        disable_created_metrics()  # no `_created` series beside each counter: noise here
        self.host, self.port = host, port
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = JobCollector()
        self.registry.register(self.collector)
        r = self.registry
        self.requests = Counter("genbench_requests", "Requests ended, by server and outcome "
                                "(done, next, retry, requeued, failed).",
                                ["server", "outcome"], registry=r)  # fmt: skip
        self.failures = Counter("genbench_request_failures", "Failed requests by server and "
                                "error kind.", ["server", "kind"], registry=r)  # fmt: skip
        self.retries = Counter("genbench_retries", "Charged retries of a row.", ["server"],
                               registry=r)  # fmt: skip
        self.requeues = Counter("genbench_requeues", "Rows sent back to the queue uncharged "
                                "(their server went away).", ["server"], registry=r)  # fmt: skip
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Serve /metrics; the URL. A port in use is a one-line error."""
        try:
            self._server, self._thread = start_http_server(self.port, self.host, self.registry)
        except OSError as e:
            where = f"{self.host}:{self.port}"
            raise UsageError(f"--metrics-port: cannot listen on {where} ({e.strerror or e})") \
                from None  # fmt: skip
        self.port = self._server.server_port
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # -- what the job says ------------------------------------------------------------------

    def planned(self, info: dict[str, Any]) -> None:
        self.collector.info.update(input=str(info["input"]), output=str(info["output"]),
                                   shard=str(info.get("shard") or ""))  # fmt: skip

    def tick(self, snap: dict[str, Any]) -> None:
        c = self.collector
        if c.last_done_at is None or snap["done"] != c.snap.get("done"):
            c.last_done_at = time.time()
        c.snap = snap

    def record(self, rec: RequestRecord) -> None:
        outcome = str(rec.extra.get("outcome") or "")
        self.requests.labels(rec.server, outcome).inc()
        if rec.error_kind is not None:
            self.failures.labels(rec.server, str(rec.error_kind)).inc()
        if outcome == "retry":
            self.retries.labels(rec.server).inc()
        elif outcome == "requeued":
            self.requeues.labels(rec.server).inc()

    def finished(self, result: Any) -> None:
        if result.snapshot:
            self.tick(result.snapshot)
