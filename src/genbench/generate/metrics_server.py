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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, disable_created_metrics, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from genbench import __version__
from genbench.errors import ErrorKind, UsageError
from genbench.generate.outcome import Listener
from genbench.generate.progress import EngineState, ServerState, Snapshot
from genbench.records import RequestRecord
from genbench.redact import redact

LOOPBACK = "127.0.0.1"


class JobCollector(Collector):
    """The latest snapshot as metric families (METRICS), built at scrape time (the scrape
    thread reads a snapshot the job replaces whole each tick, never one it is changing)."""

    def __init__(self) -> None:
        self.snap: Snapshot | None = None
        self.info: dict[str, str] = {"version": __version__}
        self.last_done_at: float | None = None

    def collect(self) -> Iterator[Any]:
        snap = self.snap
        yield InfoMetricFamily("genbench_job", "The job: input, output, genbench version.",
                               value=dict(self.info))  # fmt: skip
        if snap is not None:
            for m in METRICS:
                yield from m.family(snap, self.last_done_at)


Samples = dict[tuple[str, ...], Any]  # a labelled family's samples: {label values: value}


@dataclass(frozen=True)
class Metric:
    """One family of /metrics: its name, type (kind), help, labels, and how it is read from the
    snapshot (and when the rows done last grew): a value, or `Samples` where it has labels;
    None: no family this scrape."""

    name: str
    kind: type[GaugeMetricFamily] | type[CounterMetricFamily]
    help: str
    read: Callable[[Snapshot, float | None], Any]
    labels: tuple[str, ...] = ()

    def family(self, snap: Snapshot, last_done_at: float | None) -> Iterator[Any]:
        got = self.read(snap, last_done_at)
        if got is None:
            return
        if not self.labels:
            yield self.kind(self.name, self.help, value=float(got))
            return
        fam = self.kind(self.name, self.help, labels=list(self.labels))
        for labels, value in got.items():
            fam.add_metric([redact(str(v)) for v in labels], float(value))
        yield fam


def _kinds(thinking: float | None, answer: float | None) -> Samples:
    return {("thinking",): thinking or 0, ("answer",): answer or 0}


def _verdicts(plan: dict[str, Any] | None) -> Samples | None:
    verdict = (plan or {}).get("verdict")
    if verdict is None:
        return None
    return {(v,): v == verdict for v in ("inside", "unsure", "outside")}


def _server(name: str, kind: Any, doc: str, read: Callable[[ServerState], Any]) -> Metric:
    """A family with a sample per server (0 where the value is None)."""
    return Metric(name, kind, doc, lambda s, _: {(x.url,): read(x) or 0 for x in s.servers},
                  ("server",))  # fmt: skip


def _per_engine(read: Callable[[EngineState], Samples]) -> Callable[[Snapshot, Any], Any]:
    return lambda s, _: {k: v for e in s.engines for k, v in read(e).items()} \
        if s.engines else None  # fmt: skip


