"""Arms compared at matched interactivity (docs/field-notes.md B): the same per-user tok/s.

An arm's frontier is its measured levels as points (per-user tok/s, output tok/s), in ramp order.
At a target per-user speed u*, every segment between two consecutive measured levels whose
per-user speeds bracket u* gives a linearly interpolated throughput; the frontier value is the
best of them (a ramp that doubles back, e.g. from noise, still answers with what the arm reached).
A target outside the measured range has no value: never extrapolated.

Cost per million output tokens = price per GPU-hour x GPUs / (tok/s x 3600) x 1e6.
Throughput per MW = tok/s / (mean GPU power of the arm's GPUs in W / 1e6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from specmon.report.data import ReportArm


@dataclass
class MatchedPoint:
    at: float  # per-user tok/s asked for
    output_tok_s: float
    offered_concurrency: float  # interpolated offered C
    achieved_concurrency: Optional[float]
    power_w: Optional[float]
    from_invalid: bool  # an end of the segment was a level flagged invalid (client-bound)
    gpus: int = 1

    @property
    def tok_s_per_gpu(self) -> float:
        return self.output_tok_s / self.gpus

    def cost_per_m_tokens(self, price_per_gpu_hour: Optional[float]) -> Optional[float]:
        return cost_per_million(price_per_gpu_hour, self.output_tok_s, self.gpus)

    @property
    def tok_s_per_mw(self) -> Optional[float]:
        return tok_s_per_mw(self.output_tok_s, self.power_w)


def cost_per_million(price_per_gpu_hour: Optional[float], tok_s: Optional[float], gpus: int = 1) -> Optional[float]:
    """$ per million output tokens; None when the price or the throughput is unknown or zero."""
    if price_per_gpu_hour is None or tok_s is None or tok_s <= 0:
        return None
    return price_per_gpu_hour * gpus / (tok_s * 3600.0) * 1e6


def tok_s_per_mw(tok_s: Optional[float], power_w: Optional[float]) -> Optional[float]:
    if tok_s is None or power_w is None or power_w <= 0:
        return None
    return tok_s / (power_w / 1e6)


def _lerp(a: Optional[float], b: Optional[float], f: float) -> Optional[float]:
    if a is None or b is None:
        return None
    return a + (b - a) * f


def matched(arm: ReportArm, at: float) -> Optional[MatchedPoint]:
    pts = [lv for lv in arm.levels if lv.per_user_tok_s is not None and lv.output_tok_s is not None]
    best: Optional[MatchedPoint] = None
    candidates = []
    if len(pts) == 1 and pts[0].per_user_tok_s == at:
        candidates.append((pts[0], pts[0], 0.0))
    for a, b in zip(pts, pts[1:]):
        ua, ub = a.per_user_tok_s, b.per_user_tok_s
        if not min(ua, ub) <= at <= max(ua, ub):
            continue
        if ua == ub:  # a flat segment at exactly u*: both ends qualify
            candidates += [(a, a, 0.0), (b, b, 0.0)]
        else:
            candidates.append((a, b, (at - ua) / (ub - ua)))
    for a, b, f in candidates:
        p = MatchedPoint(
            at=at, output_tok_s=_lerp(a.output_tok_s, b.output_tok_s, f),
            offered_concurrency=_lerp(float(a.offered_concurrency), float(b.offered_concurrency), f),
            achieved_concurrency=_lerp(a.achieved_concurrency, b.achieved_concurrency, f),
            power_w=_lerp(arm.power_at(a), arm.power_at(b), f),
            from_invalid=not (a.valid and b.valid), gpus=arm.gpus)
        if best is None or p.output_tok_s > best.output_tok_s:
            best = p
    return best


def default_targets(arms: Sequence[ReportArm], n: int = 3) -> list[float]:
    """Without --at: n per-user speeds spread over the range every arm covers (or, when the arms'
    ranges do not overlap, over the union), rounded to whole tok/s."""
    ranges = []
    for arm in arms:
        us = [lv.per_user_tok_s for lv in arm.levels if lv.per_user_tok_s is not None]
        if len(us) >= 2:
            ranges.append((min(us), max(us)))
    if not ranges:
        return []
    lo, hi = max(r[0] for r in ranges), min(r[1] for r in ranges)
    if lo >= hi:
        lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
    if hi <= lo:
        return []
    step = (hi - lo) / (n + 1)
    targets = sorted({float(round(lo + step * (i + 1))) for i in range(n)})
    return [t for t in targets if lo <= t <= hi]
