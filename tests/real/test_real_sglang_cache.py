"""Real SGLang (CPU engine) against the simulator: the same shared-prefix requests, and the prefix
cache reported the same way by both: meta_info cached_tokens per request, and the counters specmon
reads over a level (sglang:cached_tokens_total, prompt_tokens_total, realtime_tokens_total by
prefill mode), including when their labelled series first appear."""

from __future__ import annotations

import time

import httpx
import pytest

from helpers import realsglang as rs
from helpers.simproc import start_sim
from specmon.sources.derive import cache_counter_deltas, cache_hit_share
from specmon.sources.prom import MetricsSnapshot

pytestmark = pytest.mark.real_sglang

SHARED = list(range(1000, 2000))  # a 1,000-token system prompt (ids below the tiny model's 4,097)
PROMPTS = [SHARED + list(range(1, 51)),        # a miss: nothing cached yet
           SHARED + list(range(51, 101)),      # the shared 1,000 hit, another question
           SHARED + list(range(1, 51)),        # the very same prompt again: all but its last token
           list(range(2100, 3150))]            # nothing in common
CACHED_BY_SGLANG = [0, 1000, 1049, 0]


def observe(url: str) -> dict:
    def snap() -> MetricsSnapshot:
        return MetricsSnapshot.parse(httpx.get(url + "/metrics", timeout=30).text, ts=time.time())

    with httpx.Client(base_url=url, timeout=300) as c:
        before = snap()
        metas = []
        for ids in PROMPTS:
            r = c.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}})
            assert r.status_code == 200, r.text
            metas.append(r.json()["meta_info"])
        deadline = time.monotonic() + 30
        while True:  # the scheduler's counters are written with its stats: wait until they hold the four
            after = snap()
            d = cache_counter_deltas(before, after) or {}
            if d.get("prompt") == 4200 and d.get("prefill_compute", 0) + d.get("prefill_cache", 0) >= 4200:
                break
            assert time.monotonic() < deadline, d
            time.sleep(0.5)
    return {"cached": [m["cached_tokens"] for m in metas], "prompt": [m["prompt_tokens"] for m in metas],
            "deltas": d, "share": cache_hit_share(d),
            "series_before": before.value("realtime_tokens_total", mode="prefill_cache") is not None,
            "series_after": after.value("realtime_tokens_total", mode="prefill_cache") is not None}


def test_prefix_cache_counters_behave_as_the_simulators(tmp_path):
    why = rs.missing()
    if why:
        pytest.skip(why)
    with rs.start_real(tmp_path / "real.log") as real:
        got_real = observe(real.url)
    with start_sim("--enable-metrics", "--profile", "fp8-nospec", speed=20) as sim:
        got_sim = observe(sim.url)
    print(f"\nreal {got_real}\nsim  {got_sim}")
    for got in (got_real, got_sim):
        assert got["cached"] == CACHED_BY_SGLANG and got["prompt"] == [1050] * 4
        # the tokenizer's counters: every prompt token, the cached ones by source (device here)
        assert got["deltas"]["prompt"] == 4200 and got["deltas"]["cached"] == sum(CACHED_BY_SGLANG)
        # the scheduler's: each prefill batch's tokens, from the cache or computed
        assert got["deltas"]["prefill_cache"] == sum(CACHED_BY_SGLANG)
        assert got["deltas"]["prefill_compute"] == 4200 - sum(CACHED_BY_SGLANG)
        assert got["share"] == pytest.approx(2049 / 4200)
        # the prefill_cache series is born at the first hit (absent after the warm-up's miss)
        assert (got["series_before"], got["series_after"]) == (False, True)
    assert got_real == got_sim
