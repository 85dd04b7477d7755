"""A simulator that stalls for seconds mid-level (--fault-stall-after/--fault-stall-s): the level
after the stall lasts its plan in wall time, not the plan stretched by a pace measured across
the stall."""

import asyncio

from helpers.simproc import start_sim
from specmon.model import ArmSpec, LevelFinished, LevelStarted, RampPlan
from specmon.session.live import LiveSession
from specmon.session.ramp import RampDriver

SPEED = 50
STALL_S = 8.0


def test_the_level_after_a_stall_lasts_its_plan(tmp_path):
    plan = RampPlan(levels=[4, 4, 4], input_len=256, output_len=64, level_duration_s=150, settle_s=25)
    events: list = []
    with start_sim("--enable-metrics", "--profile", "fp8-nospec", "--fault-stall-after", "12",
                   "--fault-stall-s", str(STALL_S), speed=SPEED) as sim:
        arm = ArmSpec(name="sim", url=sim.url)
        live = LiveSession([arm], interval=0.25, out_dir=tmp_path, ramp=RampDriver([arm], plan), isl=256, osl=64)
        reason = asyncio.run(live.run(events.append, asyncio.Event()))
    assert reason == "ramp done"
    starts = [e.ts for e in events if isinstance(e, LevelStarted)]
    ends = [e.ts for e in events if isinstance(e, LevelFinished)]
    walls = [b - a for a, b in zip(starts, ends)]
    planned = plan.level_duration_s / SPEED  # 3 s of wall time a level
    assert walls[0] > STALL_S, walls  # the stall fell in the first level
    # the next levels are planned with the pace the simulator keeps, not the first level's
    assert all(w < 2.5 * planned for w in walls[1:]), walls
