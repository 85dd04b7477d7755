"""What a session holds in memory stays bounded while its record stays whole (real simulator).

- A ramp level keeps its own samples, in a ring; one that outgrows the ring reads the earlier
  ones back from samples.csv: the level's statistics see every sample of its window.
- Without a ramp no sample is kept at all (nothing reads them); samples.csv has every tick.
- A finished request keeps its token stamps compacted, and the ramp lets a level's requests
  go once the next level starts; requests.csv has every request.
"""

import asyncio
import subprocess
import sys

import pytest

from helpers.simproc import start_sim
from specmon.model import ArmSpec, LevelFinished, RampPlan, RequestFinished
from specmon.session.live import LiveSession
from specmon.load.client import TokenStamps
from specmon.session.ramp import RampDriver
from helpers.memory_bounds import csv_rows


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


HEAVY = ("matplotlib", "numpy", "pandas", "transformers", "tokenizers", "textual", "scipy")


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
