"""LiveSession against refusing, slow and odd servers in this process, and NVML replay onto an
arm (the runs against `specmon sim` processes are in tests/e2e/test_sources_live.py)."""

from __future__ import annotations

import csv

from helpers.badserver import BadServer
from specmon.model import ArmSpec, GpuProcess, GpuReading, GpuSnapshot
from specmon.session.live import LiveSession
from specmon.sources.nvml import NvmlReplay
from helpers.sources_live import rows, run_for, ticks


async def test_nvml_replay_attaches_gpu_to_arm(tmp_path):
    snap = GpuSnapshot(ts=0, available=True, driver_version="570.86", gpus=[
        GpuReading(index=0, name="NVIDIA H200", uuid="GPU-0", mem_used_bytes=120 * 2**30, mem_total_bytes=141 * 2**30,
                   util_pct=97.0, power_w=612.5, temp_c=61.0, processes=[GpuProcess(pid=1, name="python", used_bytes=None)]),
        GpuReading(index=1, name="NVIDIA H200", uuid="GPU-1", mem_used_bytes=None, mem_total_bytes=141 * 2**30,
                   util_pct=None, power_w=None, temp_c=None, processes=None),
    ])
    # an SGLang-like server (the simulator's arms show the card it simulates instead of this host's)
    with BadServer() as sim:
        live = LiveSession([ArmSpec("a", sim.url)], interval=0.25, out_dir=tmp_path, nvml=NvmlReplay([snap]),
                           gpu_indices={"a": [0]})
        _, events = await run_for(live, 0.8)
    t = ticks(events)[-1]
    assert t.gpus.available and t.gpus.gpus[1].mem_used_bytes is None
    s = t.samples[0]
    assert s.gpu_mem_used_bytes == 120 * 2**30 and s.gpu_power_w == 612.5
    assert rows(tmp_path)[-1]["gpu_mem_total_bytes"] == str(141 * 2**30)
    # gpus.csv keeps every GPU of every tick; refused values stay empty, not 0.
    with open(tmp_path / "gpus.csv", newline="") as f:
        gpu_rows = list(csv.DictReader(f))
    assert len(gpu_rows) >= 2 and len(gpu_rows) % 2 == 0
    g0, g1 = gpu_rows[-2], gpu_rows[-1]
    assert (g0["gpu"], g0["mem_used_bytes"], g0["processes"]) == ("0", str(120 * 2**30), "1:")
    assert (g1["gpu"], g1["mem_used_bytes"], g1["util_pct"], g1["processes"]) == ("1", "", "", "")


