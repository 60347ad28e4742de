"""The plan's arithmetic: the field's formula, the step-time fit and the job simulation,
on cases small enough to work out by hand (the working is in the comments)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from synthetic import rec

from genbench.errors import UsageError
from genbench.generate.wander import SPEED_MAX
from genbench.plan import (
    DecodeRows,
    Draws,
    HiddenStates,
    PilotModel,
    SpeedWander,
    StepModel,
    StorageModel,
    arithmetic,
    chain_next,
    complete_samples,
    decode_rows,
    fit_step,
    forecast,
    job_walls,
    lag1,
    length_halfwidth,
    parse_counts,
    pilot_size_for,
    rate_halfwidth,
    series_halfwidth,
    sim_cap,
    simulate_job,
    speed_stretches,
    storage_from_tokens,
    t_975,
    worker_gap,
)

pytestmark = pytest.mark.core


# ------------------------------------------------------------------------- the field's way


def test_the_worked_example_of_the_design_notes():
    # 100K samples × 2,965 tokens = 296.5M tokens; at 577.8 tok/s (C=32 burst)
    # 296.5e6 / 577.8 = 513,153 s = 142.54 h
    a = arithmetic(100_000, 2965, 577.8)
    assert a["tokens"] == 296_500_000
    assert a["seconds"] == 296_500_000 / 577.8
    assert a["hours"] == 296_500_000 / 577.8 / 3600
    assert a["days"] == 296_500_000 / 577.8 / 86400
    assert a["hours"] == pytest.approx(142.54, abs=0.005)
    assert (a["samples"], a["tokens_per_sample"], a["tok_per_s"], a["servers"]) == (
        100_000, 2965, 577.8, 1
    )  # fmt: skip
    # four servers share it: a quarter of the time
    assert arithmetic(100_000, 2965, 577.8, servers=4)["seconds"] == 296_500_000 / (577.8 * 4)


@pytest.mark.parametrize(
    "args", [(0, 1.0, 1.0, 1), (1, 0.0, 1.0, 1), (1, 1.0, 0.0, 1), (1, 1.0, 1.0, 0)]
)
def test_the_arithmetic_refuses_what_is_not_positive(args):
    with pytest.raises(UsageError):
        arithmetic(*args)


def test_counts_read_as_a_person_writes_them():
    assert parse_counts("--samples", "100K, 200k,1.5M,7") == [100_000, 200_000, 1_500_000, 7]
    assert parse_counts("--samples", "2b,1_000") == [2_000_000_000, 1000]
    for bad in ("", " , ", "x", "0", "-5", "1.5", "2.5k5", "inf", "nan", "1e400"):
        with pytest.raises(UsageError):
            parse_counts("--samples", bad)


def test_storage_without_outputs_to_measure():
    # 1,000 tokens × 4 bytes (assumed) + 400 bytes of JSON per line = 4,400
    s = storage_from_tokens(1000, None, None)
    assert s.jsonl_bytes_per_sample == 4400
    assert "assumed" in s.basis and s.parquet_bytes_per_sample is None
    # 1,000 × 3.5 (given) + 400 = 3,900
    assert storage_from_tokens(1000, 3.5, None).jsonl_bytes_per_sample == 3900
    assert "given" in storage_from_tokens(1000, 3.5, None).basis
    assert storage_from_tokens(1000, 3.5, None, basis="why").basis == "why"


def test_storage_rows_with_hidden_states():
    hidden = HiddenStates(hidden_size=4096, layers=3)  # bf16: 2 bytes
    # 10 tokens × 4096 × 3 layers × 2 bytes = 245,760
    assert hidden.bytes_for(10) == 245_760
    row = StorageModel(4400.0, 50.0, "b", hidden).row(samples=10, hidden_tokens=100)
    assert row["jsonl_bytes"] == 44_000  # 10 × 4,400
    assert row["parquet_bytes"] == 500  # 10 × 50
    assert row["hidden_state_tokens"] == 100
    assert row["hidden_state_bytes"] == 2_457_600  # 100 × 4096 × 3 × 2
    plain = StorageModel(4400.0, None, "b").row(samples=10, hidden_tokens=100)
    assert plain["parquet_bytes"] is None
    assert plain["hidden_state_tokens"] is None and plain["hidden_state_bytes"] is None


# ------------------------------------------------------------------------- the step fit


def test_step_rate():
    # 2 decoding, 8 context tokens: a step of 0.5 + 0.25·2 + 0.125·8 = 2 s gives 2 tokens
    assert StepModel(0.5, 0.25, 0.125).rate(2, 8) == 1.0


def test_the_fit_recovers_a_step_model_that_explains_the_rows_exactly():
    a, b, c = 0.02, 0.003, 1e-5
    # [tokens, Σn, Σk] per request; seconds = a·tokens + b·Σn + c·Σk
    x = np.array(
        [[10, 40, 5000], [20, 60, 12000], [5, 40, 1000], [8, 8, 900], [30, 240, 30000]], float
    )
    # first row: 0.02·10 + 0.003·40 + 1e-5·5000 = 0.2 + 0.12 + 0.05 = 0.37 s
    y = x @ np.array([a, b, c])
    assert y[0] == pytest.approx(0.37, rel=1e-12)
    step = fit_step(DecodeRows(x, y, np.arange(5.0)))
    assert step.a == pytest.approx(a, rel=1e-9)
    assert step.b == pytest.approx(b, rel=1e-9)
    assert step.c == pytest.approx(c, rel=1e-9)


def test_a_fit_that_needs_a_negative_term_falls_back_to_the_best_feasible_one():
    # seconds = 2·tokens - 1·Σn fits exactly, but b < 0 is not a step time. Of the fits
    # with every term >= 0: a alone: a = Σ t·y / Σ t² = (2 + 1 + 4) / (1 + 1 + 4) = 7/6,
    # residual (5/6)² + (1/6)² + (2/6)² = 30/36; b alone: b = Σ n·y / Σ n² = 5/5 = 1,
    # residual 2² = 4. So a = 7/6, b = c = 0.
    x = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [2.0, 2.0, 0.0]])
    y = np.array([2.0, 1.0, 2.0])
    step = fit_step(DecodeRows(x, y, np.zeros(3)))
    assert step.a == pytest.approx(7 / 6, rel=1e-12)
    assert step.b == 0.0
    assert step.c == pytest.approx(0.0, abs=1e-15)


def test_a_fit_that_is_never_feasible_or_too_short_is_refused():
    x = np.array([[1.0, 2.0, 3.0], [2.0, 1.0, 5.0], [1.0, 1.0, 1.0]])
    with pytest.raises(UsageError, match="could not fit"):
        fit_step(DecodeRows(x, -x.sum(axis=1), np.zeros(3)))  # every step time negative
    with pytest.raises(UsageError, match="too short"):
        fit_step(DecodeRows(x[:2], np.ones(2), np.zeros(2)))


def test_decode_rows_of_three_requests_decoding_together():
    # C = 3, all sent at 10, first tokens at 11 (start-up ends at 11), last chunks at 13.
    # tokens 5, 3, 3 over chunks 3, 3, 2; prompts 10, 0, 4
    recs = [
        rec(10.0, [1.0, 2.0, 3.0], tokens=5, prompt=10),
        rec(10.0, [1.0, 2.0, 3.0], tokens=3, prompt=0),
        rec(10.0, [1.0, 3.0], tokens=3, prompt=4),
    ]
    rows = decode_rows(recs, 3)
    # decode rates (tokens - 1)/2 s = 2, 1, 1 tok/s; context at t: prompt + 1 + rate·(t - 11)
    # at 11.5: 12 + 1.5 + 5.5 = 19; at 12: 13 + 2 + 6 = 21; at 12.5: 14 + 2.5 + 6.5 = 23
    # tokens per interval: (5 - 1)/2 = 2, (3 - 1)/2 = 1, (3 - 1)/1 = 2; n = 3 throughout
    # request 1: intervals (11, 12) and (12, 13), 2 tokens each: Σn = 3·2 + 3·2 = 12,
    #   Σk = 19·2 + 23·2 = 84; request 2: 1 token each: Σn 6, Σk 19 + 23 = 42;
    # request 3: one interval (11, 13), mid 12, 2 tokens: Σn 6, Σk 21·2 = 42
    assert rows.x.tolist() == [[4.0, 12.0, 84.0], [2.0, 6.0, 42.0], [2.0, 6.0, 42.0]]
    assert rows.y.tolist() == [2.0, 2.0, 2.0]
    assert rows.start.tolist() == [11.0, 11.0, 11.0]


def test_decode_rows_leave_out_the_start_up_and_count_who_decodes_when():
    recs = [
        # R1: chunks at 11 12 13 14, 4 tokens (1 per interval), prompt 0
        rec(10.0, [1.0, 2.0, 3.0, 4.0], tokens=4, prompt=0),
        # R2: chunks at 13 14 15, 3 tokens (1 per interval), prompt 0
        rec(10.0, [3.0, 4.0, 5.0], tokens=3, prompt=0),
        # R3 (R1's slot): chunks at 15 16 17, 5 tokens (2 per interval), prompt 2
        rec(14.0, [1.0, 2.0, 3.0], tokens=5, prompt=2),
        # R0: sent after the first two, decoded 10.75-12.75, all before the start-up
        # ended: no row of its own, and never counted as decoding in a counted interval
        rec(10.25, [0.5, 1.5, 2.5], tokens=3, prompt=0),
        # a failure and a one-chunk reply are not timed
        rec(10.5, [0.5, 1.0], tokens=2, error="read_timeout"),
        rec(10.5, [4.5], tokens=1),
    ]
    rows = decode_rows(recs, 2)
    # start-up: first tokens of the first two sent, max(11, 13) = 13; intervals before
    # 13 do not count (R1's 11-12 and 12-13; all of R0's)
    # context at t: R1 1 + 1·(t - 11), R2 1 + 1·(t - 13), R3 3 + 2·(t - 15)
    # R1 (13, 14): mid 13.5, R1 and R2 decoding: n 2, k 3.5 + 1.5 = 5; 1 token
    # R2 (13, 14): the same, 1 token; (14, 15): mid 14.5, R1 ended at 14: n 1, k 2.5
    # R3 (15, 16): mid 15.5, R2 ended at 15: n 1, k 4; (16, 17): n 1, k 6; 2 tokens each
    assert rows.x.tolist() == [[1.0, 2.0, 5.0], [2.0, 3.0, 7.5], [4.0, 4.0, 20.0]]
    assert rows.y.tolist() == [1.0, 2.0, 2.0]  # seconds of the counted intervals
    assert rows.start.tolist() == [13.0, 13.0, 15.0]  # decode start, not before 13


def test_decode_rows_need_three_streamed_replies():
    with pytest.raises(UsageError, match="too few"):
        decode_rows([rec(1.0, [1.0, 2.0], tokens=2), rec(1.0, [1.0, 2.0], tokens=2)], 2)


# ------------------------------------------------------------------------- the pool


def pool(output, *, prompt=None, ttft=0.5, first=0.5, gap=0.0, fail_rate=0.0, fail_s=(), **kw):
    n = len(output)
    return Draws(
        prompt=np.array(prompt if prompt is not None else [0.0] * n, float),
        output=np.array(output, float),
        thinking=np.zeros(n),
        ttft=np.full(n, ttft),
        first_ttft=np.full(n, first),
        attempts=n,
        fail_rate=fail_rate,
        fail_s=np.array(fail_s, float),
        gap_s=gap,
        **kw,
    )


def pilot_records():
    """C = 2. Ends at 13, 14, 15, 16 are followed by sends 0.25, 0.5, 0.125, 0.25 later."""
    return [
        rec(10.0, [1.0, 3.0], "ra", tokens=4, reasoning=1, prompt=7, rid="A"),  # ends 13
        rec(10.0, [2.0, 4.0], tokens=6, prompt=5, rid="B"),  # ends 14
        rec(13.25, [0.5, 1.75], tokens=2, prompt=3, rid="C"),  # ends 15
        rec(14.5, [], end=20.0, error="read_timeout", rid="D"),  # held its worker 5.5 s
        rec(15.125, [0.75, 0.875], tokens=8, prompt=9, rid="E"),  # ends 16
        rec(16.25, [], end=16.5, error="cancelled", rid="F"),  # the user stopped: not a failure
    ]


def test_the_pool_learns_lengths_ttfts_failures_and_the_client_gap():
    p = Draws.from_records(pilot_records(), 2)
    assert p.output.tolist() == [4.0, 6.0, 2.0, 8.0]  # A B C E
    assert p.prompt.tolist() == [7.0, 5.0, 3.0, 9.0]
    assert p.thinking.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert p.first_ttft.tolist() == [1.0, 2.0]  # A and B, sent at once
    assert p.ttft.tolist() == [0.5, 0.75]  # C and E, sent under load
    # D failed (F was cancelled, neither a success nor a failure): 1 of 5 attempts
    assert (p.attempts, p.fail_rate) == (5, 0.2)
    assert p.fail_s.tolist() == [5.5]
    # sends after the first C answer ends in order: 13.25-13, 14.5-14, 15.125-15,
    # 16.25-16 = 0.25 0.5 0.125 0.25, median 0.25
    assert p.gap_s == 0.25
    assert p.order.tolist() == [0, 1, 2, 3]
    assert p.row_of is None and p.next_of is None
    assert p.heads.tolist() == [0, 1, 2, 3]
    assert p.sample_output.tolist() == [4.0, 6.0, 2.0, 8.0]


def test_worker_gap():
    assert worker_gap(sorted(pilot_records(), key=lambda r: r.t_send), 2) == 0.25
    # a send before the end it is paired with is not a refill: no gap from it
    recs = [rec(1.0, [1.0]), rec(1.5, [0.25])]  # ends 2.0 and 1.75; second send 1.5
    assert worker_gap(recs, 1) == 0.0
    assert worker_gap(recs[:1], 1) == 0.0  # nothing sent after the first C


def test_samples_of_several_turns_are_kept_whole_or_not_at_all():
    def turn(row, t, turns, tokens, send):
        return rec(send, [0.5, 1.0], tokens=tokens, extra={"row": row, "turn": t, "turns": turns})

    recs = [
        turn(0, 1, 2, 20, 3.0),  # row 0's turns, the second listed first
        turn(0, 0, 2, 10, 1.0),
        turn(1, 0, 2, 30, 1.5),  # row 1's second turn failed: the row is not a sample
        turn(2, 0, 1, 40, 2.0),
        rec(2.5, [0.5, 1.0], tokens=50),  # no row tag: a sample of its own
    ]
    failed = turn(1, 1, 2, 0, 4.0)
    failed.error_kind = "read_timeout"
    groups = complete_samples([r for r in recs if r.ok])
    assert [[r.completion_tokens for r in g] for g in groups] == [[10, 20], [40], [50]]
    p = Draws.from_records([*recs, failed], 2)
    assert p.output.tolist() == [10.0, 20.0, 40.0, 50.0]
    assert p.row_of.tolist() == [0, 0, 1, 2]
    assert p.next_of.tolist() == [1, -1, -1, -1]
    assert p.heads.tolist() == [0, 2, 3]
    assert p.sample_output.tolist() == [30.0, 40.0, 50.0]
    # samples in the order their first requests were sent: row 0 (1.0), row 2 (2.0),
    # the untagged one (2.5)
    assert p.order.tolist() == [0, 2, 3]
    assert chain_next(np.array([0, 0, 0, 1, 2, 2])).tolist() == [1, 2, -1, -1, 5, -1]


def test_a_pilot_without_a_success_or_a_whole_sample_is_refused():
    with pytest.raises(UsageError, match="no successful request"):
        Draws.from_records([rec(1.0, [], end=2.0, error="read_timeout")], 1)
    half = rec(1.0, [0.5, 1.0], tokens=3, extra={"row": 0, "turn": 0, "turns": 2})
    with pytest.raises(UsageError, match="finished no sample"):
        Draws.from_records([half], 1)


def test_a_resampled_pool_keeps_its_shape():
    p = Draws.from_records(pilot_records(), 2)
    b = p.resample(np.random.default_rng(3))
    assert len(b.output) == 4 and set(b.output.tolist()) <= {4.0, 6.0, 2.0, 8.0}
    assert (b.gap_s, b.attempts) == (0.25, 5)
    assert 0.0 <= b.fail_rate <= 0.95
    assert set(b.fail_s.tolist()) <= {5.5}


# ------------------------------------------------------------------------- the simulation


def test_one_worker_two_samples():
    # first: TTFT of the start-up 0.25, then 2 steps of 0.5 -> ends 1.25;
    # second: sent at 1.25, gap 0.125 + TTFT 0.5 -> first token 1.875, 2 steps -> 2.875
    p = pool([3.0], ttft=0.5, first=0.25, gap=0.125)
    sim = simulate_job(2, 1, p, StepModel(0.5, 0.0, 0.0), np.random.default_rng(0))
    assert sim.wall_s == 2.875
    assert sim.last_send_s == 1.25
    assert sim.steady_s_per_token is None  # 2 samples: no quarter to measure from


def test_a_step_grows_with_the_context():
    # one request, prompt 4, 3 tokens: after the first, context 5 + x over 2 steps of
    # 0.25 s per context token: ∫0..2 0.25·(5 + x) dx = 0.25·12 = 3; plus TTFT 0.5
    p = pool([3.0], prompt=[4.0], first=0.5)
    sim = simulate_job(1, 1, p, StepModel(0.0, 0.0, 0.25), np.random.default_rng(0))
    assert sim.wall_s == 3.5


def test_two_workers_share_the_steps_until_one_finishes():
    # both first tokens at 0.5; 2 decoding: step 0.25 + 0.25·2 = 0.75; the 3-token one
    # ends after 2 steps at 2.0; then alone, step 0.5, the 5-token one has 2 steps left
    # -> 3.0
    p = pool([3.0, 5.0], first=0.5)
    sim = simulate_job(0, 2, p, StepModel(0.25, 0.25, 0.0), np.random.default_rng(0), [0, 1])
    assert sim.wall_s == 3.0
    assert sim.last_send_s == 0.0


def test_an_arrival_in_the_middle_of_decoding():
    """C = 2, step = 0.125 s per context token held, requests in order j0 j1 j2:
    j0 (prompt 0, 2 tokens) and j1 (prompt 3, 9 tokens) get first tokens at 0.5.
    One step with contexts 1 + 4 -> 0.125·5 + 0.25/2 (growth) = 0.75: j0 ends at 1.25 and
    j2 is sent (no gap, TTFT 0.6875: first token at 1.9375). j1 alone, context 5 + x:
    ∫0..g 0.125·(5 + x) dx = 0.6875 -> g = 1 step. j2 joins at context 1, j1 at 6:
    one step 0.125·7 + 0.25/2 = 1.0 -> j2 ends at 2.9375. j1 alone has 5 steps left from
    context 7: 0.125·(7·5 + 25/2) = 5.9375 -> 8.875."""
    p = pool([2.0, 9.0, 2.0], prompt=[0.0, 3.0, 0.0], ttft=0.6875, first=0.5)
    sim = simulate_job(0, 2, p, StepModel(0.0, 0.0, 0.125), np.random.default_rng(0), [0, 1, 2])
    assert sim.wall_s == 8.875
    assert sim.last_send_s == 1.25


def test_the_steady_seconds_per_token_between_the_quartiles():
    # C = 1, 4 samples of 4 tokens: the first ends at 1.0 + 3·0.25 = 1.75 (a quarter
    # done, 4 tokens); each later one takes gap 0.25 + TTFT 0.5 + 0.75 = 1.5 s; the
    # third ends at 4.75 (three quarters, 12 tokens): (4.75 - 1.75)/(12 - 4) = 0.375
    p = pool([4.0], ttft=0.5, first=1.0, gap=0.25)
    sim = simulate_job(4, 1, p, StepModel(0.25, 0.0, 0.0), np.random.default_rng(0))
    assert sim.steady_s_per_token == 0.375
    assert sim.wall_s == 6.25  # 4.75 + 1.5
    assert sim.last_send_s == 4.75


def test_a_failed_attempt_holds_its_worker_then_is_retried():
    seed = 8
    # the simulation's draws for this seed: attempt 1 fails (0.434 < 0.5), attempt 2
    # does not (0.901 >= 0.5)
    draws = random.Random(int(np.random.default_rng(seed).integers(0, 2**63)))
    d = [draws.random() for _ in range(4)]
    assert d[0] < 0.5 <= d[2]
    # fails at once and holds the worker 2 s; the retry is sent at 2.0 like a later
    # request: gap 0.25 + TTFT 0.5 -> 2.75, then 1 step of 0.25 -> 3.0
    p = pool([2.0], ttft=0.5, first=1.0, gap=0.25, fail_rate=0.5, fail_s=[2.0])
    sim = simulate_job(0, 1, p, StepModel(0.25, 0.0, 0.0), np.random.default_rng(seed), [0])
    assert sim.wall_s == 3.0
    assert sim.last_send_s == 0.0  # a retry is not a new sample


def test_a_one_token_reply_ends_at_its_first_token():
    # 0.5 (start-up TTFT), then sent at 0.5: 0.125 gap + 0.25 TTFT -> 0.875
    p = pool([1.0], ttft=0.25, first=0.5, gap=0.125)
    sim = simulate_job(2, 1, p, StepModel(1.0, 0.0, 0.0), np.random.default_rng(0))
    assert sim.wall_s == 0.875


def test_the_turns_of_a_sample_run_one_after_the_other_on_its_worker():
    # turn 1: first token 0.5, one step of 0.5 -> 1.0; turn 2 sent then: gap 0.125 +
    # TTFT 0.25 -> 1.375, one step -> 1.875
    p = pool([2.0, 2.0], ttft=0.25, first=0.5, gap=0.125)
    p.row_of, p.next_of = np.array([0, 0]), np.array([1, -1])
    sim = simulate_job(1, 1, p, StepModel(0.5, 0.0, 0.0), np.random.default_rng(0))
    assert sim.wall_s == 1.875
    # a one-token first turn hands over at its first token: 0.5 -> 0.875, +0.5 -> 1.375
    p.output = np.array([1.0, 2.0])
    sim = simulate_job(1, 1, p, StepModel(0.5, 0.0, 0.0), np.random.default_rng(0))
    assert sim.wall_s == 1.375


def test_long_jobs_continue_at_the_simulated_steady_rate():
    assert sim_cap(1) == 5000 and sim_cap(32) == 5000 and sim_cap(64) == 6400
    # every request: TTFT 0.5 + one step of 0.5 = 1 s for 2 tokens, one worker
    p = pool([2.0], ttft=0.5, first=0.5)
    step = StepModel(0.5, 0.0, 0.0)
    small, big = job_walls([10, 6000], 1, p, step, np.random.default_rng(0), repeats=2)
    assert small == 10.0
    # 5,000 simulated (5,000 s), then 1,000 × 2 tokens × 0.5 s per token
    assert big == pytest.approx(5000 + 1000 * 2 * 0.5, rel=1e-12)


# ------------------------------------------------------------------------- the error bar


def test_lag1_autocorrelation():
    # 1 2 3 4: deviations -1.5 -0.5 0.5 1.5; Σ d_i·d_i+1 = 0.75 - 0.25 + 0.75 = 1.25,
    # Σ d² = 5 -> 0.25
    assert lag1([1.0, 2.0, 3.0, 4.0]) == 0.25
    # 1 3 2 4: deviations -1.5 0.5 -0.5 1.5: -0.75 - 0.25 - 0.75 = -1.75 -> -0.35
    assert lag1([1.0, 3.0, 2.0, 4.0]) == pytest.approx(-0.35, rel=1e-12)
    assert lag1([1.0, math.nan, 2.0, 3.0, 4.0, math.inf]) == 0.25  # not finite: dropped
    assert lag1([5.0, 5.0, 5.0]) == 0.0  # no spread
    assert lag1([1.0, 2.0]) == 0.0  # too short


def test_batch_means_halfwidth():
    # 1 3 2 4: mean 2.5, sd sqrt(5/3), se relative sqrt(5/3)/2.5/sqrt(4) = sqrt(5/3)/5;
    # 3 degrees of freedom: t = 3.182; lag-1 -0.35 is clipped to 0: no inflation
    assert t_975(3) == 3.182
    assert series_halfwidth([1.0, 3.0, 2.0, 4.0]) == pytest.approx(
        3.182 * math.sqrt(5 / 3) / 5, rel=1e-12
    )
    # 1 2 3 4: lag-1 0.25 inflates by sqrt(1.25/0.75) = sqrt(5/3): 3.182·(5/3)/5 = 3.182/3
    assert series_halfwidth([1.0, 2.0, 3.0, 4.0]) == pytest.approx(3.182 / 3, rel=1e-12)
    # 1..100: lag-1 0.97 is clipped to 0.9 -> sqrt(1.9/0.1); t of 9+ degrees = 2.262;
    # sd of 1..100 = sqrt(100·101/12), mean 50.5
    v = np.arange(1.0, 101.0)
    assert lag1(v.tolist()) == pytest.approx(0.97, rel=1e-12)
    se = math.sqrt(100 * 101 / 12) / 50.5 / 10
    assert series_halfwidth(v.tolist()) == pytest.approx(2.262 * se * math.sqrt(19), rel=1e-12)
    assert series_halfwidth([1.0, 2.0]) == 0.0  # too few
    assert series_halfwidth([-1.0, 0.0, 1.0]) == 0.0  # no positive mean to be relative to


def test_speed_stretches_are_measured_over_fitted_seconds():
    # 15 rows -> min(10, 15 // 5) = 3 stretches of 5 rows, in order of decode start;
    # step 1 s per token, so fitted = tokens; measured is 1×, 2×, 1.5× that
    tokens = np.arange(1.0, 16.0)
    factor = np.repeat([1.0, 2.0, 1.5], 5)
    x = np.column_stack([tokens, np.zeros(15), np.zeros(15)])
    # rows listed latest first: the stretches follow the start times, not the list
    rows = DecodeRows(x[::-1], (tokens * factor)[::-1], np.arange(15.0)[::-1])
    assert speed_stretches(rows, StepModel(1.0, 0.0, 0.0)) == [1.0, 2.0, 1.5]
    assert (
        speed_stretches(
            DecodeRows(rows.x[:14], rows.y[:14], rows.start[:14]), StepModel(1.0, 0.0, 0.0)
        )
        == []
    )  # 14 // 5 = 2 stretches: too few to say anything


def test_length_halfwidth_from_running_sums():
    # 2 4 6 8: count 4, Σ 20, Σ² 120; mean 5, variance (120/4 - 25)·4/3 = 20/3;
    # 1.96 · sqrt(20/3 / 4) / 5 = 1.96·sqrt(5/3)/5
    assert length_halfwidth(4, 20.0, 120.0) == pytest.approx(1.96 * math.sqrt(5 / 3) / 5, 1e-12)
    assert length_halfwidth(1, 5.0, 25.0) == math.inf
    assert length_halfwidth(4, 0.0, 0.0) == math.inf
    assert length_halfwidth(3, 6.0, 12.0) == 0.0  # 2 2 2: no spread


def test_length_halfwidth_counts_the_skew_on_its_upper_side():
    """With the sums of cubes the half-width is the upper side of a right-skewed mean, as
    the bar's bootstrap-t makes it (the pilot stops on it): wider than the normal
    approximation, and nearer the bootstrap-t's upper side; no skew (or a left one)
    leaves the normal approximation."""
    x = np.random.default_rng(3).lognormal(3.0, 0.8, 400)
    sums = (len(x), float(x.sum()), float((x**2).sum()), float((x**3).sum()))
    plain, skewed = length_halfwidth(*sums[:3]), length_halfwidth(*sums)
    rng = np.random.default_rng(4)
    draws = rng.choice(x, size=(4000, len(x)))
    t = (draws.mean(1) - x.mean()) / (draws.std(1, ddof=1) / np.sqrt(len(x)))
    boot = -np.quantile(t, 0.025) * x.std(ddof=1) / np.sqrt(len(x)) / x.mean()
    assert plain < skewed and abs(skewed - boot) < 0.5 * abs(plain - boot), (plain, skewed, boot)
    assert length_halfwidth(4, 20.0, 120.0, 800.0) == length_halfwidth(4, 20.0, 120.0)  # 2 4 6 8
    left = np.array([1.0, 9.0, 9.0, 10.0, 10.0, 10.0])
    args = (6, float(left.sum()), float((left**2).sum()), float((left**3).sum()))
    assert length_halfwidth(*args) == length_halfwidth(*args[:3])


def test_pilot_size_for_a_target_bar():
    # a bar narrows as 1/sqrt(K): ±10% at 100 -> ±5% needs 100·(0.10/0.05)² = 400
    assert pilot_size_for(0.10, 100) == 400
    assert pilot_size_for(0.05, 100) == 100
    assert pilot_size_for(0.06, 100) == 144  # 100·1.44
    assert pilot_size_for(0.10, 100, target=0.10) == 100
    assert pilot_size_for(0.0, 100) == 1  # never fewer than one


def steady_single(offsets, tokens):
    return [rec(0.5, offsets, tokens=tokens)]


def test_the_sustained_rates_bar_from_ten_stretches_of_its_window():
    # C = 1: the window runs from the first token (1.0) to the end (11.0); ten 1 s
    # stretches; one token in each of the first five (1 2 3 4 5), none after:
    # 1 1 1 1 1 0 0 0 0 0: mean 0.5, sd sqrt(10·0.25/9); lag-1: deviations ±0.5,
    # Σ d_i·d_i+1 = 8·0.25 - 0.25 = 1.75 over Σ d² = 2.5 -> 0.7; t(9) = 2.262
    recs = steady_single([0.5, 1.5, 2.5, 3.5, 4.5, 10.5], 6)
    se = math.sqrt(2.5 / 9) / 0.5 / math.sqrt(10)
    expected = 2.262 * se * math.sqrt(1.7 / 0.3)
    assert rate_halfwidth(recs, 1) == pytest.approx(expected, rel=1e-12)
    # one token per stretch: no spread at all
    even = steady_single([0.5 + i for i in range(11)], 11)
    assert rate_halfwidth(even, 1) == 0.0
    # tokens in only four of ten stretches: too few to cut
    assert rate_halfwidth(steady_single([0.5, 1.5, 2.5, 3.5, 10.5], 5), 1) is None
    assert rate_halfwidth([], 1) is None


def model(stretches=(), stretch_s=1.0):
    """A pilot of 2-token requests at C = 2 (TTFT 0.5, one step of 0.5: 1 s each).
    The replay ran the pilot in 8 s where the server took 10: calibration 10/8 = 1.25;
    to its last send, 4 s × 1.25 against the server's 6.25 s is 20% short."""
    p = pool([3.0, 3.0], prompt=[10.0, 10.0])
    p.thinking = np.array([1.0, 1.0])
    rows = DecodeRows(np.zeros((3, 3)), np.zeros(3), np.zeros(3))
    return PilotModel(
        concurrency=2,
        pool=p,
        rows=rows,
        step=StepModel(0.25, 0.0, 0.0),
        pilot_requests=2,
        pilot_wall_s=10.0,
        pilot_steady_tps=None,
        replay_s=8.0,
        replay_send_s=4.0,
        pilot_send_s=6.25,
        stretches=list(stretches),
        stretch_s=stretch_s,
        pilot_samples=2,
    )


