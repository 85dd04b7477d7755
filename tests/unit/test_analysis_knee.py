"""Knee definitions and statistics on constructed curves (the physics-free half of the checks;
the end-to-end half runs a ramp against the simulator in test_ramp_sim.py)."""

import random

import numpy as np
import pytest

from specmon.analysis.knee import (
    c_90, marginal_efficiency, plateau_knee, queueing_knee, queueing_ttft,
)
from specmon.analysis.stats import histogram_quantile, percentile, spread_gaps
from specmon.analysis.table import format_level_table
from specmon.model import LevelResult


def curve(cs, xs, **per_level):
    out = []
    for i, (c, x) in enumerate(zip(cs, xs)):
        r = LevelResult(arm="a", level=i, offered_concurrency=c, output_tok_s=x)
        for k, vals in per_level.items():
            setattr(r, k, vals[i])
        out.append(r)
    return out


def test_plateau_knee_called_on_the_second_flat_level():
    # one stream at C=10 gets 100 tok/s; 20 adds 80 %, 40 adds 10 %, 80 adds 3.75 %
    lv = curve([10, 20, 40, 80, 150], [1000, 1800, 2000, 2150, 2160])
    etas = marginal_efficiency(lv)
    assert etas[0] is None
    assert etas[1] == pytest.approx(0.8)
    assert etas[2] == pytest.approx(0.10)
    k = plateau_knee(lv)
    assert k.concurrency == 20          # the last level that still paid
    assert k.confirmed_at == 3          # known only once C=80 is flat too
    assert "C=20" in k.detail


def test_plateau_needs_two_consecutive_flat_levels():
    # a single flat step followed by a real gain is noise, not a knee
    lv = curve([10, 20, 40, 80], [1000, 1050, 3000, 3050])
    assert plateau_knee(lv).confirmed_at is None
    assert plateau_knee(lv[:3]).concurrency is None


def test_plateau_threshold_is_strict_and_relative_to_first_level():
    # eta exactly 0.15 is not below the threshold
    lv = curve([10, 20, 30], [1000, 1150, 1300])
    assert marginal_efficiency(lv)[1] == pytest.approx(0.15)
    assert plateau_knee(lv).concurrency is None


def test_invalid_levels_do_not_make_a_knee():
    lv = curve([10, 20, 40, 80], [1000, 1800, 1850, 1870])
    lv[2].valid, lv[2].invalid_reason = False, "client bottleneck"
    # without level 40 the curve 10 -> 20 -> 80 has only one flat step
    assert plateau_knee(lv).confirmed_at is None
    lv[2].valid = True
    assert plateau_knee(lv).concurrency == 20


def test_c90():
    lv = curve([10, 20, 40, 80], [1000, 1800, 1950, 2000])
    assert c_90(lv) == 20  # 1800 >= 0.9 x 2000


def test_queueing_knee_from_queued_share():
    lv = curve([10, 20, 40, 80], [1, 2, 3, 4], queued_share=[0.0, 0.5, 0.9, 1.0], capped_share=[0, 0, 0, 0],
               queued_mean=[0, 1, 5, 30])
    k = queueing_knee(lv)
    assert (k.concurrency, k.confirmed_at) == (40, 3)
    assert "90%" in k.detail


def test_queueing_knee_from_running_cap_or_full_pool():
    lv = curve([10, 20, 40], [1, 2, 3], queued_share=[0, 0, 0], capped_share=[0.1, 0.85, 0.95])
    k = queueing_knee(lv)
    assert (k.concurrency, k.confirmed_at) == (20, 2)


def test_queueing_not_confirmed_by_one_level():
    lv = curve([10, 20, 40], [1, 2, 3], queued_share=[0, 0.9, 0.2], capped_share=[None, None, None])
    assert queueing_knee(lv).confirmed_at is None


