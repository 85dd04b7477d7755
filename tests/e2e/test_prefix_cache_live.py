"""The prefix cache's hit rate as the live session reads it from the simulator's SGLang counters
(Sample.cache_hit_rate: realtime_tokens_total prefill_cache vs prefill_compute over the scrape
window), for prompts that share a long prefix and for prompts that share nothing."""

from __future__ import annotations

import asyncio
import random
import time

import httpx

from helpers.simproc import start_sim
from specmon.model import ArmSpec, SamplesTick
from specmon.session.live import LiveSession


async def traffic(url: str, prompts, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=30) as client:
        i = 0
        while time.monotonic() < deadline:
            r = await client.post(url + "/generate", json={
                "input_ids": prompts(i), "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}})
            r.raise_for_status()
            i += 1


def hit_rates(url: str, prompts) -> list[float]:
    live = LiveSession([ArmSpec(name="sim", url=url)], interval=0.25)
    events: list = []

    async def main():
        stop = asyncio.Event()

        async def load():
            await asyncio.sleep(0.5)
            await traffic(url, prompts, 4.0)
            stop.set()

        await asyncio.gather(live.run(events.append, stop), load())

    asyncio.run(main())
    return [s.cache_hit_rate for e in events if isinstance(e, SamplesTick) for s in e.samples
            if s.cache_hit_rate is not None]


def test_live_cache_hit_rate_shared_vs_disjoint():
    rng = random.Random(5)
    shared = [rng.randrange(1, 4000) for _ in range(3000)]
    with start_sim("--enable-metrics", "--profile", "fp8-nospec", speed=20) as sim:
        # 3,000 shared + 100 own tokens: after the first request each hits 3,000 of 3,100
        shared_rates = hit_rates(sim.url, lambda i: shared + [rng.randrange(1, 4000) for _ in range(100)])
    with start_sim("--enable-metrics", "--profile", "fp8-nospec", speed=20) as sim:
        own_rates = hit_rates(sim.url, lambda i: [rng.randrange(1, 4000) for _ in range(3100)])
    assert shared_rates and own_rates
    assert max(shared_rates) > 0.9 and shared_rates[-1] > 0.9, shared_rates
    assert max(own_rates) < 0.01, own_rates
