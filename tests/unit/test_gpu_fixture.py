"""Replays what real H200s said (tests/data/gpu) through specmon's NVML layer, the
recorder and the GPU pane, so CI keeps checking against real hardware without a GPU."""

from __future__ import annotations

import asyncio
import csv
from datetime import datetime, timezone
import json
from pathlib import Path

import pytest

from specmon.model import ArmSpec
from specmon.session.live import LiveSession
from specmon.sources.nvml import NvmlReplay, load_fixture
from helpers.badserver import BadServer
from helpers.simproc import start_sim

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"
MIB = 1024 * 1024


def smi_rows(raw: str) -> dict[int, dict]:
    rows = {}
    for line in raw.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        rows[int(f[0])] = {"used_mib": float(f[3]), "total_mib": float(f[4]), "power_w": float(f[6])}
    return rows


@pytest.mark.parametrize("name", ["h200-2gpu.json"])
def test_nvml_v2_readings_match_nvidia_smi_within_1pct(name):
    doc = json.loads((DATA / name).read_text())
    readings = load_fixture(DATA / name)
    assert len(readings) == len(doc["phases"]) == 3
    for snap, phase in zip(readings, doc["phases"]):
        before, after = smi_rows(phase["nvidia_smi_before"]), smi_rows(phase["nvidia_smi_after"])
        assert [g.index for g in snap.gpus] == sorted(before) == [0, 1]
        for g in snap.gpus:
            smi_used = (before[g.index]["used_mib"] + after[g.index]["used_mib"]) / 2
            total = before[g.index]["total_mib"]
            assert g.mem_total_bytes / MIB == pytest.approx(total, rel=0.01)
            assert abs(g.mem_used_bytes / MIB - smi_used) <= 0.01 * total
            # The allocation each GPU held (size / (index + 1) GiB) shows up in the reading.
            held_mib = phase["alloc_gib"] / (g.index + 1) * 1024
            assert g.mem_used_bytes / MIB >= held_mib
            assert g.power_w == pytest.approx(before[g.index]["power_w"], rel=0.10)


def test_nvml_v1_reading_counted_the_reserve():
    """Why specmon reads the v2 struct: v1's 'used' sat 615 MiB above nvidia-smi on an idle H200."""
    doc = json.loads((DATA / "h200-1gpu-nvml-v1.json").read_text())
    idle = doc["phases"][0]["comparison"][0]
    assert idle["smi_used_mib"] == 0 and 600 < idle["specmon_used_mib"] < 700


