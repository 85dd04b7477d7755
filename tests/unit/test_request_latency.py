"""Per-request TTFT and queue time on the operating curve (analysis/request_latency.py): a request
is placed at the most running the arm showed while it waited, a bin with few such requests keeps
the histograms' figures, and the knee says which source its TTFT and queue time came from."""

from __future__ import annotations

from specmon.analysis.observed import ObservedCurves, OperatingCurve, knee_line
from specmon.model import ArmInfo, ObservedRequest, Sample


def _sample(t: float, running: int, queued: int = 0, queue: float = 0.01) -> Sample:
    return Sample(ts=t, arm="a", up=True, running_reqs=running, queued_reqs=queued, gen_tok_s=40.0 * min(running, 12),
                  kv_usage=0.004 * running, queue_time_mean_s=queue, ttft_mean_s=queue + 0.1)


def _req(read: float, e2e: float, queue: float) -> ObservedRequest:
    return ObservedRequest(arm="a", ts_read=read, e2e_s=e2e, queue_s=queue, ttft_s=queue + 0.1)


def test_a_request_counts_at_the_most_running_seen_while_it_waited():
    c = OperatingCurve("a")
    for t, r in enumerate([2, 2, 12, 3, 12, 12, 2, 2]):  # a cohort finishing at t=3 shows 3 running
        c.add(_sample(float(t), r))
    # arrived at t=3.2 (3 running on the sample before), waited 1.5 s through 12 running
    assert c.requests.add(_req(read=7.2, e2e=4.0, queue=1.5))
    # arrived at t=6.5, no wait: the running count it found
    assert c.requests.add(_req(read=7.5, e2e=1.0, queue=0.0))
    assert c.requests.cells[12].n == 1 and c.requests.cells[12].queue_sum == 1.5
    assert c.requests.cells[2].n == 1 and 3 not in c.requests.cells
    # before the first sample, or with no figure at all: not placed
    assert not c.requests.add(_req(read=0.5, e2e=2.0, queue=0.1))
    assert not c.requests.add(ObservedRequest(arm="a", ts_read=5.0))
    assert c.requests.unplaced == 2


def test_time_scale_turns_server_seconds_into_the_arms_wall_seconds():
    curves = ObservedCurves()  # as a live session feeds them: samples with the arm's info, then lines
    for t, r in enumerate([1, 1, 1, 8, 8, 8]):
        curves.add(_sample(float(t), r), ArmInfo(time_scale=10.0))
    # 25 server seconds at x10 are 2.5 wall seconds: arrived at 2.7, when 1 was running (not 8)
    curves.add_requests([_req(read=5.2, e2e=25.0, queue=0.0), ObservedRequest(arm="b", ts_read=5.0, ttft_s=1.0)])
    assert list(curves.curves["a"].requests.cells) == [1] and "b" not in curves.curves


def test_bins_with_enough_requests_take_their_figures_and_the_knee_says_so():
    c = OperatingCurve("a")
    c.set_info(ArmInfo(max_running_requests=12))
    t = 0.0
    for running in (2, 4, 8, 12):
        for _ in range(60):
            t += 1.0
            # the histograms say 0.5 s at the cap, 10 ms below it; the requests say 2 s and 2 ms
            c.add(_sample(t, running, queued=4 if running == 12 else 0, queue=0.5 if running == 12 else 0.01))
            if running != 4:  # the 4 bin gets no request of its own: it keeps the histograms'
                c.requests.add(_req(read=t + 0.5, e2e=0.4, queue=2.0 if running == 12 else 0.002))
    k = c.knee()
    by = {p.running: p for p in k.curve}
    assert by[2].requests == 60 and abs(by[2].queue_s - 0.002) < 1e-9
    assert by[12].requests == 60 and abs(by[12].queue_s - 2.0) < 1e-9 and abs(by[12].ttft_s - 2.1) < 1e-9
    assert by[4].requests is None and abs(by[4].queue_s - 0.01) < 1e-9  # the histograms' figure
    assert k.latency_source == "requests" and k.latency_requests == 180
    assert k.concurrency == 12 and k.queue_onset == 12
    assert "TTFT/queue from 180 requests' own lines" in knee_line("a", k)
    assert k.queue_share_now is not None and k.queue_share_now > 0.9  # the newest requests waited


def test_without_request_lines_the_histograms_are_the_source():
    c = OperatingCurve("a")
    for t in range(30):
        c.add(_sample(float(t), 2 + t % 3))
    k = c.knee()
    assert k.latency_source == "histograms" and k.latency_requests == 0
    assert all(p.requests is None for p in k.curve)
