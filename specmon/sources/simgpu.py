"""The GPU a simulated arm simulates, in the typed readings NVML gives (GpuReading, source "simulated").

`specmon sim` has no GPU; it says what the card it simulates would show (weights, KV pool, CUDA
graphs, used memory, utilization, power) on its own endpoint, GET /specmon/simulated_gpu, which
SGLang does not have. specmon asks for it only when the server said, in /server_info, that it is
the simulator (ArmInfo.simulated, from its sim_profile key, which SGLang never writes): a real
server is never sent that GET, and a simulated arm never takes this host's GPUs as its own.

Fleet workers (a gateway's, a Prometheus fleet's) are not asked: 64 simulated workers would cost
64 more requests a tick for a strip nobody can read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from typing import Any, Iterable, Optional

from specmon.model import GpuReading, GpuSnapshot, Sample
from specmon.sources.sglang import ArmCollector

PATH = "/specmon/simulated_gpu"
MAX_BYTES = 256 * 1024  # a few GPUs' JSON is ~1 KiB each


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def _int(v: Any) -> Optional[int]:
    f = _num(v)
    return int(f) if f is not None else None


def _str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) and v else None


def readings_from_json(doc: Any, arm: str) -> Optional[list[GpuReading]]:
    """The simulated GPUs of one /specmon/simulated_gpu answer; None when it is not one (no
    `"simulated": true`, no gpus list). A figure that is missing or not a number is None."""
    if not isinstance(doc, dict) or doc.get("simulated") is not True or not isinstance(doc.get("gpus"), list):
        return None
    out = []
    for g in doc["gpus"]:
        if not isinstance(g, dict) or _int(g.get("index")) is None:
            continue
        out.append(GpuReading(
            index=_int(g.get("index")), name=_str(g.get("name")), uuid=_str(g.get("uuid")),
            mem_used_bytes=_int(g.get("memory_used_bytes")), mem_total_bytes=_int(g.get("memory_total_bytes")),
            util_pct=_num(g.get("utilization_pct")), power_w=_num(g.get("power_w")),
            temp_c=_num(g.get("temperature_c")), processes=None, source="simulated", arm=arm,
            weights_bytes=_int(g.get("weights_bytes")), kv_pool_bytes=_int(g.get("kv_pool_bytes")),
            cuda_graph_bytes=_int(g.get("cuda_graph_bytes")), power_limit_w=_num(g.get("power_limit_w"))))
    return out


def is_simulated(c: ArmCollector) -> bool:
    return c.info is not None and c.info.simulated


async def read_one(c: ArmCollector) -> Optional[list[GpuReading]]:
    """One simulated arm's GPUs; None for an arm not known to be simulated (no request is made),
    or when there is no usable answer (its GPU figures are then unknown)."""
    if not is_simulated(c) or c.spec.fleet is not None:
        return None
    try:
        status, body = await c._get(PATH, MAX_BYTES)
        doc = json.loads(body) if status == 200 else None
    except Exception:  # refused, timed out, too large, not JSON: unknown, never the session's end
        return None
    return readings_from_json(doc, c.spec.name)


async def read_all(collectors: Iterable[ArmCollector]) -> dict[str, list[GpuReading]]:
    """The simulated GPUs of every simulated arm that answered, by arm, asked concurrently."""
    asked = [c for c in collectors if is_simulated(c) and c.spec.fleet is None]
    if not asked:
        return {}
    got = await asyncio.gather(*(read_one(c) for c in asked))
    return {c.spec.name: g for c, g in zip(asked, got) if g is not None}


class SimulatedGpuPoller:
    """One round of asks at a time, like a scrape: a round that runs past its tick's deadline (a
    busy CPU) is used on a later tick, and an arm's newest answer stands for up to keep_s. A new
    round starts at most every every_s: the simulated pools do not move, and a round costs ~1.4 ms
    of CPU an arm (3 arms every second were ~0.4% of a core, a fifth of the TUI's whole budget)."""

    def __init__(self, keep_s: float, every_s: float = 2.0) -> None:
        self.keep_s = max(keep_s, 2 * every_s)
        self.every_s = every_s
        self._task: Optional[asyncio.Task] = None
        self._started: Optional[float] = None
        self._last: dict[str, tuple[float, list[GpuReading]]] = {}  # arm -> (when, its GPUs)

    def poll(self, collectors: Iterable[ArmCollector]) -> Optional[asyncio.Task]:
        """The round in flight, a new one when none is and the last began every_s ago, else None;
        await it up to the tick's deadline."""
        now = time.monotonic()
        if self._task is None and (self._started is None or now - self._started >= self.every_s):
            asked = [c for c in collectors if is_simulated(c) and c.spec.fleet is None]
            if asked:  # no round (and no clock) until some arm is known to be simulated
                self._started = now
                self._task = asyncio.ensure_future(read_all(asked))
        return self._task

    def take(self) -> list[GpuReading]:
        """Every arm's newest simulated GPUs, leaving out answers older than keep_s."""
        t, now = self._task, time.monotonic()
        if t is not None and t.done():
            self._task = None
            if not t.cancelled() and t.exception() is None:
                for arm, gpus in t.result().items():
                    self._last[arm] = (now, gpus)
        self._last = {a: v for a, v in self._last.items() if now - v[0] <= self.keep_s}
        return [g for _, gpus in self._last.values() for g in gpus]

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


def with_simulated(snap: Optional[GpuSnapshot], sim: list[GpuReading], ts: float) -> Optional[GpuSnapshot]:
    """This tick's snapshot with the simulated GPUs after the host's (a new object: the NVML
    reading is left as it was read)."""
    if not sim:
        return snap
    if snap is None:  # the host reading did not come in time this tick
        return GpuSnapshot(ts=ts, available=False, reason="no NVML reading this tick", gpus=list(sim))
    return dataclasses.replace(snap, gpus=snap.gpus + sim)


def attach_simulated(s: Sample, snap: Optional[GpuSnapshot]) -> None:
    """A simulated arm's Sample gets its own simulated card's figures (sums over its GPUs, each
    None unless every GPU gave it), marked gpu_source "simulated"."""
    mine = [g for g in (snap.gpus if snap is not None else ()) if g.simulated and g.arm == s.arm]
    if not mine:
        return
    s.gpu_mem_used_bytes = _sum([g.mem_used_bytes for g in mine])
    s.gpu_mem_total_bytes = _sum([g.mem_total_bytes for g in mine])
    s.gpu_power_w = _sum([g.power_w for g in mine])
    s.gpu_source = "simulated"


def _sum(values: list) -> Optional[Any]:
    return sum(values) if values and all(v is not None for v in values) else None
