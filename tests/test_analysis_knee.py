"""Knee definitions and statistics on constructed curves (the physics-free half of the checks;
the end-to-end half runs a ramp against the simulator in test_ramp_sim.py)."""

import random

import numpy as np
import pytest

from specmon.analysis.knee import (
    c_90, marginal_efficiency, plateau_knee, predicted_knees, queueing_knee, queueing_ttft,
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
    r.queue_time_mean_s = 1.0
    assert queueing_ttft(r) is None  # 25 % queue: TTFT is mostly prefill
    r.queue_time_mean_s = None
    assert queueing_ttft(r) is None  # unknown is not "no queue"


def test_predicted_knee_brackets_field_fact():
    # field-facts A: FP8 pool 175,000 tokens, ~8.8K in + 1K out -> measured knee ~18
    p = predicted_knees(175_000, 8800, 1024, 48)
    assert p["kv_full_length"] == pytest.approx(17.81, abs=0.01)
    assert p["kv_mean_length"] == pytest.approx(18.79, abs=0.01)
    assert p["predicted"] == pytest.approx(17.81, abs=0.01)
    assert predicted_knees(None, 8800, 1024, None)["predicted"] is None
    assert predicted_knees(None, 8800, 1024, 4)["predicted"] == 4


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
