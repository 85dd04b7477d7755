"""The observed knee from synthetic sample sequences (analysis/observed.py): each binding limit,
too little traffic, stale fleet rows, headroom, and the histogram-increase means it reads."""

from __future__ import annotations

from typing import Optional

from specmon.analysis.observed import ObservedCurves, OperatingCurve, bin_of, knee_line
from specmon.model import ArmInfo, Sample
from specmon.sources.derive import ScrapeWindow
from specmon.sources.prom import MetricsSnapshot


def served(curve: OperatingCurve, offered: range, *, cap: Optional[int] = None, kv_admits: Optional[int] = None,
           compute_at: Optional[int] = None, per_req: float = 40.0, seconds: int = 8, t0: float = 0.0,
           token_budget: Optional[int] = None) -> float:
    """Feed the samples a server shows while offered load climbs level by level: running is the
    offered count up to whichever limit binds, the rest wait; tok/s grows per running request
    until `compute_at` running, then flat."""
    t = t0
    for c in offered:
        limits = [x for x in (cap, kv_admits, token_budget) if x is not None]
        running = min([c, *limits])
        queued = c - running
        tok = per_req * min(running, compute_at or running)
        kv = running / kv_admits if kv_admits else 0.3
        for _ in range(seconds):
            t += 1.0
            curve.add(Sample(ts=t, arm=curve.arm, up=True, running_reqs=running, queued_reqs=queued,
                             gen_tok_s=tok, kv_usage=min(kv, 1.0), ttft_mean_s=0.1 + 0.05 * queued,
                             queue_time_mean_s=0.05 * queued))
    return t


def test_request_cap_binds():
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=16, kv_capacity_tokens=100_000))
    served(c, range(1, 25), cap=16)
    k = c.knee()
    assert k.concurrency == 16 and k.limit == "request_cap", k
    assert k.queue_onset == 16 and "request cap 16" in k.reason


def test_kv_pool_binds():
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=256))
    served(c, range(1, 30), kv_admits=19)
    k = c.knee()
    assert k.concurrency == 19 and k.limit == "kv_pool", k


def test_compute_binds_without_queueing():
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=256))
    served(c, range(1, 41), compute_at=24)
    k = c.knee()
    # past 24 running an added request adds nothing, and nothing ever waits
    assert k.queue_onset is None and k.plateau == 24 and k.concurrency == 24, k
    assert k.limit == "compute"


def test_token_budget_queues_with_room():
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=256))
    served(c, range(1, 20), token_budget=12)
    k = c.knee()
    assert k.concurrency == 12 and k.limit == "token_budget", k
    assert "KV at most 30%" in k.reason


def test_too_little_traffic_says_how_much_more():
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=48))
    served(c, range(0, 4), seconds=60)
    k = c.knee()
    assert k.concurrency is None and k.limit is None
    assert "running never above 3" in k.reason and "~8 running" in k.reason, k.reason
    line = knee_line("a", k)
    assert line.startswith("knee [observed] a: none yet")


def test_rising_traffic_is_not_a_plateau():
    c = OperatingCurve("a")
    served(c, range(1, 12))  # still linear, nothing waits
    k = c.knee()
    assert k.concurrency is None and "still rising" in k.reason and "~22" in k.reason, k.reason


def test_headroom_and_queue_share_now():
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=16))
    t = served(c, range(1, 25), cap=16)
    c.add(Sample(ts=t + 1, arm="a", up=True, running_reqs=10, queued_reqs=0, gen_tok_s=400.0,
                 ttft_mean_s=0.4, queue_time_mean_s=0.1))
    k = c.knee()
    assert (k.running_now, k.headroom) == (10, 6)
    assert abs(k.queue_share_now - 0.25) < 1e-9
    assert "running 10 of 16: room for ~6 more before queueing" in knee_line("a", k)


