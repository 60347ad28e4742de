"""The statistics every genbench number comes from, on records small enough to add up by hand.

Each expected value is worked out in the comment above it; times are binary fractions so
that `==` holds.
"""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import rec

from genbench.stats import (
    Window,
    dist,
    knee,
    percentile,
    steady_window,
    summarize,
    token_events,
    window_throughput,
)

pytestmark = pytest.mark.core


# ------------------------------------------------------------------------- percentiles


def test_percentile_interpolates_between_sorted_values():
    xs = [4.0, 1.0, 3.0, 2.0]  # sorted: 1 2 3 4, so rank k = 3·p/100
    assert percentile(xs, 50) == 2.5  # k = 1.5: 2 + (3 - 2)·0.5
    assert percentile(xs, 0) == 1.0  # k = 0
    assert percentile(xs, 100) == 4.0  # k = 3, the last value (no value above it)
    assert percentile(xs, 90) == pytest.approx(3.7, rel=1e-12)  # k = 2.7: 3 + 1·0.7
    assert percentile(xs, 25) == 1.75  # k = 0.75: 1 + 1·0.75
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


@pytest.mark.parametrize("p", [0, 10, 33, 50, 90, 99, 100])
def test_percentile_is_numpys_default_method(p):
    xs = [0.5, 8.0, 2.25, 2.25, 3.0, 17.5, 1.0]
    assert percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)), rel=1e-12)


def test_dist_skips_missing_values():
    d = dist([None, 2.0, 4.0, None, 6.0, 8.0])
    # four values 2 4 6 8: mean 20/4 = 5; p50 at k = 1.5: 4 + 2·0.5 = 5;
    # p90 at k = 2.7: 6 + 2·0.7 = 7.4; p99 at k = 2.97: 6 + 2·0.97 = 7.94
    assert d["n"] == 4
    assert d["mean"] == 5.0
    assert d["p50"] == 5.0
    assert d["p90"] == pytest.approx(7.4, rel=1e-12)
    assert d["p99"] == pytest.approx(7.94, rel=1e-12)
    assert (d["min"], d["max"]) == (2.0, 8.0)
    empty = dist([None, None])
    assert empty == {
        "n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None
    }  # fmt: skip


# ------------------------------------------------------------------------- token events


def test_usage_tokens_are_spread_over_the_chunks_of_their_kind():
    # 10 tokens, 6 of them thinking; 2 thinking chunks carry 6/2 = 3 each, 3 answer
    # chunks carry (10 - 6)/3 = 4/3 each (speculative chunks: several tokens per chunk)
    r = rec(100.0, [0.5, 1.0, 1.5, 2.0, 2.5], "rraaa", tokens=10, reasoning=6)
    ev = token_events(r)
    assert [t for t, _, _ in ev] == [100.5, 101.0, 101.5, 102.0, 102.5]
    assert [n for _, n, _ in ev] == [3.0, 3.0, 4 / 3, 4 / 3, 4 / 3]
    assert [k for _, _, k in ev] == [True, True, False, False, False]
    assert sum(n for _, n, _ in ev) == pytest.approx(10, rel=1e-12)


def test_without_usage_each_chunk_is_one_token():
    # no completion_tokens: total = 3 chunks; no reasoning_tokens: thinking = 1 chunk
    ev = token_events(rec(10.0, [1.0, 2.0, 3.0], "raa"))
    assert ev == [(11.0, 1.0, True), (12.0, 1.0, False), (13.0, 1.0, False)]


def test_reasoning_count_above_the_total_is_clipped():
    # reasoning 9 > completion 4: thinking = min(9, 4) = 4 on its one chunk, answer 0
    ev = token_events(rec(10.0, [1.0, 2.0], "ra", tokens=4, reasoning=9))
    assert ev == [(11.0, 4.0, True), (12.0, 0.0, False)]


def test_thinking_counted_by_the_server_but_not_streamed_apart_goes_to_the_answer_chunks():
    # reasoning 6 of 10, but all 4 chunks came as answer: every token is spread over
    # them, 10/4 = 2.5 each (not (10 - 6)/4), none counted as thinking
    ev = token_events(rec(10.0, [1.0, 2.0, 3.0, 4.0], "aaaa", tokens=10, reasoning=6))
    assert [n for _, n, _ in ev] == [2.5, 2.5, 2.5, 2.5]
    assert not any(k for _, _, k in ev)