def test_calibration_and_replay_error():
    m = model()
    assert m.calibration == 1.25  # the whole pilot: 10 / 8
    assert m.replay_err == pytest.approx(-0.2, rel=1e-12)  # to the last send: 4 × 1.25 / 6.25 - 1
    m.replay_s = 0.0
    assert m.calibration == 1.5625  # no whole replay: to the last send, 6.25 / 4
    m.replay_send_s = 0.0
    assert m.calibration == 1.0  # nothing to calibrate against
    assert m.replay_err == 0.0
    # the speed's wander: the stretches are measured over fitted seconds, so speed is 1/x
    assert model([1.0, 3.0, 2.0, 4.0], 2.0).wander == SpeedWander.fit([1, 1 / 3, 1 / 2, 1 / 4], 2.0)
    assert model([1.0, 3.0, 2.0, 4.0], 0.0).wander.job(100.0, drift=0.1).halfwidth == 0.1


def test_the_forecast_adds_its_parts_in_quadrature():
    # every request: TTFT 0.5 + 2 steps of 0.25 = 1 s; C = 2; 8 samples on one server
    # are 4 rounds = 4 s, × calibration 1.25 = 5 s; on two servers 4 each: 2 s -> 2.5 s.
    # All requests alike, so every bootstrap replicate is the point itself; the bar is
    # the replay's 20% error alone: 5 ± 1 s
    one, two = forecast(model(), [(8, 1), (8, 2)], boot=3)
    assert one.seconds == 5.0
    assert (one.lo_s, one.hi_s) == (pytest.approx(4.0, rel=1e-12), pytest.approx(6.0, rel=1e-12))
    assert one.rel_halfwidth == pytest.approx(0.2, rel=1e-12)
    assert (two.per_server, two.seconds) == (4, 2.5)
    assert (two.lo_s, two.hi_s) == (pytest.approx(2.0, rel=1e-12), pytest.approx(3.0, rel=1e-12))
    # tokens: 8 samples × 3 (no spread in lengths), thinking 8 × 1, prompt 8 × 10
    assert (one.output_tokens, one.output_lo, one.output_hi) == (24.0, 24.0, 24.0)
    assert (one.thinking_tokens, one.prompt_tokens) == (8.0, 80.0)
    assert one.length_halfwidth == 0.0


