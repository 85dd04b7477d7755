"""Pure analysis of the new level figures: the prefix-cache hit rate (per request and from the
server's counters), the acceptance length's source, open-loop rates and the backlog trend, and
the SLO search's policy."""

import random
from pathlib import Path

import pytest

from specmon.analysis.levels import Window, backlog_trend, level_result
from specmon.analysis.search import level_meets, search_step, search_words
from specmon.load.client import RequestOutcome
from specmon.model import LevelResult, Sample
from specmon.sources.derive import cache_counter_deltas, cache_hit_share
from specmon.sources.prom import MetricsSnapshot

T0 = 2_000_000.0
SAMPLE_PROM = Path(__file__).resolve().parents[1] / "data" / "sglang-metrics-sample.prom"


def outcome(i, sent, ttft, n, itl, prompt=100, meta=None, scheduled=None):
    o = RequestOutcome(request_id=str(i), t_scheduled_wall=T0 + (sent if scheduled is None else scheduled),
                       t_scheduled=sent)
    o.t_sent, o.t_sent_wall = sent, T0 + sent
    o.token_events = [(sent + ttft, 1)] + [(sent + ttft + k * itl, 1) for k in range(1, n)]
    o.t_end = o.token_events[-1][0]
    o.completion_tokens, o.prompt_tokens = n, prompt
    o.final_meta = meta or {}
    return o


def test_cache_hit_rate_from_the_requests_meta_info():
    outs = [outcome(i, i * 0.5, 0.2, 5, 0.05, prompt=1000, meta={"cached_tokens": 600 if i % 2 else 0})
            for i in range(40)]
    r = level_result("a", 0, 2, outs, Window(T0 + 2, T0 + 18), T0, T0 + 20, [])
    in_window = [o for o in outs if T0 + 2 <= o.t_sent_wall < T0 + 18]
    assert r.cached_tokens == sum(o.final_meta["cached_tokens"] for o in in_window)
    assert r.cache_hit_rate == pytest.approx(r.cached_tokens / (1000 * len(in_window)))
    assert r.cache_hit_rate == pytest.approx(0.3, abs=0.02)
    # The server's counters are the fallback only: requests that say nothing leave it to them.
    bare = [outcome(i, i * 0.5, 0.2, 5, 0.05) for i in range(40)]
    r2 = level_result("a", 0, 2, bare, Window(T0 + 2, T0 + 18), T0, T0 + 20, [],
                      server_cache={"cached": 300.0, "prompt": 1200.0, "prefill_cache": 0.0, "prefill_compute": 9.0})
    assert (r2.cache_hit_rate, r2.cached_tokens) == (0.25, 300)
    assert level_result("a", 0, 2, bare, Window(T0 + 2, T0 + 18), T0, T0 + 20, []).cache_hit_rate is None


def test_cache_counters_from_sglangs_own_metrics():
    text = SAMPLE_PROM.read_text()
    old = MetricsSnapshot.parse(text, ts=0.0)
    # The same server later: 1,000 more prompt tokens of which 400 cached (device), prefill split alike.
    bumped = (text.replace("sglang:prompt_tokens_total{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 411655.0",
                           "sglang:prompt_tokens_total{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 412655.0")
              .replace('cache_source="device",model_name="meta-llama/Llama-3.1-8B-Instruct"} 402.0',
                       'cache_source="device",model_name="meta-llama/Llama-3.1-8B-Instruct"} 802.0')
              .replace('mode="prefill_cache",model_name="meta-llama/Llama-3.1-8B-Instruct",moe_ep_rank="0",pp_rank="0",'
                       'tp_rank="0"} 449.0',
                       'mode="prefill_cache",model_name="meta-llama/Llama-3.1-8B-Instruct",moe_ep_rank="0",pp_rank="0",'
                       'tp_rank="0"} 849.0'))
    assert bumped != text
    new = MetricsSnapshot.parse(bumped, ts=10.0)
    d = cache_counter_deltas(old, new)
    assert d == {"cached": 400.0, "prompt": 1000.0, "prefill_cache": 400.0, "prefill_compute": 0.0}
    assert cache_hit_share(d) == 0.4
    assert cache_counter_deltas(old, old) is None and cache_counter_deltas(None, new) is None
    # Without the tokenizer's counters the scheduler's prefill modes answer.
    assert cache_hit_share({"prefill_cache": 30.0, "prefill_compute": 70.0}) == 0.3
    assert cache_hit_share({"prefill_cache": 0.0, "prefill_compute": 0.0}) is None


def test_accept_length_says_where_it_comes_from():
    spec = [outcome(i, i * 0.5, 0.2, 8, 0.05, meta={"spec_verify_ct": 4}) for i in range(40)]
    r = level_result("a", 0, 2, spec, Window(T0 + 2, T0 + 18), T0, T0 + 20, [])
    assert (r.accept_length, r.accept_length_source) == (2.0, "requests")
    bare = [outcome(i, i * 0.5, 0.2, 8, 0.05) for i in range(40)]
    gauge = [Sample(ts=T0 + 5 + k, arm="a", up=True, accept_length=3.1, spec_enabled=True) for k in range(5)]
    r = level_result("a", 0, 2, bare, Window(T0 + 2, T0 + 18), T0, T0 + 20, gauge)
    assert (r.accept_length, r.accept_length_source) == (pytest.approx(3.1), "server")
    assert level_result("a", 0, 2, bare, Window(T0 + 2, T0 + 18), T0, T0 + 20, []).accept_length_source is None


