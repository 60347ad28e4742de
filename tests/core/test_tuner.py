"""generate -c auto's tuner (generate/tuner.py) as a state machine: fed answers, /metrics
and a clock, it jumps to what the KV cache holds, climbs while there is room, steps back
on overload and holds."""

from __future__ import annotations

import pytest

from genbench.generate.tuner import Signals, Tuner
from genbench.records import RequestRecord

pytestmark = pytest.mark.core

K, P, L = 19_968, 36, 16  # C* = K / (P + L) = 384


def answers(t: Tuner, n: int, at: float, *, tokens: int = L, status: int = 200,
            sent: float | None = None) -> None:  # fmt: skip
    for i in range(n):
        rec = RequestRecord(id=f"r{i}", phase="generate", server="s", model="m", stream=True,
                            max_tokens=L)  # fmt: skip
        rec.t_send, rec.t_end = at - 1.0 if sent is None else sent, at
        rec.http_status = status
        if status == 200:
            rec.prompt_tokens, rec.completion_tokens = P, tokens
        else:
            rec.error_kind = "http_status"  # type: ignore[assignment]
        t.record(rec)


def scrape(t: Tuner, usage: float, running: float, preempted: float = 0.0, cap: int = K) -> None:
    t.signals(Signals(cap, usage, 0.0, preempted, running))


def test_it_jumps_to_what_the_cache_holds_then_to_the_exact_fit_and_holds() -> None:
    t = Tuner(16, L, now=0.0)
    scrape(t, usage=16 * (P + 1) / K, running=16)  # the first requests: prompt + 1 token
    new, why = t.decide(0.05, in_flight=16)
    assert new == K // (P + 1 + L) and "at most 37 prompt" in why
    answers(t, new, at=3.0)
    scrape(t, usage=0.9, running=new)
    assert t.decide(3.0, in_flight=new) == (384, _why(384))
    answers(t, 384, at=6.0)
    scrape(t, usage=0.95, running=384)
    assert t.decide(6.0, in_flight=384) is None  # full: held
    assert t.c == 384


def _why(fit: int) -> str:
    return f"the KV cache holds {K:,} tokens: {fit} requests of {P} prompt + {L} output tokens fit"