def test_thinking_only_and_empty_replies():
    # all chunks thinking, reasoning not reported: think = n_think = 2, answer = 4 - 2
    # has no chunk to go to
    assert token_events(rec(0.5, [1.0, 2.0], "rr", tokens=4)) == [
        (1.5, 1.0, True),
        (2.5, 1.0, True),
    ]
    assert token_events(rec(0.5, [], tokens=0)) == []


# ------------------------------------------------------------------------- windows


def window_records():
    return [
        # 8 tokens (4 thinking) in chunks r r a a, 2 each, at 101 102 103 104
        rec(100.0, [1.0, 2.0, 3.0, 4.0], "rraa", tokens=8, reasoning=4),
        # 3 tokens, 1 each, at 102.5 103.5 105
        rec(100.0, [2.5, 3.5, 5.0], "aaa", tokens=3),
        # failed: its tokens never count
        rec(100.0, [1.5, 2.5], "aa", tokens=2, error="read_timeout"),
    ]


def test_window_counts_tokens_of_successful_requests_arriving_inside_it():
    w = window_throughput(window_records(), 102.0, 105.0)
    assert w is not None
    # [102, 105): first 102(r 2) 103(a 2) 104(a 2) = 6, second 102.5 103.5 = 2 (105 is
    # the end, excluded); the failed request's 102.5 is not counted
    assert (w.start, w.end, w.seconds) == (102.0, 105.0, 3.0)
    assert w.tokens == 8.0
    assert w.thinking_tokens == 2.0
    assert w.rate == 8 / 3
    # halves split at 103.5 (a token at the midpoint is in the second half), 1.5 s each:
    # first 102(2) 102.5(1) 103(2) = 5 -> 5/1.5; second 103.5(1) 104(2) = 3 -> 3/1.5
    assert w.halves == (5 / 1.5, 3 / 1.5)
    # |10/3 - 2| / (10/3) = 0.4 > 5%
    assert w.stable is False


def test_an_empty_or_reversed_window_is_none():
    assert window_throughput(window_records(), 105.0, 105.0) is None
    assert window_throughput(window_records(), 105.0, 102.0) is None


def test_window_stability_is_within_five_percent_of_the_faster_half():
    def w(a: float, b: float) -> Window:
        return Window(0.0, 2.0, a + b, 0.0, (a, b))

    assert w(100.0, 95.0).stable  # 5/100 = 5%: stable
    assert w(95.0, 100.0).stable
    assert not w(100.0, 94.0).stable  # 6%
    assert not w(0.0, 10.0).stable  # a half without tokens is never stable
    assert not w(10.0, 0.0).stable
    assert Window(3.0, 3.0, 5.0, 0.0, (0.0, 0.0)).rate == 0.0  # no time, no rate


# ------------------------------------------------------------------------- steady window


def ramp_and_tail():
    """C = 3. The first three requests stream their first tokens at 101, 102.5 and 104;
    their slots are refilled at 110, 111, 112 (the last send); the first completion
    after that is at 112."""
    return [
        rec(100.0, [1.0, 10.0]),  # first token 101, ends 110
        rec(100.0, [2.5, 11.0]),  # 102.5, ends 111
        rec(100.0, [4.0, 12.0]),  # 104, ends 112
        rec(110.0, [1.0, 6.0]),  # ends 116
        rec(111.0, [1.0, 6.0]),  # ends 117
        rec(112.0, [1.0, 6.0]),  # the last send; ends 118
    ]


def test_steady_window_starts_after_the_last_first_token_of_the_first_c():
    # ramp: max(101, 102.5, 104) = 104, not the first first-token (101);
    # tail: the first end at or after the last send (112) is 112, not the last end (118)
    assert steady_window(ramp_and_tail(), 3, None) == (104.0, 112.0)


def test_steady_window_tail_from_when_sending_stopped():
    # sending stopped at 111.5: first end at or after it is 112
    assert steady_window(ramp_and_tail(), 3, 111.5) == (104.0, 112.0)
    # stopped at 116: ends 116 117 118 -> 116 (a completion exactly then counts)
    assert steady_window(ramp_and_tail(), 3, 116.0) == (104.0, 116.0)
    # stopped after every end: the window runs to the last end
    assert steady_window(ramp_and_tail(), 3, 200.0) == (104.0, 118.0)