def test_stale_fleet_rows_add_no_seconds():
    c = OperatingCurve("a")
    c.add(Sample(ts=1.0, arm="a", up=True, running_reqs=5, source="metrics"))
    for i in range(2, 6):  # the same scrape repeated by the live session while not in turn
        c.add(Sample(ts=float(i), arm="a", up=True, running_reqs=5, source="metrics", stale_s=i - 1.0))
    c.add(Sample(ts=6.0, arm="a", up=True, running_reqs=7, source="metrics"))
    assert c.evidence_s == 1.0 + 5.0  # the fresh row covers the gap since the last fresh one
    # a Prometheus row is its own reading even with its series' age in stale_s
    c.add(Sample(ts=7.0, arm="a", up=True, running_reqs=7, source="prometheus", stale_s=3.0))
    assert c.evidence_s == 7.0
    c.add(Sample(ts=8.0, arm="a", up=False, state="refused"))
    assert c.evidence_s == 7.0


def test_bins_stay_few_for_large_batches():
    keys = {bin_of(r)[0] for r in range(0, 4096)}
    assert len(keys) == 32 + 16 * 7  # 1 a count below 32, then 16 an octave
    assert bin_of(5) == (5, 1) and bin_of(33) == (32, 2) and bin_of(70) == (68, 4)
    # every running count falls in its own bin's range
    for r in (0, 31, 32, 63, 64, 1000, 4095):
        lo, w = bin_of(r)
        assert lo <= r < lo + w


def test_fleet_of_curves():
    fleet = ObservedCurves()
    for arm, cap in (("w1", 8), ("w2", 12)):
        c = OperatingCurve(arm)
        c.set_info(ArmInfo(max_running_requests=cap))
        served(c, range(1, 20), cap=cap)
        fleet.curves[arm] = c
    knees = fleet.knees()
    assert {a: k.concurrency for a, k in knees.items()} == {"w1": 8, "w2": 12}


HIST = """# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum {s}
sglang:time_to_first_token_seconds_bucket{{le="0.5"}} {b05}
sglang:time_to_first_token_seconds_bucket{{le="2.0"}} {b2}
sglang:time_to_first_token_seconds_bucket{{le="+Inf"}} {n}
sglang:time_to_first_token_seconds_count {n}
"""


def test_ttft_is_the_histograms_increase_not_the_cumulative_mean():
    # 100 old requests of 1.5 s, then 10 new ones of 0.2 s: the window's mean is 0.2 s (the
    # cumulative average, 1.38 s, would hide that the queue drained)
    w = ScrapeWindow(window_s=30.0, rate_window_s=5.0)
    w.add(MetricsSnapshot.parse(HIST.format(s=150.0, b05=0, b2=100, n=100), ts=0.0))
    w.add(MetricsSnapshot.parse(HIST.format(s=152.0, b05=10, b2=110, n=110), ts=10.0))
    assert abs(w.mean("time_to_first_token_seconds") - 0.2) < 1e-9
    assert w.quantile("time_to_first_token_seconds", 0.9) <= 0.5