def test_the_servers_speed_widens_the_bar():
    # stretches 1.0 1.2 1.1 1.3 of 0.5 s: the speed's half-width h for the job's 5 s
    # (SpeedWander); below the point p - p/(1 + h), above p/(1 - h) - p, each with the
    # replay's 20% in quadrature
    p, stretches = 5.0, [1.0, 1.2, 1.1, 1.3]
    speed = SpeedWander.fit([1 / x for x in stretches], 0.5).job(p)
    h = speed.halfwidth
    assert 0.1 < h < 0.95
    (f,) = forecast(model(stretches, 0.5), [(8, 1)], boot=2)
    assert f.speed == speed
    assert f.lo_s == pytest.approx(p - math.hypot(0.2 * p, p - p / (1 + h)), rel=1e-12)
    assert f.hi_s == pytest.approx(p + math.hypot(0.2 * p, p / (1 - h) - p), rel=1e-12)
    # what the user knows of slower drift (relative, 95%) adds to the speed's part
    (d,) = forecast(model(stretches, 0.5), [(8, 1)], boot=2, drift=0.3)
    assert d.speed.halfwidth == pytest.approx(math.hypot(h, 0.3), rel=1e-12)
    # a half-width past SPEED_MAX (60%) is held there on the time, as the live ETA holds
    # its own: p/0.4 (it was 95%: p/0.05, a bar of +1,132% for a server swinging ±60%)
    (g,) = forecast(model([1.0, 30.0, 1.0, 30.0]), [(8, 1)], boot=2)
    assert g.speed.halfwidth > SPEED_MAX
    assert g.hi_s == pytest.approx(p + math.hypot(0.2 * p, p / (1 - SPEED_MAX) - p), rel=1e-12)


