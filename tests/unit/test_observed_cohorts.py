"""A request-capped server's cohorts: past the cap, a cohort of equal requests finishes together
and running drops to a few for a sample while the histograms' window still holds seconds of
queueing. Those passing moments must not make a light load's bin look queued (they once called
the observed knee of a server capped at 12 at 4 running)."""

from __future__ import annotations

from specmon.analysis.observed import OperatingCurve
from specmon.model import ArmInfo, Sample


def capped_ramp(curve: OperatingCurve, cap: int = 12, levels=(2, 4, 8, 12, 16, 24), level_s: int = 100,
                cohort_every: int = 10) -> None:
    """Closed-loop levels against a server capped at `cap`: below it nothing waits (queue ~20 %
    of a short TTFT); past it running sits at the cap with the rest queued and queue time climbing,
    except every `cohort_every`-th second, when a cohort has just finished and running shows 4."""
    t, queue = 0.0, 0.0
    for c in levels:
        for i in range(level_s):
            t += 1.0
            running, queued = min(c, cap), max(0, c - cap)
            if queued:
                queue = min(4.0, queue + 0.02)
                if i % cohort_every == cohort_every - 1:
                    running = 4
            q = queue if queued else 0.003 * running + 0.005
            curve.add(Sample(ts=t, arm=curve.arm, up=True, running_reqs=running, queued_reqs=queued,
                             gen_tok_s=40.0 * running, kv_usage=0.004 * running, queue_time_mean_s=q,
                             ttft_mean_s=q + 0.06))


def test_cohort_moments_past_the_cap_leave_the_knee_at_the_cap():
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=12, kv_capacity_tokens=175_000))
    capped_ramp(c)
    k = c.knee()
    assert k.queue_onset == 12 and k.concurrency == 12 and k.limit == "request_cap", k
    # the moments count where the load was: the 4 bin holds only the level at 4, light as it ran
    four = next(p for p in k.curve if p.running == 4)
    assert four.queue_s < 0.03 and four.queued_share == 0.0 and four.evidence_s == 100.0, four
    twelve = next(p for p in k.curve if p.running == 12)
    assert twelve.evidence_s == 300.0 and twelve.queued_share == 2 / 3, twelve  # 16 and 24 waited


def test_turnover_at_the_cap_with_requests_waiting_counts_at_the_cap():
    """Real SGLang 0.5.23 on CPU, capped at 4, under 6 and 8 offered: a cohort finishes together
    and for up to 3 s running shows 2 with 2 queued, then 4 again; below the cap a closed loop of
    2 shows running 1 or 2 with nothing waiting. The waiting moments are the cap's queueing, not
    a knee at 2 (it once called "requests queue from 2 running", the ramp's knee being 6)."""
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=4, kv_capacity_tokens=8192))
    t = 0.0

    def sample(running: int, queued: int, queue_s: float) -> None:
        nonlocal t
        t += 0.5
        tok_s = 310.0 if queued else {1: 140.0, 2: 220.0, 4: 310.0}[running]  # the run's figures
        c.add(Sample(ts=t, arm="a", up=True, running_reqs=running, queued_reqs=queued,
                     gen_tok_s=tok_s, queue_time_mean_s=queue_s,
                     ttft_mean_s=queue_s + 0.05), interval_s=0.5)

    for i in range(40):  # offered 1
        sample(1, 0, 0.0005)
    for i in range(40):  # offered 2: running flips between 1 and 2
        sample(1 + i % 2, 0, 0.0005)
    for i in range(40):  # offered 4: at the cap, nothing waits
        sample(4, 0, 0.0007)
    for offered in (6, 8):  # past the cap: 4 running, then 6 samples (3 s) of 2 running
        for i in range(40):
            turnover = i % 10 >= 4
            sample(2 if turnover else 4, offered - 4, 0.1 + 0.05 * (offered - 6))
    k = c.knee()
    two = next(p for p in k.curve if p.running == 2)
    assert two.queued_share == 0.0 and two.evidence_s == 10.0, two
    assert k.queue_onset == 4 and k.concurrency == 4 and k.limit == "request_cap", k



def test_a_load_falling_from_past_the_cap_leaves_its_queueing_where_it_was():
    """Load drops from past the cap to 8 running: for the histograms' 30 s window the samples at 8
    still carry the heavy load's queue times. That queueing belongs to the most running the
    window saw (12), not to 8 (it once called a knee of 8 on a diurnal trace's falling side)."""
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=12, kv_capacity_tokens=175_000))
    t = 0.0

    def level(offered: int, seconds: int, held_queue_s: float = 0.0) -> None:
        nonlocal t
        for i in range(seconds):
            t += 1.0
            running, queued = min(offered, 12), max(0, offered - 12)
            q = 2.0 if queued else (held_queue_s if i < 30 else 0.003 * running + 0.005)
            c.add(Sample(ts=t, arm="a", up=True, running_reqs=running, queued_reqs=queued,
                         gen_tok_s=40.0 * running, kv_usage=0.004 * running, queue_time_mean_s=q,
                         ttft_mean_s=q + 0.06))

    for offered in (2, 4):
        level(offered, 40)
    level(8, 20)
    for offered in (12, 16, 24):
        level(offered, 40)
    level(8, 35, held_queue_s=1.5)  # the window still holds the 24's queueing for 30 s
    k = c.knee()
    assert k.queue_onset == 12 and k.concurrency == 12 and k.limit == "request_cap", k
    assert (k.running_now, k.headroom) == (8, 4)


def test_traffic_that_reached_the_cap_without_queueing_asks_for_more_past_it():
    """At the cap with nothing waiting, "reach ~N running" would name the cap itself: the words
    ask for traffic past it instead."""
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=4, kv_capacity_tokens=8192))
    t = 0.0
    for running in (1, 2, 3, 4):
        for _ in range(20):
            t += 1.0
            c.add(Sample(ts=t, arm="a", up=True, running_reqs=running, queued_reqs=0, gen_tok_s=40.0 * running,
                         queue_time_mean_s=0.005, ttft_mean_s=0.05))
    k = c.knee()
    assert k.concurrency is None and k.running_max == 4
    assert "request cap 4" in k.reason and "past the cap" in k.reason and "reaching ~4" not in k.reason, k.reason
