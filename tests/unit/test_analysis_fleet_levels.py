"""analysis/fleet_levels.py: a ramp through a gateway, worker by worker (pure functions, known values)."""

from __future__ import annotations

import pytest

from specmon.analysis.fleet_levels import (
    fleet_info, fleet_levels, fleet_samples, first_saturated, routing_imbalance, window_histogram, worker_level,
)
from specmon.model import ArmInfo, KneesSummary, LevelResult, Sample
from specmon.sources.prom import MetricsSnapshot


def s(ts, arm, running=None, queued=None, used=None, cap=None, up=True, **kw):
    usage = used / cap if used is not None and cap else None
    return Sample(ts=ts, arm=arm, up=up, state="up" if up else "refused", running_reqs=running, queued_reqs=queued,
                  kv_used_tokens=used, kv_capacity_tokens=cap, kv_usage=usage, **kw)


def test_fleet_samples_sum_each_tick_and_a_tick_with_a_worker_down_does_not_count():
    by = {"a": [s(1.0, "a", 2, 0, 100, 1000, gen_tok_s=50.0), s(2.0, "a", 3, 1, 200, 1000, gen_tok_s=60.0),
                s(3.0, "a", up=False, reason="refused")],
          "b": [s(1.0, "b", 4, 2, 300, 3000, gen_tok_s=70.0), s(2.0, "b", 5, 0, 400, None, gen_tok_s=None),
                s(3.0, "b", 1, 0, 10, 100)]}
    out = fleet_samples(by, "gw")
    assert [x.ts for x in out] == [1.0, 2.0, 3.0]
    first, second, third = out
    assert (first.arm, first.up, first.running_reqs, first.queued_reqs) == ("gw", True, 6, 2)
    assert (first.kv_used_tokens, first.kv_capacity_tokens) == (400, 4000)
    assert first.kv_usage == pytest.approx(0.1) and first.gen_tok_s == 120.0
    # b's pool size unknown at t=2: the fleet's is unknown, never a partial sum
    assert (second.running_reqs, second.kv_capacity_tokens, second.kv_usage, second.gen_tok_s) == (8, None, None, None)
    assert not third.up and "worker a" in third.reason


def test_worker_row_queues_against_its_share_of_c_and_is_capped_at_its_own_cap():
    samples = [s(t, "w", running=4, queued=1, used=900, cap=1000) for t in (1.0, 2.0, 3.0, 4.0)]
    fleet = LevelResult(arm="gw", level=2, offered_concurrency=30, duration_s=60.0)
    shared = worker_level("w", "http://127.0.0.1:1", 2, 30, samples, share_of=3, max_running=4, fleet_row=fleet)
    alone = worker_level("w", "http://127.0.0.1:1", 2, 30, samples, share_of=1, max_running=8, fleet_row=fleet)
    assert shared.worker == "http://127.0.0.1:1" and shared.offered_concurrency == 30 and shared.duration_s == 60.0
    # 1 queued > 5 % of its share (30 / 3 = 10 -> 0.5) in every sample; of the whole C=30 (1.5) in none
    assert shared.queued_share == 1.0 and alone.queued_share == 0.0
    assert shared.capped_share == 1.0  # running 4 at its cap 4
    assert alone.capped_share == 0.0  # cap 8, KV 90 % < 95 %
    assert shared.running_mean == 4.0 and shared.achieved_concurrency == 4.0
    assert shared.kv_usage_max == pytest.approx(0.9)
    assert shared.valid and shared.ok == 0 and shared.failed == 0  # the client counted the gateway's requests


def test_worker_ttft_from_its_histograms_over_the_window_else_from_the_samples():
    def snap(ts, counts, total, qsum, qcount):
        text = "# TYPE sglang:time_to_first_token_seconds histogram\n" + "".join(f'sglang:time_to_first_token_seconds_bucket{{le="{le}"}} {n}\n'
                       for le, n in zip(("0.1", "1.0", "+Inf"), counts))
        text += f"sglang:time_to_first_token_seconds_sum {total}\nsglang:time_to_first_token_seconds_count {counts[-1]}\n"
        text += "# TYPE sglang:queue_time_seconds histogram\n"
        text += (f'sglang:queue_time_seconds_bucket{{le="1.0"}} {qcount}\nsglang:queue_time_seconds_bucket{{le="+Inf"}} {qcount}\n'
                 f"sglang:queue_time_seconds_sum {qsum}\nsglang:queue_time_seconds_count {qcount}\n")
        return MetricsSnapshot.parse(text, ts)

    opened = snap(10.0, (100, 100, 100), 5.0, 0.0, 100)  # before the window: 100 fast first tokens
    newest = snap(20.0, (100, 110, 110), 9.0, 3.0, 110)  # in it: 10, all between 0.1 and 1.0 s
    ttft, queue = (window_histogram(opened, newest, n) for n in ("time_to_first_token_seconds", "queue_time_seconds"))
    assert ttft.count == 10 and window_histogram(newest, newest, "time_to_first_token_seconds") is None
    samples = [s(t, "w", 2, 0, ttft_p50_s=5.0, ttft_mean_s=5.0) for t in (11.0, 12.0)]
    r = worker_level("w", "u", 0, 6, samples, share_of=3, ttft_hist=ttft, queue_hist=queue)
    assert r.ttft_p50_s == pytest.approx(0.55)  # the middle of (0.1, 1.0]: only the window's requests
    assert r.ttft_mean_s == pytest.approx(0.4) and r.queue_time_mean_s == pytest.approx(0.3)
    assert r.queue_ttft_share == pytest.approx(0.75)
    fallback = worker_level("w", "u", 0, 6, samples, share_of=3)
    assert fallback.ttft_p50_s == 5.0  # the samples' sliding windows when no histogram spans the window


