"""Write screenshots/*.svg: the real app replaying the recorded sim sessions in tests/data/,
stopped in the middle of a ramp level (the last by default: the busiest moment), 160x48 (and the
demo at 80x24: an arm a line).

    .venv/bin/python tests/snapshot_apps/screenshots.py
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from specmon.model import LevelStarted, SamplesTick
from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp

REPO = Path(__file__).resolve().parent.parent.parent
# (session, file, level to stop in: None = the last). The demo stops at C=26, past both knees of
# FP8 and the queueing knee of NVFP4, with FP8's TTFT mostly queue.
SHOTS = [("session_sim_1arm", "specmon-1arm.svg", None), ("session_sim_3arm", "specmon-3arm.svg", None),
         ("session_demo_2arm", "specmon-demo.svg", 7),
         # a ramp through the real smg gateway: at C=12 its three first workers (the gateway's header
         # over their panels); at C=64, after four more joined, the fleet table of all seven
         ("session_gateway_fleet", "specmon-gateway.svg", 1),
         ("session_gateway_fleet", "specmon-fleet-table.svg", 4),
         # the demo at the same moment in an 80x24 terminal: each arm on one line, the newest levels
         ("session_demo_2arm", "specmon-80x24.svg", 7, (80, 24))]


def mid_level(src: ReplaySource, level=None) -> None:
    """Cut the event list half-way through one level's ticks (the last level by default)."""
    starts = [i for i, e in enumerate(src.events) if isinstance(e, LevelStarted)
              and (level is None or e.level == level)]
    last_start = max(starts)
    end = next((i for i, e in enumerate(src.events) if i > last_start and isinstance(e, LevelStarted)),
               len(src.events))  # the level's own ticks, not the levels after it
    ticks = [i for i, e in enumerate(src.events) if isinstance(e, SamplesTick) and last_start < i < end]
    cut = ticks[len(ticks) // 2] if ticks else len(src.events) - 1
    src.events = src.events[:cut + 2]  # the tick and its LevelProgress


async def shoot(name: str, svg: str, level=None, size=(160, 48)) -> Path:
    src = ReplaySource(REPO / "tests" / "data" / name, speed=1e9)
    mid_level(src, level)
    src.out_dir = Path("tests/data") / name
    app = SpecmonApp(src, title=f"replay {name}")
    async with app.run_test(size=size) as pilot:
        for _ in range(200):
            if app.query_one("StatusBar").stopped is not None:
                break
            await pilot.pause(0.02)
        app.query_one("StatusBar").stopped = None  # a still of a running session
        app.query_one("StatusBar").refresh()
        await pilot.pause(0.2)
        out = REPO / "screenshots"
        out.mkdir(exist_ok=True)
        return Path(app.save_screenshot(filename=svg, path=str(out)))


if __name__ == "__main__":
    import sys

    only = set(sys.argv[1:])  # file names to write (default: every shot)
    for name, svg, level, *size in SHOTS:
        if not only or svg in only:
            print(asyncio.run(shoot(name, svg, level, *size)))
