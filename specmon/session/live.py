"""LiveSession: the one orchestrator behind both front ends (Textual app and headless printer).

Every tick (default 1 s) it scrapes all arms concurrently (a gateway's many workers in turn:
FLEET_SCRAPE_EVERY_S below), reads NVML and psutil in a worker thread and emits one SamplesTick
for all arms. A scrape that has not answered by the tick's
deadline does not hold the tick back: that arm gets a "timeout" Sample for this tick, and the
scrape's answer, when it comes, is used on a later tick. A scrape that fails in any way is that
arm's state for the tick, never the session's end.

Everything the session learns leaves it as an event, through one emit: the session folder's
writer (folder.py) first, then the front end (`fan_out`). Typed parts plug in:
- supervisor (launch mode, source.Supervision): started first, restarted between levels when
  the ramp plan asks, stopped at the end;
- ramp (ramp.RampDriver): runs alongside through the RampHost view of this session; when it
  returns the session ends (unless keep_watching).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from specmon import clock
from specmon.analysis.fleet_levels import fleet_info, fleet_samples
from specmon.analysis.observed import ObservedCurves
from specmon.analysis.predict import predict_knee, predicted_knee_event
from specmon.model import (
    ArmInfo, ArmInfoUpdated, ArmSpec, FleetChanged, FleetReading, FleetStatus, GpuSnapshot, HostReading,
    LaunchContext, Marker, NoAnswer, ObservedKneesUpdated, ObservedRequestsRead, PredictedKnee, Sample, SamplesTick,
    SessionEnded, SessionStarted,
)
from specmon.session.folder import SessionWriter, default_out_dir, public_url
from specmon.session.level_samples import LevelSamples
from specmon.session.source import Emit, FleetSource, Supervision, fan_out
from specmon.sources.host import HostCollector
from specmon.sources.nvml import NvmlReader
from specmon.sources.prom import MetricsSnapshot
from specmon.sources.sglang import ArmCollector
from specmon.sources.sanity import sane_gpus, sane_sample
from specmon.sources.simgpu import SimulatedGpuPoller, attach_simulated, with_simulated

if TYPE_CHECKING:
    from specmon.session.ramp import RampDriver
    from specmon.analysis.request_windows import RequestWindowFeed
    from specmon.session.segments import Rotation

# The samples a ramp level's statistics read (RampHost.samples_for) are its own: in memory only
# while a level runs, from its start, only the fields the statistics read, bounded however long
# the level (level_samples.py); never read back from the folder. Without a ramp nothing reads
# them and nothing is kept: a session's history is its CSVs.

# A gateway's workers are scraped in turn, not all on every tick: reading a worker's /metrics
# costs ~1.5 ms of CPU, so 64 workers every second were most of a headless session's share of a
# core. Each worker is scraped at least every FLEET_SCRAPE_EVERY_S (so many a tick as that takes,
# oldest first); between its scrapes its row repeats the newest one with its age (Sample.stale_s,
# the fleet table's "age"). A fleet of FLEET_EVERY_TICK workers or fewer is scraped every tick,
# and so is every fleet during a ramp (its statistics read every tick's samples). A worker is
# scraped on the next tick, out of turn, when anything says it may have changed state: its last
# scrape did not read it, the gateway calls it unhealthy or got no load from it, or its kept
# connection was closed by its end (a server that exits closes it at once).
FLEET_SCRAPE_EVERY_S = 4.0
FLEET_EVERY_TICK = 8

# The observed knee (analysis/observed.py) is fed every tick and said every OBSERVED_EVERY_S
# (an ObservedKneesUpdated: session.json keeps the newest, so a killed session keeps it too) and
# once more at the end.
OBSERVED_EVERY_S = 5.0


# Why a front end stops a session (LiveSession.stop_cause, one of model.END_CAUSES) and the words
# the session ends with for it. The session's own ends carry their cause from where they happen
# (the tick loop returns it beside the words): no cause is ever read back out of the words.
STOP_WORDS = {"duration": "duration reached", "interrupted": "interrupted", "terminated": "terminated",
              "hangup": "hangup", "stopped": "stopped"}


def _stopped(cause: Optional[str], otherwise: str = "stopped") -> tuple[str, str]:
    """(cause, words) of a stop a front end asked for (its cause), or of one nobody explained."""
    if cause is None:
        return "stopped", otherwise
    return cause, STOP_WORDS.get(cause, cause)


class LiveSession:
    def __init__(
        self,
        arms: Sequence[ArmSpec],
        *,
        interval: float = 1.0,
        out_dir: Optional[Path] = None,
        isl: int = 1024,
        osl: int = 256,
        ramp: Optional["RampDriver"] = None,
        supervisor: Optional[Supervision] = None,
        gpu_indices: Optional[Mapping[str, Sequence[int]]] = None,
        window_s: float = 30.0,
        scrape_timeout_s: Optional[float] = None,
        nvml: Optional[NvmlReader] = None,
        keep_watching: bool = False,
        record: bool = True,
        mode: str = "attach",
        launch: Optional[LaunchContext] = None,
        panes: Optional[Sequence[str]] = None,
        consumers: Sequence[Emit] = (),
        fleets: Sequence[FleetSource] = (),
        request_metrics: Sequence["RequestWindowFeed"] = (),
        rotation: Optional["Rotation"] = None,
    ):
        clock.anchor()  # the session's stamps start from the system clock as it reads now
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
        self.mode_label = "live"
        self.launch = launch
        self.panes = list(panes) if panes is not None else None
        # More consumers of the event stream (an exporter...), after the writer and the front end.
        self.consumers = list(consumers)
        self.fleets = list(fleets)
        # --request-metrics-dir: each arm's export files, read (in a worker thread) every tick
        self.request_metrics = list(request_metrics)
        self.last_fleets: list[FleetStatus] = []
        self._fleet_polls: dict[str, asyncio.Task] = {}
        self._fleet_task: Optional[asyncio.Task] = None
        self._fleet_samples: dict[str, Sample] = {}  # arm -> the fleet's own reading this tick
        self._fleet_only: set[str] = set()  # arms the fleet measures itself (no direct scrape)
        self._unreachable: set[str] = set()  # arms whose last direct scrape did not answer
        self._scraped: dict[str, Sample] = {}  # fleet worker -> its newest scrape's Sample (scraped in turn)
        self._scraped_ts: dict[str, float] = {}  # ... and when that scrape's tick was
        self.writer: Optional[SessionWriter] = SessionWriter(self.out_dir, rotation=rotation) if record else None
        self._nvml = nvml
        self._simgpu = SimulatedGpuPoller(keep_s=3 * interval, every_s=max(interval, 2.0))  # simulated arms' cards
        self._collectors: dict[str, ArmCollector] = {}
        self._inflight: dict[str, asyncio.Task] = {}
        self._info_seen: dict[str, int] = {}
        self._closing: list[asyncio.Future] = []  # collectors of workers that left, closing
        self._predicted: dict[str, PredictedKnee] = {}
        self._level_samples = LevelSamples()  # the running level's, every arm's (above)
        self._level: Optional[int] = None
        self._offered: Optional[int] = None
        self._emit: Emit = self.writer if self.writer is not None else (lambda e: None)
        self._host: Optional[HostCollector] = None
        self.last_tick: Optional[SamplesTick] = None
        self.ticks = 0
        self.observed = ObservedCurves()  # every arm's operating curve, from its own samples
        self._observed_said = time.monotonic()
        # Whoever sets the stop event may say why first (STOP_WORDS' keys: "duration", "interrupted").
        self.stop_cause: Optional[str] = None

    # ---- what the ramp and the UI call --------------------------------------------------------
    def set_level(self, level: Optional[int], offered: Optional[int]) -> None:
        if level != self._level:  # a new level (or none): nothing asks for the older samples
            self._level_samples = LevelSamples()
        self._level, self._offered = level, offered

    def samples_for(self, arm: str, t0: float, t1: float) -> list[Sample]:
        if self._ramp_fleet(arm) is not None:  # the ramp's gateway: its workers' sums
            return fleet_samples({w.name: self.samples_for(w.name, t0, t1) for w in self.fleet_workers(arm)}, arm)
        return self._level_samples.samples(arm, t0, t1)

    def _keep(self, arm: str, s: Sample) -> None:
        """The running level's samples, for its statistics (level_samples.py)."""
        if self.ramp is not None and self._level is not None:
            self._level_samples.add(arm, s)

    def info(self, arm: str) -> Optional[ArmInfo]:
        c = self._collectors.get(arm)
        if c is None and self._ramp_fleet(arm) is not None:
            return fleet_info([w.info for w in (self._collectors.get(a.name) for a in self.fleet_workers(arm))
                               if w is not None and w.info is not None])
        return c.info if c else None

    def fleet_workers(self, arm: str) -> list[ArmSpec]:
        """The workers behind a ramp arm that is a gateway (the fleet polled at its URL)."""
        f = self._ramp_fleet(arm)
        return [a for a in self.arms if a.fleet == f.name] if f is not None else []

    def _ramp_fleet(self, arm: str) -> Optional[FleetSource]:
        """The gateway fleet whose URL is the ramp arm `arm`'s (not an arm watched itself)."""
        if self.ramp is None or arm in self._collectors:
            return None
        spec = next((a for a in self.ramp.arms if a.name == arm), None)
        if spec is None:
            return None
        url = spec.url.rstrip("/")
        return next((f for f in self.fleets if f.kind == "gateway" and f.url == url), None)

    def newest_metrics(self, arm: str) -> Optional[MetricsSnapshot]:
        c = self._collectors.get(arm)
        return c.window.newest if c is not None else None

    def predicted(self, arm: str) -> Optional[PredictedKnee]:
        return self._predicted.get(arm)

    def _never_answered(self) -> list[NoAnswer]:
        """The arms whose server never answered a scrape, each with the last reason."""
        return [NoAnswer(arm=c.spec.name, url=public_url(c.spec.url), reason=c.last_reason or c.last_state)
                for c in self._collectors.values() if not c.ever_up]

    async def between_levels(self, level_index: int, restart: bool) -> None:
        if self.supervisor is not None and restart:
            await self.supervisor.restart(self._emit)

    def mark(self, label: str) -> None:
        self._emit(Marker(label=label, ts=clock.wall()))

    def pause_ramp(self) -> bool:
        if self.ramp is not None:
            self.ramp.pause()
        return self.ramp is not None

    def resume_ramp(self) -> bool:
        if self.ramp is not None:
            self.ramp.resume()
        return self.ramp is not None

    def skip_level(self) -> bool:
        if self.ramp is not None:
            self.ramp.skip_level()
        return self.ramp is not None

    # ---- the loop -----------------------------------------------------------------------------
    async def run(self, emit: Emit, stop: asyncio.Event) -> str:
        emit = self._emit = fan_out(self.writer, emit, *self.consumers)
        cause, reason = "stopped", "stopped"
        ramp_task: Optional[asyncio.Task] = None
        try:
            arms = self.supervisor.arms if self.supervisor is not None else self.arms
            emit(SessionStarted(mode=self.mode, arms=list(arms), interval_s=self.interval, isl=self.isl,
                                osl=self.osl, launch=self.launch, panes=self.panes))
            if self.supervisor is not None:
                # Startup can take minutes (weights, CUDA graphs): a stop (q, Ctrl-C, SIGTERM) must not wait for it.
                starting = asyncio.ensure_future(self.supervisor.start(emit))
                stopping = asyncio.create_task(stop.wait())
                await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
                stopping.cancel()
                if not starting.done():
                    starting.cancel()
                    await asyncio.gather(starting, return_exceptions=True)
                    cause, reason = _stopped(self.stop_cause, "stopped during startup")
                    return reason
                starting.result()
                self.arms = list(self.supervisor.arms)
            self._start_collectors()
            if self.fleets:
                await self._poll_fleets(emit, deadline_s=max(self.interval * 0.8, min(2.0, self.scrape_timeout_s)))
            if self.ramp is not None:
                ramp_task = asyncio.create_task(self.ramp.run(emit, self))
            cause, reason = await self._tick_loop(emit, stop, ramp_task)
        except asyncio.CancelledError:
            # cancelled after a stop was asked (a front end that stopped waiting): the stop's why
            cause, reason = _stopped(self.stop_cause) if self.stop_cause else ("cancelled", "cancelled")
            raise
        except Exception as e:
            cause, reason = "error", f"error: {type(e).__name__}: {e}"
            raise
        finally:
            if ramp_task is not None and not ramp_task.done():
                ramp_task.cancel()
                await asyncio.gather(ramp_task, return_exceptions=True)
            await self._close_collectors()
            for src in self.request_metrics:  # the lines written until now, and the last window
                try:
                    for ev in await asyncio.to_thread(src.close):
                        if isinstance(ev, ObservedRequestsRead):
                            self.observed.add_requests(ev.records)
                        emit(ev)
                except Exception:
                    pass
            if self.supervisor is not None:
                try:
                    self.supervisor.stop()
                except Exception:
                    pass
            try:
                if self.observed.curves:
                    emit(ObservedKneesUpdated(knees=self.observed.knees()))
            except Exception:
                pass
            try:
                emit(SessionEnded(reason=reason, cause=cause, never_answered=self._never_answered()))
            except Exception:
                pass
        return reason

    def _start_collectors(self) -> None:
        for spec in self.arms:
            self._start_collector(spec)
        self._host = HostCollector(self.arms)
        if self._nvml is None:
            self._nvml = NvmlReader()

    def _start_collector(self, spec: ArmSpec) -> None:
        self._collectors[spec.name] = ArmCollector(
            spec, timeout_s=self.scrape_timeout_s, window_s=self.window_s,
            retry_min_s=self.interval, retry_max_s=max(8 * self.interval, 2.0))

    # ---- fleets: workers that come and go -------------------------------------------------------
    async def _poll_fleets(self, emit: Emit, deadline_s: float) -> None:
        """Poll every fleet source (a poll that is late is used on a later tick, like a scrape),
        then make the watched arms the fleets' workers: new ones start, gone ones stop (their
        rows stop; everything recorded stays)."""
        for f in self.fleets:
            if f.name not in self._fleet_polls:
                # a gateway reads its figures only of workers not answering us
                f.need_figures_of({a.url for a in self.arms if a.fleet == f.name and a.name in self._unreachable})
                self._fleet_polls[f.name] = asyncio.create_task(f.poll())
        await asyncio.wait(list(self._fleet_polls.values()), timeout=deadline_s)
        self._fleet_samples = {}
        statuses = []
        for f in self.fleets:
            t = self._fleet_polls[f.name]
            if not t.done():
                prev = next((x for x in self.last_fleets if x.name == f.name), None)
                if prev is not None:
                    statuses.append(prev)
                continue
            del self._fleet_polls[f.name]
            exc = t.exception()
            if exc is not None:  # a source must not raise; if it does, it is that fleet's state
                statuses.append(FleetStatus(name=f.name, kind="unknown", url="", up=False,
                                            reason=f"{type(exc).__name__}: {exc}"[:300]))
                continue
            reading = t.result()
            statuses.append(reading.status)
            if reading.status.up:  # a fleet that did not answer keeps its workers
                self._reconcile(f.name, reading, emit)
            self._fleet_samples.update(reading.samples)
        self.last_fleets = statuses

    def _reconcile(self, fleet: str, reading: FleetReading, emit: Emit) -> None:
        now = {w.name: w for w in reading.workers}
        mine = [a for a in self.arms if a.fleet == fleet]
        added = [w for name, w in now.items() if name not in {a.name for a in self.arms}]
        removed = [a.name for a in mine if a.name not in now]
        if not added and not removed:
            return
        for w in added:
            self.arms.append(w)
            if reading.scrape_workers:
                self._start_collector(w)
            else:
                self._fleet_only.add(w.name)
        for name in removed:
            self.arms = [a for a in self.arms if a.name != name]
            self._fleet_only.discard(name)
            # its history is in the CSVs; a fleet whose workers come and go under new names must
            # not keep samples per name forever
            self._level_samples.drop(name)
            self._scraped.pop(name, None)
            self._scraped_ts.pop(name, None)
            c = self._collectors.pop(name, None)
            t = self._inflight.pop(name, None)
            if t is not None:
                t.cancel()
            if c is not None:
                self._closing.append(asyncio.ensure_future(c.aclose()))
        # Process readings only for the servers scraped here: a fleet's own arms have none (and
        # finding 500 local listeners costs seconds of CPU).
        self._host = HostCollector([a for a in self.arms if a.name not in self._fleet_only])
        words = []
        if added:
            words.append(f"{len(added)} joined ({', '.join(w.name for w in added)})")
        if removed:
            words.append(f"{len(removed)} left ({', '.join(removed)})")
        emit(FleetChanged(fleet=fleet, added=added, removed=removed, note=f"{fleet}: " + "; ".join(words)))

    async def _close_collectors(self) -> None:
        if self._fleet_task is not None:
            self._fleet_task.cancel()
            await asyncio.gather(self._fleet_task, return_exceptions=True)
        for t in list(self._inflight.values()) + list(self._fleet_polls.values()):
            t.cancel()
        await asyncio.gather(*self._inflight.values(), *self._fleet_polls.values(), return_exceptions=True)
        self._inflight.clear()
        await asyncio.gather(*self._closing, return_exceptions=True)
        for c in self._collectors.values():
            await c.aclose()
        for f in self.fleets:
            try:
                await f.aclose()
            except Exception:
                pass
        await self._simgpu.aclose()
        if self._nvml is not None:
            self._nvml.close()

    async def _tick_loop(self, emit: Emit, stop: asyncio.Event, ramp_task: Optional[asyncio.Task]) -> tuple[str, str]:
        start = time.monotonic()
        while True:
            tick_start = time.monotonic()
            # The first tick also fetches /server_info (a large JSON): give it more time.
            deadline = self.interval * 0.8 if self.ticks else max(self.interval * 0.8, min(2.0, self.scrape_timeout_s))
            await self.tick(emit, deadline_s=deadline)
            if self.request_metrics:
                await self._read_request_metrics(emit)
            if self.writer is not None and self.writer.error is not None:
                # The folder cannot take more (full disk): stop cleanly, rows written stay whole.
                return "recording failed", f"recording failed: {self.writer.error}"
            if ramp_task is not None and ramp_task.done() and not self.keep_watching:
                exc = ramp_task.exception()
                if exc is not None:
                    raise exc
                return "ramp ended", f"ramp {ramp_task.result() or 'done'}"
            if stop.is_set():
                return _stopped(self.stop_cause)
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
                return _stopped(self.stop_cause)

    async def _read_request_metrics(self, emit: Emit) -> None:
        """The export files' new lines, as events (the reads in a thread: a slow disk never holds the loop)."""
        for src in self.request_metrics:
            for ev in await asyncio.to_thread(src.poll):
                if isinstance(ev, ObservedRequestsRead):  # exact TTFT and queue time for the curve
                    self.observed.add_requests(ev.records)
                emit(ev)

    def _in_turn(self) -> Optional[set[str]]:
        """The gateway workers to scrape this tick (FLEET_SCRAPE_EVERY_S above); None: every arm."""
        workers = [a.name for a in self.arms if a.fleet is not None and a.name in self._collectors]
        if self.ramp is not None or len(workers) <= FLEET_EVERY_TICK:
            return None
        budget = max(FLEET_EVERY_TICK, math.ceil(len(workers) * self.interval / FLEET_SCRAPE_EVERY_S))
        flagged = {w.arm for f in self.last_fleets for w in f.workers if w.healthy is False}
        urgent, rest = [], []
        for name in workers:
            last = self._scraped.get(name)
            fleet_sample = self._fleet_samples.get(name)
            if (last is None or not last.up or name in flagged or self._collectors[name].peer_closed()
                    or (fleet_sample is not None and not fleet_sample.up)):
                urgent.append(name)
            else:
                rest.append(name)
        rest.sort(key=lambda n: self._scraped_ts.get(n, 0.0))
        return set(urgent) | set(rest[:max(0, budget - len(urgent))])

    async def tick(self, emit: Emit, deadline_s: float) -> SamplesTick:
        ts = clock.wall()
        in_turn = self._in_turn()
        for name, c in self._collectors.items():
            if name not in self._inflight and (in_turn is None or name in in_turn or name not in self._scraped):
                self._inflight[name] = asyncio.create_task(c.scrape())
        readings = asyncio.create_task(asyncio.to_thread(self._read_machine))
        # simulated arms' own cards (only arms whose /server_info said they are the simulator)
        simulated = self._simgpu.poll(self._collectors.values())
        tasks = list(self._inflight.values()) + [readings] + ([simulated] if simulated is not None else [])
        if self.fleets and (self._fleet_task is None or self._fleet_task.done()):
            # one poll round at a time: a round that runs past this tick finishes on a later one
            self._fleet_task = asyncio.create_task(self._poll_fleets(emit, deadline_s))
        if self._fleet_task is not None and not self._fleet_task.done():
            tasks.append(self._fleet_task)
        await asyncio.wait(tasks, timeout=deadline_s)
        if not readings.done():
            await asyncio.wait([readings], timeout=max(0.05, deadline_s / 4))
        gpus, host, per_arm = readings.result() if readings.done() and not readings.exception() else (None, None, {})
        if not readings.done():
            readings.cancel()
        gpus = sane_gpus(with_simulated(gpus, self._simgpu.take(), ts))  # impossible readings: unknown
        samples = []
        for spec in list(self.arms):
            c = self._collectors.get(spec.name)
            t = self._inflight.get(spec.name)
            fleet_sample = self._fleet_samples.get(spec.name)
            if c is None:  # measured by its fleet only (Prometheus)
                s = fleet_sample if fleet_sample is not None else Sample(
                    ts=ts, arm=spec.name, up=False, state="timeout", reason="no reading from its fleet this tick")
            elif t is None and spec.name in self._scraped:  # not its turn: its newest scrape, with its age
                last = self._scraped[spec.name]
                # a restart is said once, on the scrape that saw it; scrape_s was that scrape's
                s = dataclasses.replace(last, stale_s=round(ts - self._scraped_ts[spec.name], 3),
                                        server_restarted=False, scrape_s=None)
            elif t is None:  # joined its fleet during this tick: scraped from the next one
                s = fleet_sample if fleet_sample is not None else Sample(
                    ts=ts, arm=spec.name, up=False, state="starting", reason="joined its fleet; first scrape next tick")
            elif t.done():
                del self._inflight[spec.name]
                s = _scrape_result(t, c, ts)
                (self._unreachable.discard if s.up else self._unreachable.add)(spec.name)
                if spec.fleet is not None:
                    self._scraped[spec.name], self._scraped_ts[spec.name] = s, ts
            else:
                s = Sample(ts=ts, arm=spec.name, up=False, state="timeout",
                           reason=f"no answer from {c.shown} yet (scrape running for "
                                  f"{clock.wall() - (c.scrape_started or ts):.1f} s)",
                           spec_enabled=c.info.speculative if c.info else None)
            if c is not None and not s.up and s.state != "refused" and fleet_sample is not None and fleet_sample.up:
                # The worker cannot be reached, its gateway can: the gateway's figures, said so. Not
                # for a refused connect: nothing listens there, whatever the gateway last cached
                # (smg 1.x's smg_engine_* keep a stopped worker's last load until its health check fails).
                fleet_sample.reason = f"worker unreachable ({s.reason}); figures from its gateway"
                s = fleet_sample
            s.ts = ts
            if spec.fleet is not None:
                s.worker = s.worker or spec.url
                s.role = s.role or spec.role
            if self.supervisor is not None:
                self.supervisor.fill_from_log(s)  # launch mode: the server's log lines fill what the scrape lacks
            s.level, s.offered_concurrency = self._level, self._offered
            if c is not None:
                self._attach_machine(s, gpus, per_arm.get(spec.name), c)
            samples.append(sane_sample(s))  # whatever source filled it: no 5,500 % share written or shown
            self._keep(spec.name, s)
        tick = SamplesTick(samples=samples, gpus=gpus, host=host, ts=ts, fleets=list(self.last_fleets))
        self.last_tick = tick
        emit(tick)
        self._emit_info_updates(emit)
        self._observe(samples, emit)
        return tick

    def _observe(self, samples: list[Sample], emit: Emit) -> None:
        for s in samples:
            c = self._collectors.get(s.arm)
            self.observed.add(s, c.info if c is not None else None, self.interval)
        now = time.monotonic()
        if now - self._observed_said >= OBSERVED_EVERY_S:
            self._observed_said = now
            emit(ObservedKneesUpdated(knees=self.observed.knees()))

    def _read_machine(self) -> tuple[Optional[GpuSnapshot], Optional[HostReading], dict]:
        gpus = self._nvml.read() if self._nvml is not None else None
        host, per_arm = self._host.read() if self._host else (None, {})
        return gpus, host, per_arm

    def _attach_machine(self, s: Sample, gpus: Optional[GpuSnapshot], proc: Optional[tuple],
                        c: ArmCollector) -> None:
        if proc is not None:
            s.server_rss_bytes, s.server_cpu_pct = proc
        if c.info is not None and c.info.simulated:
            attach_simulated(s, gpus)  # its simulated card only, never this host's GPUs
            return
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
        mine = [g for g in gpus.host_gpus if g.index in idx]
        s.gpu_mem_used_bytes = _sum([g.mem_used_bytes for g in mine])
        s.gpu_mem_total_bytes = _sum([g.mem_total_bytes for g in mine])
        s.gpu_power_w = _sum([g.power_w for g in mine])
        s.gpu_source = "nvml"

    def _emit_info_updates(self, emit: Emit) -> None:
        for name, c in self._collectors.items():
            if c.info is None or self._info_seen.get(name) == c.info_version:
                continue
            self._info_seen[name] = c.info_version
            info = c.info
            if info.startup_s is None and self.supervisor is not None:
                # launch mode, a server whose /server_info has no startup_time (0.5.10): the phases
                # its log printed. The collector's info stays as the server said it, so the next
                # /server_info poll compares equal and is not announced again.
                phases = self.supervisor.startup_phases(name)
                if phases:
                    info = dataclasses.replace(info, startup_s=phases)
            emit(ArmInfoUpdated(arm=name, info=info, source=c.mode))
            if name not in self._predicted:
                knee = predict_knee(c.info, self.isl, self.osl, c.last_new_token_ratio,
                                    ignore_eos=self.ramp is not None)  # the ramp's requests ignore EOS
                if knee is not None:
                    self._predicted[name] = knee
                    emit(predicted_knee_event(name, knee))


def _scrape_result(t: asyncio.Task, c: ArmCollector, ts: float) -> Sample:
    """The scrape's Sample; a scrape that raised (it should not) is that arm's error, not the session's."""
    if t.cancelled():
        return Sample(ts=ts, arm=c.spec.name, up=False, state="error", reason="scrape cancelled")
    exc = t.exception()
    if exc is None:
        return t.result()
    return Sample(ts=ts, arm=c.spec.name, up=False, state="error",
                  reason=f"scrape failed: {type(exc).__name__}: {exc}"[:300],
                  spec_enabled=c.info.speculative if c.info else None)


def _sum(values: list) -> Optional[float]:
    known = [v for v in values if v is not None]
    return sum(known) if known and len(known) == len(values) else None