def test_worker_row_invalid_without_samples_or_when_the_fleet_level_is():
    bad = LevelResult(arm="gw", level=0, offered_concurrency=6, valid=False, invalid_reason="no request succeeded")
    assert not worker_level("w", "u", 0, 6, [], share_of=3).valid
    r = worker_level("w", "u", 0, 6, [s(1.0, "w", 1, 0)], share_of=3, fleet_row=bad)
    assert not r.valid and "no request succeeded" in r.invalid_reason


def test_routing_imbalance_is_max_over_mean_of_running():
    rows = [LevelResult(arm=a, level=0, offered_concurrency=12, running_mean=m) for a, m in (("a", 2.0), ("b", 4.0),
                                                                                              ("c", 6.0))]
    assert routing_imbalance(rows) == (pytest.approx(1.5), "c")
    assert routing_imbalance(rows[:1]) == (None, None)
    idle = [LevelResult(arm=a, level=0, offered_concurrency=1, running_mean=0.0) for a in "ab"]
    assert routing_imbalance(idle) == (None, None)


def test_first_saturated_is_the_lowest_knee_queueing_first_on_a_tie():
    knees = {"a": KneesSummary(queueing=18.0), "b": KneesSummary(plateau=12.0), "c": KneesSummary()}
    assert first_saturated(knees) == ("b", 12.0, "plateau", ["b"])
    knees["a"] = KneesSummary(queueing=12.0, plateau=24.0)
    assert first_saturated(knees) == ("a", 12.0, "queueing", ["a", "b"])
    assert first_saturated({"c": KneesSummary()}) == (None, None, None, [])


def test_fleet_summary_imbalance_per_level_and_the_sentence():
    rows = [LevelResult(arm=a, level=lv, offered_concurrency=c, running_mean=m)
            for lv, c, ms in ((0, 6, (2.0, 2.0, 2.0)), (1, 18, (3.0, 6.0, 6.0)))
            for a, m in zip(("a", "b", "c"), ms)]
    f = fleet_levels("gw", "gateway gw", rows, {"a": KneesSummary(queueing=18.0), "b": KneesSummary()},
                     KneesSummary(plateau=24.0, queueing=18.0))
    assert f.workers == ["a", "b", "c"]
    assert f.imbalance == {"0": 1.0, "1": pytest.approx(1.2)} and f.busiest["1"] in ("b", "c")
    assert (f.first_saturated, f.first_saturated_at, f.first_saturated_by, f.fleet_knee) == ("a", 18.0, "queueing", 18.0)
    assert f.detail == "worker a saturated first (queueing at the fleet's C=18); the fleet's knee C=18"
    assert fleet_levels("gw", "g", rows, {}, None).detail == "no worker saturated yet"


def test_fleet_info_shares_what_the_workers_share_and_sums_pools_and_caps():
    a = ArmInfo(model="m", version="0.5", kv_capacity_tokens=1000, max_running_requests=8, time_scale=20.0)
    b = ArmInfo(model="m", version="0.6", kv_capacity_tokens=3000, max_running_requests=4, time_scale=20.0)
    f = fleet_info([a, b])
    assert (f.model, f.version, f.kv_capacity_tokens, f.max_running_requests, f.time_scale) == ("m", None, 4000, 12, 20.0)
    assert fleet_info([a, ArmInfo(model="m", time_scale=10.0)]).kv_capacity_tokens is None
    assert fleet_info([a, ArmInfo(model="m", time_scale=10.0)]).time_scale == 10.0
    assert fleet_info([]) is None


def test_a_pd_fleets_imbalance_compares_workers_of_one_role():
    rows = [LevelResult(arm=a, level=0, offered_concurrency=12, running_mean=m)
            for a, m in (("p1", 1.0), ("p2", 1.0), ("d1", 4.0), ("d2", 8.0))]
    roles = {"p1": "prefill", "p2": "prefill", "d1": "decode", "d2": "decode"}
    f = fleet_levels("gw", "g", rows, {}, None, roles=roles)
    assert f.imbalance == {"0": pytest.approx(8.0 / 6.0, abs=1e-4)} and f.busiest == {"0": "d2"}  # not 8 / 3.5
    assert fleet_levels("gw", "g", rows, {}, None).imbalance == {"0": pytest.approx(8.0 / 3.5, abs=1e-4)}
    one_each = fleet_levels("gw", "g", [rows[0], rows[2]], {}, None, roles=roles)
    assert one_each.imbalance == {"0": None}  # one worker of each role: nothing to compare