def test_queueing_ttft_note():
    r = LevelResult(arm="a", level=0, offered_concurrency=20, ttft_mean_s=4.0, queue_time_mean_s=3.2)
    share, note = queueing_ttft(r)
    assert share == pytest.approx(0.8)
    assert note == "TTFT 4.0 s: 3.2 s queue, 0.8 s prefill"
    r.queue_time_mean_s = 4.2  # the window's queue histogram and its TTFTs cover other requests
    assert queueing_ttft(r) == (1.0, "TTFT 4.0 s: 4.0 s queue, 0 ms prefill")
    r.queue_time_mean_s = 1.0
    assert queueing_ttft(r) is None  # 25 % queue: TTFT is mostly prefill
    r.queue_time_mean_s = None
    assert queueing_ttft(r) is None  # unknown is not "no queue"


def test_predicted_knee_brackets_field_fact():
    # Operators measured: an FP8 pool of 175,000 tokens, ~8.8K in + 1K out -> knee ~18.
    p = predict_knee(ArmInfo(kv_capacity_tokens=175_000, max_running_requests=48), 8800, 1024)
    assert p.kv_full_length == pytest.approx(17.81, abs=0.01)
    assert p.kv_admitted == 18 and p.concurrency == 18 and p.ratio_assumed and p.bound_by == "KV pool"
    assert predict_knee(ArmInfo(), 8800, 1024) is None
    assert predict_knee(ArmInfo(max_running_requests=4), 8800, 1024).concurrency == 4


def test_percentile_matches_numpy_linear():
    rng = random.Random(7)
    for n in (1, 2, 5, 101, 1000):
        xs = [rng.expovariate(1.0) for _ in range(n)]
        for q in (0, 1, 50, 90, 99, 100):
            assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
    assert percentile([], 50) is None
    assert percentile([None, 3.0], 50) == 3.0