def test_only_the_first_c_requests_make_the_ramp():
    recs = ramp_and_tail()
    # a later request with a very late first token does not delay the ramp end
    recs.append(rec(111.5, [3.0, 4.0]))  # first token 114.5, ends 115.5
    assert steady_window(recs, 3, 112.0)[0] == 104.0
    # with C = 2 the ramp ends at the second first token, 102.5
    assert steady_window(recs, 2, 112.0)[0] == 102.5
    # the order the records come in does not matter, only their send times
    assert steady_window(list(reversed(ramp_and_tail())), 3, None) == (104.0, 112.0)


def test_a_request_that_failed_before_streaming_frees_its_slot_when_it_ends():
    recs = ramp_and_tail()
    # the 102.5 slot's request was refused at 105 instead: its slot ramps at 105
    recs[1] = rec(100.0, [], end=105.0, error="connect_refused")
    assert steady_window(recs, 3, None) == (105.0, 112.0)


def test_a_slot_that_never_streams_nor_ends_does_not_hold_the_window():
    recs = ramp_and_tail()
    recs[2] = rec(100.0, [], end=None, error="cancelled")  # no first token, no end
    # ramp: max(101, 102.5) = 102.5; ends 110 111 116 117 118, first >= 112 is 116
    assert steady_window(recs, 3, None) == (102.5, 116.0)


def test_a_failed_request_ending_after_sending_stopped_starts_the_tail():
    recs = ramp_and_tail()
    # a fourth request by send time (not one of the first C) times out at 111.5
    recs.append(rec(100.5, [], end=111.5, error="read_timeout"))
    # it ends before the last send (112): the tail still starts at 112
    assert steady_window(recs, 3, None) == (104.0, 112.0)
    # sending stopped at 111.25: the failure at 111.5 is the first completion after it
    assert steady_window(recs, 3, 111.25) == (104.0, 111.5)


def test_no_window_when_nothing_fits():
    assert steady_window([], 2, None) is None
    # never sent (t_send 0): ignored
    assert steady_window([rec(0.0, [1.0, 2.0])], 1, None) is None
    # no first C request streamed or ended
    assert steady_window([rec(1.0, [], end=None, error="cancelled")], 1, None) is None
    # the tail starts before the ramp ends: C = 2, first tokens 101 and 106, but the
    # first completion after the last send (105) is at 105.5
    recs = [rec(100.0, [1.0, 5.5]), rec(100.0, [6.0, 7.0]), rec(105.0, [0.25, 0.5])]
    assert steady_window(recs, 2, None) is None
    # nothing ended: the window would end where it starts
    running = rec(1.0, [0.5])
    running.t_end = None
    assert steady_window([running], 1, 0.5) is None


# ------------------------------------------------------------------------- a whole phase


def sustained_phase():
    """C = 2, sent from 100 to 106.5, every chunk's tokens worked out below."""
    return [
        # A: 8 tokens, 4 thinking: r r a a, 2 each, at 101 102 103 104; prompt 10
        rec(100.0, [1.0, 2.0, 3.0, 4.0], "rraa", tokens=8, reasoning=4, prompt=10, rid="A"),
        # B: 5 tokens, 1 each at 102 ... 106; prompt 20; hit its length limit
        rec(100.0, [2.0, 3.0, 4.0, 5.0, 6.0], tokens=5, prompt=20, finish="length", rid="B"),
        # C (A's slot): 6 tokens, 2 each at 105 106 107
        rec(104.0, [1.0, 2.0, 3.0], tokens=6, prompt=10, rid="C"),
        # D (B's slot): HTTP error at 106.5, no tokens
        rec(106.0, [], end=106.5, error="http_status", rid="D"),
        # E (D's slot, the last send at 106.5): 2 tokens at 107.5 108.5
        rec(106.5, [1.0, 2.0], tokens=2, prompt=10, rid="E"),
    ]


def test_sustained_phase_summary():
    s = summarize(sustained_phase(), concurrency=2, sustained=True)
    # counts: 5 requests, 4 ok, one HTTP error; finish reasons of the ok ones
    assert (s.requests, s.ok, s.failed) == (5, 4, 1)
    assert s.errors == {"http_status": 1}
    assert s.finish_reasons == {"stop": 3, "length": 1}
    # tokens of ok requests: 8 + 5 + 6 + 2 = 21, thinking 4, answer 17, prompt 50
    assert (s.output_tokens, s.thinking_tokens, s.answer_tokens) == (21, 4, 17)
    assert s.prompt_tokens == 50
    assert s.tokens_estimated is False
    # burst: first send 100 to last end 108.5 = 8.5 s
    assert s.wall_s == 8.5
    assert s.output_tps == 21 / 8.5
    assert s.request_rate == 4 / 8.5
    # steady window: ramp ends at max(101, 102) = 102; tail starts at the first end at
    # or after the last send 106.5, which is D's failure at 106.5
    assert s.steady_window_s == (2.0, 6.5)
    # tokens in [102, 106.5): A 102(r2) 103(2) 104(2) = 6; B 102..106 = 5; C 105(2)
    # 106(2) = 4; E none -> 15 in 4.5 s, thinking 2, answer 13
    assert s.steady_tps == 15 / 4.5
    assert s.steady_thinking_tps == 2 / 4.5
    assert s.steady_answer_tps == 13 / 4.5
    # halves split at 104.25: first A 6 + B 102 103 104 = 9 -> 9/2.25 = 4;
    # second B 105 106 = 2 + C 4 = 6 -> 6/2.25 = 8/3
    assert s.steady_halves_tps == (4.0, 6 / 2.25)
    assert s.steady_stable is False