def poisson_arrivals(rate, until, seed=1):
    rng, t, out = random.Random(seed), 0.0, []
    while True:
        t += rng.expovariate(rate)
        if t >= until:
            return out
        out.append(t)


def test_open_loop_rates_and_no_closed_loop_verdicts():
    # 2 req/s offered for 60 s, each request 1 s: ~2 in flight, well below any C the checks assume.
    outs = [outcome(i, t, 0.2, 9, 0.1) for i, t in enumerate(poisson_arrivals(2.0, 60))]
    r = level_result("a", 0, 0, outs, Window(T0 + 10, T0 + 50), T0, T0 + 60,
                     [Sample(ts=T0 + 10 + k, arm="a", up=True, running_reqs=2, queued_reqs=0) for k in range(40)],
                     offered_rate=2.0, scale=1.0)
    assert r.offered_rate == 2.0 and r.label == "r=2/s"
    done = [o for o in outs if T0 + 10 <= o.wall(o.t_end) < T0 + 50]
    assert r.achieved_rate == pytest.approx(len(done) / 40) and r.achieved_rate == pytest.approx(2.0, rel=0.25)
    assert r.valid, r.invalid_reason                  # no "client held only 2 of C" for an open loop
    assert r.littles_law_ratio is None


def test_backlog_trend_growing_and_steady():
    # steady: 2 req/s of 1 s requests (about 2 in flight all along)
    steady = [(T0 + t, T0 + t + 1.0) for t in poisson_arrivals(2.0, 60, seed=3)]
    trend = backlog_trend(steady, T0 + 30, T0 + 60)
    assert trend is not None and not trend.growing, trend.detail
    # over-saturated: 4 req/s arrive, one server slot finishes 2/s (FIFO): the backlog grows 2/s
    arrivals = poisson_arrivals(4.0, 60, seed=4)
    spans, free = [], 0.0
    for a in arrivals:
        start = max(a, free)
        free = start + 0.5
        spans.append((T0 + a, T0 + free if free <= 60 else None))  # unfinished at the end: None
    trend = backlog_trend(spans, T0 + 30, T0 + 60)
    assert trend.growing and trend.slope == pytest.approx(2.0, rel=0.35), trend.detail
    assert trend.means[-1] > trend.means[0] + 20
    # the arm's seconds: the same span on a x10 simulator is a tenth of the slope
    assert backlog_trend(spans, T0 + 30, T0 + 60, scale=10.0).slope == pytest.approx(trend.slope / 10)
    assert backlog_trend([], T0, T0) is None


def run_search(limit, **kw):
    tried = []
    while True:
        nxt, s = search_step(tried, **kw)
        if nxt is None:
            return tried, s
        tried.append((nxt, nxt <= limit))


@pytest.mark.parametrize("limit", [1, 7, 12, 13, 37, 100])
def test_search_doubles_then_bisects_to_one_step(limit):
    tried, s = run_search(limit, start=1, max_level=256, rates=False, target=0.9)
    xs = [x for x, _ in tried]
    assert s.done and s.answer == limit and (s.lo, s.hi) == (limit, limit + 1)
    first_miss = next(i for i, (_, met) in enumerate(tried) if not met)
    assert xs[:first_miss + 1] == [2.0 ** k for k in range(first_miss + 1)]  # coarse: 1, 2, 4, ... to a miss
    assert len(set(xs)) == len(xs) and all(float(x).is_integer() for x in xs)
    assert len(xs) <= 2 * (limit.bit_length() + 1)                          # log steps, not a full ramp
    assert s.levels_used == len(xs) and f"C={limit}" in search_words(s)


def test_search_stops_early():
    tried, s = run_search(0, start=4, max_level=64, rates=False, target=0.9)
    assert [x for x, _ in tried] == [4.0] and s.answer is None and "not met even at the start" in s.reason
    tried, s = run_search(1000, start=4, max_level=48, rates=False, target=0.9)
    assert [x for x, _ in tried] == [4, 8, 16, 32, 48] and s.answer == 48 and s.hi is None
    tried, s = run_search(3.7, start=0.5, max_level=64, rates=True, target=0.9)
    assert s.lo <= 3.7 < s.hi and s.hi - s.lo <= 0.1 * s.lo + 1e-9 and "r=" in search_words(s)


def test_level_meets_by_the_wilson_bound():
    def lv(n, met, knee=None):
        return LevelResult(arm="a", level=0, offered_concurrency=4, slo_n=n, slo_met=met, knee=knee)
    assert level_meets(lv(200, 195), 0.9)
    assert not level_meets(lv(10, 10), 0.9)          # 10 of 10: the lower bound is 0.79
    assert not level_meets(lv(0, 0), 0.9)            # nothing judged is not a pass
    assert not level_meets(lv(200, 200, knee="over_saturation"), 0.9)
