"""A generate job's history, read from its request log in one streamed pass.

A week-long job logs millions of compact records (`.genbench/requests.jsonl`, see
records.py). The report needs rates over time, each server's up/down timeline, failures
by kind over time and distributions of latency and length; none of that needs the records
kept. So the log is read line by line into fixed-size state:

  * time bins (`Bins`): at most MAX_BINS; when a record ends past the last bin, the bin
    width doubles (neighbours are summed), so a minute and a week both end up as a few
    hundred bins, in one pass, without knowing the span first;
  * histograms on fixed log-spaced edges for TTFT, latency and lengths;
  * per server: its down intervals (a handful, however long the job) and counters.

Times are wall-clock seconds (each record's send time, from the run's `clock`, plus its
duration), so the runs of a resumed job line up across restarts and reboots.

A server's down interval is read from the records, as the job lived it: it starts when a
request ended with a failure that took the server out (`outcome: requeued` with a kind
that says the server is gone or that /health then failed; a router saying no worker is
left) and ends at the next request sent to it, which the job sends only once its /health
answered again. The rows requeued off it are counted in the interval.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from genbench.errors import ErrorKind, no_worker_left
from genbench.inspect.acceptance import AcceptTally

MAX_BINS = 480
FIRST_WIDTH_S = 1.0
EDGES = {  # log-spaced histogram edges
    "ttft_s": np.geomspace(1e-3, 1e4, 281),
    "latency_s": np.geomspace(1e-3, 1e5, 321),
    "completion_tokens": np.geomspace(1, 1e6, 241),
    "reasoning_tokens": np.geomspace(1, 1e6, 241),
}
NOT_DOWN = {ErrorKind.LOCAL_LIMIT.value}  # requeued, but the server is fine


class Bins:
    """Sums per (metric, key) in time bins that double in width as the span grows."""

    def __init__(self, width: float = FIRST_WIDTH_S, max_bins: int = MAX_BINS) -> None:
        self.width, self.max_bins = width, max_bins
        self.t0: float | None = None
        self.n = 0  # bins in use
        self.sums: dict[tuple[str, str], list[float]] = {}

    def index(self, t: float) -> int:
        if self.t0 is None:
            self.t0 = math.floor(t / self.width) * self.width
        i = int((t - self.t0) // self.width)
        while i >= self.max_bins:
            self._double()
            i = int((t - self.t0) // self.width)
        i = max(i, 0)  # a record that ended a moment before the first: the first bin
        self.n = max(self.n, i + 1)
        return i

    def add(self, i: int, metric: str, key: str, v: float = 1.0) -> None:
        row = self.sums.get((metric, key))
        if row is None:
            row = self.sums[(metric, key)] = [0.0] * self.max_bins
        row[i] += v

    def _double(self) -> None:
        for row in self.sums.values():
            half = [row[j] + row[j + 1] for j in range(0, self.max_bins - 1, 2)]
            row[:] = half + [0.0] * (self.max_bins - len(half))
        self.n = (self.n + 1) // 2
        self.width *= 2

    def series(self, metric: str, key: str) -> list[float]:
        return (self.sums.get((metric, key)) or [0.0] * self.max_bins)[: self.n]

    def keys(self, metric: str) -> list[str]:
        return sorted(k for m, k in self.sums if m == metric)

    def starts(self) -> list[float]:
        t0 = self.t0 or 0.0
        return [t0 + i * self.width for i in range(self.n)]


@dataclass
class ServerLife:
    """One server across the job: its down intervals (wall times) and what it did."""

    name: str
    downs: list[list[Any]] = field(default_factory=list)  # [start, end|None, requeued rows]
    requests: int = 0
    rows: int = 0
    failed: int = 0
    requeued: int = 0
    retries: int = 0
    tokens: int = 0
    last: float | None = None

    @property
    def down(self) -> bool:
        return bool(self.downs) and self.downs[-1][1] is None


@dataclass
class JobHistory:
    path: Path
    bins: Bins
    servers: dict[str, ServerLife]
    hist: dict[str, np.ndarray]
    runs: list[tuple[float, float]]  # (first send, last end) of each run, wall time
    records: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # failed requests, by kind
    interrupted: int = 0  # requests the operator ended (Ctrl-C, SIGTERM): never failures
    # output tokens of the rows written (every turn of each, as inspect counts them), and
    # the partial outputs of the requests the operator ended, apart
    row_tokens: int = 0
    partial_tokens: int = 0
    model: str = ""
    accept: AcceptTally = field(default_factory=AcceptTally)  # each answer's, where said

    @property
    def start(self) -> float:
        return self.runs[0][0] if self.runs else 0.0

    @property
    def end(self) -> float:
        return max((r[1] for r in self.runs), default=0.0)


class _Reader:
    """The pass over the log: one `line` at a time into fixed-size state."""

    def __init__(self, path: Path) -> None:
        self.h = JobHistory(path, Bins(), {}, {k: np.zeros(len(e) - 1) for k, e in EDGES.items()},
                            [])  # fmt: skip
        self.defaults: dict[str, Any] = {}
        self.samples: dict[str, list[float]] = defaultdict(list)  # flushed into hist
        self.pending: dict[str, int] = {}  # a row's earlier turns' tokens, until it is written

    def line(self, d: dict[str, Any]) -> None:
        if "defaults" in d:
            self.defaults = d["defaults"]
            self.h.model = self.h.model or str(self.defaults.get("model") or "")
            self._run_ended()
            self.pending.clear()  # rows in flight when a run ended start again
            self.h.runs.append((math.inf, -math.inf))
            return
        g, dft = d.get, self.defaults.get
        t_send = g("t_send", dft("t_send", 0.0)) or 0.0
        sent = g("sent_at") or t_send + (dft("clock") or 0.0)
        end = sent + max(0.0, (g("t_end", dft("t_end")) or t_send) - t_send)
        server = g("server", dft("server")) or ""
        extra = g("extra", dft("extra")) or {}
        outcome, kind = extra.get("outcome"), g("error_kind", dft("error_kind"))
        cancelled = kind == ErrorKind.CANCELLED.value
        if cancelled:  # the operator's word, not the row's outcome nor a failure
            outcome = None
        if not self.h.runs:
            self.h.runs.append((math.inf, -math.inf))
        a, z = self.h.runs[-1]
        self.h.runs[-1] = (min(a, sent), max(z, end))
        self.h.records += 1
        life = self.h.servers.get(server) or self.h.servers.setdefault(server, ServerLife(server))
        self._life(life, sent, end, outcome, kind, g("error_message") or "")
        b = self.h.bins
        i = b.index(end)
        b.add(i, "requests", server)
        if cancelled:
            self.h.interrupted += 1
            b.add(i, "interrupted", server)
        elif kind is not None:
            b.add(i, "failures", kind)
            self.h.kinds[kind] = self.h.kinds.get(kind, 0) + 1
        if outcome in ("done", "failed", "requeued", "retry"):
            b.add(i, outcome, server)
        if kind is None:
            self._answered(life, i, d, dft, sent, end)
        self._row_tokens(d, dft, outcome, kind)

    def _row_tokens(self, d: dict[str, Any], dft: Any, outcome: Any, kind: Any) -> None:
        """Tokens counted as inspect counts them: a written row's, every turn; a request
        the operator ended keeps its partial output apart."""
        rid = str(d.get("id") or "")
        tokens = int(d.get("completion_tokens", dft("completion_tokens")) or 0)
        if kind == ErrorKind.CANCELLED.value:
            self.h.partial_tokens += tokens
            self.pending.pop(rid, None)
        elif kind is None and outcome == "next":
            self.pending[rid] = self.pending.get(rid, 0) + tokens
        elif kind is None and outcome == "done":
            self.h.row_tokens += self.pending.pop(rid, 0) + tokens
        elif outcome == "failed":
            self.pending.pop(rid, None)

    def _answered(self, life: ServerLife, i: int, d: dict[str, Any], dft: Any, sent: float,
                  end: float) -> None:  # fmt: skip
        g = d.get
        tokens = g("completion_tokens", dft("completion_tokens")) or 0
        thinking = g("reasoning_tokens", dft("reasoning_tokens")) or 0
        life.tokens += tokens
        spec = g("spec") if isinstance(g("spec"), dict) else {}
        # inspect's rule: said nothing is unknown, figures that cannot be are dropped
        self.h.accept.add_request(
            spec.get("steps"), spec.get("accepted"), (g("extra") or {}).get("group"), tokens,
            drafted=spec.get("drafted"), dropped=g("spec_dropped"),
            estimated=g("tokens_estimated", dft("tokens_estimated")) is True,
        )  # fmt: skip
        self.h.bins.add(i, "tokens", life.name, tokens)
        self.h.bins.add(i, "thinking", life.name, thinking)
        first = [t for t in (g("ttft_answer"), g("ttft_thinking"), g("ttft")) if t is not None]
        s = self.samples
        if first:
            s["ttft_s"].append(min(first))
        s["latency_s"].append(end - sent)
        if tokens:
            s["completion_tokens"].append(tokens)
        if thinking:
            s["reasoning_tokens"].append(thinking)
        if len(s["latency_s"]) >= 65536:
            self.flush()

    def _life(self, life: ServerLife, sent: float, end: float, outcome: Any, kind: Any,
              message: str) -> None:  # fmt: skip
        life.requests += 1
        life.last = end if life.last is None else max(life.last, end)
        if life.down and sent > life.downs[-1][0]:
            life.downs[-1][1] = sent  # a request sent again: /health answered
        if outcome == "done":
            life.rows += 1
        elif outcome == "failed":
            life.failed += 1
        elif outcome == "retry":
            life.retries += 1
        elif outcome == "requeued":
            life.requeued += 1
            if life.down:
                life.downs[-1][2] += 1
            elif _takes_out(kind, message):
                life.downs.append([end, None, 1])

    def _run_ended(self) -> None:
        """A new run begins: a server down when the last one ended was down until then."""
        if not self.h.runs or self.h.runs[-1][1] < self.h.runs[-1][0]:
            return
        for life in self.h.servers.values():
            if life.down:
                life.downs[-1][1] = max(self.h.runs[-1][1], life.downs[-1][0])

    def flush(self) -> None:
        for key, xs in self.samples.items():
            if xs:
                self.h.hist[key] += np.histogram(np.asarray(xs), bins=EDGES[key])[0]
                xs.clear()


def _takes_out(kind: Any, message: str) -> bool:
    """Whether a requeued request's failure took its server out (pipeline.RowPolicy)."""
    if kind is None or kind in NOT_DOWN:
        return False
    return kind != ErrorKind.UPSTREAM.value or no_worker_left(message)


def read_job_log(path: Path) -> JobHistory:
    """The job's history from its request log, streamed; a torn last line is skipped."""
    r = _Reader(path)
    loads = orjson.loads
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            if len(raw) > 1:
                try:
                    d = loads(raw)
                except orjson.JSONDecodeError:
                    continue  # a line a crash tore in the middle of the file
                r.line(d)
    r.flush()
    h = r.h
    h.runs = [run for run in h.runs if run[0] <= run[1]]
    for life in h.servers.values():
        if life.down:  # still down when its run (or the job) ended
            life.downs[-1][1] = max(life.last or life.downs[-1][0], h.end)
    return h
