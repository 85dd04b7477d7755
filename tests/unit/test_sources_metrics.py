"""Collector parsing and derivations on SGLang's real /metrics sample (both name forms)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from specmon.sources.derive import ScrapeWindow, histogram_delta, histogram_quantile
from specmon.sources.prom import Histogram, MetricsSnapshot
from specmon.sources.serverinfo import arm_info_from_server_info, parse_loads

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sglang-metrics-sample.prom"  # made by SGLang's own code
if not SAMPLE.exists():  # the copy shipped with the repo's tests, when the shared folder is absent
    SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sglang-metrics-sample.prom"


def colon_text() -> str:
    return SAMPLE.read_text()


def underscore_text() -> str:
    """The body SGLang sends for an OpenMetrics Accept header with underscore escaping:
    sample lines say `sglang_x`, HELP/TYPE keep `sglang:x` (docs/field-notes.md, SGLang notes 0.1)."""
    return re.sub(r"^sglang:", "sglang_", colon_text(), flags=re.M)


@pytest.fixture(params=["colon", "underscore"])
def snap(request) -> MetricsSnapshot:
    text = colon_text() if request.param == "colon" else underscore_text()
    return MetricsSnapshot.parse(text, ts=100.0)


def test_underscore_form_really_differs():
    u = underscore_text()
    assert "\nsglang_num_running_reqs{" in u and "# TYPE sglang:num_running_reqs gauge" in u
    assert "\nsglang:num_running_reqs{" not in u


def test_every_needed_field(snap):
    # Values as written in the sample (tests/data/sglang-metrics-sample.prom).
    assert snap.value("num_running_reqs") == 47.0
    assert snap.value("num_queue_reqs") == 15.0
    assert snap.value("num_used_tokens") == 58700.0
    assert snap.value("max_total_num_tokens") == 617344.0
    assert snap.value("token_usage") == pytest.approx(58700 / 617344)
    assert snap.value("gen_throughput") == pytest.approx(6380.238921036397)
    assert snap.value("spec_accept_length") == 3.078125
    assert snap.value("spec_accept_rate") == 0.76953125
    assert snap.value("num_requests_total") == 403.0
    assert snap.value("generation_tokens_total") == 102920.0
    assert snap.value("realtime_tokens_total", mode="decode") == 112055.0
    assert snap.value("new_token_ratio") is not None
    ttft = snap.histogram("time_to_first_token_seconds")
    assert ttft is not None and ttft.count == 403.0 and ttft.sum == pytest.approx(179.23865796489952)
    assert ttft.buckets[0] == (0.1, 137.0) and math.isinf(ttft.buckets[-1][0])
    q = snap.histogram("queue_time_seconds")
    assert q is not None and q.count == 450.0 and q.buckets[0] == (0.0, 12.0)
    assert snap.histogram("inter_token_latency_seconds") is not None
    assert snap.value("no_such_metric") is None


def test_rank_zero_is_picked_never_summed():
    # A TP=2 server with metrics for all schedulers: rank 1 writes the same quantity.
    text = colon_text()
    extra = [line.replace('tp_rank="0"', 'tp_rank="1"').replace(" 47.0", " 46.0")
             for line in text.splitlines() if line.startswith("sglang:num_running_reqs{")]
    extra += [line.replace('tp_rank="0"', 'tp_rank="1"')
              for line in text.splitlines() if line.startswith("sglang:queue_time_seconds_")]
    snap = MetricsSnapshot.parse(text + "\n".join(extra) + "\n", ts=0)
    assert snap.value("num_running_reqs") == 47.0
    assert snap.histogram("queue_time_seconds").count == 450.0


def test_histogram_quantile_like_promql():
    buckets = [(0.1, 137.0), (0.2, 198.0), (0.4, 239.0), (math.inf, 403.0)]
    # rank 201.5 falls in (0.2, 0.4]: 0.2 + 0.2 * (201.5 - 198) / (239 - 198)
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.2 + 0.2 * 3.5 / 41)
    # rank inside the first bucket interpolates from 0
    assert histogram_quantile(0.1, buckets) == pytest.approx(0.1 * 40.3 / 137)
    # rank in +Inf: the highest finite bound, as PromQL
    assert histogram_quantile(0.99, buckets) == 0.4
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None


def _hist(counts: list[float], bounds=(0.1, 0.2, 0.4, 1.0, math.inf), s=0.0) -> Histogram:
    return Histogram(buckets=tuple(zip(bounds, counts)), sum=s, count=counts[-1])


def test_histogram_delta_subtracts_and_refuses_decrease():
    d = histogram_delta(_hist([10, 20, 30, 40, 40], s=10), _hist([10, 10, 10, 10, 10], s=1))
    assert [c for _, c in d.buckets] == [0, 10, 20, 30, 30] and d.sum == 9 and d.count == 30
    assert histogram_delta(_hist([1, 1, 1, 1, 1]), _hist([2, 2, 2, 2, 2])) is None


def _body(ttft_counts: list[float], decode_tokens: float, requests: float, ttft_sum: float) -> str:
    bounds = ["0.1", "0.2", "0.4", "1.0", "+Inf"]
    lines = ["# TYPE sglang:time_to_first_token_seconds histogram"]
    for b, c in zip(bounds, ttft_counts):
        lines.append(f'sglang:time_to_first_token_seconds_bucket{{le="{b}",model_name="m"}} {c}')
    lines.append(f'sglang:time_to_first_token_seconds_sum{{model_name="m"}} {ttft_sum}')
    lines.append(f'sglang:time_to_first_token_seconds_count{{model_name="m"}} {ttft_counts[-1]}')
    lines.append("# TYPE sglang:realtime_tokens_total counter")
    lines.append(f'sglang:realtime_tokens_total{{mode="decode",model_name="m",tp_rank="0"}} {decode_tokens}')
    lines.append("# TYPE sglang:num_requests_total counter")
    lines.append(f'sglang:num_requests_total{{model_name="m"}} {requests}')
    return "\n".join(lines) + "\n"


def test_window_percentiles_use_bucket_deltas_not_lifetime():
    w = ScrapeWindow(window_s=30.0, rate_window_s=5.0)
    # Lifetime: 1000 fast requests (all under 0.1 s) before we attached.
    w.add(MetricsSnapshot.parse(_body([1000, 1000, 1000, 1000, 1000], 0, 1000, 50.0), ts=0.0))
    assert w.quantile("time_to_first_token_seconds", 0.5) is None  # one scrape: no window yet
    # In the window: 10 slow requests, all between 0.4 and 1.0 s.
    w.add(MetricsSnapshot.parse(_body([1000, 1000, 1000, 1010, 1010], 500, 1010, 57.0), ts=10.0))
    p50 = w.quantile("time_to_first_token_seconds", 0.5)
    assert p50 == pytest.approx(0.4 + 0.6 * 5 / 10)  # the lifetime p50 would be < 0.1
    assert w.mean("time_to_first_token_seconds") == pytest.approx(0.7)
    # Rate over the 10 s between the two scrapes.
    assert w.rate("realtime_tokens_total", mode="decode") == pytest.approx(50.0)
    # A simulator at speed 4 advanced 4 simulated seconds per wall second.
    assert w.rate("realtime_tokens_total", 4.0, mode="decode") == pytest.approx(12.5)


def test_window_slides_past_old_requests():
    w = ScrapeWindow(window_s=30.0, rate_window_s=5.0)
    w.add(MetricsSnapshot.parse(_body([0, 0, 0, 0, 0], 0, 0, 0.0), ts=0.0))
    w.add(MetricsSnapshot.parse(_body([0, 0, 0, 10, 10], 100, 10, 7.0), ts=10.0))  # slow ones
    for t in range(20, 81, 10):  # then only fast ones
        n = 10 + (t - 10) // 10 * 10
        w.add(MetricsSnapshot.parse(_body([n - 10, n - 10, n - 10, n, n], 100 + t, n, 7.0 + (n - 10) * 0.05), ts=t))
    # At t=80 the window base is t=50: the slow requests of t<=10 are out of it.
    assert w.quantile("time_to_first_token_seconds", 0.9) < 0.1


def test_counter_reset_clears_window():
    w = ScrapeWindow()
    assert not w.add(MetricsSnapshot.parse(_body([5, 5, 5, 5, 5], 1000, 5, 0.1), ts=0.0))
    assert not w.add(MetricsSnapshot.parse(_body([9, 9, 9, 9, 9], 2000, 9, 0.2), ts=6.0))
    restarted = w.add(MetricsSnapshot.parse(_body([1, 1, 1, 1, 1], 10, 1, 0.01), ts=12.0))
    assert restarted and len(w) == 1
    assert w.rate("realtime_tokens_total", mode="decode") is None
    assert w.quantile("time_to_first_token_seconds", 0.5) is None


def test_server_info_fields_and_no_api_key():
    d = {
        "model_path": "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "llama", "tp_size": 1,
        "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4, "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": 0.85,
        "max_total_tokens": None, "max_running_requests": None, "enable_metrics": True,
        "api_key": "sk-secret-123", "max_total_num_tokens": 617344, "version": "0.5.10.post1",
        "internal_states": [{"effective_max_running_requests_per_dp": 48,
                             "memory_usage": {"weight": 16.38, "kvcache": 75.37, "token_capacity": 617344,
                                              "graph": 2.61}}],
    }
    info = arm_info_from_server_info(d)
    assert info.kv_capacity_tokens == 617344 and info.max_running_requests == 48
    assert info.speculative is True and info.speculative_num_draft_tokens == 4
    assert info.weight_gb == 16.38 and info.graph_gb == 2.61 and info.version == "0.5.10.post1"
    assert info.time_scale == 1.0
    assert "sk-secret-123" not in repr(info) and "sk-secret-123" not in repr(info.server_args())
    off = arm_info_from_server_info({"model_path": "m", "speculative_algorithm": None, "sim_speed": 20})
    assert off.speculative is False and off.time_scale == 20.0


def test_loads_parse():
    d = {"loads": [{"num_running_reqs": 47, "num_waiting_reqs": 16, "num_used_tokens": 57713,
                    "max_total_num_tokens": 617344, "token_usage": 0.0935, "gen_throughput": 6380.24,
                    "speculative": {"accept_length": 3.01, "accept_rate": 0.77}}]}
    r = parse_loads(d)
    assert (r.running, r.waiting, r.used_tokens, r.capacity_tokens) == (47, 16, 57713, 617344)
    assert r.accept_length == 3.01
    assert parse_loads({"loads": []}) is None


def test_filtered_parse_reads_the_same_values():
    from specmon.sources.sglang import USED_METRICS

    for text in (colon_text(), underscore_text()):
        full = MetricsSnapshot.parse(text, ts=0)
        part = MetricsSnapshot.parse(text, ts=0, only=USED_METRICS)
        assert part.names() < full.names()
        for name in USED_METRICS:
            if full.has(name + "_bucket"):
                assert part.histogram(name) == full.histogram(name)
            else:
                assert part.series(name) == full.series(name), name


def test_a_counter_per_dp_rank_is_a_rate_of_every_rank_together():
    def snap(ts, r0, r1):
        return MetricsSnapshot.parse(
            "# TYPE sglang:realtime_tokens_total counter\n"
            f'sglang:realtime_tokens_total{{dp_rank="0",tp_rank="0",mode="decode"}} {r0}\n'
            f'sglang:realtime_tokens_total{{dp_rank="0",tp_rank="1",mode="decode"}} 999\n'  # a TP copy: not counted
            f'sglang:realtime_tokens_total{{dp_rank="1",tp_rank="0",mode="decode"}} {r1}\n'
            f'sglang:realtime_tokens_total{{dp_rank="1",tp_rank="0",mode="prefill_compute"}} 5\n', ts)

    w = ScrapeWindow(window_s=30, rate_window_s=5)
    w.add(snap(0.0, 100, 50))
    w.add(snap(10.0, 300, 350))
    # rank 0 decoded 200 tokens and rank 1 300 in 10 s: the worker 50 tok/s (rank 0 alone would say 20)
    assert w.rate("realtime_tokens_total", mode="decode") == pytest.approx(50.0)
    assert w.rate("realtime_tokens_total", time_scale=10.0, mode="decode") == pytest.approx(5.0)
    assert snap(0.0, 1, 2).dp_total("realtime_tokens_total", mode="decode") == 3.0
    assert snap(0.0, 1, 2).value("realtime_tokens_total", mode="decode") == 1.0  # a gauge's reading stays rank 0's


def test_parts_split_by_is_streaming_add_up_and_rank_copies_do_not():
    """0.5.23 cuts request series by is_streaming (and tags engine_type): a figure is its parts'
    sum; a tp_rank copy is still not added; parts with other buckets are no histogram."""
    body = (
        'sglang:num_requests_total{engine_type="unified",is_streaming="true"} 6\n'
        'sglang:num_requests_total{engine_type="unified",is_streaming="false"} 2\n'
        'sglang:num_running_reqs{engine_type="unified",tp_rank="0"} 3\n'
        'sglang:num_running_reqs{engine_type="unified",tp_rank="1"} 3\n'
        + "".join(f'sglang:ttft_seconds_bucket{{is_streaming="{p}",le="{le}"}} {n}\n'
                  for p, counts in (("true", (1, 4, 4)), ("false", (0, 1, 2))) for le, n in zip(("0.1", "1", "+Inf"), counts))
        + 'sglang:ttft_seconds_sum{is_streaming="true"} 1.5\nsglang:ttft_seconds_sum{is_streaming="false"} 2.5\n'
        'sglang:ttft_seconds_count{is_streaming="true"} 4\nsglang:ttft_seconds_count{is_streaming="false"} 2\n'
        'sglang:odd_bucket{is_streaming="true",le="1"} 1\nsglang:odd_bucket{is_streaming="true",le="+Inf"} 1\n'
        'sglang:odd_bucket{is_streaming="false",le="2"} 1\nsglang:odd_bucket{is_streaming="false",le="+Inf"} 1\n'
    )
    snap = MetricsSnapshot.parse(body, ts=0.0)
    assert snap.value("num_requests_total") == 8
    assert snap.value("num_requests_total", is_streaming="false") == 2
    assert snap.value("num_running_reqs") == 3
    h = snap.histogram("ttft_seconds")
    assert h.buckets == ((0.1, 1.0), (1.0, 5.0), (math.inf, 6.0)) and (h.sum, h.count) == (4.0, 6.0)
    assert snap.histogram("odd") is None


@pytest.mark.parametrize("a, b", [("+Inf", "-Inf"), ("1e308", "1e308"), ("NaN", "1")])
def test_parts_whose_sum_is_no_number_are_unknown(a, b):
    """Parts of one figure (split by is_streaming) that are +Inf and -Inf, or whose sum
    overflows, made math.fsum raise inside a scrape: the figure is unknown instead, and so is a
    histogram's sum or count made of such parts."""
    body = (f'sglang:num_requests_total{{is_streaming="true"}} {a}\n'
            f'sglang:num_requests_total{{is_streaming="false"}} {b}\n'
            + "".join(f'sglang:ttft_seconds_bucket{{is_streaming="{p}",le="{le}"}} 1\n'
                      for p in ("true", "false") for le in ("1", "+Inf"))
            + f'sglang:ttft_seconds_sum{{is_streaming="true"}} {a}\nsglang:ttft_seconds_sum{{is_streaming="false"}} {b}\n'
            'sglang:ttft_seconds_count{is_streaming="true"} 1\nsglang:ttft_seconds_count{is_streaming="false"} 1\n')
    snap = MetricsSnapshot.parse(body, ts=0.0)
    assert snap.value("num_requests_total") is None
    h = snap.histogram("ttft_seconds")
    assert h.buckets == ((1.0, 2.0), (math.inf, 2.0)) and (h.sum, h.count) == (None, 2.0)
