"""Data-parallel ranks of one worker: is one rank saturated or starving while the others are not?

Summed gauges hide this (a worker at 50 % KV can be one rank full and one idle), so every rank
is read on its own (model.RankReading) and compared:
- imbalance of running requests and of KV usage = max / mean across ranks (1.0 = even);
- a rank is *saturated* when its KV usage >= 95 % or it runs at the request cap, and *starving*
  when it runs nothing while another rank runs at least 2; the callout names such a rank only
  when the other ranks are not in the same state (all saturated is a saturated worker, not an
  imbalance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from specmon.model import RankReading

KV_SATURATED = 0.95
STARVING_OTHERS_RUN = 2


@dataclass
class RankImbalance:
    ranks: int
    running_max_over_mean: Optional[float]  # None: unknown, or nothing running anywhere
    kv_max_over_mean: Optional[float]
    callout: Optional[str]  # e.g. "dp1 saturated (KV 97%) while dp0 is not"; None: nothing to say


def _max_over_mean(values: Sequence[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    if len(known) < 2 or len(known) != len(values):
        return None
    mean = sum(known) / len(known)
    return max(known) / mean if mean > 0 else None


def _why_saturated(r: RankReading, max_running: Optional[int]) -> str:
    if r.kv_usage is not None and r.kv_usage >= KV_SATURATED:
        return f"KV {r.kv_usage:.0%}"
    return f"running {r.running_reqs} at its cap {max_running}"


def rank_imbalance(ranks: Sequence[RankReading], max_running: Optional[int] = None) -> Optional[RankImbalance]:
    """None for fewer than two ranks (nothing to compare)."""
    if len(ranks) < 2:
        return None
    saturated = [r for r in ranks if (r.kv_usage is not None and r.kv_usage >= KV_SATURATED)
                 or (max_running is not None and r.running_reqs is not None and r.running_reqs >= max_running)]
    busiest = max((r.running_reqs or 0) for r in ranks)
    starving = [r for r in ranks if r.running_reqs == 0 and busiest >= STARVING_OTHERS_RUN]
    words = []
    if saturated and len(saturated) < len(ranks):
        rest = [r for r in ranks if r not in saturated]
        words.append(", ".join(f"dp{r.dp_rank} saturated ({_why_saturated(r, max_running)})" for r in saturated)
                     + " while " + ", ".join(f"dp{r.dp_rank}" for r in rest)
                     + (" is" if len(rest) == 1 else " are") + " not")
    if starving:
        words.append(", ".join(f"dp{r.dp_rank}" for r in starving) + " starving (0 running while another runs "
                     f"{busiest})")
    return RankImbalance(
        ranks=len(ranks),
        running_max_over_mean=_max_over_mean([None if r.running_reqs is None else float(r.running_reqs) for r in ranks]),
        kv_max_over_mean=_max_over_mean([r.kv_usage for r in ranks]),
        callout="; ".join(words) or None)
