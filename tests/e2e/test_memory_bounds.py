"""What a session holds in memory stays bounded while its record stays whole (real simulator).

- A ramp level keeps its own samples in memory, only the fields its statistics read, never
  reading samples.csv back; past its budget a level is thinned to one tick in 2, 4, ...
- Without a ramp no sample is kept at all (nothing reads them); samples.csv has every tick.
- A finished request keeps its token stamps compacted, and the ramp lets a level's requests
  go once the next level starts; requests.csv has every request.
- A headless ramp imports the heavy modules (plotting, tokenizers, the TUI) only where used.
"""

import asyncio
import subprocess
import sys

import pytest

from helpers.simproc import start_sim
from specmon.load.client import TokenStamps
from specmon.model import ArmSpec, LevelFinished, RampPlan, RequestFinished, SamplesTick
from specmon.session import level_samples
from specmon.session.live import LiveSession
from specmon.session.ramp import RampDriver
from helpers.memory_bounds import csv_rows

HEAVY = ("matplotlib", "numpy", "pandas", "transformers", "tokenizers", "textual", "scipy")


def test_a_level_past_its_budget_is_thinned_never_read_back(tmp_path, monkeypatch):
    monkeypatch.setattr(level_samples, "KEPT_BYTES", 4 * level_samples.ROW_BYTES)
    # 30 simulated s a level at x10: 3 s of wall time, ~30 ticks of 0.1 s in a budget of 4 rows
    plan = RampPlan(levels=[2, 3], input_len=64, output_len=24, level_duration_s=30, settle_s=5)
    ticks, ring_sizes, checked = [], [], []
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=10) as sim:
        arm = ArmSpec(name="sim", url=sim.url)
        ramp = RampDriver([arm], plan)
        live = LiveSession([arm], interval=0.1, out_dir=tmp_path, ramp=ramp, isl=64, osl=24)

        def emit(e):
            if isinstance(e, SamplesTick):
                ticks.append(e)
                ring_sizes.append(live._level_samples.rows)
            elif isinstance(e, LevelFinished):
                # what the level was computed from (its window), while the level's samples are kept
                w = ramp.last_window
                got = live.samples_for("sim", w.t0, w.t1)
                stride = live._level_samples.stride
                level_ticks = [t for t in ticks if t.samples[0].level == e.level]
                kept = {t.ts for t in level_ticks[::stride]}  # the level's first tick, then one in `stride`
                seen = [s for t in ticks for s in t.samples if w.t0 <= s.ts <= w.t1]
                checked.append((e.results[0], got, seen, [s for s in seen if s.ts in kept], stride))

        reason = asyncio.run(live.run(emit, asyncio.Event()))
    assert reason == "ramp done"
    assert max(ring_sizes) == 4  # bounded, and full
    assert len(checked) == 2
    for result, got, seen, thinned, stride in checked:
        assert len(seen) >= 10 and stride >= 4  # the window outlasted the budget (4) several times over
        assert [s.ts for s in got] == [s.ts for s in thinned]
        assert [s.running_reqs for s in got] == [s.running_reqs for s in thinned]
        assert [s.up for s in got] == [s.up for s in thinned]
        running = [s.running_reqs for s in thinned if s.up and s.running_reqs is not None]
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
                kept.append(live._level_samples.rows)
                if len(ticks) == 40:
                    stop.set()

        asyncio.run(live.run(emit, stop))
    assert len(ticks) >= 40 and set(kept) == {0}
    rows = csv_rows(tmp_path / "samples.csv")
    assert sorted(r["arm"] for r in rows if r["arm"]) == sorted(["a", "b"] * len(ticks))


def test_finished_requests_are_compacted_and_released_by_the_next_level(tmp_path):
    plan = RampPlan(levels=[3, 3], input_len=128, output_len=48, level_duration_s=None, requests_per_level=9,
                    settle_s=0)
    first_level = []
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=20) as sim:
        arm = ArmSpec(name="sim", url=sim.url)
        ramp = RampDriver([arm], plan)
        live = LiveSession([arm], interval=0.2, out_dir=tmp_path, ramp=ramp, isl=128, osl=48)
        records = []

        def emit(e):
            if isinstance(e, RequestFinished):
                records.append(e.record)
            elif isinstance(e, LevelFinished) and e.level == 0:
                first_level.extend(ramp.last_outcomes["sim"])

        assert asyncio.run(live.run(emit, asyncio.Event())) == "ramp done"
    assert len(records) == 18 and {r.status for r in records} == {"ok"}
    outs = ramp.last_outcomes["sim"]
    assert len(outs) == 9 and not {id(o) for o in outs} & {id(o) for o in first_level}  # level 0's let go
    for o in outs + first_level:
        assert isinstance(o.token_events, TokenStamps)
        assert sum(n for _, n in o.token_events) == o.completion_tokens == 48
    # the rows were written before compaction; the compacted stamps give the same figures
    by_id = {r.request_id: r for r in records}
    for o in outs:
        r = by_id[o.request_id]
        scale = r.first_byte_s / (o.t_first_byte - o.t_sent)  # the scale the row was written with
        itl = o.itls()
        assert r.itl_mean_s == pytest.approx(scale * sum(itl) / len(itl), rel=1e-9)
        assert r.chunks == o.events


def test_a_headless_ramp_imports_no_heavy_module(tmp_path):
    """The report's plotting stack, a tokenizer and the TUI are imported only where used."""
    code = ("import atexit, sys\n"
            f"heavy = {HEAVY!r}\n"
            "atexit.register(lambda: print('HEAVY', sorted({m.split('.')[0] for m in sys.modules} & set(heavy))))\n"
            "from specmon.cli import main\n"
            "raise SystemExit(main(sys.argv[1:]))\n")
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=50) as sim:
        p = subprocess.run([sys.executable, "-c", code, "ramp", sim.url, "--levels", "2", "--requests-per-level", "4",
                            "--input-len", "64", "--output-len", "8", "--headless", "--out", str(tmp_path / "s")],
                           capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "HEAVY []" in p.stdout, p.stdout[-500:]
    assert len(csv_rows(tmp_path / "s" / "requests.csv")) == 4