def test_per_request_distributions_of_a_phase():
    s = summarize(sustained_phase(), concurrency=2, sustained=True)
    # TTFT of ok requests: A 1, B 2, C 1, E 1 -> mean 5/4, p50 at k = 1.5 of 1 1 1 2 = 1
    assert s.ttft_s["n"] == 4
    assert s.ttft_s["mean"] == 1.25
    assert s.ttft_s["p50"] == 1.0
    assert s.ttft_s["max"] == 2.0
    # first answer chunk: A 3 (two thinking chunks first), B 2, C 1, E 1
    assert s.ttft_answer_s["mean"] == 7 / 4
    # TPOT = (last chunk - first chunk) / (tokens - 1): A 3/7, B 4/4, C 2/5, E 1/1
    assert s.tpot_s["min"] == 2 / 5
    assert s.tpot_s["max"] == 1.0
    assert s.tpot_s["mean"] == pytest.approx((3 / 7 + 1 + 2 / 5 + 1) / 4, rel=1e-12)
    # decode tok/s is 1/TPOT: 7/3, 1, 5/2, 1
    assert s.decode_tps["mean"] == pytest.approx((7 / 3 + 1 + 2.5 + 1) / 4, rel=1e-12)
    assert s.decode_tps["max"] == 2.5
    # ITL: every gap between chunks is 1 s: A 3, B 4, C 2, E 1 = 10 gaps
    assert s.itl_chunk_s["n"] == 10
    assert (s.itl_chunk_s["min"], s.itl_chunk_s["max"]) == (1.0, 1.0)
    # end to end: A 4, B 6, C 3, E 2 (D failed, not counted)
    assert s.e2e_s["n"] == 4
    assert s.e2e_s["mean"] == 15 / 4
    # output lengths 8 5 6 2
    assert s.output_len["mean"] == 21 / 4
    assert (s.output_len["min"], s.output_len["max"]) == (2.0, 8.0)
    # tokens per chunk: 21 tokens over 4 + 5 + 3 + 2 = 14 chunks
    assert s.tokens_per_chunk == 1.5


def test_a_burst_phase_has_no_steady_figures():
    s = summarize(sustained_phase(), concurrency=2)
    assert s.output_tps == 21 / 8.5
    assert s.steady_tps is None and s.steady_window_s is None and s.steady_stable is None
    s = summarize(sustained_phase(), concurrency=None, sustained=True)
    assert s.steady_tps is None


def test_estimated_tokens_and_an_empty_phase():
    recs = sustained_phase()
    recs[2].tokens_estimated = True
    assert summarize(recs).tokens_estimated is True
    empty = summarize([])
    assert (empty.requests, empty.ok, empty.output_tps, empty.wall_s) == (0, 0, None, 0.0)


def test_a_phase_where_nothing_ended_has_no_rate():
    # one request sent, never ended: wall 0, no rate (not a division by zero)
    s = summarize([rec(5.0, [], end=None, error="cancelled")])
    assert (s.wall_s, s.output_tps, s.request_rate, s.tokens_per_chunk) == (0.0, None, None, None)


def test_a_phase_whose_window_is_empty_has_no_steady_rate():
    recs = [rec(100.0, [1.0, 5.5]), rec(100.0, [6.0, 7.0]), rec(105.0, [0.25, 0.5])]
    s = summarize(recs, concurrency=2, sustained=True)
    assert s.steady_tps is None and s.steady_halves_tps is None


# ------------------------------------------------------------------------- the knee


