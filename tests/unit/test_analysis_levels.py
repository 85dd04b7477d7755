"""level_result on constructed request outcomes and samples: windowing, scaling, validity."""

import pytest

from specmon.analysis.levels import Window, level_result
from specmon.load.client import RequestOutcome
from specmon.session.ramp import server_pace
from specmon.model import Sample

T0 = 1_000_000.0


def outcome(i, sent, ttft, n, itl, meta=None):
    """A finished request sent at wall `sent`, first token after `ttft`, then n-1 tokens every `itl`."""
    o = RequestOutcome(request_id=str(i), t_scheduled_wall=T0 + sent, t_scheduled=sent)
    o.t_sent, o.t_sent_wall = sent, T0 + sent
    o.token_events = [(sent + ttft, 1)] + [(sent + ttft + k * itl, 1) for k in range(1, n)]
    o.t_end = o.token_events[-1][0]
    o.completion_tokens, o.prompt_tokens = n, 100
    o.final_meta = meta or {}
    return o


def closed_loop(c, e2e_n=11, until=100.0):
    """c streams back to back, each request 1 s TTFT + 10 tokens at 0.1 s: e2e 2 s."""
    outs, i = [], 0
    for s in range(c):
        t = 0.0
        while t < until:
            outs.append(outcome(i, t, 1.0, e2e_n, 0.1, {"queue_time": 0.5}))
            i += 1
            t = outs[-1].t_end
    return outs


def samples(n, running, queued):
    return [Sample(ts=T0 + 10 + k, arm="a", up=True, running_reqs=running, queued_reqs=queued) for k in range(n)]


def test_throughput_latency_and_scaling():
    outs = closed_loop(4)
    w = Window(T0 + 10, T0 + 90)
    r = level_result("a", 0, 4, outs, w, T0, T0 + 100, samples(80, 4, 0), scale=10.0)
    # 4 streams x 11 tokens per 2 s wall = 22 tok/s wall = 2.2 tok/s in simulated seconds
    assert r.output_tok_s == pytest.approx(2.2, rel=0.03)
    assert r.ttft_p50_s == pytest.approx(10.0)        # 1 s wall x 10
    assert r.itl_p50_s == pytest.approx(1.0)
    assert r.tpot_p50_s == pytest.approx(1.0)
    assert r.e2e_mean_s == pytest.approx(20.0)
    assert r.queue_time_mean_s == 0.5                 # server seconds: not rescaled
    assert r.achieved_concurrency == 4 and r.per_user_tok_s == pytest.approx(0.55, rel=0.03)
    assert r.littles_law_ratio == pytest.approx(1.0, abs=0.05)
    assert r.valid, r.invalid_reason


def test_client_bottleneck_is_flagged_invalid():
    outs = closed_loop(10)
    w = Window(T0 + 10, T0 + 90)
    # the client held 10 but the server only ever saw 4 (7.5 expected: 2.5 are in prefill by
    # Little's law; the check allows 20% and one request of gauge slack): something capped it
    r = level_result("a", 0, 10, outs, w, T0, T0 + 100, samples(80, 4, 0))
    assert not r.valid and "client is the bottleneck" in r.invalid_reason
    ok = level_result("a", 0, 10, outs, w, T0, T0 + 100, samples(80, 8, 1))
    assert ok.valid, ok.invalid_reason


def test_queued_share_and_unknowns():
    outs = closed_loop(10)
    w = Window(T0 + 10, T0 + 90)
    s = samples(8, 7, 3) + samples(2, 10, 0)
    r = level_result("a", 0, 10, outs, w, T0, T0 + 100, s, max_running=10)
    assert r.queued_share == pytest.approx(0.8)       # queued > 5 % of C in 8 of 10 samples
    assert r.capped_share == pytest.approx(0.2)       # at the running cap in 2 of 10
    r2 = level_result("a", 0, 10, outs, w, T0, T0 + 100, [])
    assert r2.queued_share is None and r2.kv_usage_max is None and r2.running_mean is None
    assert r2.achieved_concurrency == pytest.approx(10, rel=0.02)  # client in-flight when the server is silent