def test_preemptions_at_a_level_that_held_halve_it_then_it_holds_what_fits() -> None:
    t = Tuner(384, L, now=0.0)
    t.early = t.started = True
    scrape(t, 0.9, 384, preempted=10)
    answers(t, 384, at=2.0)
    assert t.decide(2.0, in_flight=384) is None  # full, held
    scrape(t, 1.0, 384, preempted=60, cap=K // 2)  # the server lost half its cache
    new, why = t.decide(3.0, in_flight=384)
    assert new == 192 and "50 requests preempted" in why
    scrape(t, 1.0, 384, preempted=90, cap=K // 2)
    assert t.decide(4.5, in_flight=300) is None  # the old level's requests still drain
    answers(t, 192, at=6.0)
    scrape(t, 1.0, 192, preempted=90, cap=K // 2)
    assert t.decide(6.0, in_flight=192) is None  # drained: a new window from now
    answers(t, 192, at=8.0)
    assert t.decide(8.0, in_flight=192) is None and t.c == 192  # 192 · 52 fill it: held


def test_without_metrics_it_climbs_while_throughput_rises_and_steps_back_when_not() -> None:
    t = Tuner(16, None, now=0.0)
    answers(t, 16, at=1.0)
    assert t.decide(1.0, in_flight=16)[0] == 32  # nothing says it is full: climb
    answers(t, 32, at=2.0)  # twice the answers in the same time: twice the rate
    assert t.decide(2.0, in_flight=32)[0] == 64
    answers(t, 64, at=4.0)  # as many tokens a second as at 32: no gain
    new, why = t.decide(4.0, in_flight=64)
    assert new == 32 and "C=64 gave +0% throughput over C=32" in why


def test_refusals_are_overload() -> None:
    t = Tuner(64, None, now=0.0)
    t.early = t.started = True
    answers(t, 40, at=2.0, status=503)
    new, why = t.decide(2.0, in_flight=64)
    assert new == 32 and "40 answers 429/503" in why


def test_varied_lengths_jump_to_the_average_holding_and_a_few_preemptions_are_no_sign() -> None:
    t = Tuner(16, 320, now=0.0)
    t.early = True
    scrape(t, 0.1, 16)
    # mean 100, E[L^2] = 12,500, E[L^3] = 1.75M: a request holds 36 + 62.5 on average, and
    # E[h^2] = 36^2 + 36 * 125 + 1.75M / 300: a standard deviation of 43.9 tokens
    lengths = [50, 150] * 8
    for i, n in enumerate(lengths):
        answers(t, 1, at=2.0 + i, tokens=n, sent=0.0)  # one wave, every answer in
    new, why = t.decide(20.0, in_flight=16)
    # n * 98.5 + 1.64 * sqrt(n) * 43.9 <= K: 192 (the mean alone would fit 202)
    assert new == 192 and "holding 98 ± 44 tokens" in why
    scrape(t, 0.95, new, preempted=new // 8 - 1)  # young requests preempted: a few, cheap
    assert t.decide(22.0, in_flight=new) is None and t.c == new
    scrape(t, 0.95, new, preempted=new // 8 + 1)  # an eighth of the level: overload
    back, why = t.decide(23.0, in_flight=new)
    assert back < new and f"{new // 8 + 1} requests preempted" in why


def test_a_cache_of_a_few_long_requests_keeps_their_spread_to_spare_and_steps_back_to_it() -> None:
    # vLLM CPU's benchmark cache: 88 blocks of 32 tokens, prompts of 36, answers of 80 or
    # 320: a request holds 36 + 136 (+ 15.5, half a block) ± 96 tokens; the mean alone
    # would fit 15
    cap = 88 * 32
    t = Tuner(8, 320, now=0.0)
    t.early = True
    t.signals(Signals(cap, 0.1, 0.0, 0.0, 8, block=32))
    for i, n in enumerate([80, 320] * 4):
        answers(t, 1, at=2.0 + i, tokens=n, sent=0.0)
    new, why = t.decide(20.0, in_flight=8)
    assert new == 12 and "± 96 tokens" in why  # n * 187.5 + 1.64 * sqrt(n) * 96.1 <= 2,816
    # a window of short answers (a lull) peaks low: the climb still stops at the fit
    t.signals(Signals(cap, 0.5, 0.0, 0.0, new, block=32))
    for i, n in enumerate([80, 320] * 5):
        answers(t, 1, at=30.0 + i, tokens=n)
    assert t.decide(45.0, in_flight=new) is None and t.c == 12
    # pushed past it (another plan's C), preempting: back to the fit, not to half
    t = Tuner(16, 320, now=0.0)
    t.early = t.started = t.settled = True
    t.signals(Signals(cap, 1.0, 0.0, 0.0, 16, block=32))
    for i, n in enumerate([80, 320] * 4):
        answers(t, 1, at=2.0 + i, tokens=n)
    t.signals(Signals(cap, 1.0, 0.0, 5.0, 16, block=32))
    back, why = t.decide(20.0, in_flight=16)
    assert back == 12 and "5 requests preempted" in why


def test_the_first_window_counts_the_waves_running_requests_as_censored_lengths() -> None:
    # 16 sent at 0; by 11 s ten have ended (40..200 tokens at 20 tokens/s a stream) and six
    # short replacements (20 tokens): the window's own answers would say 103 tokens held
    # and jump to 181; the six still running have made 220 tokens each (20/s for 11 s), so
    # the wave holds 129 ± 61 and the cache fits 145
    t = Tuner(16, 320, now=0.0)
    t.early = True
    scrape(t, 0.1, 16)
    for n in [40, 80, 120, 160, 200] * 2:
        answers(t, 1, at=n / 20, tokens=n, sent=0.0)
    answers(t, 6, at=10.5, tokens=20, sent=9.5)
    new, why = t.decide(11.0, in_flight=16)
    assert new == 145 and "holding 129 ± 61 tokens" in why


def test_the_tuner_changes_nothing_once_the_job_is_stopping():
    """After Ctrl-C the load sends nothing more: a climb then ("concurrency 24 → 28" after
    "stopping: waiting … for 24 rows in flight") was a change that never ran, logged and
    reported as if it had. The tuners' loop ends as soon as the load is stopped."""
    import asyncio
    from types import SimpleNamespace

    from genbench.generate.tuner import AutoConcurrency

    async def go() -> None:
        auto = AutoConcurrency([], {}, None, lambda change: None)
        auto._full.set()  # a window just filled: the loop would decide now
        load = SimpleNamespace(stopped=asyncio.Event())
        load.stopped.set()
        await asyncio.wait_for(auto.run(load), 5.0)
        assert auto.changes == []

    asyncio.run(go())