def test_knee_is_the_last_concurrency_that_still_paid():
    # 100 -> 190 (+90%) -> 300 (+58%) -> 320 (+6.7% < 10%): the knee is at 4
    assert knee([(8, 320.0), (1, 100.0), (4, 300.0), (2, 190.0)]) == 4
    # a gain of exactly min_gain still pays: 100 -> 150 is +50%, not below 1.5 × 100
    assert knee([(1, 100.0), (2, 150.0)], min_gain=0.5) is None
    assert knee([(1, 100.0), (2, 149.0)], min_gain=0.5) == 1
    # levels without a rate are left out: 1 -> 4 is +100%, 4 -> 8 +1%
    assert knee([(1, 100.0), (2, None), (4, 200.0), (8, 202.0)]) == 4
    assert knee([(1, 100.0)]) is None
    # the local demo: C=2 adds < 10% over C=1, but C=8/16 are 47-50% above it
    demo = [(1, 380.0), (2, 400.0), (4, 530.0), (8, 559.0), (16, 571.0)]
    assert knee(demo) == 4  # 571 < 530 * 1.1: nothing above C=4 paid
    assert knee([(1, 380.0), (2, 400.0), (8, 559.0), (16, 571.0)]) == 8
    assert knee([]) is None


# ------------------------------------------------------------------------- edge cases


def test_counts_of_a_phase_with_missing_usage_and_finish_reasons():
    recs = [
        rec(10.0, [0.25, 0.5], tokens=None, prompt=None, finish=None),  # no usage, no finish
        rec(10.0, [0.25, 0.5], tokens=3, prompt=4),
    ]
    s = summarize(recs)
    assert s.finish_reasons == {"none": 1, "stop": 1}
    assert (s.output_tokens, s.prompt_tokens) == (3, 4)  # missing counts add nothing
    # a phase shorter than a second still has a rate: 3 tokens in 0.5 s
    assert (s.wall_s, s.output_tps, s.request_rate) == (0.5, 6.0, 4.0)


def test_the_steady_window_ends_where_the_caller_says_sending_stopped():
    # the caller stopped sending at 100.5 (not at the last send, 112): the tail starts at
    # the first end at or after it, 110
    recs = ramp_and_tail()
    for r in recs:
        r.completion_tokens = 2
    s = summarize(recs, concurrency=3, sustained=True, stop_sending_at=100.5)
    assert s.steady_window_s == (4.0, 10.0)  # [104, 110) from the phase start 100


def test_reasoning_counted_without_any_chunk_gives_no_events():
    assert token_events(rec(1.0, [], tokens=5, reasoning=5)) == []


def test_chunks_without_kinds_pair_as_far_as_they_go():
    r = rec(1.0, [0.5, 1.0], tokens=2)
    r.chunk_kinds = "a"  # a record cut short between its two lists
    assert token_events(r) == [(1.5, 2.0, False)]


def test_thinking_tokens_add_up_over_the_window_and_failures_anywhere_are_skipped():
    recs = [
        rec(100.0, [1.0, 2.0], "aa", tokens=2, error="read_timeout"),  # first in the list
        rec(100.0, [1.0, 2.0, 3.0], "rra", tokens=6, reasoning=4),  # 2 thinking each
    ]
    w = window_throughput(recs, 100.0, 104.0)
    # the failed request is skipped, the next one still counted: 2 + 2 + 2 = 6, 4 thinking
    assert (w.tokens, w.thinking_tokens) == (6.0, 4.0)


def test_a_summary_as_a_document():
    d = summarize(sustained_phase(), concurrency=2, sustained=True).to_dict()
    assert d["output_tokens"] == 21 and d["steady_window_s"] == (2.0, 6.5)


def test_an_unstable_sustained_sweep_names_its_levels_instead_of_a_knee():
    from genbench.run.benchmark import Phase
    from genbench.stats import PhaseSummary, sweep_of

    def phase(c: int, tps: float, stable: bool) -> Phase:
        s = PhaseSummary(steady_tps=tps, output_tps=tps, steady_stable=stable)
        return Phase(f"sustained-c{c}", "sustained", c, 256, s)

    demo = [(1, 380.0), (2, 400.0), (4, 530.0), (8, 559.0), (16, 571.0)]
    shaky = sweep_of("sustained", [phase(c, r, c == 2) for c, r in demo])
    assert shaky["knee"] is None and shaky["knee_unstable"] == [1, 4, 8, 16]
    steady = sweep_of("sustained", [phase(c, r, True) for c, r in demo])
    assert steady["knee"] == 4 and "knee_unstable" not in steady
    assert steady["by_concurrency"]["8"] == 559.0
