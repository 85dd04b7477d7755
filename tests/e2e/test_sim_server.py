"""The simulator as a real process on 127.0.0.1: formats, metrics families, auth, faults, physics."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from helpers.simproc import start_sim
from helpers.simclient import GEN, load



def test_flush_cache_busy_and_idle():
    with start_sim(speed=5) as sim, httpx.Client(base_url=sim.url, timeout=30) as c:
        import threading
        t = threading.Thread(target=lambda: c.post("/generate", json={
            "input_ids": [1] * 50, "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}))
        t.start()
        time.sleep(0.3)
        assert c.post("/flush_cache").status_code == 400
        t.join()
        assert c.post("/flush_cache").status_code == 200


def test_faults():
    with start_sim("--fault-crash-after", "2", speed=100) as sim:
        load(sim.url, 2, stream=False)
        sim.proc.wait(10)
        assert sim.proc.returncode != 0
    with start_sim("--fault-503-above", "1", speed=2) as sim, httpx.Client(base_url=sim.url, timeout=30) as c:
        import threading
        t = threading.Thread(target=lambda: c.post("/generate", json={
            "input_ids": [1] * 50, "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}}))
        t.start()
        time.sleep(0.3)
        assert c.post("/generate", json=GEN).status_code == 503
        t.join()
    with start_sim("--fault-metrics", "malformed", "--enable-metrics", speed=100) as sim:
        assert "garbage" in httpx.get(sim.url + "/metrics").text
    with start_sim("--fault-refuse", speed=100, wait=False) as sim:
        time.sleep(1.0)
        with pytest.raises(httpx.ConnectError):
            httpx.get(sim.url + "/health", timeout=2)
    with start_sim("--fault-stall-after", "1", "--fault-stall-s", "1.5", speed=100) as sim:
        load(sim.url, 1, stream=False)
        t0 = time.monotonic()
        load(sim.url, 1, stream=False)
        assert time.monotonic() - t0 > 1.0


def test_physics_queueing_when_pool_is_full():
    """A pool of 4000 tokens holds 3 requests of 1000+200: the rest must queue (gauge and /v1/loads)."""
    with start_sim("--max-total-tokens", "4000", "--enable-metrics", "--decode-log-interval", "2",
                   "--startup-s", "0.5", speed=1) as sim:
        import threading
        body = {"input_ids": list(range(1000)), "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
        ts = [threading.Thread(target=lambda: httpx.post(sim.url + "/generate", json=body, timeout=60))
              for _ in range(8)]
        for t in ts:
            t.start()
        time.sleep(0.4)
        e = httpx.get(sim.url + "/v1/loads").json()["loads"][0]
        assert e["num_waiting_reqs"] > 0 and 1 <= e["num_running_reqs"] <= 3
        assert e["num_used_tokens"] <= 4000
        for t in ts:
            t.join()
        m = httpx.get(sim.url + "/metrics").text
        assert re.search(r"sglang:num_requests_total\{[^}]*\} 9\.0", m)  # 8 + the warm-up