def test_folder_keeps_the_knee_and_report_draws_it(tmp_path):
    import subprocess
    import sys

    from specmon.model import ArmSpec, ObservedKneesUpdated, SamplesTick, SessionEnded, SessionStarted
    from specmon.session.folder import SessionWriter, read_meta

    c = OperatingCurve("w1")
    c.set_info(ArmInfo(max_running_requests=16))
    served(c, range(1, 25), cap=16)
    folder = tmp_path / "attach"
    w = SessionWriter(folder)
    w(SessionStarted(mode="attach", arms=[ArmSpec(name="w1", url="http://127.0.0.1:1")], interval_s=1.0))
    w(SamplesTick(samples=[c.last]))
    w(ObservedKneesUpdated(knees={"w1": c.knee()}))
    w(SamplesTick(samples=[c.last]))  # session.json is rewritten with the next tick
    meta = read_meta(folder)  # before the end: a killed session keeps it
    k = meta.observed_knees["w1"]
    assert (k.concurrency, k.limit) == (16, "request_cap") and k.curve[0].running == 1
    w(SessionEnded(reason="stopped"))
    assert '"curve": []' in (folder / "events.jsonl").read_text().replace('"curve":[]', '"curve": []')
    p = subprocess.run([sys.executable, "-m", "specmon", "report", str(folder), "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "| w1 | 16 | request_cap |" in p.stdout
    assert "w1: operating curve" in p.stdout and "w1: 1 " in p.stdout


def test_exporter_gauges_for_the_observed_knee_and_headroom():
    from specmon.exporter import Exporter
    from specmon.model import ObservedKneesUpdated, SamplesTick

    c = OperatingCurve("w1")
    c.set_info(ArmInfo(max_running_requests=16))
    served(c, range(1, 25), cap=16)
    ex = Exporter()
    ex(ObservedKneesUpdated(knees={"w1": c.knee(), "w2": OperatingCurve("w2").knee()}))
    get = ex.registry.get_sample_value
    assert get("specmon_observed_knee_concurrency", {"arm": "w1"}) == 16
    assert get("specmon_headroom_requests", {"arm": "w1"}) == 0  # the ramp ended running 16
    assert get("specmon_observed_knee_concurrency", {"arm": "w2"}) is None  # no knee: no series, never 0
    ex(SamplesTick(samples=[Sample(ts=1.0, arm="w1", up=True, running_reqs=10)]))
    assert get("specmon_headroom_requests", {"arm": "w1"}) == 6  # every tick: knee less running now


def test_kv_pool_from_0523_free_and_evictable_tokens():
    # token_usage says 70 %, but nothing is free and the radix cache holds nothing evictable:
    # SGLang 0.5.23's own split says the pool binds
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=256, kv_capacity_tokens=10_000))
    t = 0.0
    for c_off in range(1, 20):
        running = min(c_off, 12)
        for _ in range(8):
            t += 1.0
            s = Sample(ts=t, arm="a", up=True, running_reqs=running, queued_reqs=c_off - running,
                       gen_tok_s=40.0 * running, kv_usage=0.7 * running / 12, kv_capacity_tokens=10_000)
            s.kv_available_tokens = 0 if running == 12 else 5_000
            s.kv_evictable_tokens = 0 if running == 12 else 1_000
            c.add(s)
    k = c.knee()
    assert (k.concurrency, k.limit) == (12, "kv_pool"), k


def _five_admitted(pool: int, held: int, output: Optional[float] = None):
    """The knee of a server that runs at most 5 requests, each holding `held` tokens of a `pool`
    of KV, the rest waiting; `output`: the mean output of finished requests its counters show."""
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=320, kv_capacity_tokens=pool))
    t = done = 0.0
    for offered in range(1, 10):
        running = min(offered, 5)
        for _ in range(8):
            t += 1.0
            tok = 60.0 * running
            done += tok / output if output else 0.0
            c.add(Sample(ts=t, arm="a", up=True, running_reqs=running, queued_reqs=offered - running,
                         gen_tok_s=tok, kv_used_tokens=held * running, kv_capacity_tokens=pool,
                         requests_finished_total=done if output else None,
                         ttft_mean_s=0.2 + 0.1 * (offered - running), queue_time_mean_s=0.1 * (offered - running)))
    return c.knee()


def test_kv_pool_binds_below_full_when_no_request_fits():
    # SGLang admits a request only with room for its prompt and its whole output: with 5 running
    # holding ~174 tokens each in a 1,024-token pool, 154 tokens are free and requests wait at
    # 85 % used: the pool binds (no room for another), not a token budget
    k = _five_admitted(1024, 174)
    assert (k.concurrency, k.limit) == (5, "kv_pool"), k
    assert "without room for another request at 85% used" in k.reason, k.reason
    # the same queue with the pool half empty: something else holds the requests (a token budget)
    assert _five_admitted(4096, 174).limit == "token_budget"


def test_kv_pool_binds_with_room_kept_for_the_running_requests_output():
    # 5 running hold 150 tokens each (73 % of 1,024, 274 free); requests of a mean output of 48:
    # the next needs ~150 + 24 and the running ones may still write 5 x 24, 294 in all: no room
    k = _five_admitted(1024, 150, output=48.0)
    assert (k.concurrency, k.limit) == (5, "kv_pool"), k
    # without the finished requests' mean output, 274 free over 150 a request looks like room
    assert _five_admitted(1024, 150).limit == "token_budget"
