"""GPU readings through NVML (nvidia-ml-py), and a JSON form of them for fixtures and replay.

Every per-GPU call is made on its own and may fail on its own (NVMLError_NotSupported on
some boards, NoPermission in containers): that one field becomes None, never 0. A host
without a driver gives GpuSnapshot(available=False, reason="NVML unavailable: ...").

Fixture format (what `python -m specmon.sources.nvml --dump FILE` writes on a GPU host):
    {"format": "specmon-nvml/1", "host": "...", "readings": [<snapshot>, ...]}
where <snapshot> is GpuSnapshot as a JSON object (dataclasses.asdict); NvmlReplay plays
them back in order (looping), so tests and demos can show real H200 readings anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from specmon import clock
from specmon.model import GpuProcess, GpuReading, GpuSnapshot

FIXTURE_FORMAT = "specmon-nvml/1"


def _try(fn: Callable[[], Any]) -> Any:
    """One NVML call; None when the driver refuses (not supported, no permission, ...)."""
    try:
        return fn()
    except Exception:  # pynvml raises a zoo of NVMLError_* subclasses; all mean "unknown"
        return None


def _text(v: Any) -> Optional[str]:
    if v is None:
        return None
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class NvmlReader:
    """Reads every GPU of this host. Call read() from a worker thread (NVML calls block)."""

    def __init__(self) -> None:
        self._nv: Any = None
        self.reason: Optional[str] = None
        self.driver_version: Optional[str] = None
        self._proc_names: dict[int, Optional[str]] = {}
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
        except ImportError as e:
            self.reason = f"NVML unavailable: nvidia-ml-py is not installed ({e})"
            return
        except Exception as e:
            self.reason = f"NVML unavailable: {_describe(e)}"
            return
        self._nv = pynvml
        self.driver_version = _text(_try(pynvml.nvmlSystemGetDriverVersion))

    @property
    def available(self) -> bool:
        return self._nv is not None

    def close(self) -> None:
        if self._nv is not None:
            _try(self._nv.nvmlShutdown)
            self._nv = None

    def read(self) -> GpuSnapshot:
        ts = clock.wall()
        nv = self._nv
        if nv is None:
            return GpuSnapshot(ts=ts, available=False, reason=self.reason)
        count = _try(nv.nvmlDeviceGetCount)
        if count is None:
            return GpuSnapshot(ts=ts, available=False, reason="NVML unavailable: nvmlDeviceGetCount failed",
                               driver_version=self.driver_version)
        gpus = []
        for i in range(count):
            h = _try(lambda: nv.nvmlDeviceGetHandleByIndex(i))
            if h is None:
                gpus.append(GpuReading(index=i, name=None, uuid=None, mem_used_bytes=None, mem_total_bytes=None,
                                       util_pct=None, power_w=None, temp_c=None))
                continue
            gpus.append(self._read_one(nv, i, h))
        return GpuSnapshot(ts=ts, available=True, driver_version=self.driver_version, gpus=gpus)

    def _read_one(self, nv: Any, index: int, h: Any) -> GpuReading:
        # Memory info v2 reports "used" without the driver's reserved memory, as nvidia-smi does.
        # v1 counts the reserve as used: on an H200 (driver 580) an idle card read 615 MiB under
        # v1 against nvidia-smi's 0 MiB. Older drivers lack v2; fall back to v1 there.
        mem = _try(lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2))
        if mem is None:
            mem = _try(lambda: nv.nvmlDeviceGetMemoryInfo(h))
        util = _try(lambda: nv.nvmlDeviceGetUtilizationRates(h))
        power_mw = _try(lambda: nv.nvmlDeviceGetPowerUsage(h))
        temp = _try(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        return GpuReading(
            index=index,
            name=_text(_try(lambda: nv.nvmlDeviceGetName(h))),
            uuid=_text(_try(lambda: nv.nvmlDeviceGetUUID(h))),
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else None,
            util_pct=float(util.gpu) if util is not None else None,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            temp_c=float(temp) if temp is not None else None,
            processes=self._processes(nv, h),
        )

    def _processes(self, nv: Any, h: Any) -> Optional[list[GpuProcess]]:
        procs = _try(lambda: nv.nvmlDeviceGetComputeRunningProcesses(h))
        if procs is None:
            return None  # the driver refused to list them (common in containers)
        out = []
        for p in procs:
            pid = int(p.pid)
            used = getattr(p, "usedGpuMemory", None)
            # pynvml maps NVML_VALUE_NOT_AVAILABLE to None; keep it None, not 0.
            out.append(GpuProcess(pid=pid, name=self._proc_name(pid), used_bytes=int(used) if used is not None else None))
        return out

    def _proc_name(self, pid: int) -> Optional[str]:
        if pid not in self._proc_names:
            try:
                import psutil

                self._proc_names[pid] = psutil.Process(pid).name()
            except Exception:
                self._proc_names[pid] = None  # another container's process, or gone
        return self._proc_names[pid]


def _describe(e: Exception) -> str:
    text = str(e) or type(e).__name__
    name = type(e).__name__
    if "LibraryNotFound" in name or "NVML Shared Library Not Found" in text:
        return "no NVIDIA driver (libnvidia-ml.so.1 not found)"
    if "DriverNotLoaded" in name:
        return "the NVIDIA driver is not loaded"
    if "NoPermission" in name:
        return "no permission to talk to the NVIDIA driver"
    return text


# --------------------------------------------------------------------------------------------
# JSON form


def snapshot_to_dict(s: GpuSnapshot) -> dict:
    return dataclasses.asdict(s)


def snapshot_from_dict(d: dict) -> GpuSnapshot:
    gpus = []
    for g in d.get("gpus") or []:
        procs = g.get("processes")
        gpus.append(GpuReading(
            index=int(g["index"]), name=g.get("name"), uuid=g.get("uuid"),
            mem_used_bytes=g.get("mem_used_bytes"), mem_total_bytes=g.get("mem_total_bytes"),
            util_pct=g.get("util_pct"), power_w=g.get("power_w"), temp_c=g.get("temp_c"),
            processes=None if procs is None else [GpuProcess(pid=int(p["pid"]), name=p.get("name"),
                                                             used_bytes=p.get("used_bytes")) for p in procs],
            # fixtures from before simulated GPUs existed hold NVML readings only
            source=g.get("source") or "nvml", arm=g.get("arm"), weights_bytes=g.get("weights_bytes"),
            kv_pool_bytes=g.get("kv_pool_bytes"), cuda_graph_bytes=g.get("cuda_graph_bytes"),
            power_limit_w=g.get("power_limit_w"),
        ))
    return GpuSnapshot(ts=float(d.get("ts", 0.0)), available=bool(d.get("available")), reason=d.get("reason"),
                       driver_version=d.get("driver_version"), gpus=gpus)


def save_fixture(path: Path, readings: list[GpuSnapshot]) -> None:
    doc = {"format": FIXTURE_FORMAT, "host": socket.gethostname(),
           "readings": [snapshot_to_dict(r) for r in readings]}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def load_fixture(path: Path) -> list[GpuSnapshot]:
    from specmon.errors import UsageError

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: expected an NVML fixture (JSON), {e}")
    if not isinstance(doc, dict) or doc.get("format") != FIXTURE_FORMAT or not isinstance(doc.get("readings"), list):
        raise UsageError(f"{path}: expected a JSON object with format {FIXTURE_FORMAT!r} and a readings list")
    return [snapshot_from_dict(r) for r in doc["readings"]]


class NvmlReplay:
    """Plays saved readings back in order (looping), each stamped with the current time."""

    def __init__(self, readings: list[GpuSnapshot]):
        if not readings:
            raise ValueError("NvmlReplay needs at least one reading")
        self._readings = readings
        self._i = 0
        self.available = readings[0].available
        self.reason = readings[0].reason

    @classmethod
    def from_file(cls, path: Path) -> "NvmlReplay":
        return cls(load_fixture(path))

    def read(self) -> GpuSnapshot:
        r = self._readings[self._i % len(self._readings)]
        self._i += 1
        return dataclasses.replace(r, ts=clock.wall())

    def close(self) -> None:
        pass


def main(argv: Optional[list[str]] = None) -> int:
    """Save raw readings of this host's GPUs as a fixture: python -m specmon.sources.nvml --dump F."""
    p = argparse.ArgumentParser(prog="python -m specmon.sources.nvml")
    p.add_argument("--dump", required=True, help="fixture file to write")
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--interval", type=float, default=1.0)
    a = p.parse_args(argv)
    reader = NvmlReader()
    readings = []
    for i in range(a.count):
        if i:
            time.sleep(a.interval)
        readings.append(reader.read())
    reader.close()
    save_fixture(Path(a.dump), readings)
    last = readings[-1]
    print(f"{a.dump}: {len(readings)} readings, {len(last.gpus)} GPUs"
          + ("" if last.available else f" ({last.reason})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
