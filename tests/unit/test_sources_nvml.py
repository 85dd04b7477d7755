"""NVML on a machine without a driver (this one), and the JSON fixture format."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers.simproc import REPO
from specmon.errors import UsageError
from specmon.model import GpuProcess, GpuReading, GpuSnapshot
from specmon.sources.nvml import NvmlReader, NvmlReplay, load_fixture, save_fixture


def _has_driver() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


@pytest.mark.skipif(_has_driver(), reason="this host has an NVIDIA driver")
def test_nvml_unavailable_is_a_clear_state():
    r = NvmlReader()
    snap = r.read()
    assert not r.available and not snap.available and snap.gpus == []
    assert snap.reason.startswith("NVML unavailable: ") and "libnvidia-ml" in snap.reason
    r.close()


def test_fixture_round_trip_keeps_unknowns(tmp_path):
    snaps = [GpuSnapshot(ts=1.0, available=True, driver_version="570.86.15", gpus=[
        GpuReading(index=0, name="NVIDIA H200", uuid="GPU-abc", mem_used_bytes=1, mem_total_bytes=2, util_pct=50.0,
                   power_w=300.5, temp_c=40.0, processes=[GpuProcess(pid=12, name=None, used_bytes=None)]),
        GpuReading(index=1, name=None, uuid=None, mem_used_bytes=None, mem_total_bytes=None, util_pct=None,
                   power_w=None, temp_c=None, processes=None)])]
    path = tmp_path / "h200.json"
    save_fixture(path, snaps)
    doc = json.loads(path.read_text())
    assert doc["format"] == "specmon-nvml/1" and len(doc["readings"]) == 1
    back = load_fixture(path)
    assert back == snaps
    replay = NvmlReplay.from_file(path)
    a, b = replay.read(), replay.read()
    assert a.gpus == snaps[0].gpus and b.ts >= a.ts > 1.0


def test_bad_fixture_is_usage_error(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"readings": 3}')
    with pytest.raises(UsageError, match="x.json"):
        load_fixture(p)


def test_dump_tool_writes_a_fixture_here_too(tmp_path):
    out = tmp_path / "dump.json"
    p = subprocess.run([sys.executable, "-m", "specmon.sources.nvml", "--dump", str(out), "--count", "2",
                        "--interval", "0.01"], cwd=str(REPO), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    readings = load_fixture(out)
    assert len(readings) == 2
    if not _has_driver():
        assert "NVML unavailable" in p.stdout and readings[0].available is False


def test_fixture_keeps_a_simulated_card_and_old_readings_are_nvml(tmp_path):
    sim = GpuReading(index=0, name="NVIDIA RTX PRO 6000 Blackwell Server Edition", uuid="GPU-x", mem_used_bytes=3,
                     mem_total_bytes=4, util_pct=100.0, power_w=370.0, temp_c=60.0, source="simulated", arm="fp8-mtp",
                     weights_bytes=1, kv_pool_bytes=2, cuda_graph_bytes=None, power_limit_w=600.0)
    snaps = [GpuSnapshot(ts=1.0, available=False, reason="NVML unavailable: no NVIDIA driver", gpus=[sim])]
    path = tmp_path / "sim.json"
    save_fixture(path, snaps)
    back = load_fixture(path)
    assert back == snaps and back[0].simulated_gpus == [sim] and back[0].host_gpus == []
    # readings saved before simulated cards existed carry no source: they are NVML's
    old = json.loads((REPO / "tests" / "data" / "gpu" / "h200-2gpu.json").read_text())
    assert all("source" not in g for r in old["readings"] for g in r["gpus"])
    first = load_fixture(REPO / "tests" / "data" / "gpu" / "h200-2gpu.json")[0]
    assert first.gpus and all(g.source == "nvml" and g.arm is None and not g.simulated for g in first.gpus)
