"""Values derived from successive /metrics scrapes: rates, windowed histogram percentiles.

Definitions (all "unknown" results are None, never 0):
- Rate of a counter = (value now - value at the window base) / (wall seconds between the two
  scrapes) / time_scale; a counter per DP rank (dp_rank) is summed over the ranks first. `time_scale` is simulated seconds per wall second (1 for a real
  server, X for `specmon sim --speed X`): the simulator's counters advance X times faster than
  wall time, so dividing gives per-simulated-second rates, the figures the simulated GPU shows.
- Windowed percentile = PromQL `histogram_quantile(q, increase(h_bucket[window]))`: the
  cumulative bucket counts of the newest scrape minus those of the window base, then linear
  interpolation inside the bucket holding rank q x total. Durations observed by the server
  are already in the server's own (simulated) seconds: they are not rescaled.
- Windowed mean = delta(_sum) / delta(_count).
- A counter that went down means the server restarted (its counters started from 0 again):
  the window is cleared, so nothing is ever computed across a restart.
- A result that would be NaN or infinite (odd inputs) is None too.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Optional, Sequence

from specmon.sources import sglang_names as names
from specmon.sources.prom import Histogram, MetricsSnapshot

Buckets = Sequence[tuple[float, float]]


def histogram_quantile(q: float, buckets: Buckets) -> Optional[float]:
    """PromQL's histogram_quantile on cumulative (upper bound, count) buckets sorted by bound.

    None when the histogram holds no observation. When the rank falls in the +Inf bucket the
    result is the highest finite bound (as PromQL), because nothing more is known.
    """
    if not buckets or not 0.0 <= q <= 1.0:
        return None
    total = buckets[-1][1]
    if not math.isinf(buckets[-1][0]) or not math.isfinite(total) or total <= 0:
        # Without the +Inf bucket the total is not known; with zero observations there is no answer.
        return None
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for i, (bound, count) in enumerate(buckets):
        if count >= rank:
            if math.isinf(bound):
                return buckets[i - 1][0] if i > 0 else None
            if i == 0 and bound <= 0:
                return bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return None


def histogram_delta(new: Histogram, old: Histogram) -> Optional[Histogram]:
    """new - old bucket by bucket; None when the bucket layouts differ or any count went down."""
    if [b for b, _ in new.buckets] != [b for b, _ in old.buckets]:
        return None
    deltas = tuple((b, n - o) for (b, n), (_, o) in zip(new.buckets, old.buckets))
    if any(d < 0 for _, d in deltas):
        return None
    dsum = None if new.sum is None or old.sum is None else new.sum - old.sum
    dcount = None if new.count is None or old.count is None else new.count - old.count
    return Histogram(buckets=deltas, sum=dsum, count=dcount)


# Counters whose decrease betrays a restarted server (any one suffices).
# (Names per SGLang release: sources/sglang_names.py; a counter split by is_streaming is summed.)
RESET_COUNTERS = (
    (names.metric1("requests_total"), {}),
    (names.metric1("prompt_tokens"), {}),
    (names.metric1("generation_tokens"), {}),
    (names.metric1("realtime_tokens"), {"mode": "decode"}),
    (names.metric1("realtime_tokens"), {"mode": "prefill_compute"}),
    (names.metric1("ttft") + "_count", {}),
    (names.metric1("http_requests"), {"endpoint": "/metrics", "method": "GET"}),
)


def counters_went_down(new: MetricsSnapshot, old: MetricsSnapshot) -> bool:
    for name, labels in RESET_COUNTERS:
        a, b = old.value(name, **labels), new.value(name, **labels)
        if a is not None and b is not None and b < a:
            return True
    return False


class ScrapeWindow:
    """The recent /metrics snapshots of one arm, and what their differences say.

    `window_s` (default 30 s) bounds the histogram percentiles and means: they describe the
    requests of the last window, not everything since the server started. Rates use the shorter
    `rate_window_s` so tok/s follows the load within a few ticks.
    """

    def __init__(self, window_s: float = 30.0, rate_window_s: float = 5.0):
        self.window_s = window_s
        self.rate_window_s = rate_window_s
        self._snaps: deque[MetricsSnapshot] = deque()
        # histogram_delta answers until the next add(): a scrape asks each histogram for its
        # p50, p90, p99 and mean, one delta each otherwise
        self._deltas: dict[str, Optional[Histogram]] = {}

    def __len__(self) -> int:
        return len(self._snaps)

    def clear(self) -> None:
        self._snaps.clear()
        self._deltas.clear()

    def add(self, snap: MetricsSnapshot) -> bool:
        """Append a scrape; returns True when a counter reset (server restart) was seen."""
        self._deltas.clear()
        restarted = bool(self._snaps) and counters_went_down(snap, self._snaps[-1])
        if restarted:
            self._snaps.clear()
        self._snaps.append(snap)
        # Keep one snapshot at or before the window start as the base of the deltas.
        horizon = snap.ts - max(self.window_s, self.rate_window_s)
        while len(self._snaps) >= 2 and self._snaps[1].ts <= horizon:
            self._snaps.popleft()
        return restarted

    def _base(self, span_s: float) -> Optional[MetricsSnapshot]:
        """The newest snapshot at least `span_s` older than the latest one, else the oldest."""
        if len(self._snaps) < 2:
            return None
        newest = self._snaps[-1]
        base = self._snaps[0]
        for s in self._snaps:
            if newest.ts - s.ts >= span_s:
                base = s
            else:
                break
        return base if base is not newest else None

    def rate(self, name: str, time_scale: float = 1.0, **labels: str) -> Optional[float]:
        base = self._base(self.rate_window_s)
        if base is None:
            return None
        newest = self._snaps[-1]
        # a counter of a worker with DP ranks: every rank's together, not rank 0's
        a, b = base.dp_total(name, **labels), newest.dp_total(name, **labels)
        dt = newest.ts - base.ts
        if a is None or b is None or dt <= 0 or b < a:
            return None
        return _finite((b - a) / dt / (time_scale or 1.0))

    def rate_since_born(self, name: str, time_scale: float = 1.0, **labels: str) -> Optional[float]:
        """rate(), except that a series the window's base lacks counts from 0 there: SGLang creates
        a labelled counter at its first increment (cached_tokens_total, realtime_tokens_total
        {mode="prefill_cache"} at the first prefix-cache hit)."""
        r = self.rate(name, time_scale, **labels)
        base = self._base(self.rate_window_s)
        if r is not None or base is None or base.value(name, **labels) is not None:
            return r
        newest = self._snaps[-1]
        b, dt = newest.value(name, **labels), newest.ts - base.ts
        if b is None or dt <= 0:
            return None
        return _finite(b / dt / (time_scale or 1.0))

    @property
    def newest(self) -> Optional[MetricsSnapshot]:
        """The latest scrape (cumulative values): the ramp keeps two of these to compute
        histogram deltas over exactly one level's window."""
        return self._snaps[-1] if self._snaps else None

    def histogram_delta(self, name: str) -> Optional[Histogram]:
        try:
            return self._deltas[name]
        except KeyError:
            h = self._deltas[name] = self._histogram_delta(name)
            return h

    def _histogram_delta(self, name: str) -> Optional[Histogram]:
        base = self._base(self.window_s)
        if base is None:
            return None
        new, old = self._snaps[-1].histogram(name), base.histogram(name)
        if new is None:
            return None
        if old is None:
            # The series appeared within the window (labelled series exist only after first use):
            # everything it counted happened since the base scrape.
            return new
        return histogram_delta(new, old)

    def quantile(self, name: str, q: float) -> Optional[float]:
        h = self.histogram_delta(name)
        return None if h is None else _finite(histogram_quantile(q, h.buckets))

    def mean(self, name: str) -> Optional[float]:
        h = self.histogram_delta(name)
        if h is None or h.sum is None or not h.count:
            return None
        return _finite(h.sum / h.count)