G, C = GaugeMetricFamily, CounterMetricFamily
# the families in the order /metrics lists them (docs/generate.md lists them too)
METRICS = (
    Metric("genbench_rows", G, "Rows of the job (this shard), done or not.", lambda s, _: s.total),
    Metric("genbench_rows_done", C, "Rows durably written, earlier runs included.",
           lambda s, _: s.done),
    Metric("genbench_rows_failed", C, "Rows in the errors file, earlier runs included.",
           lambda s, _: s.failed),
    Metric("genbench_rows_truncated", C, "Rows of this run cut by max_tokens.",
           lambda s, _: s.truncated_this_run),
    Metric("genbench_rows_remaining", G, "Rows neither done nor failed.", lambda s, _: s.remaining),
    Metric("genbench_elapsed_seconds", G, "Seconds since this run started.",
           lambda s, _: s.elapsed_s),
    Metric("genbench_last_row_done_timestamp_seconds", G, "When the rows done count last grew "
           "(Unix time).", lambda _, at: at),
    Metric("genbench_tokens", C, "Generated tokens of this run's durable rows, by kind.",
           lambda s, _: _kinds(s.thinking_tokens, s.tokens - (s.thinking_tokens or 0)),
           ("kind",)),
    Metric("genbench_rows_per_second", G, "Rows ended per second, recent window.",
           lambda s, _: s.rows_per_s),
    Metric("genbench_tokens_per_second", G, "Tokens per second, recent window, by kind.",
           lambda s, _: None if s.tokens_per_s is None else
           _kinds(s.thinking_tokens_per_s, s.answer_tokens_per_s), ("kind",)),
    Metric("genbench_eta_seconds", G, "Seconds left, as the panel's ETA (rows left at the "
           "rate between clusters of completions).", lambda s, _: s.eta_s),
    Metric("genbench_eta_low_seconds", G, "Low end of the ETA's 95% range.",
           lambda s, _: s.eta_lo_s),
    Metric("genbench_eta_high_seconds", G, "High end of the ETA's 95% range.",
           lambda s, _: s.eta_hi_s),
    Metric("genbench_all_servers_down_seconds", G, "Seconds every server has been down.",
           lambda s, _: s.all_down_s),
    Metric("genbench_no_server", G, "1 while no server is up: nothing can run, and the ETA "
           "families are absent.", lambda s, _: s.eta_note is not None),
    Metric("genbench_plan_seconds", G, "The plan's forecast of this run's wall time.",
           lambda s, _: (s.plan or {}).get("seconds")),
    Metric("genbench_plan_low_seconds", G, "Low end of the plan's 95% bar.",
           lambda s, _: (s.plan or {}).get("lo_s")),
    Metric("genbench_plan_high_seconds", G, "High end of the plan's 95% bar.",
           lambda s, _: (s.plan or {}).get("hi_s")),
    Metric("genbench_plan_on_course_seconds", G, "Where the run is headed: elapsed plus the "
           "ETA.", lambda s, _: (s.plan or {}).get("on_course_s")),
    Metric("genbench_plan_verdict", G, "1 for the projection against the plan's bar: inside, "
           "unsure or outside.", lambda s, _: _verdicts(s.plan), ("verdict",)),
    _server("genbench_server_up", G, "1 while the server is up.", lambda x: x.state == "up"),
    _server("genbench_server_downs", C, "Times the server went down.", lambda x: x.downs),
    _server("genbench_server_in_flight", G, "Requests in flight.", lambda x: x.in_flight),
    _server("genbench_server_streams", G, "Streams the server is given now.",
            lambda x: x.concurrency),
    _server("genbench_server_down_seconds", G, "Seconds down (0 while up).", lambda x: x.down_s),
    _server("genbench_server_rows_per_second", G, "Rows ended per second, recent window.",
            lambda x: x.rows_per_s),
    _server("genbench_server_tokens_per_second", G, "Tokens per second, recent window.",
            lambda x: x.tokens_per_s),
    # --serve: each engine up or not, its restarts by cause, its downtime
    Metric("genbench_engine_up", G, "1 while the engine genbench started is up.",
           _per_engine(lambda e: {(e.engine, e.url): e.up}), ("engine", "server")),
    Metric("genbench_engine_restarts", C, "Restarts of the engine, by the cause of its death.",
           _per_engine(lambda e: {(e.engine, c): n for c, n in e.restarts_by_cause.items()}),
           ("engine", "cause")),
    Metric("genbench_engine_down_seconds", C, "Seconds the engine was down.",
           _per_engine(lambda e: {(e.engine,): e.down_s or 0}), ("engine",)),
)  # fmt: skip

# counted from each request record as it ends: (name, help, labels, their values or None)
RECORD_COUNTERS: tuple[tuple[str, str, list[str], Callable[[RequestRecord, str], Any]], ...] = (
    ("genbench_requests", "Requests ended, by server and outcome (done, next, retry, requeued, "
     "failed).", ["server", "outcome"], lambda r, outcome: (r.server, outcome)),
    ("genbench_request_failures", "Failed requests by server and error kind (an interrupted "
     "one is not a failure).", ["server", "kind"],
     lambda r, _: None if r.error_kind in (None, ErrorKind.CANCELLED) else
     (r.server, str(r.error_kind))),
    ("genbench_requests_interrupted", "Requests ended by the operator (Ctrl-C, SIGTERM).",
     ["server"], lambda r, _: (r.server,) if r.error_kind == ErrorKind.CANCELLED else None),
    ("genbench_retries", "Charged retries of a row.", ["server"],
     lambda r, outcome: (r.server,) if outcome == "retry" else None),
    ("genbench_requeues", "Rows sent back to the queue uncharged (their server went away).",
     ["server"], lambda r, outcome: (r.server,) if outcome == "requeued" else None),
)  # fmt: skip


class MetricsServer(Listener):
    """A job listener that serves what it hears on `/metrics` while the job runs."""

    def __init__(self, host: str = LOOPBACK, port: int = 0) -> None:
        disable_created_metrics()  # no `_created` series beside each counter: noise here
        self.host, self.port = host, port
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = JobCollector()
        self.registry.register(self.collector)
        self.counters = [(Counter(name, doc, labels, registry=self.registry), read)
                         for name, doc, labels, read in RECORD_COUNTERS]  # fmt: skip
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
        self.collector.info.update(input=redact(str(info["input"])),
                                   output=redact(str(info["output"])),
                                   shard=str(info.get("shard") or ""))  # fmt: skip

    def tick(self, snap: Snapshot) -> None:
        c = self.collector
        if c.snap is None or snap.done != c.snap.done:
            c.last_done_at = time.time()
        c.snap = snap

    def record(self, rec: RequestRecord) -> None:
        outcome = str(rec.extra.get("outcome") or "")
        for counter, read in self.counters:
            if (labels := read(rec, outcome)) is not None:
                counter.labels(*(redact(str(v)) for v in labels)).inc()

    def finished(self, result: Any) -> None:
        if result.snapshot:
            self.tick(result.snapshot)