def test_server_pace_from_meta_stamps():
    outs = []
    for i in range(5):
        o = outcome(i, i * 1.0, 0.5, 10, 0.1)
        # a simulator at x8: its own stamps run 8 times faster than our wall clock
        o.final_meta = {"request_received_ts": 5000 + 8 * (o.t_sent_wall - T0),
                        "request_finished_ts": 5000 + 8 * (o.wall(o.t_end) - T0)}
        outs.append(o)
    assert server_pace(outs) == pytest.approx(8.0)
    for o in outs:
        o.final_meta = {}
    assert server_pace(outs) is None


def test_throughput_se_by_batch_means_in_arm_seconds():
    outs = closed_loop(4)
    w = Window(T0 + 10, T0 + 90)
    # 80 wall s at scale 1: 16 batches of 5 s; at scale 10 the same window is 800 arm seconds: 160
    r1 = level_result("a", 0, 4, outs, w, T0, T0 + 100, samples(80, 4, 0))
    r10 = level_result("a", 0, 4, outs, w, T0, T0 + 100, samples(80, 4, 0), scale=10.0)
    assert r1.output_tok_s_batches == 16 and r10.output_tok_s_batches == 160
    # a steady closed loop: the SE is small beside the rate, and it scales like the rate
    assert 0 < r1.output_tok_s_se < 0.05 * r1.output_tok_s
    # a 12 s window holds two 5 s batches: it is cut into MIN_BATCHES = 4 shorter ones
    short = level_result("a", 0, 4, outs, Window(T0 + 10, T0 + 22), T0, T0 + 100, samples(12, 4, 0))
    assert short.output_tok_s_batches == 4 and short.output_tok_s_se is not None


def test_throughput_se_sees_a_bursty_level():
    steady = [outcome(0, 0.0, 0.0, 400, 0.1)]  # 10 tok/s for 40 s
    bursty = [outcome(0, 0.0, 0.0, 200, 0.05), outcome(1, 20.0, 0.0, 200, 0.05)]  # 20 tok/s half the time
    w = Window(T0, T0 + 40)
    a = level_result("a", 0, 1, steady, w, T0, T0 + 40, [])
    b = level_result("a", 0, 1, bursty, w, T0, T0 + 40, [])
    assert a.output_tok_s == pytest.approx(b.output_tok_s, rel=0.01)
    assert a.output_tok_s_se == pytest.approx(0.0, abs=0.05)
    assert b.output_tok_s_se > 1.0


def test_slo_attainment_counts_failed_requests_as_missed():
    outs = [outcome(i, 10.0 + i, ttft, 11, 0.1) for i, ttft in enumerate([0.5, 0.5, 2.0, 0.5])]
    bad = outcome(9, 12.0, 0.5, 11, 0.1)
    bad.status = "error"
    gone = outcome(10, 12.0, 0.5, 11, 0.1)
    gone.status = "cancelled"
    w = Window(T0 + 10, T0 + 30)
    r = level_result("a", 0, 4, outs + [bad, gone], w, T0, T0 + 30, [], slo_ttft_s=1.0)
    assert (r.slo_n, r.slo_met, r.slo_attainment) == (5, 3, pytest.approx(0.6))
    # TPOT 0.1 s: a 50 ms TPOT SLO fails every request; 150 ms passes the three fast ones
    assert level_result("a", 0, 4, outs, w, T0, T0 + 30, [], slo_ttft_s=1.0, slo_tpot_s=0.05).slo_met == 0
    assert level_result("a", 0, 4, outs, w, T0, T0 + 30, [], slo_ttft_s=1.0, slo_tpot_s=0.15).slo_met == 3
    # in the arm's seconds: at scale 10 every TTFT is >= 5 s
    assert level_result("a", 0, 4, outs, w, T0, T0 + 30, [], scale=10.0, slo_ttft_s=1.0).slo_met == 0
    assert level_result("a", 0, 4, outs, w, T0, T0 + 30, []).slo_n is None  # no SLO, nothing judged


