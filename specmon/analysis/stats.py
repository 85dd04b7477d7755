"""Small statistics shared by every part of specmon.

- `percentile(values, q)`: q in [0, 100], linear interpolation between closest ranks (numpy's
  default "linear" method, the one bench_serving's `np.percentile` uses), so our p50/p99 are
  comparable with SGLang's own client. None for an empty input (unknown, never 0).
- `histogram_quantile(q, buckets)`: PromQL's, on cumulative (bound, count) buckets. It lives in
  specmon.sources.derive (the SOURCES part wrote it first); re-exported here so analysis code has
  one place to import statistics from.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

from specmon.sources.derive import histogram_quantile  # noqa: F401  (re-export, one implementation)


def _clean(values: Iterable[Optional[float]]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def percentile(values: Iterable[Optional[float]], q: float) -> Optional[float]:
    """q-th percentile (0..100) with linear interpolation; None values are ignored."""
    xs = sorted(_clean(values))
    if not xs:
        return None
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile: q must be within 0..100, got {q}")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: Iterable[Optional[float]]) -> Optional[float]:
    xs = _clean(values)
    return sum(xs) / len(xs) if xs else None


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    """num / den, None when either is unknown or den is 0."""
    if num is None or den is None or den == 0:
        return None
    return num / den


def spread_gaps(gaps_and_tokens: Sequence[tuple[float, int]]) -> list[float]:
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