# ------------------------------------------------------------------------- edges of the above


def test_the_arithmetics_smallest_valid_inputs_and_its_messages():
    a = arithmetic(1, 0.5, 0.5)  # one sample of half a token at half a token per second
    assert (a["tokens"], a["seconds"]) == (0.5, 1.0)
    for args, msg in [
        ((0, 1.0, 1.0, 1), "--samples: 0 must be positive"),
        ((1, 0.0, 1.0, 1), "--tokens-per-sample must be positive, got 0.0"),
        ((1, 1.0, 0.0, 1), "--rate must be positive, got 0.0"),
        ((1, 1.0, 1.0, 0), "--servers must be positive, got 0"),
    ]:
        with pytest.raises(UsageError) as e:
            arithmetic(*args)
        assert str(e.value) == msg


def test_the_counts_messages():
    for text, msg in [
        ("", "--samples '' is empty: expected counts like 100K,200K"),
        ("x", "--samples: 'x' is not a count (e.g. 100000 or 100K)"),
        ("0.5", "--samples: 0.5 is not a whole number of samples"),  # positive, not whole
        ("1.5", "--samples: 1.5 is not a whole number of samples"),
        ("-5", "--samples: -5 must be positive"),
    ]:
        with pytest.raises(UsageError) as e:
            parse_counts("--samples", text)
        assert str(e.value) == msg


