"""What the live-source tests share across tiers: a live session run for a while, its ticks and
its samples.csv rows."""

from __future__ import annotations

import asyncio
import csv
from pathlib import Path

from specmon.model import SamplesTick
from specmon.session.live import LiveSession


async def run_for(live: LiveSession, seconds: float, *extra) -> tuple[str, list]:
    events: list = []
    stop = asyncio.Event()

    async def stopper() -> None:
        await asyncio.sleep(seconds)
        stop.set()

    results = await asyncio.gather(live.run(events.append, stop), stopper(), *extra)
    return results[0], events


def ticks(events) -> list[SamplesTick]:
    return [e for e in events if isinstance(e, SamplesTick)]


def rows(out: Path) -> list[dict]:
    with open(out / "samples.csv", newline="") as f:
        return list(csv.DictReader(f))


def last_answered(events):
    """The newest sample of the first arm that is not a missed tick deadline (a busy machine's)."""
    return [t.samples[0] for t in ticks(events) if t.samples[0].state != "timeout"][-1]