def test_a_count_level_close_to_its_concurrency_is_short_not_client_bound():
    # 16 requests at C=12, each 2 s: 12 go out at once, 4 more as the first ones end, then the
    # level drains. The full-C window is under one request lifetime, with two server samples that
    # caught the server still admitting (4 seen of 12): no verdict on who limited it.
    outs = [outcome(i, 0.0, 1.0, 11, 0.1) for i in range(12)] + [outcome(12 + i, 2.0, 1.0, 11, 0.1) for i in range(4)]
    w = Window(T0, T0 + 2.0)
    few = [Sample(ts=T0 + 0.5 + k, arm="a", up=True, running_reqs=4, queued_reqs=0) for k in range(2)]
    r = level_result("a", 4, 12, outs, w, T0, T0 + 4.0, few)
    assert r.valid, r.invalid_reason
    assert r.note and "short level" in r.note and "too short to tell" in r.note
    assert r.ttft_p50_s == pytest.approx(1.0)
    # the same server view over a long window still blames the client, as before
    outs = closed_loop(12)
    r = level_result("a", 0, 12, outs, Window(T0 + 10, T0 + 90), T0, T0 + 100, samples(80, 4, 0))
    assert not r.valid and "client is the bottleneck" in r.invalid_reason and r.note is None


def _throughput_by_arrivals(outs, window, scale):
    """The level's throughput and its batches as level_result computed them before each request
    added its own (a tuple per token event, then stats.rate_batches): the reference."""
    from specmon.analysis.levels import MIN_BATCHES, THROUGHPUT_BATCH_S
    from specmon.analysis.stats import rate_batches

    toks, arrivals = 0, []
    for o in outs:
        for stamp, n in o.token_events:
            t = o.t_sent_wall + (stamp - o.t_sent)
            if window.t0 <= t < window.t1:
                toks += n
                arrivals.append(((t - window.t0) * scale, n))
    span = window.length * scale
    return toks / span, rate_batches(arrivals, 0.0, span, THROUGHPUT_BATCH_S, MIN_BATCHES)


@pytest.mark.parametrize("scale", [1.0, 10.0, 0.37])
def test_throughput_per_request_in_c_and_python_is_the_arrivals_figure(scale, monkeypatch):
    # Requests whose stamps are kept as the client keeps them (TokenStamps: the C reader's
    # arrays, summed in C where it is built) and as plain lists (summed in Python): the same
    # figures, to the last bit, as the arrivals the level's statistics once collected.
    import random

    from specmon.analysis.stats import mean_se
    from specmon.load import client
    from specmon.load.client import TokenStamps

    rng = random.Random(7)
    outs = []
    for i in range(60):
        sent = rng.uniform(-5.0, 95.0)
        o = RequestOutcome(request_id=str(i), t_scheduled_wall=T0 + sent, t_scheduled=sent)
        o.t_sent, o.t_sent_wall = sent + 1e-3 * i, T0 + sent
        t, ev = o.t_sent + rng.uniform(0.0, 2.0), []
        for _ in range(rng.randint(1, 120)):
            ev.append((t, rng.choice((1, 1, 2, 3, 4))))
            t += rng.uniform(0.0, 0.4)
        o.token_events = TokenStamps(ev) if i % 2 else ev
        o.t_end, o.completion_tokens, o.status = t, sum(n for _, n in ev), "ok"
        outs.append(o)
    w = Window(T0 + 10.25, T0 + 87.5)
    want_tok_s, want_batches = _throughput_by_arrivals(outs, w, scale)
    figures = []
    for c_reader in (client._fastread, None):
        monkeypatch.setattr(client, "_fastread", c_reader)
        r = level_result("a", 0, 8, outs, w, T0, T0 + 100, [], scale=scale)
        figures.append((r.output_tok_s, r.output_tok_s_batches, r.output_tok_s_se))
    assert figures[0] == figures[1] == (want_tok_s, len(want_batches), mean_se(want_batches)[1])
    assert want_tok_s > 0 and len(want_batches) >= 4
