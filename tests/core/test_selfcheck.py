"""The client's self-check: when its own CPU or event-loop lag says the figures may be the
client's limit rather than the server's. The clocks are replaced, so the numbers are exact."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import genbench.selfcheck as selfcheck
from genbench.selfcheck import CPU_LIMIT, LAG_LIMIT_S, LoopMonitor

pytestmark = pytest.mark.core


def stop(monkeypatch, *, cpu_s: float, wall_s: float, lags: list[float], chunks: int = 0):
    """A monitor that ran `wall_s` seconds and used `cpu_s` of CPU, with these loop lags."""
    monkeypatch.setattr(
        selfcheck,
        "time",
        SimpleNamespace(process_time=lambda: 64.0 + cpu_s, perf_counter=lambda: 32.0 + wall_s),
    )
    m = LoopMonitor()  # as if started at 64 s of CPU, 32 s on the clock
    m._cpu0, m._wall0 = 64.0, 32.0
    m.lags = list(lags)
    return asyncio.run(m.stop(chunks))


def test_the_limits():
    assert (CPU_LIMIT, LAG_LIMIT_S) == (0.85, 0.010)


def test_a_client_with_room_to_spare_is_not_flagged(monkeypatch):
    # 4 s of CPU in 8 s: half a core; lags 1 2 3 4 ms: p99 at k = 2.97: 3 + 0.97 = 3.97 ms
    sc = stop(monkeypatch, cpu_s=4.0, wall_s=8.0, lags=[0.004, 0.001, 0.003, 0.002], chunks=200)
    assert sc.cpu_fraction == 0.5
    assert sc.chunks_per_s == 25.0  # 200 / 8
    assert sc.loop_lag_p50_s == pytest.approx(0.0025, rel=1e-12)
    assert sc.loop_lag_p99_s == pytest.approx(0.00397, rel=1e-12)
    assert sc.loop_lag_max_s == 0.004
    assert sc.client_bound is False and sc.reasons == []


def test_a_busy_core_flags_the_phase(monkeypatch):
    # 8.5 s of CPU in 10 s = 85%: at the limit counts
    sc = stop(monkeypatch, cpu_s=8.5, wall_s=10.0, lags=[0.001])
    assert sc.cpu_fraction == 0.85
    assert sc.client_bound is True
    assert sc.reasons == ["client used 85% of a CPU core"]
    sc = stop(monkeypatch, cpu_s=8.25, wall_s=10.0, lags=[0.001])  # 82.5%
    assert sc.client_bound is False


def test_a_late_event_loop_flags_the_phase(monkeypatch):
    # p99 of one lag is that lag: 10 ms is at the limit
    sc = stop(monkeypatch, cpu_s=1.0, wall_s=8.0, lags=[0.010])
    assert sc.client_bound is True
    assert sc.reasons == ["event-loop lag p99 10 ms"]
    assert stop(monkeypatch, cpu_s=1.0, wall_s=8.0, lags=[0.0099]).client_bound is False
    both = stop(monkeypatch, cpu_s=7.6, wall_s=8.0, lags=[0.02, 0.03])
    assert both.reasons == ["client used 95% of a CPU core", "event-loop lag p99 30 ms"]


def test_no_lag_samples_and_no_time(monkeypatch):
    sc = stop(monkeypatch, cpu_s=1.0, wall_s=8.0, lags=[])
    assert sc.loop_lag_p99_s is None and sc.client_bound is False
    sc = stop(monkeypatch, cpu_s=1.0, wall_s=0.0, lags=[0.5])
    assert sc.cpu_fraction is None and sc.client_bound is False
    assert sc.to_dict()["client_bound"] is False


def test_lag_is_reported_in_milliseconds_and_a_short_phase_is_measured(monkeypatch):
    sc = stop(monkeypatch, cpu_s=0.125, wall_s=0.5, lags=[0.9])
    assert sc.cpu_fraction == 0.25  # under a second is still a phase
    assert sc.reasons == ["event-loop lag p99 900 ms"]


def test_a_running_monitor_stops_cleanly():
    async def main():
        m = LoopMonitor(interval=0.01)
        m.start()
        await asyncio.sleep(0.05)
        return await m.stop(10)

    sc = asyncio.run(main())
    assert sc.cpu_fraction is not None and sc.cpu_fraction >= 0
    assert sc.loop_lag_p50_s is not None and sc.loop_lag_p50_s >= 0
