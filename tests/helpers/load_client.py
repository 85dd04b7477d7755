"""What the load client's tests share across tiers: one request sent and its outcome."""

from __future__ import annotations

import time

from specmon.load.client import RequestOutcome


async def send(client, prompt, n, rid="r"):
    o = RequestOutcome(request_id=rid, t_scheduled_wall=time.time(), t_scheduled=time.perf_counter())
    return await client.generate(prompt, n, o)
