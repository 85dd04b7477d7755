"""specmon.clock: a session's stamps keep their true intervals when the system clock steps.

The end-to-end test steps this process's system clock (time.time) by +30 s in the middle of a
ramp's first level against a real `specmon sim` process, as NTP stepping a drifted VM clock
would, and reads what the session recorded.
"""

import asyncio
import time

from helpers.records import rows
from helpers.simproc import start_sim
from specmon.model import ArmSpec, LevelStarted, RampPlan
from specmon.session.live import LiveSession
from specmon.session.ramp import RampDriver

STEP_S = 30.0


def test_a_clock_step_mid_level_moves_no_recorded_interval(tmp_path, monkeypatch):
    plan = RampPlan(levels=[2, 4], input_len=64, output_len=24, level_duration_s=None, requests_per_level=12,
                    settle_s=0.0)
    system = time.time
    stepped = []

    def step() -> None:
        monkeypatch.setattr(time, "time", lambda: system() + STEP_S)
        stepped.append(system())

    with start_sim("--enable-metrics", "--profile", "fp8-mtp", "--startup-s", "0.5", speed=1.0) as sim:
        arm = ArmSpec(name="sim", url=sim.url)
        ramp = RampDriver([arm], plan)
        live = LiveSession([arm], interval=0.25, out_dir=tmp_path, ramp=ramp, isl=plan.input_len,
                           osl=plan.output_len)

        def emit(e):
            if isinstance(e, LevelStarted) and e.level == 0:
                asyncio.get_running_loop().call_later(0.5, step)

        t0 = time.perf_counter()
        assert asyncio.run(live.run(emit, asyncio.Event())) == "ramp done"
        took = time.perf_counter() - t0
    assert stepped, "the step came after the ramp: make level 0 longer"
    reqs = rows(tmp_path / "requests.csv")
    assert len(reqs) == 24 and {r["status"] for r in reqs} == {"ok"}
    # The step is inside level 0 (requests before and after it) ...
    level0 = [r for r in reqs if r["level"] == "0"]
    assert min(float(r["t_start"]) for r in level0) < stepped[0] < max(float(r["t_end"]) for r in level0)
    # ... yet the whole ramp's requests span no more than the ramp took (+30 s with time.time())
    span = max(float(r["t_end"]) for r in reqs) - min(float(r["t_start"]) for r in reqs)
    assert span <= took
    # and each level's duration and tok/s are what its requests say
    for lv in rows(tmp_path / "levels.csv"):
        mine = [r for r in reqs if r["level"] == lv["level"]]
        tokens = sum(int(r["output_tokens"]) for r in mine)
        assert float(lv["duration_s"]) < took
        assert float(lv["output_tok_s"]) >= 0.5 * tokens / took
    # The scrapes' stamps go on a quarter second apart, without a 30 s hole
    ts = sorted({float(s["ts"]) for s in rows(tmp_path / "samples.csv")})
    assert len(ts) >= 4 and max(b - a for a, b in zip(ts, ts[1:])) < 5.0
