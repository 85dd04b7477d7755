"""Small statistics shared by every part of specmon.

- `percentile(values, q)` (several q at once, one sort: `percentiles(values, qs)`; values known
  to be numbers, without the filtering copy: `percentile_of_numbers(xs, q)`): q in [0, 100],
  linear interpolation between closest ranks (numpy's default "linear" method, the one
  bench_serving's `np.percentile` uses), so our p50/p99 are comparable with SGLang's own client. None for an empty input (unknown, never 0).
- `histogram_quantile(q, buckets)`: PromQL's, on cumulative (bound, count) buckets. It lives in
  specmon.sources.derive (the SOURCES part wrote it first); re-exported here so analysis code has
  one place to import statistics from.
- `rate_batches(events, t0, t1, batch_s, min_batches)`: the batch-means method for a rate. The
  span [t0, t1] is cut into n = floor((t1 - t0) / batch_s) equal batches (each >= batch_s long,
  together the whole span, so their mean is exactly total / span); when that gives fewer than
  `min_batches`, into `min_batches` shorter ones (their SE is less trustworthy: short batches of a
  bursty stream are correlated). The caller passes times in the arm's own seconds.
- `mean_se(xs)`: mean and standard error (sample stdev / sqrt(n)) of batch means; SE None under 2.
- `t_upper_95(df)`: the one-sided 95 % quantile of Student's t (1.645 for large df): a one-sided
  95 % upper bound is estimate + t_upper_95(df) x SE.
- `wilson_lower(k, n, z)`: the Wilson score lower bound of a proportion k/n (one-sided 95 % with
  the default z = 1.645); sound at 0 or n successes and small n, where the normal bound is not.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

from specmon.sources.derive import histogram_quantile  # noqa: F401  (re-export, one implementation)


def _clean(values: Iterable[Optional[float]]) -> list[float]:
    # `v == v` is False only for NaN: one comparison a value where math.isnan was a call (a
    # level's ITLs are ~250k values at 1,000 streams)
    return [v for v in values if v is not None and v == v]


def _check_q(q: float) -> None:
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile: q must be within 0..100, got {q}")


def _at(xs: Sequence[float], q: float) -> float:
    """The q-th percentile of sorted, non-empty xs."""
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def percentile(values: Iterable[Optional[float]], q: float) -> Optional[float]:
    """q-th percentile (0..100) with linear interpolation; None values are ignored."""
    xs = _clean(values)
    if not xs:
        return None
    _check_q(q)
    xs.sort()
    return _at(xs, q)


def percentile_of_numbers(xs: Sequence[float], q: float) -> Optional[float]:
    """percentile(xs, q) for values that are all numbers (no None, no NaN), as a request's ITLs
    are: one sorted copy, where percentile filters a copy first (1,000 finished requests a level)."""
    if not xs:
        return None
    _check_q(q)
    return _at(sorted(xs), q)


def percentiles(values: Iterable[Optional[float]], qs: Sequence[float]) -> list[Optional[float]]:
    """percentile(values, q) for each q of qs, the values cleaned and sorted once."""
    return percentiles_of_numbers(_clean(values), qs)


def percentiles_of_numbers(xs: list[float], qs: Sequence[float]) -> list[Optional[float]]:
    """percentiles(xs, qs) for a list of numbers only (no None, no NaN) that the caller owns and
    lets this sort in place: a level's ~250k ITLs at 1,000 streams, without a cleaned copy."""
    for q in qs:
        _check_q(q)
    if not xs:
        return [None] * len(qs)
    xs.sort()
    return [_at(xs, q) for q in qs]


def mean(values: Iterable[Optional[float]]) -> Optional[float]:
    xs = _clean(values)
    return sum(xs) / len(xs) if xs else None


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    """num / den, None when either is unknown or den is 0."""
    if num is None or den is None or den == 0:
        return None
    return num / den


def spread_gaps(gaps_and_tokens: Iterable[tuple[float, int]]) -> list[float]:
    """Per-token inter-token latencies from (chunk gap, tokens in chunk) pairs.

    A speculative chunk that carries n tokens after a gap g contributes n values of g / n
    (SGLang's bench_serving does the same), so a 4-token chunk is not counted as one slow token.
    """
    out: list[float] = []
    for gap, n in gaps_and_tokens:
        if n <= 0:
            continue
        out.extend([gap / n] * n)
    return out


def batch_grid(span: float, batch_s: float, min_batches: int) -> tuple[int, float]:
    """(number of batches, their width) that rate_batches splits a positive span into."""
    n = max(int(span // batch_s), min_batches)
    return n, span / n


def rate_batches(events: Iterable[tuple[float, float]], t0: float, t1: float, batch_s: float = 5.0,
                 min_batches: int = 4) -> list[float]:
    """Per-batch rates (amount / batch length) of (time, amount) events over [t0, t1)."""
    span = t1 - t0
    if span <= 0 or batch_s <= 0:
        return []
    n, width = batch_grid(span, batch_s, min_batches)
    sums = [0.0] * n
    for t, amount in events:
        if t0 <= t < t1:
            sums[min(int((t - t0) / width), n - 1)] += amount
    return [x / width for x in sums]


def mean_se(xs: Sequence[float]) -> tuple[Optional[float], Optional[float]]:
    """(mean, standard error of the mean); SE is None with fewer than two values."""
    xs = _clean(xs)
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, math.sqrt(var / len(xs))


# One-sided 95 % quantiles of Student's t, df = 1..30; beyond 30 the normal 1.645 is within 3 %.
_T95 = [6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761,
        1.753, 1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701,
        1.699, 1.697]
Z95 = 1.645


def t_upper_95(df: Optional[int]) -> float:
    if df is None or df > len(_T95):
        return Z95
    return _T95[max(df, 1) - 1]


def wilson_lower(k: int, n: int, z: float = Z95) -> Optional[float]:
    """Wilson score lower bound of the proportion k / n; None when n is 0."""
    if n <= 0:
        return None
    p = k / n
    den = 1 + z * z / n
    centre = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max((centre - half) / den, 0.0)
