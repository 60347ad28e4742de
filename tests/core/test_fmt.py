"""The one number formatter: the same quantity reads the same in every command."""

from __future__ import annotations

import math

import pytest

from genbench import fmt

pytestmark = pytest.mark.core


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (812, "812"),
        (4096, "4.10K"),
        (87_500_000, "87.5M"),
        (300_000_000, "300M"),
        (212_500_000, "212M"),  # three significant digits, never "0.2125B"
        (1_062_000_000, "1.06B"),
        (999_600, "1.00M"),  # rounds up into the next unit, not "1,000K"
        (None, "—"),
        (math.nan, "—"),
    ],
)
def test_tokens_keep_three_significant_digits(value, text):
    assert fmt.tokens(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(512, "512 B"), (4100, "4.10 KB"), (2.41e9, "2.41 GB"), (1.5e13, "15.0 TB"), (None, "—")],
)
def test_bytes_use_decimal_units(value, text):
    assert fmt.nbytes(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(45.24, "45.2 s"), (750, "12.5 min"), (513_000, "142.5 h"), (None, "—")],
)
def test_durations_pick_their_unit_by_size(seconds, text):
    assert fmt.duration(seconds) == text


def test_a_range_is_written_in_the_unit_of_its_upper_end():
    assert fmt.duration_range(3714, 4482) == "61.9 – 74.7 min"
    assert fmt.duration_range(100, 130) == "1.7 – 2.2 min"
    # two ends that one decimal prints alike get another (a plan's ±0.6% bar on 2.4 min)
    assert fmt.duration_range(143.8, 145.6) == "2.40 – 2.43 min"
    assert fmt.duration_range(60.0, 60.0) == "60.0 – 60.0 s"


@pytest.mark.parametrize(
    ("value", "text"), [(26.54, "26.5 tok/s"), (2345.4, "2,345 tok/s"), (None, "—")]
)
def test_rates(value, text):
    assert fmt.rate(value) == text


def test_ms_pct_count():
    assert fmt.ms(0.0008) == "0.8 ms"
    assert fmt.ms(1.2044) == "1,204 ms"
    assert fmt.pct(0.1234) == "12.3%"
    assert fmt.pct(-0.145, signed=True) == "-14.5%"
    assert fmt.count(1400) == "1,400"


def test_a_count_and_its_noun():
    assert fmt.counted(1, "row") == "1 row"
    assert fmt.counted(0, "row") == "0 rows"
    assert fmt.counted(1234, "generated turn") == "1,234 generated turns"