def _finite(v: Optional[float]) -> Optional[float]:
    return v if v is not None and math.isfinite(v) else None


# The prefix cache as SGLang counts it: the tokenizer side adds a finished request's prompt tokens
# and its cached ones (cached_tokens_total, one series per cache_source: device, host, storage);
# the scheduler side adds each prefill batch's tokens by mode (realtime_tokens_total).
CACHE_COUNTERS = (("cached", names.metric1("cached_tokens"), {}), ("prompt", names.metric1("prompt_tokens"), {}),
                  ("prefill_cache", names.metric1("realtime_tokens"), {"mode": "prefill_cache"}),
                  ("prefill_compute", names.metric1("realtime_tokens"), {"mode": "prefill_compute"}))


def counter_total(snap: MetricsSnapshot, name: str, **match: str) -> Optional[float]:
    """A counter summed over its series that match (cached_tokens_total over cache_source), of
    rank 0 where series carry rank labels; None when no series matches."""
    rows = [(lab, v) for lab, v in snap.series(name) if all(lab.get(k) == x for k, x in match.items())]
    if not rows:
        return None
    ranks = [lab for lab, _ in rows if any(k in lab for k in ("tp_rank", "dp_rank", "pp_rank"))]
    if ranks:  # one value per rank: rank 0's (the others count the same work again)
        return snap.value(name, **match)
    total = sum(v for _, v in rows)
    return total if math.isfinite(total) else None


def cache_counter_deltas(old: Optional[MetricsSnapshot], new: Optional[MetricsSnapshot]) -> Optional[dict[str, float]]:
    """The prefix-cache counters' increase between two scrapes (CACHE_COUNTERS' names: cached,
    prompt, prefill_cache, prefill_compute), each present when the newer scrape has it (a series
    the older one lacks was born in between, from 0) and it did not go down; None when either
    scrape is missing, they are the same, or the server restarted in between."""
    if old is None or new is None or new is old or counters_went_down(new, old):
        return None
    out: dict[str, float] = {}
    for key, name, match in CACHE_COUNTERS:
        a, b = counter_total(old, name, **match), counter_total(new, name, **match)
        if b is None:
            continue
        if a is None:
            # SGLang creates a labelled series at its first increment (cached_tokens_total per
            # cache_source, realtime_tokens_total{mode="prefill_cache"} at the first hit): 0 before.
            a = 0.0
        if a is not None and b >= a:
            out[key] = b - a
    return out


def cache_hit_share(d: Optional[dict[str, float]]) -> Optional[float]:
    """Cached prompt tokens / prompt tokens from counter increases: the tokenizer's counters
    (per finished request) when both moved, else the scheduler's prefill tokens by mode; None
    when no prompt token was counted."""
    if not d:
        return None
    if d.get("prompt") and "cached" in d:
        return min(d["cached"] / d["prompt"], 1.0)
    total = d.get("prefill_cache", 0.0) + d.get("prefill_compute", 0.0)
    if "prefill_compute" in d and total > 0:
        return d.get("prefill_cache", 0.0) / total
    return None
