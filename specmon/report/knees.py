"""Every knee definition for one arm, never one number: analysis.knee.knees_summary over the
arm's levels (the function the ramp used live), with the knee the live session predicted from
the KV pool (session.json predicted_knees) and the SLOs of its ramp plan."""

from __future__ import annotations

from specmon.analysis.knee import knees_summary
from specmon.model import KneesSummary
from specmon.report.data import ReportArm


def arm_knees(arm: ReportArm) -> KneesSummary:
    """The arm's knees over all its levels, by the function the ramp used live (one shape for
    session.json, the TUI, headless and the report)."""
    return knees_summary(arm.levels, arm.predicted, slo_ttft_s=arm.slo_ttft_s, slo_tpot_s=arm.slo_tpot_s,
                         min_attainment=arm.attainment, final=True)  # a recorded ramp has ended


def within_noise(k: KneesSummary) -> bool:
    return k.plateau is not None and k.plateau_resolved is False
