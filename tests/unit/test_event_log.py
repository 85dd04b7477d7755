"""One event stream: a live session's events are the session folder's record, and a replay of a
new folder emits exactly the events the live session emitted, in the same order (against a real
simulator process: attach, a two-level ramp, a mark)."""

from __future__ import annotations

import asyncio
import copy
import csv

from helpers.simproc import start_sim
from specmon.model import (
    ArmInfoUpdated, ArmSpec, KneeCalled, LevelFinished, LevelStarted, Marker, ObservedKneesUpdated, RampPlan, RampStarted,
    RequestFinished,
    SamplesTick, SessionEnded, SessionStarted,
)
from specmon.session.live import LiveSession
from specmon.session.ramp import RampDriver
from specmon.session.folder import without_curves
from specmon.session.replay import ReplaySource


def test_replay_of_a_new_session_is_the_recorded_event_sequence(tmp_path):
    plan = RampPlan(levels=[2, 4], input_len=64, output_len=16, level_duration_s=None, requests_per_level=6,
                    settle_s=0)
    out = tmp_path / "s"
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=50) as sim:
        arm = ArmSpec(name="sim", url=sim.url)
        live = LiveSession([arm], interval=0.25, out_dir=out, ramp=RampDriver([arm], plan), isl=64, osl=16)
        seen = []

        async def main():
            def emit(e):
                # a copy as of the moment it was emitted: what the front end saw then
                seen.append(copy.deepcopy(e))
                if isinstance(e, LevelStarted) and e.level == 1:
                    live.mark("level 2 began")
            return await live.run(emit, asyncio.Event())

        reason = asyncio.run(main())
    assert reason == "ramp done"
    kinds = [type(e) for e in seen]
    assert kinds[0] is SessionStarted and kinds[-1] is SessionEnded
    for k in (ArmInfoUpdated, KneeCalled, RampStarted, SamplesTick, LevelStarted, LevelFinished, Marker,
              RequestFinished):
        assert k in kinds, k
    replayed = ReplaySource(out, speed=1e9).events
    # The observed knees are logged without their curves (session.json holds the newest curve;
    # a curve each tick would be most of the log), so a replayed update carries none.
    expected = [without_curves(e) if isinstance(e, ObservedKneesUpdated) else e
                for e in seen if not isinstance(e, RequestFinished)]
    assert len(replayed) == len(expected)
    for got, want in zip(replayed, expected):
        assert got == want, _diff(got, want)
    # The requests are requests.csv's rows, one per RequestFinished, in order.
    with open(out / "requests.csv") as f:
        ids = [r["request_id"] for r in csv.DictReader(f)]
    assert ids == [e.record.request_id for e in seen if isinstance(e, RequestFinished)]
    assert len(ids) == 12


def _diff(a, b):
    """The first differing field, down through nested dataclasses and dicts (the assertion's words)."""
    import dataclasses
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        for f in dataclasses.fields(a):
            if getattr(a, f.name) != getattr(b, f.name):
                return f.name, _diff(getattr(a, f.name), getattr(b, f.name))
    if isinstance(a, dict) and isinstance(b, dict):
        for k in set(a) | set(b):
            if a.get(k) != b.get(k):
                return k, _diff(a.get(k), b.get(k))
    return a, b
