"""compare's rule for one run per side, drift allowance aside: a ratio to the first run,
called a difference only when it is beyond the noise both runs carry
(|ln ratio| > Z·sqrt(n1² + n2²), Z = 2, never under 1%). The rule with repeats has its own
exact tests (tests/test_repeats.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from synthetic import rec

import genbench.compare.in_run as estimates
import genbench.compare.noise as noise
from genbench.compare.noise import difference, side
from genbench.compare.rule import (
    Estimate,
    MetricRow,
    bootstrap_rel,
    burst_rel,
    halves_rel,
    tokens_per_chunk,
)

pytestmark = pytest.mark.core


def noise_verdict(ratio: float, n_base: float | None, n_run: float | None) -> bool | None:
    """The verdict on two single runs whose values differ by `ratio`, with no allowance for
    the drift between runs (the allowance is tested apart)."""
    if ratio <= 0:
        return None  # no log ratio: compare gives no verdict (MetricRow.judge)
    return difference(side([1.0], [n_base]), side([ratio], [n_run]), allowance=0.0).within_noise


def test_the_rule_constants():
    assert (noise.Z, noise.FLOOR, noise.ALLOWANCE) == (2.0, 0.01, 0.10)


def test_one_run_per_side_differences_under_the_drift_allowance_are_not_called():
    # ln(1.09) = 0.0862 <= 0.10: with no repeats nothing measured the drift between runs
    one, other = side([100.0], [0.0]), side([109.0], [0.0])
    assert difference(one, other).within_noise is True
    assert difference(one, other).drift_measured is False
    # ln(1.11) = 0.1044 > 0.10, and beyond the runs' own (zero) noise: a difference
    assert difference(one, side([111.0], [0.0])).within_noise is False


def test_a_difference_under_one_percent_is_noise_even_without_an_estimate():
    # ln(1.005) = 0.00499 <= 0.01; ln(1/1.009) = -0.00896, |.| <= 0.01
    assert noise_verdict(1.005, None, None) is True
    assert noise_verdict(1 / 1.009, None, None) is True
    # ln(1.011) = 0.01094 > 0.01: without both estimates nobody can tell
    assert noise_verdict(1.011, None, None) is None
    assert noise_verdict(1.011, 0.01, None) is None
    assert noise_verdict(1.011, None, 0.01) is None


def test_beyond_twice_the_combined_noise_is_a_difference():
    # n = 0.03 and 0.04: combined sqrt(0.03² + 0.04²) = 0.05, twice that 0.10
    assert noise_verdict(1.1, 0.03, 0.04) is True  # ln 1.1 = 0.0953 <= 0.10
    assert noise_verdict(1.11, 0.03, 0.04) is False  # ln 1.11 = 0.1044 > 0.10
    assert noise_verdict(1 / 1.1, 0.04, 0.03) is True  # symmetric in the direction
    assert noise_verdict(1 / 1.11, 0.04, 0.03) is False
    # zero noise on both sides: any difference past the 1% floor is real
    assert noise_verdict(1.011, 0.0, 0.0) is False


def test_the_noise_bound_and_the_floor_are_inclusive(monkeypatch):
    d = math.log(1.25)
    # Z·hypot(d/2, 0) = d exactly (halving and doubling are exact): on the bound is noise
    assert noise_verdict(1.25, d / 2, 0.0) is True
    assert noise_verdict(1.25, 0.0, d / 2) is True
    assert noise_verdict(1.25, 0.0, math.nextafter(d / 2, 0.0)) is False
    # a floor of exactly |ln ratio| calls it noise with or without an estimate
    monkeypatch.setattr(noise, "FLOOR", d)
    assert noise_verdict(1.25, None, None) is True
    assert noise_verdict(1.25, 0.0, 0.0) is True


def test_a_ratio_that_is_not_positive_has_no_verdict():
    assert noise_verdict(0.0, 0.01, 0.01) is None
    assert noise_verdict(-1.0, 0.01, 0.01) is None


def row(better: str, *estimates: Estimate | None) -> MetricRow:
    # one run per side, judged without the drift allowance (tested apart)
    r = MetricRow("k", "throughput", "label", "tok/s", better, [[e] for e in estimates])
    r.judge(allowance=0.0)
    return r


def test_row_verdicts_against_the_first_run():
    base = Estimate(100.0, 0.01)
    r = row(
        "higher",
        base,
        Estimate(110.0, 0.01),  # ln 1.1 = 0.095 > 2·hypot(.01, .01) = 0.028: better
        Estimate(90.0, 0.02),  # |ln 0.9| = 0.105 > 2·hypot(.01, .02) = 0.045: worse
        Estimate(100.5, None),  # ln 1.005 under the 1% floor: same, estimate or not
        Estimate(110.0, None),  # beyond the floor, no estimate: unknown
        None,  # the run has no such value
        Estimate(-1.0, 0.01),  # not a value to divide
        Estimate(0.0, 0.01),  # ratio 0: no log ratio, so no verdict from the rule
    )
    assert r.ratios == [None, 1.1, 0.9, 1.005, 1.1, None, None, None]
    assert r.within_noise == [None, False, False, True, None, None, None, None]
    assert r.verdicts == [None, "better", "worse", "same", "unknown", None, None, "unknown"]


def test_lower_is_better_flips_the_verdict():
    r = row("lower", Estimate(100.0, 0.01), Estimate(110.0, 0.01), Estimate(90.0, 0.01))
    assert r.verdicts == [None, "worse", "better"]


def test_no_ratios_against_a_missing_or_non_positive_base():
    assert row("higher", None, Estimate(1.0, 0.1)).verdicts == [None, None]
    r = row("higher", Estimate(0.0, 0.1), Estimate(1.0, 0.1), Estimate(2.0, 0.1))
    assert r.ratios == [None, None, None]
    assert r.within_noise == [None, None, None]
    assert r.verdicts == [None, None, None]


def test_row_as_a_document():
    r = row("higher", Estimate(100.0, 0.01), None, Estimate(110.0, 0.02))
    d = r.to_dict()
    assert d["key"] == "k" and d["section"] == "throughput" and d["better"] == "higher"
    assert d["values"] == [100.0, None, 110.0]
    assert d["rel_noise"] == [0.01, None, 0.02]
    assert d["ratios"] == [None, None, 1.1]
    assert d["verdicts"] == [None, None, "better"]


# ------------------------------------------------------------------------- noise estimates


def test_sustained_noise_from_the_two_halves_of_the_steady_window():
    # halves 3 and 1 tok/s: |3 - 1| / (3 + 1) = 0.5
    assert halves_rel({"steady_halves_tps": [3.0, 1.0]}) == 0.5
    assert halves_rel({"steady_halves_tps": [100.0, 100.0]}) == 0.0
    assert halves_rel({"steady_halves_tps": [0.0, 1.0]}) is None  # a half without tokens
    assert halves_rel({"steady_halves_tps": [1.0, 0.0]}) is None
    assert halves_rel({"steady_halves_tps": [1.0]}) is None
    assert halves_rel({"steady_halves_tps": None}) is None
    assert halves_rel({}) is None


def test_tokens_per_chunk_of_one_request():
    assert tokens_per_chunk(rec(1.0, [0.5, 0.75, 1.0, 1.5], tokens=6)) == 1.5  # 6 / 4
    assert tokens_per_chunk(rec(1.0, [0.5, 0.75], tokens=6, error="read_timeout")) is None
    assert tokens_per_chunk(rec(1.0, [0.5, 0.75], tokens=0)) is None
    assert tokens_per_chunk(rec(1.0, [], tokens=6)) is None


def test_bootstrap_of_a_constant_has_no_noise_and_one_value_has_no_estimate():
    assert bootstrap_rel([2.0, 2.0, 2.0], estimates._mean, 2.0) == 0.0
    # missing and infinite values are dropped before resampling
    assert bootstrap_rel([2.0, None, math.inf, 2.0], estimates._mean, 2.0) == 0.0
    assert bootstrap_rel([2.0, None], estimates._mean, 2.0) is None
    assert bootstrap_rel([1.0, 3.0], estimates._mean, 0.0) is None
    assert bootstrap_rel([1.0, 3.0], estimates._mean, None) is None


def test_bootstrap_of_a_mean_is_its_standard_error_relative_to_the_point():
    xs = [float(i) for i in range(100)]  # mean 49.5, population sd sqrt((100² - 1)/12)
    se = math.sqrt((100**2 - 1) / 12 / 100)  # 2.8866: the bootstrap's target
    rel = bootstrap_rel(xs, estimates._mean, 49.5)
    assert rel == bootstrap_rel(xs, estimates._mean, 49.5)  # fixed seed: same files, same verdict
    assert rel == pytest.approx(se / 49.5, rel=0.1)  # 1000 resamples: within ~5%
    # a percentile statistic works the same way; the point scales the result
    rel50 = bootstrap_rel(xs, estimates._pct(50.0), 49.5)
    assert rel50 is not None and rel50 > 0
    assert bootstrap_rel(xs, estimates._mean, -99.0) == pytest.approx(rel / 2, rel=1e-12)


def test_bootstrap_of_a_burst_rate():
    same = [rec(100.0, [1.0, 2.0], tokens=10, rid=str(i)) for i in range(4)]
    # every resample: 4 × 10 tokens over 100 -> 102 = 20 tok/s, no spread
    assert burst_rel(same, 20.0) == 0.0
    failed = rec(100.0, [1.0, 50.0], tokens=10, error="read_timeout")
    assert burst_rel([*same, failed], 20.0) == 0.0  # failures are not resampled
    assert burst_rel(same[:1], 20.0) is None
    assert burst_rel(same, None) is None
    spread = [rec(100.0, [1.0, float(d)], tokens=10 * d, rid=str(d)) for d in range(2, 12)]
    rel = burst_rel(spread, 50.0)
    assert rel is not None and 0 < rel < 1
    assert rel == burst_rel(spread, 50.0)
    # a resample whose requests all have zero wall time is left out, not a division by 0
    flat = [rec(100.0, [0.0], tokens=5, rid=str(i)) for i in range(3)]
    assert burst_rel(flat, 5.0) is None


def test_the_bootstrap_draws_fewer_resamples_of_very_many_requests(monkeypatch):
    sizes = []
    real = np.random.default_rng

    class Spy:
        def __init__(self, seed):
            self.g = real(seed)

        def integers(self, lo, hi, size):
            sizes.append(size)
            return self.g.integers(lo, hi, size=size)

    monkeypatch.setattr(estimates.np.random, "default_rng", Spy)
    bootstrap_rel([1.0, 2.0] * 4, estimates._mean, 1.5)  # 8 values: 1000 resamples
    bootstrap_rel([1.0, 2.0] * 10_000, estimates._mean, 1.5)  # 4e6 // 20000 = 200
    bootstrap_rel([1.0, 2.0] * 2_500, estimates._mean, 1.5)  # 4e6 // 5000 = 800
    assert sizes == [(1000, 8), (200, 20_000), (800, 5000)]


def test_small_and_odd_halves():
    # rates under 1 tok/s are rates: |0.25 - 0.5| / 0.75 = 1/3
    assert halves_rel({"steady_halves_tps": [0.25, 0.5]}) == pytest.approx(1 / 3, rel=1e-12)
    # halves that are not rates at all (negative, or summing to zero) give no estimate
    assert halves_rel({"steady_halves_tps": [-3.0, 1.0]}) is None
    assert halves_rel({"steady_halves_tps": [1.0, -1.0]}) is None


def test_a_base_under_one_still_gives_a_ratio():
    assert row("higher", Estimate(0.5, 0.01), Estimate(1.0, 0.01)).ratios == [None, 2.0]


def test_the_bootstrap_draws_every_request():
    # two different values: resamples of 2 draw either, so the mean moves
    assert bootstrap_rel([5.0, 1.0], estimates._mean, 3.0) > 0
    two = [rec(100.0, [0.25, 0.5], tokens=10, rid="a"), rec(100.0, [0.25, 0.5], tokens=30)]
    assert burst_rel(two, 80.0) > 0  # 40 tokens in 0.5 s: resamples of 20, 40 or 60


def test_the_burst_bootstrap_is_tokens_over_last_end_minus_first_send():
    recs = [rec(100.0 + i / 4, [0.25, 0.25 + d], tokens=10 * d, rid=str(d)) for i, d in
            enumerate([0.25, 0.5, 1.0, 2.0, 0.75])]  # fmt: skip
    point = 50.0
    # the same resamples, computed here: for each, Σ tokens / (max end - min send)
    idx = np.random.default_rng(estimates.SEED).integers(0, 5, size=(estimates.BOOTSTRAP, 5))
    tok = np.array([r.completion_tokens for r in recs], float)
    t0 = np.array([r.t_send for r in recs])
    t1 = np.array([r.t_end for r in recs])
    rates = tok[idx].sum(axis=1) / (t1[idx].max(axis=1) - t0[idx].min(axis=1))
    assert burst_rel(recs, point) == pytest.approx(float(np.std(rates)) / point, rel=1e-12)