def test_storage_basis_texts_and_hidden_states_carried():
    hidden = HiddenStates(4096, 3)
    s = storage_from_tokens(10, None, hidden)
    assert s.basis == "4 bytes per output token (assumed) + 400 bytes per line; prompts not counted"
    assert s.hidden is hidden
    assert storage_from_tokens(10, 3.5, None).basis.startswith("3.5 bytes per output token (given)")
    assert StorageModel(4400.0, 50.0, "b").row(10, 0) == {
        "jsonl_bytes_per_sample": 4400.0,
        "jsonl_bytes": 44000.0,
        "parquet_bytes_per_sample": 50.0,
        "parquet_bytes": 500.0,
        "hidden_state_tokens": None,
        "hidden_state_bytes": None,
        "hidden_state_bytes_fp8": None,
    }


def test_the_step_fits_messages():
    x = np.array([[1.0, 2.0, 3.0], [2.0, 1.0, 5.0], [1.0, 1.0, 1.0]])
    with pytest.raises(UsageError) as e:
        fit_step(DecodeRows(x, -x.sum(axis=1), np.zeros(3)))
    assert str(e.value) == "could not fit the server's step time to the pilot"
    with pytest.raises(UsageError) as e:
        fit_step(DecodeRows(x[:2], np.ones(2), np.zeros(2)))
    assert str(e.value) == "the pilot is too short to time the server: use a larger --pilot"
    with pytest.raises(UsageError) as e:
        decode_rows([rec(1.0, [1.0, 2.0], tokens=2)], 1)
    assert str(e.value) == "the pilot streamed too few replies to time the server: use more"


def test_the_best_feasible_fit_among_terms_of_any_number():
    # seconds [3, 3, 4] = 1·Σn + 1·Σk exactly (a = 0); a + b·n + c·k with all three gives
    # a negative term; of the pairs, (a, c) fits first with residual 0.5 but (b, c) is exact
    x = np.array([[1.0, 2.0, 1.0], [0.0, 1.0, 2.0], [1.0, 3.0, 1.0]])
    step = fit_step(DecodeRows(x, np.array([3.0, 3.0, 4.0]), np.zeros(3)))
    assert (step.a, step.b, step.c) == pytest.approx((0.0, 1.0, 1.0), abs=1e-12)
    # here every pair and the triple need a negative term: the best single term is b = 1
    # (Σ n·y / Σ n² = 2/2; residual 3, against a = 1/6 with residual 4.5)
    x = np.array([[3.0, 1.0, 1.0], [3.0, 0.0, 1.0], [0.0, 1.0, 3.0]])
    step = fit_step(DecodeRows(x, np.array([0.0, 1.0, 2.0]), np.zeros(3)))
    assert (step.a, step.b, step.c) == (0.0, pytest.approx(1.0, rel=1e-12), 0.0)
    # (a, b) needs b < 0; (a, c) fits with a = 2/3, c = 1, residual 1/3; (b, c) with 2/3
    x = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0], [2.0, 2.0, 1.0]])
    step = fit_step(DecodeRows(x, np.array([2.0, 1.0, 2.0]), np.zeros(3)))
    assert (step.a, step.b, step.c) == pytest.approx((2 / 3, 0.0, 1.0), rel=1e-12)


def test_a_feasible_least_squares_fit_is_the_fit():
    # noisy seconds: the three-term least squares has every term > 0, so it is the answer
    # even where a smaller model comes close
    rng = np.random.default_rng(5)
    x = np.column_stack([np.full(40, 10.0), rng.uniform(10, 80, 40), rng.uniform(1e3, 9e3, 40)])
    y = x @ np.array([0.002, 0.003, 1e-6]) * rng.uniform(0.9, 1.1, 40)
    want = np.linalg.lstsq(x, y, rcond=None)[0]
    assert np.all(want > 0)
    step = fit_step(DecodeRows(x, y, np.zeros(40)))
    assert (step.a, step.b, step.c) == pytest.approx(tuple(want), rel=1e-9)


def test_decode_rows_of_requests_that_are_not_timed():
    base = [
        rec(10.0, [1.0, 2.0, 3.0], tokens=5, prompt=10),
        rec(10.0, [1.0, 2.0, 3.0], tokens=3, prompt=0),
        rec(10.0, [1.0, 3.0], tokens=3, prompt=4),
    ]
    extra = [
        # sent later than the first three; none of these may change their rows
        rec(10.25, [0.75, 2.75], tokens=3, error="read_timeout"),  # failed while they ran
        rec(10.25, [0.75, 2.75], tokens=None),  # no usage: not timed, not decoding
        rec(10.25, [0.25, 0.25], tokens=3),  # two chunks at once, before the start-up
        rec(19.75, [0.25, 0.25], tokens=3),  # two chunks at once, later: no seconds
        rec(20.5, [0.5, 1.5], tokens=1),  # one token: nothing decoded after the first
    ]
    rows = decode_rows(base + extra, 3)
    assert rows.x.tolist() == [[4.0, 12.0, 84.0], [2.0, 6.0, 42.0], [2.0, 6.0, 42.0]]
    assert rows.y.tolist() == [2.0, 2.0, 2.0]


def test_decode_rows_when_the_first_requests_all_failed():
    # C = 1 and the first request sent failed: no start-up to leave out, every interval
    # counts; the rows are those of the three requests decoding together
    recs = [
        rec(9.5, [], end=10.0, error="connect_refused"),
        rec(10.0, [1.0, 2.0, 3.0], tokens=5, prompt=10),
        rec(10.0, [1.0, 2.0, 3.0], tokens=3, prompt=0),
        rec(10.0, [1.0, 3.0], tokens=3, prompt=4),
    ]
    rows = decode_rows(recs, 1)
    assert rows.x.tolist() == [[4.0, 12.0, 84.0], [2.0, 6.0, 42.0], [2.0, 6.0, 42.0]]
    assert rows.start.tolist() == [11.0, 11.0, 11.0]


