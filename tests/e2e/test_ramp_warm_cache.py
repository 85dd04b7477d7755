"""A second ramp with the same seed on one server measures a warm prefix cache: the ramp says
so on its first level (a mark and the level's note, offering --flush-cache), and --flush-cache
empties the cache before the first level. Real simulator with its radix cache."""

import asyncio

from helpers.simproc import start_sim
from specmon.model import ArmSpec, LevelFinished, Marker, RampPlan
from specmon.session.live import LiveSession
from specmon.session.ramp import RampDriver


def _ramp(url, out, **kw):
    plan = RampPlan(levels=[2], input_len=512, output_len=8, level_duration_s=None, requests_per_level=6,
                    settle_s=0, seed=7, **kw)
    arm = ArmSpec(name="sim", url=url)
    ramp = RampDriver([arm], plan)
    live = LiveSession([arm], interval=0.5, out_dir=out, ramp=ramp, isl=512, osl=8)
    events = []
    asyncio.run(live.run(events.append, asyncio.Event()))
    (r,) = next(e for e in events if isinstance(e, LevelFinished)).results
    return r, [e.label for e in events if isinstance(e, Marker)]


def test_a_second_ramp_on_a_warm_cache_is_warned_and_flush_cache_clears_it(tmp_path):
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=50) as sim:
        cold, marks = _ramp(sim.url, tmp_path / "a")
        assert not [m for m in marks if "prefix cache" in m], marks  # a fresh server: nothing to say
        assert cold.cache_hit_rate is not None and cold.cache_hit_rate < 0.5
        warm, marks = _ramp(sim.url, tmp_path / "b")  # the same seed: the same prompts, cached now
        said = [m for m in marks if "prefix cache" in m]
        assert warm.cache_hit_rate > 0.9 and said, (warm.cache_hit_rate, marks)
        assert "--flush-cache" in said[0] and "earlier run" in said[0]
        assert "warm prefix cache" in warm.note
        flushed, marks = _ramp(sim.url, tmp_path / "c", flush_cache=True)
    assert flushed.cache_hit_rate < 0.5, flushed.cache_hit_rate  # emptied before the first level
    assert not [m for m in marks if "prefix cache" in m], marks
