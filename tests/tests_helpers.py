"""Small helpers importable from test modules (conftest fixtures are not importable)."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

from pytest import approx


def sim_metric(root: str, name: str) -> float:
    """One of the sim's own counters from its /metrics (`name` without the `sim:` prefix)."""
    import urllib.request

    with urllib.request.urlopen(root + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(rf"^sim:{name} (\S+)", text, re.M)
    assert m, f"the sim exports {name}"
    return float(m[1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


def idle_wake_late_s(idle: float = 0.3, tries: int = 5) -> float:
    """How late this host wakes a process from an idle wait of `idle` seconds (median of
    `tries`). On a busy VM host an idle vCPU is woken milliseconds late, every time a
    process that waited is woken: a timing check tighter than that measures the host."""
    late = []
    for _ in range(tries):
        t = time.perf_counter()
        time.sleep(idle)
        late.append(time.perf_counter() - t - idle)
    return sorted(late)[len(late) // 2]


def skip_if_host_wakes_late(budget_s: float) -> None:
    """Skip a timing test whose tolerance is `budget_s` when three idle wake-ups (request
    to server, server's own timer, first byte to client) use more than a quarter of it.
    A timer wake-up is the cheapest of them: waking on network traffic cost this host
    several times more (5-10 ms at 300 ms idle when timers woke 0.75-1.4 ms late)."""
    import pytest

    late = idle_wake_late_s()
    if 3 * late > budget_s / 4:
        pytest.skip(
            f"this host wakes an idle process {late * 1000:.1f} ms late: a check to within "
            f"{budget_s * 1000:.0f} ms measures the host, not genbench"
        )


def sim_rate_in_window(
    records: list, start: float, end: float, tps: float, per_seq_ms: float
) -> tuple[float, float]:
    """The tok/s the sim's step model gives over [start, end) for the streams the client saw
    decoding, and their mean number there.

    A decode step takes a + b·n seconds for n streams (docs/sim.md), so n streams decoding
    for dt seconds give n·dt / (a + b·n) tokens; a stream decodes from its first chunk to its
    last. First tokens (prefill) falling in the window count one each. This is the rate a
    sustained phase must report when the host delays the gap between a slot's requests
    (client turnaround, the server's request handling): C streams are not quite always in
    flight, and `C / (a + b·C)` alone would blame genbench for the host."""
    b = per_seq_ms / 1000
    a = 1 / tps - b
    edges: list[tuple[float, int]] = []
    firsts = 0
    for r in records:
        if not r.ok or not r.chunk_offsets:
            continue
        first, last = r.t_send + r.chunk_offsets[0], r.t_send + r.chunk_offsets[-1]
        firsts += start <= first < end
        lo, hi = max(first, start), min(last, end)
        if hi > lo:
            edges += [(lo, 1), (hi, -1)]
    edges.sort()
    tokens = busy = 0.0
    n, t = 0, start
    for at, step in edges:
        if n:
            tokens += n * (at - t) / (a + b * n)
            busy += n * (at - t)
        n, t = n + step, at
    span = end - start
    return (tokens + firsts) / span, busy / span


def sim_rate_of_phase(out: Path, name: str, tps: float, per_seq_ms: float) -> tuple[float, float]:
    """`sim_rate_in_window` over the steady window a `genbench run` result in `out` reports
    for its phase `name`: what its `steady_tps` must be, and the mean streams decoding."""
    from genbench.records import read_records

    doc = json.loads((out / "result.json").read_text())
    summary = next(p for p in doc["phases"] if p["name"] == name)["summary"]
    recs = [r for r in read_records(out / "requests.jsonl") if r.phase == name]
    t0 = min(r.t_send for r in recs)  # the summary's offsets are from the phase's first send
    w0, w1 = summary["steady_window_s"]
    return sim_rate_in_window(recs, t0 + w0, t0 + w1, tps, per_seq_ms)


def check_sustained_rate(
    out: Path, name: str, tps: float, per_seq_ms: float, root: str, rel: float = 0.02
) -> tuple[float, float]:
    """A sustained phase's `steady_tps` against the truth, on a quiet host or a busy one.

    Always: it is the tokens the client received in the steady window over the window's
    length (counted here from the raw chunk offsets, apart from genbench's stats), and never
    above what the sim's step model allows for the streams that were decoding. Where the
    sim kept its schedule (no resynchronisation: a host that starved it shifts the schedule,
    and the model then overstates what was served; docs/sim.md), it is the step model's
    rate itself. Returns (the model's rate, the mean streams decoding)."""
    from genbench.records import read_records

    doc = json.loads((out / "result.json").read_text())
    summary = next(p for p in doc["phases"] if p["name"] == name)["summary"]
    recs = [r for r in read_records(out / "requests.jsonl") if r.phase == name]
    t0 = min(r.t_send for r in recs)
    w0, w1 = summary["steady_window_s"]
    got = summary["steady_tps"]
    received = 0.0  # each request's tokens (its usage) spread over its text chunks
    for r in recs:
        if r.ok and r.chunk_offsets:
            each = (r.completion_tokens or len(r.chunk_offsets)) / len(r.chunk_offsets)
            received += each * sum(w0 <= r.t_send + o - t0 < w1 for o in r.chunk_offsets)
    # a token or two at each edge may fall either side, and the records read back keep
    # times to the microsecond: within 0.2% (a wrong window or count is off by far more)
    span = w1 - w0
    assert abs(got * span - received) <= 2 + 0.002 * received, (name, got, received, span)
    want, streams = sim_rate_in_window(recs, t0 + w0, t0 + w1, tps, per_seq_ms)
    assert got <= want * (1 + rel), (name, got, want)
    if sim_metric(root, "decode_resync_seconds_total") == 0:
        assert got == approx(want, rel=rel), (name, got, want)
    return want, streams
