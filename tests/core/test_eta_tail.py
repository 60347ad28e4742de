"""The tail model (generate/tail.py): the durations' fit sees the requests still running,
a request in flight ends at its own duration, rows not yet sent wait for a free stream,
a request older than any seen is given a tail past them, and before the rate has two
clusters the requests in flight give an ETA (generate/eta.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from genbench.generate.eta import Completions, Eta, estimate
from genbench.generate.progress import Progress, ServerState
from genbench.generate.tail import finish, fit_censored
from genbench.records import RequestRecord

pytestmark = pytest.mark.core


def test_the_fit_counts_the_long_requests_still_running():
    rng = np.random.default_rng(7)
    d = rng.lognormal(1.0, 0.8, 4000)
    cut = math.exp(1.3)  # about a third of the requests are still running at the cut
    ended, ages = d[d <= cut], np.full(int((d > cut).sum()), cut)
    mu, sigma = fit_censored(ended, ages)
    assert mu == pytest.approx(1.0, abs=0.06) and sigma == pytest.approx(0.8, abs=0.06)
    naive = np.log(ended)  # the durations that ended alone: the short ones
    assert naive.mean() < 0.8 and naive.std() < 0.6


def test_a_request_in_flight_ends_at_its_own_duration():
    # every request lasts 10 s: those 2, 4, 6 and 8 s in are done in 8 s, not 10 or 5
    q = finish([10.0] * 50, [2.0, 4.0, 6.0, 8.0], 0, (0.025, 0.5, 0.975))
    assert q is not None and q == pytest.approx([8.0, 8.0, 8.0], abs=0.01)


def test_rows_not_sent_wait_for_a_free_stream():
    # 10 s each; 2 streams busy for 10 s more; 3 rows to send: 10, 20, then 30 s
    q = finish([10.0] * 50, [1e-6, 1e-6], 3, (0.5,), streams=2)
    assert q is not None and q[0] == pytest.approx(30.0, abs=0.01)
    # 4 streams, 2 of them free now: two rows start now, the third at 10 s
    q = finish([10.0] * 50, [1e-6, 1e-6], 3, (0.5,), streams=4)
    assert q is not None and q[0] == pytest.approx(20.0, abs=0.01)


def test_a_request_older_than_any_seen_runs_on_past_them():
    rng = np.random.default_rng(3)
    seen = list(rng.lognormal(0.0, 1.0, 200))
    old = 3 * max(seen)  # the empirical distribution would say it has ended
    q = finish(seen, [old], 0, (0.025, 0.5, 0.975))
    assert q is not None and 0 < q[0] < q[1] < q[2]
    assert finish(seen[:5], [old], 0, (0.5,)) is None  # too few ended to draw from
    assert finish(seen[:5] + [0.0] * 20, [old], 0, (0.5,)) is None  # nor without durations


def test_before_two_clusters_the_requests_in_flight_give_an_eta():
    done = Completions()
    for k in range(32):  # the first wave of 32 ending, 5 s each; more of it may come yet
        done.add(5.0 + k * 0.001, 1, 5.0)
    assert estimate(done, 100, 5.035) is None  # no rate yet
    ages = [0.03 - k * 0.001 for k in range(32)]  # the next wave, sent as each ended
    e = estimate(done, 100, 5.035, ages=ages, streams=32)
    # the 100 rows left: the 32 in flight (0.03 s of their 5 in), then 32, 32 and the last 4
    assert e is not None and e.seconds == pytest.approx(20.0 - 0.03, abs=0.05)
    assert e.lo_s is not None and e.hi_s is not None
    assert e.lo_s <= e.seconds <= e.hi_s < 2 * e.seconds


def test_after_the_concurrency_moves_the_rate_is_the_new_ones():
    # -c auto doubled the streams at 20.1 s (Progress.rate_changed): waves of 32 rows every
    # 2 s before, of 64 after; the ETA reads the rate since the change once it shows
    done = Completions()
    for w in range(1, 15):
        size = 32 if w <= 10 else 64
        for k in range(size):
            done.add(w * 2.0 + k * 0.001, 1, 2.0)
    now, left = 28.2, 640
    moved = estimate(done, left, now, since=20.1)
    blended = estimate(done, left, now)
    assert moved is not None and blended is not None
    assert moved.seconds == pytest.approx(left / 32, rel=0.1)  # 64 rows every 2 s
    assert blended.seconds > 1.15 * moved.seconds  # the half before the change, slower


def test_the_simulated_end_runs_on_the_streams_of_the_servers_up():
    # two servers of 8 streams; the second goes down: the rows not yet sent wait for the
    # first's streams alone (generate/progress.py hands the tail the up servers' count)
    now = [90.0]
    prog = Progress(40, 0, 0, ["a", "b"], clock=lambda: now[0])
    now[0] = 100.0
    prog.sending = lambda: [99.0] * 8  # 8 requests 1 s in
    for i in range(10):  # 10 rows of 4 s ended, one cluster still forming: no rate yet
        prog.on_record(RequestRecord(f"r{i}", server="a", t_send=95.0, t_end=99.0 + i * 1e-3,
                                     extra={"outcome": "done"}))  # fmt: skip
        prog.on_durable("row", [(f"r{i}", None)])
    both = prog.snapshot([ServerState("a", concurrency=8), ServerState("b", concurrency=8)])
    one = prog.snapshot([ServerState("a", concurrency=8),
                         ServerState("b", "down", 5.0, concurrency=8)])  # fmt: skip
    assert prog.streams == 8 and both.eta_s is not None and one.eta_s is not None
    # 30 rows left: 8 in flight (3 s more), 22 to send: on 16 streams 8 now (to 4 s), 8 at
    # 3 s (to 7 s), 6 at 4 s (to 8 s); on 8, three rounds of 4 s after the 3 s (to 15 s)
    assert both.eta_s == pytest.approx(8.0, abs=1.0) and one.eta_s == pytest.approx(15.0, abs=1.0)


def test_requests_running_long_raise_the_high_end_not_the_estimate():
    # 10 waves of 32 rows of 1 to 2.75 s ended; the 32 in flight now are 8 s in, three
    # times the longest seen: the rate's estimate stands, its high end reaches their
    # simulated end (the median of it)
    done = Completions()
    for w in range(1, 11):
        for k in range(32):
            done.add(w * 2.0 + k * 0.001, 1, 1.0 + (k % 8) * 0.25)
    ages = [8.0] * 32
    plain = estimate(done, 100, 26.0)
    seen = estimate(done, 100, 26.0, ages=ages, streams=32)
    assert plain is not None and seen is not None and plain.hi_s is not None
    assert seen.seconds == plain.seconds and seen.lo_s == plain.lo_s
    assert seen.hi_s is not None and seen.hi_s > plain.hi_s
    sim = finish(list(done.durations), ages, 100 - 32, (0.5,), 32)
    assert sim is not None and seen.hi_s == pytest.approx(sim[0])


def test_the_tail_simulation_takes_a_hundredth_of_the_loop_and_is_carried_between():
    from genbench.generate.eta import TailBudget

    calls = []

    def run():
        calls.append(1)
        return Eta(10.0, 8.0, 14.0)

    b = TailBudget()
    assert b.get(100.0, run, 8) == Eta(10.0, 8.0, 14.0) and len(calls) == 1
    b.cost_s = 0.03  # as if it took 30 ms: again after 3 s of the job's clock
    assert b.get(101.0, run, 8) == Eta(9.0, 7.0, 13.0) and len(calls) == 1  # carried, 1 s on
    assert b.get(102.9, run, 8).seconds == pytest.approx(7.1) and len(calls) == 1
    assert b.get(103.1, run, 8) == Eta(10.0, 8.0, 14.0) and len(calls) == 2  # run again
    b.cost_s = 0.03
    assert b.get(103.2, run, 16) == Eta(10.0, 8.0, 14.0) and len(calls) == 3  # streams moved
