"""Every knee definition of peers.md C2 for one arm, never one number.

Plateau (D1), queueing (D2) and c_90 come from specmon.analysis.knee, the same functions the
ramp used live, and so does the Kleinrock power knee (D3 without SLOs, analysis.knee.power_knee:
P_k = X_k / TTFT_p50_k, argmax over valid levels, confirmed when P falls at the two levels after
it). Added here: the prediction the live session made from the KV pool (session.json
predicted_knees). The plateau knee uses the throughput SEs of levels.csv (output_tok_s_se); a
session recorded before they existed gets the point-estimate rule (analysis.knee says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from specmon.analysis.knee import KneeResult, PowerKnee, c_90, plateau_knee, power_knee, queueing_knee
from specmon.model import LevelResult
from specmon.report.data import ReportArm


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
    """The live ramp's power knee (one implementation, analysis.knee.power_knee)."""
    return power_knee(levels)


def arm_knees(arm: ReportArm) -> ArmKnees:
    return ArmKnees(
        plateau=plateau_knee(arm.levels), queueing=queueing_knee(arm.levels), c_90=c_90(arm.levels),
        power=kleinrock_power(arm.levels), predicted=arm.predicted_knee, predicted_detail=arm.predicted_detail,
        invalid_levels=[lv.offered_concurrency for lv in arm.levels if not lv.valid])