def test_decode_rows_context_grows_within_a_second():
    # C = 3, each: chunks at 11 11.5 12, 3 tokens: 2 tok/s, context 1 + 2·(t - 11);
    # mids 11.25 (contexts 1.5 each, k 4.5) and 11.75 (2.5 each, k 7.5), 1 token each
    recs = [rec(10.0, [1.0, 1.5, 2.0], tokens=3, prompt=0) for _ in range(3)]
    rows = decode_rows(recs, 3)
    assert rows.x.tolist() == [[2.0, 6.0, 12.0]] * 3
    assert rows.y.tolist() == [1.0] * 3


def test_the_pool_without_prompt_counts_or_end_times():
    recs = [
        rec(10.0, [1.0, 2.0], tokens=4, prompt=None),  # prompt not reported: 0
        rec(10.0, [1.0, 2.0], tokens=4, prompt=3),
        rec(11.0, [], end=None, error="disconnected"),  # failed, never ended: held 0 s
        rec(11.0, [0.5, 1.0], tokens=3, error="read_timeout"),  # failed after tokens
    ]
    recs[2].t_end = None
    p = Draws.from_records(recs, 2)
    assert p.prompt.tolist() == [0.0, 3.0]
    assert p.output.tolist() == [4.0, 4.0]  # the failure with tokens is not a success
    assert (p.attempts, p.fail_rate) == (4, 0.5)
    assert p.fail_s.tolist() == [0.0, 1.0]
    with pytest.raises(UsageError) as e:
        Draws.from_records([rec(1.0, [], end=2.0, error="read_timeout")], 1)
    assert str(e.value) == "the pilot has no successful request to learn from"
    half = rec(1.0, [0.5, 1.0], tokens=3, extra={"row": 0, "turn": 0, "turns": 2})
    with pytest.raises(UsageError) as e:
        Draws.from_records([half], 1)
    assert str(e.value) == "the pilot finished no sample (every conversation had a failed turn)"


def test_a_turn_without_a_number_is_the_first():
    first = rec(1.0, [0.5, 1.0], tokens=3, extra={"row": 0, "turns": 2})  # no "turn": 0
    second = rec(2.0, [0.5, 1.0], tokens=5, extra={"row": 0, "turn": 1, "turns": 2})
    (g,) = complete_samples([second, first])
    assert [r.completion_tokens for r in g] == [3, 5]


def test_resampling_keeps_samples_whole_and_draws_every_one():
    row_of = np.array([0, 0, 1, 2, 2])
    p = pool([10.0, 20.0, 30.0, 40.0, 50.0], row_of=row_of, next_of=chain_next(row_of))
    p.thinking = p.output / 10
    p.ttft = np.array([0.5, 1.0, 1.5, 2.0, 2.5])
    p.first_ttft = np.array([0.25, 0.75, 1.25, 1.75, 2.25])
    seen, ttfts, firsts = set(), set(), set()
    rng = np.random.default_rng(0)
    for _ in range(30):
        b = p.resample(rng)
        samples = [tuple(b.output[b.row_of == k]) for k in range(3)]
        assert all(s in {(10.0, 20.0), (30.0,), (40.0, 50.0)} for s in samples)
        assert b.next_of.tolist() == chain_next(b.row_of).tolist()
        assert b.thinking.tolist() == (b.output / 10).tolist()  # with their own requests
        seen |= set(samples)
        ttfts |= set(b.ttft.tolist())
        firsts |= set(b.first_ttft.tolist())
    assert len(seen) == 3 and len(ttfts) == 5 and len(firsts) == 5  # none left out
    one = pool([10.0, 20.0])
    assert {tuple(one.resample(np.random.default_rng(s)).output) for s in range(20)} >= {
        (10.0, 10.0),
        (10.0, 20.0),
    }


def test_resampled_failure_rates():
    # every attempt failed: the resample's rate is held at 95% so a job can finish
    p = pool([2.0], fail_rate=1.0, fail_s=[1.0, 3.0])
    p.attempts = 10
    rng = np.random.default_rng(0)
    draws = [p.resample(rng) for _ in range(20)]
    assert all(b.fail_rate == 0.95 for b in draws)
    assert any(b.fail_s.tolist() in ([1.0, 1.0], [3.0, 3.0]) for b in draws)  # resampled
    none = pool([2.0])
    none.attempts = 0
    assert none.resample(rng).fail_rate == 0.0


def test_the_simulation_draws_ttfts_and_failures_from_the_pool():
    seed = 25
    # the simulation's draws for this seed: 0.490 0.933 0.862 0.480
    draws = random.Random(int(np.random.default_rng(seed).integers(0, 2**63)))
    d = [draws.random() for _ in range(4)]
    assert [int(x * 4) for x in d] == [1, 3, 3, 1] and d[0] < 0.5 <= d[2]
    # no failures: the start-up TTFT is first_ttft[int(0.490 · 4)] = first_ttft[1] = 0.5;
    # then one step of 0.25
    p = pool([2.0])
    p.first_ttft = np.array([0.25, 0.5, 1.0, 2.0])
    sim = simulate_job(0, 1, p, StepModel(0.25, 0.0, 0.0), np.random.default_rng(seed), [0])
    assert sim.wall_s == 0.75
    # a failure first (0.490 < 0.5), held fail_s[int(0.933 · 4)] = fail_s[3] = 32; the
    # retry passes (0.862), TTFT ttft[int(0.480 · 4)] = ttft[1] = 0.5 after the 0.25 gap
    p = pool([2.0], gap=0.25, fail_rate=0.5, fail_s=[4.0, 8.0, 16.0, 32.0])
    p.ttft = np.array([0.25, 0.5, 1.0, 2.0])
    sim = simulate_job(0, 1, p, StepModel(0.25, 0.0, 0.0), np.random.default_rng(seed), [0])
    assert sim.wall_s == 32.0 + 0.25 + 0.5 + 0.25
    # a pool that failed without a recorded hold: the failed attempt takes no time
    p = pool([2.0], gap=0.25, fail_rate=0.5, fail_s=[])
    sim = simulate_job(0, 1, p, StepModel(0.25, 0.0, 0.0), np.random.default_rng(seed), [0])
    assert sim.wall_s == 0.0 + 0.25 + 0.5 + 0.25


def test_a_replay_runs_the_samples_in_the_order_given():
    # C = 1, TTFT 0.5, step 0.5: the 2-token sample takes 1 s, the 4-token one 2 s; the
    # last send is when the first sample ends
    p = pool([2.0, 4.0])
    step = StepModel(0.5, 0.0, 0.0)
    assert simulate_job(0, 1, p, step, np.random.default_rng(0), [0, 1]).last_send_s == 1.0
    assert simulate_job(0, 1, p, step, np.random.default_rng(0), [1, 0]).last_send_s == 2.0


def test_the_steady_rate_is_taken_between_the_quartiles_of_the_samples_done():
    # C = 1, replayed in order: three 2-token samples (0.5 + 0.25 = 0.75 s each), then
    # three 4-token ones (0.5 + 3·0.25 = 1.25 s). Done at 0.75 1.5 2.25 3.5 4.75 6.0 with
    # 2 4 6 10 14 18 tokens. Quartiles of 6: 6 // 4 = 1st and 18 // 4 = 4th:
    # (3.5 - 0.75) / (10 - 2) = 2.75 / 8
    p = pool([2.0, 2.0, 2.0, 4.0, 4.0, 4.0])
    sim = simulate_job(
        0, 1, p, StepModel(0.25, 0.0, 0.0), np.random.default_rng(0), [0, 1, 2, 3, 4, 5]
    )
    assert sim.steady_s_per_token == 2.75 / 8
    assert (sim.wall_s, sim.last_send_s) == (6.0, 4.75)


def test_the_steady_rate_counts_tokens_still_being_decoded():
    """C = 2, step 0.5 s whoever decodes, TTFT 0.5, samples of 2 and 3 tokens alternating.
    Ends: 1.0 (2 tok), 1.5 (3), 2.0 (2), 3.0 (3 and 2), then the last two pairs are sent at
    3.0: 2 tokens end at 4.0 while the 3-token one has 2 of its tokens. The 2nd end (1.5)
    comes before the 3rd sample's first token at the same instant: 2 + 3 = 5 tokens; at
    the 6th end (4.0): 2+3+2+3+2+2 done + 2 in flight = 16. (4.0 - 1.5)/(16 - 5) = 2.5/11"""
    p = pool([2.0, 3.0] * 4)
    sim = simulate_job(0, 2, p, StepModel(0.5, 0.0, 0.0), np.random.default_rng(0), range(8))
    assert sim.steady_s_per_token == pytest.approx(2.5 / 11, rel=1e-12)
    assert sim.wall_s == 5.5


