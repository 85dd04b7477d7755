"""What a session holds in memory stays bounded while its record stays whole (real simulator).

- A ramp level keeps its own samples, in a ring; one that outgrows the ring reads the earlier
  ones back from samples.csv: the level's statistics see every sample of its window.
- Without a ramp no sample is kept at all (nothing reads them); samples.csv has every tick.
- A finished request keeps its token stamps compacted, and the ramp lets a level's requests
  go once the next level starts; requests.csv has every request.
"""

import asyncio

import pytest

from helpers.simproc import start_sim
from specmon.model import ArmSpec, LevelFinished, RampPlan, SamplesTick
from specmon.session import live as live_mod
from specmon.session.live import LiveSession
from specmon.session.ramp import RampDriver
from helpers.memory_bounds import csv_rows


def test_a_level_longer_than_its_ring_reads_its_first_samples_back(tmp_path, monkeypatch):
    monkeypatch.setattr(live_mod, "SAMPLES_KEPT", 4)
    monkeypatch.setattr(live_mod, "SAMPLES_MIN_PER_ARM", 4)
    # 30 simulated s a level at x10: 3 s of wall time, ~30 ticks of 0.1 s in a ring of 4
    plan = RampPlan(levels=[2, 3], input_len=64, output_len=24, level_duration_s=30, settle_s=5)
    ticks, ring_sizes, checked = [], [], []
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=10) as sim:
        arm = ArmSpec(name="sim", url=sim.url)
        ramp = RampDriver([arm], plan)
        live = LiveSession([arm], interval=0.1, out_dir=tmp_path, ramp=ramp, isl=64, osl=24)

        def emit(e):
            if isinstance(e, SamplesTick):
                ticks.append(e)
                ring_sizes.append(len(live._samples.get("sim", ())))
            elif isinstance(e, LevelFinished):
                # what the level was computed from (its window), while the ring still holds it
                w = ramp.last_window
                got = live.samples_for("sim", w.t0, w.t1)
                seen = [s for t in ticks for s in t.samples if w.t0 <= s.ts <= w.t1]
                checked.append((e.results[0], got, seen))

        reason = asyncio.run(live.run(emit, asyncio.Event()))
    assert reason == "ramp done"
    assert max(ring_sizes) == 4  # bounded, and full
    assert len(checked) == 2
    for result, got, seen in checked:
        assert len(seen) >= 10  # the window outlasted the ring (4) several times over (~25 ticks idle)
        assert [s.ts for s in got] == pytest.approx([s.ts for s in seen], abs=1e-3)
        assert [s.running_reqs for s in got] == [s.running_reqs for s in seen]
        assert [s.up for s in got] == [s.up for s in seen]
        running = [s.running_reqs for s in seen if s.up and s.running_reqs is not None]
        assert result.running_mean == pytest.approx(sum(running) / len(running))
    # the record is whole: a samples.csv row per arm per tick, events.jsonl a line per tick
    rows = [r for r in csv_rows(tmp_path / "samples.csv") if r["arm"] == "sim" and not r["dp_rank"]]
    assert len(rows) == len(ticks)
    events = (tmp_path / "events.jsonl").read_text().splitlines()
    assert sum('"type":"SamplesTick"' in line for line in events) == len(ticks)


def test_attach_keeps_no_samples_and_records_every_tick(tmp_path):
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=10) as sim:
        arms = [ArmSpec(name="a", url=sim.url), ArmSpec(name="b", url=sim.url)]
        live = LiveSession(arms, interval=0.05, out_dir=tmp_path)
        kept, ticks = [], []
        stop = asyncio.Event()

        def emit(e):
            if isinstance(e, SamplesTick):
                ticks.append(e)
                kept.append(sum(len(r) for r in live._samples.values()))
                if len(ticks) == 40:
                    stop.set()

        asyncio.run(live.run(emit, stop))
    assert len(ticks) >= 40 and set(kept) == {0}
    rows = csv_rows(tmp_path / "samples.csv")
    assert sorted(r["arm"] for r in rows if r["arm"]) == sorted(["a", "b"] * len(ticks))
