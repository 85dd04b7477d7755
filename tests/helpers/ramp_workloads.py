"""What the workload ramps share across tiers: RampDriver over several arms, timed."""

from __future__ import annotations

import asyncio

from specmon.model import ArmSpec
from specmon.session.live import LiveSession
from specmon.session.ramp import RampDriver


def run_ramp(url, plan, out, interval=0.5):
    arm = ArmSpec(name="sim", url=url)
    ramp = RampDriver([arm], plan)
    live = LiveSession([arm], interval=interval, out_dir=out, ramp=ramp, isl=plan.input_len, osl=plan.output_len)
    events = []

    async def main():
        return await live.run(events.append, asyncio.Event())

    reason = asyncio.run(main())
    return ramp, events, reason