def test_a_one_token_sample_is_the_last_send():
    # the one-token test above: sent at 0 and at 0.5, nothing after the second
    p = pool([1.0], ttft=0.25, first=0.5, gap=0.125)
    sim = simulate_job(2, 1, p, StepModel(1.0, 0.0, 0.0), np.random.default_rng(0))
    assert sim.last_send_s == 0.5


def test_long_jobs_continue_at_the_simulated_rate_from_the_same_start():
    # lengths 2 and 4 drawn at random; every token costs 0.5 s (TTFT 0.5 = one step), so
    # the simulated steady rate is 0.5 s per token and the first 5,000 samples' wall is
    # the same simulation as a 5,000-sample job from the same seed; the rest is
    # 1,000 × 3 tokens (the mean) × 0.5 s. The start-up's TTFT is longer (2.5 s)
    p = pool([2.0, 4.0], first=2.5)
    step = StepModel(0.5, 0.0, 0.0)
    (w_cap,) = job_walls([5000], 1, p, step, np.random.default_rng(1))
    (big,) = job_walls([6000], 1, p, step, np.random.default_rng(1))
    assert big == pytest.approx(w_cap + 1000 * 3 * 0.5, rel=1e-12)


def replicate(outputs):
    """A bootstrap replicate as `Draws.resample` would return it, with these lengths."""
    return pool(outputs)


def test_the_bar_studentizes_the_mean_length(monkeypatch):
    """Steps take no time (a = b = c = 0), so a job's wall is its TTFTs alone: C = 1,
    8 samples × 0.5 s = 4 s, whatever the lengths. The pilot's lengths 1 2 6: mean 3,
    se = sqrt(7)/sqrt(3). Three replicates, given:
    [1 1 2]: mean 4/3, se 1/3: t = (4/3 - 3)/(1/3) = -5 -> 3 + 5·se;
    [2 6 6]: mean 14/3, se 4/3: t = 1.25 -> 3 - 1.25·se;
    [6 6 5.5]: mean 35/6, se 1/6: t = 17 -> below 5% of the mean: held at 0.15.
    A replicate's wall is 4 s × (studentized mean / its own mean)."""
    se = math.sqrt(7 / 3)
    m_t = [3 + 5 * se, 3 - 1.25 * se, 0.15]
    m_r = [4 / 3, 14 / 3, 35 / 6]
    reps = iter([replicate([1.0, 1.0, 2.0]), replicate([2.0, 6.0, 6.0]),
                 replicate([6.0, 6.0, 5.5])])  # fmt: skip
    monkeypatch.setattr(Draws, "resample", lambda self, rng: next(reps))
    monkeypatch.setattr("genbench.plan.bar.MISFIT_FLOOR", 0.0)  # the bootstrap's part alone
    m = model()
    m.pool = pool([1.0, 2.0, 6.0])
    m.pool.thinking = np.array([2.0, 2.0, 2.0])
    m.step = StepModel(0.0, 0.0, 0.0)
    m.concurrency = 1
    m.replay_s, m.pilot_wall_s, m.replay_send_s, m.pilot_send_s = 1.0, 1.0, 1.0, 1.0
    (f,) = forecast(m, [(8, 1)], boot=3)
    walls = sorted(4.0 * t / r for t, r in zip(m_t, m_r, strict=True))
    # percentiles of 3 values at 2.5% and 97.5%: ranks 0.05 and 1.95
    lo = walls[0] + 0.05 * (walls[1] - walls[0])
    hi = walls[1] + 0.95 * (walls[2] - walls[1])
    assert f.seconds == 4.0
    assert (f.lo_s, f.hi_s) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    means = sorted(m_t)
    out_lo = means[0] + 0.05 * (means[1] - means[0])
    out_hi = means[1] + 0.95 * (means[2] - means[1])
    assert f.output_tokens == 24.0  # 8 × 3
    # the job's own 8 samples scatter about the mean besides: × √(1 + 3/8) on each side
    own = math.sqrt(1 + 3 / 8)
    assert f.output_lo == pytest.approx(8 * max(3 - (3 - out_lo) * own, 0.0), abs=1e-12)
    assert f.output_hi == pytest.approx(8 * (3 + (out_hi - 3) * own), rel=1e-12)
    assert f.length_halfwidth == pytest.approx(max(out_hi / 3 - 1, 1 - out_lo / 3), rel=1e-12)
    assert (f.samples, f.servers, f.per_server) == (8, 1, 8)
    assert f.thinking_tokens == 16.0  # 8 × 2


def test_the_bootstrap_stops_at_twenty_replicates_past_its_time_budget(monkeypatch):
    calls = []
    real = Draws.resample

    def counting(self, rng):
        calls.append(1)
        return real(self, rng)

    monkeypatch.setattr(Draws, "resample", counting)
    assert len(forecast(model(), [(4, 1)], boot=25, time_budget_s=0.0)) == 1
    assert len(calls) == 20
    calls.clear()
    forecast(model(), [(4, 1)], boot=25)
    assert len(calls) == 25
    calls.clear()
    forecast(model(), [(4, 1)])
    assert len(calls) == 100  # the default


def test_the_forecast_is_reproducible_from_its_seed():
    m = model()
    m.pool = pool([2.0, 3.0, 9.0, 4.0])
    a = forecast(m, [(40, 1)], boot=5)
    assert forecast(m, [(40, 1)], boot=5, seed=0) == a
    assert forecast(m, [(40, 1)], boot=5, seed=1) != a


def test_a_pilot_replayed_exactly_keeps_a_bar_of_the_run_to_run_floor():
    # identical requests replayed to the millisecond: no bootstrap spread, no speed
    # stretches, no misfit; the bar is still ±1% (the same job twice differs by that much)
    m = model()
    m.replay_s, m.pilot_wall_s, m.replay_send_s, m.pilot_send_s = 8.0, 8.0, 4.0, 4.0
    (f,) = forecast(m, [(8, 1)], boot=3)
    assert m.replay_err == 0.0
    assert (f.lo_s, f.hi_s) == (pytest.approx(0.99 * f.seconds), pytest.approx(1.01 * f.seconds))
    assert f.parts is not None and f.parts.misfit == 0.01


def test_a_short_job_may_start_its_bar_below_one_second():
    m = model()
    m.replay_send_s = 25.0  # 25 × 1.25 / 6.25 - 1: a 400% replay error on each side
    (f,) = forecast(m, [(2, 1)], boot=2)
    # 2 samples at C = 2: one round of 1 s × 1.25 = 1.25 s; 4 × 1.25 below it: held at 0
    assert (f.seconds, f.lo_s) == (1.25, 0.0)


def test_the_smallest_series_that_say_something():
    # three values are enough: 1 3 2, deviations -1 1 0: (-1 + 0) / 2 = -0.5
    assert lag1([1.0, 3.0, 2.0]) == -0.5
    # spread below 1 in absolute terms is still spread: 0.1 .. 0.4 as 1 .. 4 above
    assert lag1([0.1, 0.2, 0.3, 0.4]) == pytest.approx(0.25, rel=1e-12)
    # 1 2 3: lag-1 0, sd 1, mean 2: t(2) = 4.303 × 1 / 2 / sqrt(3)
    assert series_halfwidth([1.0, 2.0, 3.0]) == pytest.approx(4.303 / 2 / math.sqrt(3), 1e-12)
    # two lengths 2 and 4: Σ 6, Σ² 20; variance (20/2 - 9)·2 = 2: 1.96·sqrt(2/2)/3
    assert length_halfwidth(2, 6.0, 20.0) == pytest.approx(1.96 / 3, rel=1e-12)
    assert length_halfwidth(2, 0.5, 0.125) == 0.0  # two of 0.25: a mean under one token


def test_the_rate_bar_reads_the_window_of_the_first_c_only():
    # a second request, sent at 6 (the last send) with its first token at 12: C = 1, so
    # the ramp is the first request's first token (1.0) and the tail its end (11.0)
    recs = [*steady_single([0.5, 1.5, 2.5, 3.5, 4.5, 10.5], 6), rec(6.0, [6.0, 7.0], tokens=2)]
    se = math.sqrt(2.5 / 9) / 0.5 / math.sqrt(10)
    assert rate_halfwidth(recs, 1) == pytest.approx(2.262 * se * math.sqrt(1.7 / 0.3), 1e-12)


