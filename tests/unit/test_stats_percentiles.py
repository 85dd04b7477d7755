"""analysis/stats.py percentile / percentiles: numpy's "linear" method, None and NaN left out."""

import math
import random

import pytest

from specmon.analysis.stats import mean, percentile, percentile_of_numbers, percentiles


def _linear(xs, q):
    """The definition, written out: rank (n - 1) q / 100, interpolated between its neighbours."""
    xs = sorted(xs)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    return xs[lo] if lo + 1 >= len(xs) else xs[lo] * (1 - (pos - lo)) + xs[lo + 1] * (pos - lo)


def test_known_values():
    xs = [15, 20, 35, 40, 50]
    assert percentile(xs, 0) == 15.0 and percentile(xs, 100) == 50.0
    assert percentile(xs, 50) == 35.0
    assert percentile(xs, 40) == pytest.approx(29.0)  # rank 1.6: 20 + 0.6 x 15
    assert isinstance(percentile([1, 2, 3], 50), float)


def test_none_and_nan_are_left_out():
    xs = [3.0, None, float("nan"), 1.0, 2.0, None]
    assert percentile(xs, 50) == 2.0
    assert percentiles(xs, (0, 100)) == [1.0, 3.0]
    assert mean(xs) == 2.0
    assert percentile([None, float("nan")], 50) is None
    assert percentiles([], (50, 99)) == [None, None]
    assert mean([]) is None


def test_percentiles_is_percentile_for_each_q():
    rng = random.Random(7)
    xs = [rng.expovariate(10.0) for _ in range(5_001)] + [None, math.nan] * 5
    qs = (0, 1, 50, 90, 99, 99.9, 100)
    got = percentiles(xs, qs)
    assert got == [percentile(xs, q) for q in qs]
    clean = [x for x in xs if x is not None and not math.isnan(x)]
    for q, v in zip(qs, got):
        assert v == pytest.approx(_linear(clean, q), rel=1e-12)


def test_percentile_of_numbers_is_percentile_without_the_filter():
    rng = random.Random(11)
    xs = [rng.expovariate(10.0) for _ in range(257)]
    for q in (0, 1, 50, 99, 100):
        assert percentile_of_numbers(xs, q) == percentile(xs, q)
    assert xs != sorted(xs)  # the caller's list is left as it was
    assert percentile_of_numbers([], 99) is None
    with pytest.raises(ValueError):
        percentile_of_numbers([1.0], 101)


def test_q_out_of_range_raises_even_when_empty():
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    with pytest.raises(ValueError):
        percentiles([], (50, -1))
