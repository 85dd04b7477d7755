"""Where a ramp stops paying: the knee definitions, computed on finished levels of one arm.

All functions are pure: they take LevelResults (levels already flagged invalid are left out:
a level where the client was the bottleneck says nothing about the server) and return calls.
A knee is *confirmed* only when its condition holds at two consecutive valid levels; it is
called on the second of them (the confirming level), whose levels.csv row gets the knee label.

D1 throughput plateau (peers.md C2):
    eta_k = ((X_k - X_{k-1}) / (c_k - c_{k-1})) / (X_1 / c_1)
    = output tok/s added per added stream, relative to what one stream got at the first level.
    k* = first k with eta_k < 0.15 and eta_{k+1} < 0.15; the knee is c_{k*-1}, the last level
    that still paid. Also c_90 = lowest c whose X >= 90 % of the best X seen (robust to uneven steps).
D2 queueing onset:
    a level queues when queued > 5 % of C in >= 80 % of its samples (queued_share >= 0.8), or
    when the server runs at its request cap / with a full KV pool for >= 80 % of them
    (capped_share >= 0.8), or when most of the level's TTFT is server queue time (the queue
    time histogram over the level: queue share of TTFT > 50 %, the queueing-TTFT rule below).
    The last condition is there because the gauges are snapshots: near the knee a closed loop
    with equal output lengths finishes requests in bursts, so the waiting list empties and
    refills between scrapes (seen in the demo: FP8 at C=20 held 17 running and showed > 1 queued
    in only 33 % of samples, while 82 % of its TTFT was queue). The histogram sees every request.
    The knee is the first c_k that queues, confirmed when c_{k+1} queues too.
Queueing TTFT: share = mean server queue time / mean TTFT of the level; above 50 % the TTFT is
    mostly waiting, and the note reads "TTFT 4.0 s: 3.2 s queue, 0.8 s prefill" (prefill here is
    everything that is not queue: TTFT - queue).
Predicted knee from KV capacity (before any load): pool / (isl + osl) (every request at full
    length, conservative), pool / (isl + osl / 2) (closed loop with fixed output length holds
    half-decoded requests on average), and the request cap; the prediction is the lowest bound.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from specmon.model import LevelResult

PLATEAU_THETA = 0.15
QUEUED_SHARE_MIN = 0.8
QUEUE_TTFT_SHARE = 0.5


@dataclass
class KneeResult:
    definition: str  # "plateau" | "queueing"
    concurrency: Optional[float]  # the knee (a level's offered concurrency)
    confirmed_at: Optional[int]  # level index (LevelResult.level) that confirmed it; None = not confirmed
    detail: str
    values: dict = field(default_factory=dict)


def _valid(levels: Sequence[LevelResult]) -> list[LevelResult]:
    return [lv for lv in levels if lv.valid and lv.output_tok_s is not None]


def marginal_efficiency(levels: Sequence[LevelResult]) -> list[Optional[float]]:
    """eta for each valid level (None for the first, which is the reference)."""
    lv = _valid(levels)
    if not lv or not lv[0].output_tok_s:
        return [None] * len(lv)
    per_stream = lv[0].output_tok_s / lv[0].offered_concurrency
    out: list[Optional[float]] = [None]
    for prev, cur in zip(lv, lv[1:]):
        dc = cur.offered_concurrency - prev.offered_concurrency
        out.append(((cur.output_tok_s - prev.output_tok_s) / dc) / per_stream if dc > 0 else None)
    return out


def plateau_knee(levels: Sequence[LevelResult], theta: float = PLATEAU_THETA) -> KneeResult:
    lv = _valid(levels)
    etas = marginal_efficiency(lv)
    values = {"eta": {str(x.offered_concurrency): (None if e is None else round(e, 4)) for x, e in zip(lv, etas)},
              "c_90": c_90(lv)}
    for k in range(1, len(lv) - 1):
        a, b = etas[k], etas[k + 1]
        if a is not None and b is not None and a < theta and b < theta:
            knee = lv[k - 1]
            detail = (f"throughput plateau at C={knee.offered_concurrency}: {knee.output_tok_s:.0f} tok/s; "
                      f"each stream added past it gave {a:.0%} then {b:.0%} of a first-level stream "
                      f"(threshold {theta:.0%})")
            return KneeResult("plateau", knee.offered_concurrency, lv[k + 1].level, detail, values)
    return KneeResult("plateau", None, None, "no plateau yet", values)


def queues(level: LevelResult, share_min: float = QUEUED_SHARE_MIN) -> bool:
    ttft_share = queue_share(level)
    return ((level.queued_share is not None and level.queued_share >= share_min)
            or (level.capped_share is not None and level.capped_share >= share_min)
            or (ttft_share is not None and ttft_share > QUEUE_TTFT_SHARE))


def queueing_knee(levels: Sequence[LevelResult], share_min: float = QUEUED_SHARE_MIN) -> KneeResult:
    lv = [x for x in levels if x.valid]
    flags = [queues(x, share_min) for x in lv]
    values = {"queueing_levels": [x.offered_concurrency for x, f in zip(lv, flags) if f]}
    for k in range(len(lv) - 1):
        if flags[k] and flags[k + 1]:
            x = lv[k]
            why = []
            if x.queued_share is not None and x.queued_share >= share_min:
                why.append(f"queued > 5% of C in {x.queued_share:.0%} of samples (mean {x.queued_mean:.1f} queued)")
            if x.capped_share is not None and x.capped_share >= share_min:
                why.append(f"running at the cap or KV pool full in {x.capped_share:.0%} of samples")
            share = queue_share(x)
            if share is not None and share > QUEUE_TTFT_SHARE:
                why.append(f"{share:.0%} of its TTFT was server queue time")
            detail = f"queueing from C={x.offered_concurrency}: " + "; ".join(why)
            note = queueing_ttft(lv[k + 1])
            if note:
                detail += f"; at C={lv[k + 1].offered_concurrency} {note[1]}"
            return KneeResult("queueing", x.offered_concurrency, lv[k + 1].level, detail, values)
    return KneeResult("queueing", None, None, "no queueing yet", values)


def queueing_ttft(level: LevelResult, threshold: float = QUEUE_TTFT_SHARE) -> Optional[tuple[float, str]]:
    """(queue share of TTFT, note) when queue time is more than `threshold` of the mean TTFT."""
    share = queue_share(level)
    if share is None or share <= threshold:
        return None
    t, q = level.ttft_mean_s, level.queue_time_mean_s
    return share, f"TTFT {_secs(t)}: {_secs(q)} queue, {_secs(max(t - q, 0.0))} prefill"


def queue_share(level: LevelResult) -> Optional[float]:
    t, q = level.ttft_mean_s, level.queue_time_mean_s
    if t is None or q is None or t <= 0:
        return None
    return min(q / t, 1.0)


def _secs(v: float) -> str:
    return f"{v:.1f} s" if v >= 0.1 else f"{v * 1000:.0f} ms"


def c_90(levels: Sequence[LevelResult]) -> Optional[int]:
    lv = _valid(levels)
    if not lv:
        return None
    best = max(x.output_tok_s for x in lv)
    for x in lv:
        if x.output_tok_s >= 0.9 * best:
            return x.offered_concurrency
    return None


def predicted_knees(kv_capacity: Optional[int], isl: int, osl: int,
                    max_running: Optional[int] = None) -> dict:
    """The knee bounds knowable before any load; None where the input is unknown."""
    full = kv_capacity / (isl + osl) if kv_capacity and isl + osl > 0 else None
    half = kv_capacity / (isl + osl / 2) if kv_capacity and isl + osl > 0 else None
    bounds = [b for b in (full, float(max_running) if max_running else None) if b is not None]
    return {
        "kv_full_length": None if full is None else round(full, 2),
        "kv_mean_length": None if half is None else round(half, 2),
        "request_cap": max_running,
        "predicted": round(min(bounds), 2) if bounds else None,
    }


def knees_summary(levels: Sequence[LevelResult], kv_capacity: Optional[int], isl: int, osl: int,
                  max_running: Optional[int]) -> dict:
    """Every definition's value for session.json (knees={arm: summary})."""
    p, q = plateau_knee(levels), queueing_knee(levels)
    qt = {str(x.offered_concurrency): (None if queue_share(x) is None else round(queue_share(x), 3))
          for x in levels if x.valid}
    return {
        "plateau": p.concurrency, "plateau_confirmed_at_level": p.confirmed_at, "plateau_detail": p.detail,
        "queueing": q.concurrency, "queueing_confirmed_at_level": q.confirmed_at, "queueing_detail": q.detail,
        "c_90": p.values.get("c_90"), "eta": p.values.get("eta"),
        "queueing_levels": q.values.get("queueing_levels"),
        "queue_share_of_ttft": qt,
        "predicted": predicted_knees(kv_capacity, isl, osl, max_running),
        "invalid_levels": [x.offered_concurrency for x in levels if not x.valid],
    }
