"""specmon's readers against what real SGLang 0.5.10.post1 and 0.5.23 wrote (tests/data/sglang-versions/,
recorded by its record.py from the real server): every figure specmon shows reads what the
fixture holds, never empty or zero where the server had it, and sources/sglang_names.py says of
each name exactly which release has it.

The expected figures are read from the fixture text by this test's own small parser (a regular
expression per line, summed over the series of one metric), not by specmon's.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from specmon.model import ArmSpec
from specmon.sources import logparse as lp
from specmon.sources import sglang_names as names
from specmon.sources.prom import MetricsSnapshot
from specmon.sources.serverinfo import arm_info_from_server_info, parse_loads, parse_loads_ranks
from specmon.sources.sglang import USED_METRICS, ArmCollector

DATA = Path(__file__).resolve().parents[1] / "data" / "sglang-versions"
RELEASES = names.RELEASES
GAP_S = 10.0  # seconds between the idle and the loaded scrape, as the test lays them out

_LINE = re.compile(r"^sglang:(\w+)(?:\{([^}]*)\})? (\S+)$", re.M)


def own_series(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list] = {}
    for name, labels, value in _LINE.findall(text):
        out.setdefault(name, []).append((dict(re.findall(r'(\w+)="([^"]*)"', labels or "")), float(value)))
    return out


def total(series: dict, name: str, **match: str) -> float | None:
    """The sum of every series of `name` whose labels include `match` (one rank here: no copies)."""
    rows = [v for lab, v in series.get(name, ()) if all(lab.get(k) == x for k, x in match.items())]
    return math.fsum(rows) if rows else None


def fixture(release: str, name: str) -> str:
    return (DATA / release / name).read_text()


def scraped(release: str):
    """specmon's Sample of the loaded scrape, the idle one GAP_S before it as the window's base."""
    c = ArmCollector(ArmSpec(name="a", url="http://127.0.0.1:9"))
    c.info = arm_info_from_server_info(json.loads(fixture(release, "server_info.json")))
    c.window.rate_window_s = c.window.window_s = GAP_S
    idle = MetricsSnapshot.parse(fixture(release, "metrics_idle.prom"), ts=1000.0, only=USED_METRICS)
    c.read_snapshot(idle, 1000.0)
    loaded = MetricsSnapshot.parse(fixture(release, "metrics.prom"), ts=1000.0 + GAP_S, only=USED_METRICS)
    return c.read_snapshot(loaded, 1000.0 + GAP_S)


@pytest.mark.parametrize("release", RELEASES)
def test_recorded_release_is_the_one_named(release):
    assert fixture(release, "version.txt").strip().startswith(release)


@pytest.mark.parametrize("release", RELEASES)
def test_gauges_read_what_the_server_had_under_load(release):
    s = scraped(release)
    want = own_series(fixture(release, "metrics.prom"))
    got = {"running_reqs": s.running_reqs, "queued_reqs": s.queued_reqs, "kv_used_tokens": s.kv_used_tokens,
           "kv_capacity_tokens": s.kv_capacity_tokens, "kv_usage": s.kv_usage,
           "requests_finished_total": s.requests_finished_total, "retracted_reqs": s.retracted_reqs}
    expect = {"running_reqs": total(want, "num_running_reqs"), "queued_reqs": total(want, "num_queue_reqs"),
              "kv_used_tokens": total(want, "num_used_tokens"), "kv_capacity_tokens": total(want, "max_total_num_tokens"),
              "kv_usage": total(want, "token_usage"), "requests_finished_total": total(want, "num_requests_total"),
              "retracted_reqs": total(want, "num_retracted_reqs")}
    assert got == expect
    # the recording held streams running and queued: a zero here is a reader gone blind
    for k in ("running_reqs", "queued_reqs", "kv_used_tokens", "kv_capacity_tokens", "kv_usage",
              "requests_finished_total"):
        assert got[k], (k, got[k])


@pytest.mark.parametrize("release", RELEASES)
def test_window_figures_from_idle_to_loaded(release):
    s = scraped(release)
    a, b = own_series(fixture(release, "metrics_idle.prom")), own_series(fixture(release, "metrics.prom"))

    def delta(name, **m):
        return (total(b, name, **m) or 0.0) - (total(a, name, **m) or 0.0)

    gen = delta("realtime_tokens_total", mode="decode") / GAP_S
    assert gen > 0 and s.gen_tok_s == pytest.approx(gen)
    for hist, mean in (("time_to_first_token_seconds", s.ttft_mean_s), ("queue_time_seconds", s.queue_time_mean_s)):
        n = delta(hist + "_count")
        assert n > 0, hist
        assert mean == pytest.approx(delta(hist + "_sum") / n), hist
    assert s.ttft_p50_s is not None and s.ttft_p90_s is not None and s.queue_time_p50_s is not None
    # no prompt shared a prefix: the scheduler counted prefill tokens, none of them cached
    hit, compute = delta("realtime_tokens_total", mode="prefill_cache"), delta("realtime_tokens_total", mode="prefill_compute")
    assert compute > 0 and s.cache_hit_rate == pytest.approx(hit / (hit + compute))


def test_ttft_histogram_is_both_streaming_parts():
    s = own_series(fixture("0.5.23", "metrics.prom"))
    snap = MetricsSnapshot.parse(fixture("0.5.23", "metrics.prom"), ts=0.0, only=USED_METRICS)
    h = snap.histogram("time_to_first_token_seconds")
    parts = {lab["is_streaming"]: v for lab, v in s["time_to_first_token_seconds_count"]}
    assert set(parts) == {"true", "false"} and all(parts.values())
    assert h.count == sum(parts.values()) == h.buckets[-1][1]
    assert h.sum == pytest.approx(total(s, "time_to_first_token_seconds_sum"))


def test_kv_split_and_scheduler_busy_share_of_0_5_23():
    s = scraped("0.5.23")
    a, b = own_series(fixture("0.5.23", "metrics_idle.prom")), own_series(fixture("0.5.23", "metrics.prom"))
    assert (s.kv_evictable_tokens, s.kv_available_tokens) == (total(b, "kv_evictable_tokens"), total(b, "kv_available_tokens"))
    assert s.kv_available_tokens and s.kv_evictable_tokens is not None
    # used + evictable + available is the pool, as SGLang accounts it
    assert total(b, "kv_used_tokens") + s.kv_evictable_tokens + s.kv_available_tokens == s.kv_capacity_tokens
    idle = (total(b, "scheduler_idle_seconds_total") - total(a, "scheduler_idle_seconds_total")) / GAP_S
    assert s.scheduler_busy_share == pytest.approx(min(max(1 - idle, 0.0), 1.0))
    assert s.retractions_per_s is None  # 0.5.23 has no retraction counter: unknown, not 0


def test_0_5_10_has_no_kv_split_and_a_retraction_rate():
    s = scraped("0.5.10")
    assert (s.kv_evictable_tokens, s.kv_available_tokens, s.scheduler_busy_share) == (None, None, None)
    a, b = own_series(fixture("0.5.10", "metrics_idle.prom")), own_series(fixture("0.5.10", "metrics.prom"))
    assert s.retractions_per_s == pytest.approx(
        ((total(b, "num_retractions_sum") or 0) - (total(a, "num_retractions_sum") or 0)) / GAP_S)


@pytest.mark.parametrize("release", RELEASES)
def test_server_args_and_startup(release):
    d = json.loads(fixture(release, "server_info.json"))
    info = arm_info_from_server_info(d)
    st0 = d["internal_states"][0]
    assert info.max_running_requests == st0["effective_max_running_requests_per_dp"] > 0
    assert info.kv_capacity_tokens == d["max_total_num_tokens"] > 0
    assert info.chunked_prefill_size == d["chunked_prefill_size"] > 0
    assert info.speculative is False and info.speculative_num_draft_tokens is None  # no speculation recorded
    args = info.server_args()
    assert args["chunked_prefill_size"] == info.chunked_prefill_size and args["max_running_requests"]
    graph = st0["memory_usage"]["graph"]
    assert info.graph_gb == (sum(graph.values()) if isinstance(graph, dict) else graph)
    log = lp.LogState()
    for line in fixture(release, "startup.log").splitlines():
        log.feed(line)
    assert log.kv_capacity_tokens == info.kv_capacity_tokens and log.max_running_requests == d["max_running_requests"] or \
        log.max_running_requests == info.max_running_requests
    if release == "0.5.23":
        want = {k: (sum(v.values()) if isinstance(v, dict) else v) for k, v in d["startup_time"].items()}
        assert info.startup_s == want and info.startup_s["tokenizer_e2e"] > 0
        # the log line prints the same phases, rounded to 2 decimals
        assert log.startup_s.keys() == want.keys()
        assert all(abs(log.startup_s[k] - want[k]) <= 0.006 for k in want), (log.startup_s, want)
        # and /metrics carries them as startup_time_seconds{phase}
        phases = {lab["phase"]: v for lab, v in own_series(fixture(release, "metrics.prom"))["startup_time_seconds"]}
        assert phases == {k: v for k, v in want.items() if k != "cuda_graph"}
    else:
        assert info.startup_s is None and log.startup_s and log.startup_s["load_weight"] > 0


@pytest.mark.parametrize("release", RELEASES)
def test_v1_loads_under_load(release):
    d = json.loads(fixture(release, "v1_loads.json"))
    got = parse_loads(d)
    e = d["loads"][0]
    assert (got.running, got.waiting, got.used_tokens, got.capacity_tokens, got.token_usage) == (
        e["num_running_reqs"], e["num_waiting_reqs"], e["num_used_tokens"], e["max_total_num_tokens"], e["token_usage"])
    assert got.running and got.waiting and got.used_tokens and got.capacity_tokens and got.token_usage
    # one entry (0.5.23 names it dp_rank 0): a server without DP ranks, no per-rank rows
    assert len(d["loads"]) == 1 and parse_loads_ranks(d) == []


@pytest.mark.parametrize("release", RELEASES)
def test_every_batch_line_parses(release):
    lines = fixture(release, "startup.log").splitlines()
    decode = [ln for ln in lines if "] Decode batch" in ln]
    prefill = [ln for ln in lines if "] Prefill batch" in ln]
    assert decode and prefill
    assert all(lp.parse_decode(ln) is not None for ln in decode)
    assert all(lp.parse_prefill(ln) is not None for ln in prefill)
    # the loaded part of the log shows the queue the recording built
    assert max(lp.parse_decode(ln).queued for ln in decode) > 0 and max(lp.parse_decode(ln).running for ln in decode) > 1
    assert any(lp.parse_phase(ln) == (lp.PHASE_READY, None) for ln in lines)


# ---- the name map against the fixtures -----------------------------------------------------------------


def _metric_names(release: str) -> set[str]:
    text = fixture(release, "metrics.prom") + fixture(release, "metrics_idle.prom")
    return set(re.findall(r"^# TYPE sglang:(\w+) ", text, re.M))


@pytest.mark.parametrize("release", RELEASES)
def test_name_map_metrics_match_the_release(release):
    have = _metric_names(release)
    for key, n in names.METRICS.items():
        mine = n.in_release(release)
        if mine is not None and key not in names.BORN_AT_FIRST_USE:
            assert mine in have, f"{key}: {mine} not in SGLang {release}'s /metrics"
        for other in n.aliases:
            if other != mine:
                assert other not in have, f"{key}: {other} is in SGLang {release}'s /metrics but the map says {mine}"


@pytest.mark.parametrize("release", RELEASES)
def test_name_map_json_and_log_match_the_release(release):
    si = json.loads(fixture(release, "server_info.json"))
    st0 = si["internal_states"][0]
    si_keys = set(si) | set(st0) | set(st0["memory_usage"])
    loads = json.loads(fixture(release, "v1_loads.json"))
    l0 = loads["loads"][0]
    loads_keys = set(loads) | set(l0) | set(l0["disaggregation"])
    meta = set(json.loads(fixture(release, "generate.json"))["meta_info"])
    log = fixture(release, "startup.log")
    for table, keys in ((names.SERVER_INFO, si_keys), (names.LOADS, loads_keys), (names.META_INFO, meta)):
        for key, n in table.items():
            mine = n.in_release(release)
            assert mine is None or mine in keys, f"{key}: {mine} not in SGLang {release}"
            assert all(o in (mine,) or o not in keys for o in n.aliases), f"{key}: another name is in {release}"
    for key, n in names.LOG.items():
        mine = n.in_release(release)
        assert mine is None or mine in log, f"log {key}: {mine!r} not in SGLang {release}'s log"
        assert all(o == mine or o not in log for o in n.aliases), f"log {key}: another text is in {release}'s log"


def test_split_labels_are_where_the_map_says():
    text = fixture("0.5.23", "metrics.prom")
    for label in names.SPLIT_LABELS:
        assert f'{label}="' in text
    assert 'is_streaming="' not in fixture("0.5.10", "metrics.prom")
    assert "accepted drafts / proposed drafts" in text and \
        "accepted tokens / total draft tokens" in fixture("0.5.10", "metrics.prom")