def test_histogram_quantile_reused_from_sources():
    buckets = [(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (float("inf"), 40.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.4 * (20 - 10) / 20)


def test_spread_gaps_counts_tokens_not_chunks():
    # a 4-token speculative chunk after 40 ms is four 10 ms tokens, not one 40 ms token
    assert spread_gaps([(0.04, 4), (0.01, 1)]) == pytest.approx([0.01] * 5)


def test_level_table_columns():
    lv = curve([10, 20], [1000.0, 1800.0], achieved_concurrency=[10.0, 18.5], per_user_tok_s=[100.0, 97.3],
               ttft_p50_s=[0.5, 4.0], ttft_p99_s=[0.9, 6.0], tpot_p50_s=[0.02, 0.03], accept_length=[2.6, 2.7],
               ok=[40, 80], failed=[0, 1], knee=[None, "queueing"])
    text = format_level_table(lv)
    head, r1, r2 = text.splitlines()
    assert [h.strip() for h in head.split(" | ")][1:6] == ["C", "achieved", "out tok/s", "per-user tok/s", "TTFT p50/p99"]
    assert "500ms/900ms" in r1 and "80/1" in r2 and r2.rstrip().endswith("queueing")


def test_queueing_knee_from_queue_time_share_of_ttft():
    # The demo's FP8 arm near its knee: bursty gauges (queued > 5% of C in only a third of the
    # samples) but most of TTFT spent waiting, by the server's own histogram.
    lv = curve([16, 18, 20, 22], [1, 2, 3, 4], queued_share=[0.1, 0.2, 0.33, 0.6], capped_share=[0, 0.44, 0.44, 0.6],
               ttft_mean_s=[1.4, 1.4, 3.8, 6.9], queue_time_mean_s=[0.7, 0.6, 3.1, 5.9])
    k = queueing_knee(lv)
    assert (k.concurrency, k.confirmed_at) == (20, 3)
    assert "82% of its TTFT was server queue time" in k.detail
    # 50% exactly is not "most"
    lv[2].queue_time_mean_s = 1.9
    assert queueing_knee(lv).concurrency != 20


# ---- D1 with confidence bounds ---------------------------------------------------------------

from specmon.analysis.knee import marginal_efficiency_bounds, power_knee, slo_knee, knees_summary  # noqa: E402
from specmon.analysis.predict import predict_knee  # noqa: E402
from specmon.model import ArmInfo, PowerKneeSummary  # noqa: E402
from specmon.analysis.stats import mean_se, rate_batches, t_upper_95, wilson_lower  # noqa: E402


def with_se(lv, se, batches=27):
    for x in lv:
        x.output_tok_s_se, x.output_tok_s_batches = se, batches
    return lv


# One stream at C=10 gets 100 tok/s; past C=12 each added stream gives 2.5-5 % of one.
CS, XS = [10, 12, 14, 16, 18], [1000, 1190, 1200, 1205, 1210]


def test_plateau_called_on_point_estimates_and_flagged_when_the_noise_could_hide_it():
    # Point estimates cross theta (eta 5 %, 2.5 %), but with +-30 tok/s per level a step of two
    # streams cannot tell 5 % from 40 % of a stream: the knee is called, marked unresolved.
    noisy = with_se(curve(CS, XS), 30.0)
    etas = marginal_efficiency(noisy)
    assert etas[2] == pytest.approx(0.05) and etas[3] == pytest.approx(0.025)
    k = plateau_knee(noisy)
    assert (k.concurrency, k.confirmed_at) == (12, 3)
    assert k.values["resolved"] is False and "within the noise" in k.detail
    assert k.values["eta_upper95"]["14"] > 0.15
    assert k.values["point_estimate_at"] == []


def test_plateau_resolved_when_the_levels_are_precise():
    precise = with_se(curve(CS, XS), 2.0)
    k = plateau_knee(precise)
    assert (k.concurrency, k.confirmed_at) == (12, 3)
    assert k.values["resolved"] is True and "within the noise" not in k.detail
    assert "at 95%" in k.detail and "+- 2 tok/s" in k.detail
    assert k.values["eta_upper95"]["14"] < 0.15


def test_plateau_falls_back_to_point_estimates_without_se_and_says_so():
    old = curve(CS, XS)  # a session recorded before throughput SEs existed
    k = plateau_knee(old)
    assert (k.concurrency, k.confirmed_at) == (12, 3)
    assert k.values["point_estimate_at"] == [12, 14, 16, 18]
    assert "point estimates" in k.detail
    # one level without SE falls back for the etas that involve it only
    lv = with_se(curve(CS, XS), 30.0)
    lv[4].output_tok_s_se = None
    assert plateau_knee(lv).values["point_estimate_at"] == [18]


def test_plateau_bound_delta_method_numbers():
    lv = curve([10, 20], [1000, 1500])
    lv[0].output_tok_s_se, lv[1].output_tok_s_se = 10.0, 20.0
    lv[0].output_tok_s_batches = lv[1].output_tok_s_batches = 31
    (e0, u0), (e1, u1) = marginal_efficiency_bounds(lv)
    assert e0 is None and u0 is None
    assert e1 == pytest.approx(0.5)
    # d/dX_1 = c0/(dc x0) = 0.001; d/dX_0 = -0.001 - eta/x0 = -0.0015 (X_0 is also the reference)
    se = ((0.001 * 20) ** 2 + (0.0015 * 10) ** 2) ** 0.5
    assert u1 == pytest.approx(0.5 + 1.697 * se)
    # fewer batches -> a wider Student t
    lv[0].output_tok_s_batches = 4
    assert marginal_efficiency_bounds(lv)[1][1] == pytest.approx(0.5 + 2.353 * se)


def test_stats_batches_se_t_and_wilson():
    # 20 s at 10 tok/s then 20 s at 30 tok/s, 5 s batches: 8 batches
    ev = [(t + 0.5, 10.0) for t in range(20)] + [(t + 0.5, 30.0) for t in range(20, 40)]
    b = rate_batches(ev, 0.0, 40.0, 5.0, 4)
    assert b == pytest.approx([10.0] * 4 + [30.0] * 4)
    m, se = mean_se(b)
    assert m == pytest.approx(20.0)
    assert se == pytest.approx(float(np.std(b, ddof=1)) / 8 ** 0.5)
    assert len(rate_batches(ev, 0.0, 12.0, 5.0, 4)) == 4    # too short for 5 s batches: 4 of 3 s
    assert rate_batches(ev, 0.0, 0.0) == [] and mean_se([1.0]) == (1.0, None)
    assert t_upper_95(1) == pytest.approx(6.314) and t_upper_95(None) == pytest.approx(1.645)
    assert wilson_lower(9, 10) == pytest.approx(0.6523, abs=1e-3)
    assert wilson_lower(200, 200) == pytest.approx(0.9867, abs=1e-3)
    assert wilson_lower(0, 5) == 0.0 and wilson_lower(0, 0) is None


# ---- D3 --------------------------------------------------------------------------------------

def test_power_knee_argmax_and_confirmation():
    lv = curve([10, 20, 30, 40], [1000, 1800, 2000, 2050], ttft_p50_s=[1.0, 1.5, 4.0, 9.0])
    p = power_knee(lv)
    assert (p.concurrency, p.power, p.confirmed) == (20, pytest.approx(1200.0), True)
    assert power_knee(lv[:3]).confirmed is False  # only one level after the maximum


def test_slo_knee_uses_the_wilson_bound_not_the_point_attainment():
    lv = curve([10, 20, 30, 40], [1000, 1800, 2000, 2050], slo_n=[100, 100, 100, 100],
               slo_met=[100, 95, 92, 40])
    k = slo_knee(lv)
    # 92 % met at C=30 is above 90 % as a point, but its lower bound (0.865) is not
    assert k.levels["30"]["attainment"] == pytest.approx(0.92)
    assert k.levels["30"]["lower95"] < 0.9 <= k.levels["20"]["lower95"]
    assert k.c_slo == 20
    # goodput X x a: 1000, 1710, 1840, 820 -> C=30, confirmed only with two falls after it
    assert (k.c_goodput, k.goodput_tok_s, k.goodput_confirmed) == (30, pytest.approx(1840.0), False)
    assert slo_knee(curve([10], [1.0])) is None


def test_knees_summary_carries_d3_only_with_slos():
    lv = curve([10, 20, 30, 40], [1000, 1800, 2000, 2050], ttft_p50_s=[1.0, 1.5, 4.0, 9.0],
               ttft_p99_s=[2.0, 3.0, 20.0, 20.0], slo_n=[50] * 4, slo_met=[50, 50, 30, 10])
    s = knees_summary(lv)
    assert s.power == PowerKneeSummary(concurrency=20, power_tok_s_per_s_ttft=1200.0, confirmed=True)
    assert s.ttft_dispersion_levels == [30]
    assert s.slo is None
    s = knees_summary(lv, slo_ttft_s=2.0)
    assert s.slo.c_slo == 20 and s.slo.c_goodput == 20 and s.slo.slo_ttft_s == 2.0


def test_unresolved_plateau_says_the_ramp_cannot_resolve_theta():
    k = plateau_knee(with_se(curve(CS, [1000, 1190, 1300, 1410, 1520]), 30.0))  # no plateau, noisy
    assert k.concurrency is None and k.values["eta_halfwidth_median"] > 0.15
    assert "known only to" in k.detail
    assert "known only to" not in plateau_knee(with_se(curve(CS[:3], [1000, 1190, 1400]), 1.0)).detail


def test_slo_flags_reach_the_ramp_plan():
    from specmon.cli import build_parser
    from specmon.commands.demo import apply_overrides
    from specmon.commands.ramp import plan_from_args
    from specmon.servers.layout import load_layout

    args = build_parser().parse_args(["ramp", "http://127.0.0.1:1", "--levels", "2,4", "--slo-ttft", "2", "--slo-tpot", "0.05"])
    plan = plan_from_args(args)
    assert (plan.slo_ttft_s, plan.slo_tpot_s) == (2.0, 0.05)
    assert plan_from_args(build_parser().parse_args(["ramp", "http://127.0.0.1:1", "--levels", "2"])).slo_ttft_s is None
    args = build_parser().parse_args(["demo", "--slo-ttft", "3"])
    layout, _ = load_layout("demo")
    apply_overrides(layout, slo_ttft=args.slo_ttft, slo_tpot=args.slo_tpot)
    assert (layout.plan().slo_ttft_s, layout.plan().slo_tpot_s) == (3.0, None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--slo-ttft", "0"])


# --------------------------------------------------------------------------------------------
# A knee on the ramp's last level, and the one headline knee


def _last_level_saturates():
    """--levels 8,24,48,72 where only C=72 saturates: TTFT 181 ms -> 3.61 s, 24 queued, most of
    its TTFT queue; throughput still climbs, so no plateau."""
    lv = curve([8, 24, 48, 72], [800, 2300, 4300, 5000],
               ttft_p50_s=[0.12, 0.15, 0.181, 3.61], ttft_mean_s=[0.12, 0.15, 0.181, 3.61],
               queue_time_mean_s=[0.0, 0.001, 0.002, 3.2], queued_share=[0.0, 0.0, 0.0, 0.95],
               queued_mean=[0.0, 0.0, 0.0, 24.0])
    return lv


def test_queueing_on_the_last_level_is_called_when_the_ramp_ended():
    from specmon.analysis.knee import knee_level, knees_summary

    lv = _last_level_saturates()
    assert queueing_knee(lv).concurrency is None  # live, a next level may still come
    k = queueing_knee(lv, final=True)
    assert k.concurrency == 72 and k.confirmed_at == 3 and knee_level(lv, k) == 3
    assert "181 ms at C=48 -> 3.61 s" in k.detail and "add a level" in k.detail
    s = knees_summary(lv, final=True)
    assert s.queueing == 72 and s.headline.definition == "queueing" and s.headline.concurrency == 72
    assert not s.headline.confirmed and "add a level" in s.ramp_end
    assert knees_summary(lv).headline is None  # not final: nothing yet


def test_a_ramp_that_ends_on_its_first_flat_step_says_add_a_level():
    from specmon.analysis.knee import knees_summary

    lv = curve([10, 20, 40, 80], [1000, 1800, 3400, 3500])  # the last step adds 2.5 % of a stream
    s = knees_summary(lv, final=True)
    assert s.plateau is None and s.headline is None
    assert s.ramp_end.startswith("the ramp ended at the knee: add a level"), s.ramp_end
    # the last level queued but was not valid: its figures cannot call a knee, the note says so
    lv = _last_level_saturates()
    lv[3].valid, lv[3].invalid_reason = False, "client held only 60% of C"
    s = knees_summary(lv, final=True)
    assert s.queueing is None and "C=72 queued but is not valid" in s.ramp_end


def test_one_headline_knee_per_arm_queueing_first_then_plateau():
    from specmon.analysis.knee import knees_summary

    # plateau confirmed at 20 and queueing from 40: the operator acts on the queueing knee
    lv = curve([10, 20, 40, 80, 150], [1000, 1800, 2000, 2150, 2160],
               queued_share=[0, 0, 0.9, 0.95, 1.0], queued_mean=[0, 0, 3, 20, 90])
    s = knees_summary(lv, final=True)
    assert s.plateau == 20 and s.queueing == 40
    assert (s.headline.definition, s.headline.concurrency, s.headline.confirmed) == ("queueing", 40, True)
    assert s.headline.words == "queueing knee C=40" and s.ramp_end == ""
    # no queueing: the plateau is the headline
    lv = curve([10, 20, 40, 80, 150], [1000, 1800, 2000, 2150, 2160])
    s = knees_summary(lv, final=True)
    assert (s.headline.definition, s.headline.concurrency) == ("plateau", 20)
