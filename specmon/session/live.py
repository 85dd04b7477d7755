"""LiveSession: the one orchestrator behind both front ends (Textual app and headless printer).

Every tick (default 1 s) it scrapes all arms concurrently, reads NVML and psutil in a worker
thread, records one samples.csv row per arm and emits one SamplesTick for all arms. A scrape
that has not answered by the tick's deadline does not hold the tick back: that arm gets a
"timeout" Sample for this tick, and the scrape's answer, when it comes, is used on a later
tick. Optional parts plug in duck-typed:
- supervisor (launch mode): `await supervisor.start(emit)` first, `.arms` gives the arms,
  `await supervisor.restart(emit)` between levels if the ramp plan asks, `supervisor.stop()` at the end;
- ramp (LOAD's RampDriver): `await ramp.run(emit, self)` runs alongside; when it returns the
  session ends (unless keep_watching), and pause()/resume()/skip_level() are forwarded to it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from specmon.model import (
    ArmInfo, ArmInfoUpdated, ArmSpec, Event, GpuSnapshot, HostReading, Marker, Sample,
    SamplesTick, SessionEnded,
)
from specmon.session.recorder import Recorder, default_out_dir, public_url
from specmon.sources.host import HostCollector
from specmon.sources.predict import predicted_knee
from specmon.sources.sglang import ArmCollector

Emit = Callable[[Event], None]


class LiveSession:
    def __init__(
        self,
        arms: Sequence[ArmSpec],
        *,
        interval: float = 1.0,
        out_dir: Optional[Path] = None,
        isl: int = 1024,
        osl: int = 256,
        ramp: Any = None,
        supervisor: Any = None,
        gpu_indices: Optional[Mapping[str, Sequence[int]]] = None,
        window_s: float = 30.0,
        scrape_timeout_s: Optional[float] = None,
        nvml: Any = None,
        keep_watching: bool = False,
        record: bool = True,
        mode: str = "attach",
    ):
        self.arms = list(arms)
        self.interval = interval
        self.out_dir = Path(out_dir) if out_dir is not None else default_out_dir()
        self.isl, self.osl = isl, osl
        self.ramp = ramp
        self.supervisor = supervisor
        self.gpu_indices = {k: list(v) for k, v in (gpu_indices or {}).items()}
        self.window_s = window_s
        # A scrape may run past one tick (its answer is then used later) but not forever.
        self.scrape_timeout_s = scrape_timeout_s or max(2.0, 3 * interval)
        self.keep_watching = keep_watching
        self.mode = mode
        self.recorder: Optional[Recorder] = Recorder(self.out_dir) if record else None
        self._nvml = nvml
        self._collectors: dict[str, ArmCollector] = {}
        self._inflight: dict[str, asyncio.Task] = {}
        self._info_seen: dict[str, int] = {}
        self._knee_called: set[str] = set()
        self._samples: dict[str, deque[Sample]] = {}
        self._level: Optional[int] = None
        self._offered: Optional[int] = None
        self._emit: Emit = lambda e: None
        self._host: Optional[HostCollector] = None
        self.last_tick: Optional[SamplesTick] = None
        self.ticks = 0
        # Whoever sets the stop event may say why first (e.g. "duration reached", "interrupted").
        self.stop_reason: Optional[str] = None

    # ---- what the ramp and the UI call --------------------------------------------------------
    def set_level(self, level: Optional[int], offered: Optional[int]) -> None:
        self._level, self._offered = level, offered

    def samples_for(self, arm: str, t0: float, t1: float) -> list[Sample]:
        return [s for s in self._samples.get(arm, ()) if t0 <= s.ts <= t1]

    def info(self, arm: str) -> Optional[ArmInfo]:
        c = self._collectors.get(arm)
        return c.info if c else None

    def collector(self, arm: str) -> Optional[ArmCollector]:
        return self._collectors.get(arm)

    async def between_levels(self, level_index: int) -> None:
        plan = getattr(self.ramp, "plan", None)
        if self.supervisor is not None and getattr(plan, "restart_between_levels", False):
            await self.supervisor.restart(self._emit)

    def mark(self, label: str) -> None:
        ts = time.time()
        if self.recorder:
            self.recorder.write_marker(label, ts)
        self._emit(Marker(label=label, ts=ts))

    def pause_ramp(self) -> None:
        if self.ramp is not None and hasattr(self.ramp, "pause"):
            self.ramp.pause()

    def resume_ramp(self) -> None:
        if self.ramp is not None and hasattr(self.ramp, "resume"):
            self.ramp.resume()

    def skip_level(self) -> None:
        if self.ramp is not None and hasattr(self.ramp, "skip_level"):
            self.ramp.skip_level()

    # ---- the loop -----------------------------------------------------------------------------
    async def run(self, emit: Emit, stop: asyncio.Event) -> str:
        self._emit = emit
        reason = "stopped"
        ramp_task: Optional[asyncio.Task] = None
        try:
            if self.supervisor is not None:
                # Startup can take minutes (weights, CUDA graphs): a stop (q, Ctrl-C, SIGTERM) must not wait for it.
                starting = asyncio.ensure_future(_maybe_await(self.supervisor.start(emit)))
                stopping = asyncio.create_task(stop.wait())
                await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not starting.done():
                    starting.cancel()
                    await asyncio.gather(starting, return_exceptions=True)
                    reason = self.stop_reason or "stopped during startup"
                    return reason
                starting.result()
                self.arms = list(getattr(self.supervisor, "arms", self.arms))
            self._start_collectors()
            self._write_session_arms()
            if self.ramp is not None:
                plan = getattr(self.ramp, "plan", None)
                if self.recorder and plan is not None:
                    self.recorder.update_session(ramp_plan=_plain(plan))
                ramp_task = asyncio.create_task(self._run_ramp(emit))
            reason = await self._tick_loop(emit, stop, ramp_task)
        except asyncio.CancelledError:
            reason = "cancelled"
            raise
        except Exception as e:
            reason = f"error: {type(e).__name__}: {e}"
            raise
        finally:
            if ramp_task is not None and not ramp_task.done():
                ramp_task.cancel()
                await asyncio.gather(ramp_task, return_exceptions=True)
            await self._close_collectors()
            if self.supervisor is not None:
                try:
                    self.supervisor.stop()
                except Exception:
                    pass
            if self.recorder:
                self.recorder.close(reason)
            try:
                emit(SessionEnded(reason=reason))
            except Exception:
                pass
        return reason

    async def _run_ramp(self, emit: Emit) -> str:
        return await self.ramp.run(emit, self)

    def _start_collectors(self) -> None:
        for spec in self.arms:
            self._collectors[spec.name] = ArmCollector(
                spec, timeout_s=self.scrape_timeout_s, window_s=self.window_s,
                retry_min_s=self.interval, retry_max_s=max(8 * self.interval, 2.0))
            self._samples[spec.name] = deque(maxlen=200_000)
        self._host = HostCollector(self.arms)
        if self._nvml is None:
            from specmon.sources.nvml import NvmlReader

            self._nvml = NvmlReader()

    async def _close_collectors(self) -> None:
        for t in self._inflight.values():
            t.cancel()
        await asyncio.gather(*self._inflight.values(), return_exceptions=True)
        self._inflight.clear()
        for c in self._collectors.values():
            await c.aclose()
        if self._nvml is not None and hasattr(self._nvml, "close"):
            self._nvml.close()

    async def _tick_loop(self, emit: Emit, stop: asyncio.Event, ramp_task: Optional[asyncio.Task]) -> str:
        start = time.monotonic()
        while True:
            tick_start = time.monotonic()
            # The first tick also fetches /server_info (a large JSON): give it more time.
            deadline = self.interval * 0.8 if self.ticks else max(self.interval * 0.8, min(2.0, self.scrape_timeout_s))
            await self.tick(emit, deadline_s=deadline)
            if ramp_task is not None and ramp_task.done() and not self.keep_watching:
                exc = ramp_task.exception()
                if exc is not None:
                    raise exc
                return f"ramp {ramp_task.result() or 'done'}"
            if stop.is_set():
                return self.stop_reason or "stopped"
            # Ticks are on a fixed grid: a slow tick shortens the next wait, never shifts the grid.
            self.ticks += 1
            next_at = start + self.ticks * self.interval
            if next_at < tick_start:
                next_at = tick_start + self.interval
            wait = max(0.0, next_at - time.monotonic())
            waiters = [asyncio.create_task(stop.wait())]
            if ramp_task is not None and not self.keep_watching:
                waiters.append(ramp_task)  # type: ignore[arg-type]
            done, _ = await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            waiters[0].cancel()
            if stop.is_set():
                return self.stop_reason or "stopped"

    async def tick(self, emit: Emit, deadline_s: float) -> SamplesTick:
        ts = time.time()
        for name, c in self._collectors.items():
            if name not in self._inflight:
                self._inflight[name] = asyncio.create_task(c.scrape())
        readings = asyncio.create_task(asyncio.to_thread(self._read_machine))
        tasks = list(self._inflight.values()) + [readings]
        await asyncio.wait(tasks, timeout=deadline_s)
        if not readings.done():
            await asyncio.wait([readings], timeout=max(0.05, deadline_s / 4))
        gpus, host, per_arm = readings.result() if readings.done() and not readings.exception() else (None, None, {})
        if not readings.done():
            readings.cancel()
        samples = []
        for spec in self.arms:
            c = self._collectors[spec.name]
            t = self._inflight[spec.name]
            if t.done():
                del self._inflight[spec.name]
                s = t.result()
            else:
                s = Sample(ts=ts, arm=spec.name, up=False, state="timeout",
                           reason=f"no answer from {c.base} yet (scrape running for {time.time() - ts:.1f} s)",
                           spec_enabled=c.info.speculative if c.info else None)
            s.ts = ts
            if self.supervisor is not None and hasattr(self.supervisor, "fill_from_log"):
                self.supervisor.fill_from_log(s)  # launch mode: the server's log lines fill what the scrape lacks
            s.level, s.offered_concurrency = self._level, self._offered
            self._attach_machine(s, gpus, per_arm.get(spec.name), c)
            samples.append(s)
            self._samples[spec.name].append(s)
            if self.recorder:
                self.recorder.write_sample(s)
        if self.recorder and gpus is not None:
            self.recorder.write_gpus(gpus, ts=ts)
        tick = SamplesTick(samples=samples, gpus=gpus, host=host, ts=ts)
        self.last_tick = tick
        emit(tick)
        self._emit_info_updates(emit)
        return tick

    def _read_machine(self) -> tuple[Optional[GpuSnapshot], Optional[HostReading], dict]:
        gpus = self._nvml.read() if self._nvml is not None else None
        host, per_arm = self._host.read() if self._host else (None, {})
        return gpus, host, per_arm

    def _attach_machine(self, s: Sample, gpus: Optional[GpuSnapshot], proc: Optional[tuple],
                        c: ArmCollector) -> None:
        if proc is not None:
            s.server_rss_bytes, s.server_cpu_pct = proc
        if gpus is None or not gpus.available:
            return
        # Which GPUs belong to this arm: those named for it, else those running its processes.
        idx = self.gpu_indices.get(s.arm)
        if idx is None and self._host is not None:
            pids = self._host.server_pids(s.arm)
            if pids:
                idx = [g.index for g in gpus.gpus if g.processes and any(p.pid in pids for p in g.processes)]
        if not idx:
            return
        mine = [g for g in gpus.gpus if g.index in idx]
        s.gpu_mem_used_bytes = _sum([g.mem_used_bytes for g in mine])
        s.gpu_mem_total_bytes = _sum([g.mem_total_bytes for g in mine])
        s.gpu_power_w = _sum([g.power_w for g in mine])

    def _emit_info_updates(self, emit: Emit) -> None:
        for name, c in self._collectors.items():
            if c.info is None or self._info_seen.get(name) == c.info_version:
                continue
            self._info_seen[name] = c.info_version
            emit(ArmInfoUpdated(arm=name, info=c.info, source=c.mode))
            self._write_session_arms()
            if name not in self._knee_called:
                knee = predicted_knee(name, c.info, self.isl, self.osl, c.last_new_token_ratio)
                if knee is not None:
                    self._knee_called.add(name)
                    emit(knee)
                    if self.recorder:
                        self.recorder.update_session(predicted_knees={
                            **self.recorder.session.get("predicted_knees", {}),
                            name: {"concurrency": knee.concurrency, "detail": knee.detail,
                                   "isl": self.isl, "osl": self.osl}})

    def _write_session_arms(self) -> None:
        if not self.recorder:
            return
        arms = []
        for spec in self.arms:
            c = self._collectors.get(spec.name)
            info = c.info if c else None
            arms.append({
                "name": spec.name, "url": public_url(spec.url), "launched": spec.launched,
                "api_key_env": spec.api_key_env,
                "version": info.version if info else None,
                "time_scale": info.time_scale if info else None,
                "server_args": info.server_args() if info else None,
            })
        self.recorder.update_session(arms=arms, mode=self.mode, interval_s=self.interval)


def _sum(values: list) -> Any:
    known = [v for v in values if v is not None]
    return sum(known) if known and len(known) == len(values) else None


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return obj if isinstance(obj, (dict, list, str, int, float, type(None))) else str(obj)


async def _maybe_await(v: Any) -> Any:
    if inspect.isawaitable(v):
        return await v
    return v
