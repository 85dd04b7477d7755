"""LiveSession against real `specmon sim` processes: 1 and 3 arms, down/refused/401/slow arms,
a server that dies and comes back, NVML replay onto an arm."""

from __future__ import annotations

import asyncio
import csv
import json


from helpers.badserver import BadServer
from helpers.simproc import start_sim
from specmon.model import ArmSpec, GpuProcess, GpuReading, GpuSnapshot
from specmon.session.live import LiveSession
from specmon.sources.nvml import NvmlReplay
from helpers.sources_live import rows, run_for, ticks

SPEED = 20.0


def last_answered(events):
    """The newest sample of the first arm that is not a missed tick deadline (a busy machine's)."""
    return [t.samples[0] for t in ticks(events) if t.samples[0].state != "timeout"][-1]


async def test_unauthorized_and_key_from_env(tmp_path, monkeypatch):
    with start_sim("--profile", "nvfp4-mtp", "--api-key", "sk-test-secret", speed=SPEED) as sim:
        live = LiveSession([ArmSpec("nokey", sim.url)], interval=0.25, out_dir=tmp_path / "a")
        _, events = await run_for(live, 1.2)
        s = last_answered(events)
        # No --enable-metrics: both /server_info and /v1/loads want the key.
        assert not s.up and s.state == "unauthorized" and "401" in s.reason and "--api-key-env" in s.reason
        monkeypatch.setenv("SPECMON_TEST_KEY", "sk-test-secret")
        live = LiveSession([ArmSpec("withkey", sim.url, api_key_env="SPECMON_TEST_KEY")], interval=0.25,
                           out_dir=tmp_path / "b")
        _, events = await run_for(live, 1.2)
        s = last_answered(events)
        assert s.up and s.state == "up" and s.source == "loads"
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert "sk-test-secret" not in p.read_text()


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


async def test_live_session_without_ramp_or_supervisor_marks(tmp_path):
    with start_sim("--enable-metrics", speed=SPEED) as sim:
        live = LiveSession([ArmSpec("a", sim.url)], interval=0.25, out_dir=tmp_path)

        async def marker() -> None:
            await asyncio.sleep(0.6)
            live.mark("fan noise")

        _, events = await run_for(live, 1.2, marker())
    r = rows(tmp_path)
    marks = [x for x in r if x["marker"]]
    assert len(marks) == 1 and marks[0]["arm"] == "" and marks[0]["marker"] == "fan noise"
    assert json.loads((tmp_path / "session.json").read_text())["markers"][0]["label"] == "fan noise"
