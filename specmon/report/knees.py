"""Every knee definition of peers.md C2 for one arm, never one number.

Plateau (D1), queueing (D2) and c_90 come from specmon.analysis.knee, the same functions the
ramp used live. Added here: the Kleinrock power knee (D3 without SLOs), P_k = X_k / TTFT_p50_k,
knee = argmax_k P_k over valid levels, confirmed when P falls at the two levels after it; and the
prediction the live session made from the KV pool (session.json predicted_knees).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from specmon.analysis.knee import KneeResult, c_90, plateau_knee, queueing_knee
from specmon.model import LevelResult
from specmon.report.data import ReportArm


@dataclass
class PowerKnee:
    concurrency: Optional[int]
    power: Optional[float]  # tok/s per second of TTFT at the knee
    confirmed: bool


@dataclass
class ArmKnees:
    plateau: KneeResult
    queueing: KneeResult
    c_90: Optional[int]
    power: PowerKnee
    predicted: Optional[float]
    predicted_detail: Optional[str]
    invalid_levels: list[int]


def kleinrock_power(levels: Sequence[LevelResult]) -> PowerKnee:
    pts = [(lv.offered_concurrency, lv.output_tok_s / lv.ttft_p50_s) for lv in levels
           if lv.valid and lv.output_tok_s is not None and lv.ttft_p50_s]
    if not pts:
        return PowerKnee(None, None, False)
    k = max(range(len(pts)), key=lambda i: pts[i][1])
    after = [p for _, p in pts[k + 1:k + 3]]
    confirmed = len(after) == 2 and after[0] < pts[k][1] and after[1] < after[0]
    return PowerKnee(pts[k][0], pts[k][1], confirmed)


def arm_knees(arm: ReportArm) -> ArmKnees:
    return ArmKnees(
        plateau=plateau_knee(arm.levels), queueing=queueing_knee(arm.levels), c_90=c_90(arm.levels),
        power=kleinrock_power(arm.levels), predicted=arm.predicted_knee, predicted_detail=arm.predicted_detail,
        invalid_levels=[lv.offered_concurrency for lv in arm.levels if not lv.valid])
