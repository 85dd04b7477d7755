"""Every knee definition of peers.md C2 for one arm, never one number.

Plateau (D1), queueing (D2) and c_90 come from specmon.analysis.knee, the same functions the
ramp used live, and so does the Kleinrock power knee (D3 without SLOs, analysis.knee.power_knee:
P_k = X_k / TTFT_p50_k, argmax over valid levels, confirmed when P falls at the two levels after
it), and, when the ramp had SLOs (session.json ramp_plan slo_ttft_s / slo_tpot_s), the SLO and
goodput knees (analysis.knee.slo_knee, judged on levels.csv's slo_n / slo_met). Added here: the prediction the live session made from the KV pool (session.json
predicted_knees). The plateau knee uses the throughput SEs of levels.csv (output_tok_s_se); a
session recorded before they existed gets the point-estimate rule (analysis.knee says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specmon.analysis.knee import (
    KneeResult, PowerKnee, SloKnee, c_90, plateau_knee, power_knee, queueing_knee, slo_condition, slo_knee,
)
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
    slo: Optional[SloKnee] = None  # None: no SLO given, or no valid level judged against it
    slo_words: Optional[str] = None  # 'TTFT<=2 s, TPOT<=30 ms' when SLOs were given

    @property
    def plateau_within_noise(self) -> bool:
        return self.plateau.concurrency is not None and self.plateau.values.get("resolved") is False


def arm_knees(arm: ReportArm) -> ArmKnees:
    return ArmKnees(
        plateau=plateau_knee(arm.levels), queueing=queueing_knee(arm.levels), c_90=c_90(arm.levels),
        power=power_knee(arm.levels), predicted=arm.predicted_knee, predicted_detail=arm.predicted_detail,
        invalid_levels=[lv.offered_concurrency for lv in arm.levels if not lv.valid],
        slo=slo_knee(arm.levels) if has_slo(arm) else None,
        slo_words=slo_condition(arm.slo_ttft_s, arm.slo_tpot_s) if has_slo(arm) else None)


def has_slo(arm: ReportArm) -> bool:
    return arm.slo_ttft_s is not None or arm.slo_tpot_s is not None