def test_the_rate_bar_cuts_ten_equal_stretches():
    # one token in each of [1, 2) [2, 3) ... [10, 11): at 1, 2.5, 3.5, ..., 10.5 (the
    # chunk at 11 ends the window): no spread, whatever each carries (here 1/11 token)
    offsets = [0.5] + [2.0 + i for i in range(9)] + [10.5]
    assert rate_halfwidth(steady_single(offsets, 11), 1) == 0.0
    assert rate_halfwidth(steady_single(offsets, 1), 1) == 0.0
    # two tokens in the first stretch (1 and 1.5), one in each of the next four
    two = steady_single([0.5, 1.0, 1.5, 2.5, 3.5, 4.5, 10.5], 7)
    assert rate_halfwidth(two, 1) == series_halfwidth([2, 1, 1, 1, 1, 0, 0, 0, 0, 0])


def test_a_send_at_the_instant_a_request_ended_is_a_gap_of_zero():
    # C = 1: ends 2 and 3; the next sends at 2.0 (no gap) and 3.5: median of 0 and 0.5
    recs = [rec(1.0, [1.0]), rec(2.0, [1.0]), rec(3.5, [0.5])]
    assert worker_gap(recs, 1) == 0.25


def test_blocks_of_decode_rows():
    rows = DecodeRows(np.zeros((4, 3)), np.zeros(4), np.array([3.0, 1.0, 2.0, 0.0]))
    assert [b.tolist() for b in rows.blocks(1)] == [[3, 1, 2, 0]]
    assert [b.tolist() for b in rows.blocks(2)] == [[3, 1], [2, 0]]
    assert len(rows.blocks(9)) == 4  # never more stretches than rows


def test_samples_sent_at_the_same_instant_keep_their_order():
    recs = [rec(1.0, [0.5, 1.0], tokens=2, rid=str(i)) for i in range(40)]
    assert Draws.from_records(recs, 4).order.tolist() == list(range(40))


def test_resampled_failure_rates_move_with_the_draws():
    p = pool([2.0], fail_rate=0.5, fail_s=[1.0])
    p.attempts = 10
    rng = np.random.default_rng(0)
    rates = {p.resample(rng).fail_rate for _ in range(20)}
    assert rates <= {k / 10 for k in range(10)} and len(rates) > 1  # k failures of 10


def test_job_walls_simulate_once_unless_asked():
    p = pool([2.0, 5.0, 9.0])
    step = StepModel(0.5, 0.0, 0.0)
    one = job_walls([12], 1, p, step, np.random.default_rng(2))
    assert one == job_walls([12], 1, p, step, np.random.default_rng(2), repeats=1)
    assert one != job_walls([12], 1, p, step, np.random.default_rng(2), repeats=2)


def test_a_forecast_without_replicates():
    # no bootstrap at all: the bar is the replay's 20% alone, around 5 s (see above)
    (f,) = forecast(model(), [(8, 1)], boot=0)
    assert (f.seconds, f.output_lo, f.output_hi) == (5.0, 24.0, 24.0)
    assert (f.lo_s, f.hi_s) == (pytest.approx(4.0, rel=1e-12), pytest.approx(6.0, rel=1e-12))


def given_replicates(monkeypatch, pilot, replicates):
    """forecast over 8 samples at C = 1 with steps of no time (each sample: 0.5 s of TTFT,
    4 s in all), the pilot's lengths `pilot`, and these bootstrap replicates."""
    reps = iter([pool(r) for r in replicates])
    monkeypatch.setattr(Draws, "resample", lambda self, rng: next(reps))
    monkeypatch.setattr("genbench.plan.bar.MISFIT_FLOOR", 0.0)  # the bootstrap's part alone
    m = model()
    m.pool = pool(pilot)
    m.step = StepModel(0.0, 0.0, 0.0)
    m.concurrency = 1
    m.replay_s, m.pilot_wall_s, m.replay_send_s, m.pilot_send_s = 1.0, 1.0, 1.0, 1.0
    (f,) = forecast(m, [(8, 1)], boot=len(replicates))
    return f


def bar(walls):
    """2.5% and 97.5% percentiles of three values: ranks 0.05 and 1.95."""
    w = sorted(walls)
    return w[0] + 0.05 * (w[1] - w[0]), w[1] + 0.95 * (w[2] - w[1])


def test_the_bar_of_a_two_sample_pilot(monkeypatch):
    # pilot 1 3: mean 2, se = sqrt(2)/sqrt(2) = 1. Replicates: [1 1] and [3 3] have no
    # spread (se_r 0): taken as they are (4 s); [1 2]: mean 1.5, se_r 0.5, t = -1:
    # studentized 2 + 1 = 3, so its wall is 4 × 3/1.5 = 8 s
    f = given_replicates(monkeypatch, [1.0, 3.0], [[1.0, 1.0], [3.0, 3.0], [1.0, 2.0]])
    lo, hi = bar([4.0, 4.0, 8.0])
    assert (f.lo_s, f.hi_s) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))


def test_the_bar_with_a_small_standard_error_and_without_one(monkeypatch):
    # pilot 2 2.5 3: mean 2.5, se = 0.5/sqrt(3) = 0.2887. [2 2 2]: no spread, as is (4 s);
    # [2.5 3 3]: mean 17/6, se_r = sqrt(1/12)/sqrt(3) = 1/6: t = 2, studentized
    # 2.5 - 2·0.2887; [2 2 3]: mean 7/3, se_r 1/3: t = -0.5, studentized 2.5 + 0.5·0.2887
    se = 0.5 / math.sqrt(3)
    f = given_replicates(
        monkeypatch, [2.0, 2.5, 3.0], [[2.0, 2.0, 2.0], [2.5, 3.0, 3.0], [2.0, 2.0, 3.0]]
    )
    walls = [4.0, 4.0 * (2.5 - 2 * se) / (17 / 6), 4.0 * (2.5 + 0.5 * se) / (7 / 3)]
    lo, hi = bar(walls)
    assert (f.lo_s, f.hi_s) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    means = bar([2.0, 2.5 - 2 * se, 2.5 + 0.5 * se])
    assert f.length_halfwidth == pytest.approx(
        max(means[1] / 2.5 - 1, 1 - means[0] / 2.5), rel=1e-12
    )
    # a pilot of equal lengths has no standard error: replicates are taken as they are
    f = given_replicates(monkeypatch, [2.0, 2.0, 2.0], [[1.0, 2.0, 6.0]] * 3)
    assert f.lo_s == pytest.approx(4.0, rel=1e-12)  # the wall does not depend on lengths


def test_a_request_that_starts_decoding_at_an_intervals_midpoint_is_counted():
    # C = 1, start-up ends at 11. R1 chunks 11 12 (3 tokens: 2 in its interval, 2 tok/s),
    # R2 11.5 12.5 (2 tokens), R3 12 13 (2 tokens); prompts 0: context 1 + rate·(t - d).
    # R1's mid 11.5: R2 starts then and counts: n 2, k (1 + 2·0.5) + 1 = 3; 2 tokens
    # R2's mid 12: R3 starts then, R1 ends then (not before): n 3, k 3 + 1.5 + 1 = 5.5
    # R3's mid 12.5: R1 ended, R2 ends then: n 2, k 2 + 1.5 = 3.5
    recs = [rec(10.0, [1.0, 2.0], tokens=3), rec(10.0, [1.5, 2.5], tokens=2),
            rec(10.0, [2.0, 3.0], tokens=2)]  # fmt: skip
    rows = decode_rows(recs, 1)
    assert rows.x.tolist() == [[2.0, 4.0, 6.0], [1.0, 3.0, 5.5], [1.0, 2.0, 3.5]]
    assert rows.y.tolist() == [1.0, 1.0, 1.0]
    assert rows.start.tolist() == [11.0, 11.5, 12.0]


def test_a_pilot_longer_than_its_file_says_draws_not_more_rows_than_there_are():
    from genbench.plan.pilot import draws_of

    assert draws_of(200, 3000) == "200 of 3,000 rows"
    assert draws_of(30, 7) == "30 draws from the 7 rows (some twice)"
    assert draws_of(5, 1) == "5 draws from the 1 row (some twice)"


def test_the_warm_up_sends_none_of_the_prompts_a_short_pilot_measures():
    """A prefix cache warmed on the pilot's own prompts makes its TTFT look better than the
    job's: with a file of K + 4·C rows, the warm-up and a pilot of K share none."""
    from genbench.generate.input.reader import Row
    from genbench.plan.make import warmup_rows

    rows = [Row(line=i, id=str(i), messages=[{"role": "user", "content": "x"}], params={})
            for i in range(40)]  # fmt: skip
    warm = warmup_rows(rows, 8)
    assert len(warm) == 32 and not {r.id for r in warm} & {r.id for r in rows[:8]}
    assert len(warmup_rows(rows[:3], 2)) == 8  # a small file: its rows again