async def test_two_gpu_readings_replay_into_gpus_csv(tmp_path):
    readings = load_fixture(DATA / "h200-2gpu.json")
    # An SGLang-like server (not the simulator, whose arms show the card it simulates instead of
    # this host's GPUs: tests/unit/test_sim_gpu.py), on the host the readings came from.
    with BadServer() as sim:
        live = LiveSession([ArmSpec("a", sim.url)], interval=0.2, out_dir=tmp_path, nvml=NvmlReplay(readings),
                           gpu_indices={"a": [0, 1]})
        stop = asyncio.Event()
        task = asyncio.create_task(live.run(lambda e: None, stop))
        await asyncio.sleep(1.3)
        stop.set()
        await asyncio.wait_for(task, 20)
    with open(tmp_path / "gpus.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 6
    # Replay loops over the three phases; every tick has both GPUs with that phase's figures.
    for i in range(0, 6, 2):
        snap = readings[(i // 2) % 3]
        assert [r["gpu"] for r in rows[i:i + 2]] == ["0", "1"]
        for r, g in zip(rows[i:i + 2], snap.gpus):
            assert int(r["mem_used_bytes"]) == g.mem_used_bytes and int(r["mem_total_bytes"]) == g.mem_total_bytes
    with open(tmp_path / "samples.csv", newline="") as f:
        samples = [r for r in csv.DictReader(f) if r["arm"] == "a"]
    # The arm owns both GPUs: its memory is their sum.
    first = readings[0]
    assert int(samples[0]["gpu_mem_total_bytes"]) == sum(g.mem_total_bytes for g in first.gpus)


def test_attach_gpus_csv_tracks_nvidia_smi_per_gpu():
    """The gpus.csv that `specmon attach` wrote on 2 x H200 against nvidia-smi's 500 ms log."""
    with open(DATA / "h200-2gpu-attach-gpus.csv", newline="") as f:
        ours = list(csv.DictReader(f))
    smi = {}
    with open(DATA / "h200-2gpu-attach-nvidia-smi.csv") as f:
        for line in f:
            ts, idx, used, total, _power = [x.strip() for x in line.split(",")]
            smi.setdefault(int(idx), []).append(float(used))
    assert {r["gpu"] for r in ours} == {"0", "1"}
    for r in ours:
        used_mib = int(r["mem_used_bytes"]) / MIB
        # While attach ran, each GPU held 20 GiB: nvidia-smi's plateau for that GPU.
        plateau = max(smi[int(r["gpu"])])
        assert abs(used_mib - plateau) <= 0.01 * 143771
        pid, used = r["processes"].split(":")
        # The holder's 20 GiB plus its CUDA context (about 610 MiB on these H200s).
        assert 20 * 1024 <= int(used) / MIB <= 21 * 1024


def test_attach_under_a_compute_load_reads_utilisation_and_power_as_nvidia_smi():
    """`specmon attach --headless` on 1 x H200 while a process held ~21 GiB and ran bf16 matmuls
    (the recording of the event-stream writer, 2026-12-01): memory, utilisation, power and the
    process's memory as nvidia-smi (-lms 500 and --query-compute-apps) gave them."""
    with open(DATA / "h200-1gpu-load-attach-gpus.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    smi = [[x.strip() for x in line.split(",")] for line in open(DATA / "h200-1gpu-load-attach-nvidia-smi.csv")]
    apps = [[x.strip() for x in line.split(",")] for line in open(DATA / "h200-1gpu-load-compute-apps.csv")]
    # attach started while the holder was still starting its matmuls; compare the rows inside
    # the span nvidia-smi logged (its stamps are the machine's UTC wall clock)
    stamps = [datetime.strptime(x[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp() for x in smi]
    ours = [r for r in rows if stamps[0] + 1.0 <= float(r["ts"]) <= stamps[-1]]
    assert rows[0]["util_pct"] == "0" and float(rows[0]["power_w"]) < 100  # before the load, as recorded
    assert len(ours) >= 10
    smi_used = {float(x[2]) for x in smi}
    smi_power = [float(x[5]) for x in smi]
    for r in ours:
        assert any(abs(int(r["mem_used_bytes"]) / MIB - u) <= 0.01 * 143771 for u in smi_used)
        assert float(r["util_pct"]) == 100.0 and {x[4] for x in smi} == {"100"}  # not 0: the GPU computed
        assert min(smi_power) - 15 <= float(r["power_w"]) <= max(smi_power) + 15
        pid, used = r["processes"].split(":")
        (app,) = apps
        assert pid == app[0] and abs(int(used) / MIB - float(app[1].split()[0])) < 1.0


async def test_two_h200_readings_replay_through_the_gpu_pane(tmp_path):
    """Record with the real readings, replay the folder through the app: the GPU strip shows
    both H200s with what nvidia-smi said (GiB, one decimal)."""
    from specmon.session.replay import ReplaySource
    from specmon.tui.app import SpecmonApp
    from specmon.tui.widgets.gpu_strip import GpuStrip

    readings = load_fixture(DATA / "h200-2gpu.json")
    with start_sim("--enable-metrics", speed=20) as sim:
        live = LiveSession([ArmSpec("a", sim.url)], interval=0.2, out_dir=tmp_path, nvml=NvmlReplay(readings[2:]))
        stop = asyncio.Event()
        task = asyncio.create_task(live.run(lambda e: None, stop))
        await asyncio.sleep(1.0)
        stop.set()
        await asyncio.wait_for(task, 20)
    app = SpecmonApp(ReplaySource(tmp_path, speed=50.0), title="replay")
    async with app.run_test(size=(160, 48)) as pilot:
        strip = app.query_one(GpuStrip)
        for _ in range(200):
            if "GPU1" in str(strip.render()):
                break
            await pilot.pause(0.05)
        shown = str(strip.render())
    smi = smi_rows(json.loads((DATA / "h200-2gpu.json").read_text())["phases"][2]["nvidia_smi_before"])
    for i in (0, 1):
        assert f"GPU{i}" in shown
        assert f"{smi[i]['used_mib'] / 1024:.1f}/{smi[i]['total_mib'] / 1024:.0f}G" in shown
