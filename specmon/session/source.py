"""The typed seams of a session: what a front end drives, what the ramp needs, what a launcher
provides, and how one event reaches every consumer.

- `SessionSource`: what the TUI and the headless printer run. `LiveSession` (live.py) and
  `ReplaySource` (replay.py) implement it; a front end never probes for attributes.
- `RampHost`: the narrow view of the live session the ramp (ramp/driver.py) works through.
- `Supervision`: what launch mode plugs into the live session (servers/launch/supervisor.py Supervisor).
- `FleetSource`: where a fleet's workers come from (a gateway, a Prometheus server).
- `fan_out`: one `emit` that calls each consumer in turn (the session folder's writer first,
  then the front end, then any other: an exporter, a test's list).
- `fewer_young_collections`: the garbage collector's pace while a front end runs a session.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from pathlib import Path
from typing import Callable, Optional, Protocol, runtime_checkable

from specmon.model import ArmInfo, ArmSpec, Event, FleetReading, PredictedKnee, Sample
from specmon.sources.prom import MetricsSnapshot

Emit = Callable[[Event], None]


def fan_out(*consumers: Optional[Emit]) -> Emit:
    """An emit that hands each event to every consumer, in the order given (None skipped)."""
    chain = tuple(c for c in consumers if c is not None)

    def emit(e: Event) -> None:
        for consume in chain:
            consume(e)

    return emit


@contextlib.contextmanager
def fewer_young_collections(threshold: int = 10_000):
    """Collect the young generation every `threshold` allocations instead of Python's 700, while
    a session runs (then as before). A session allocates in bursts of short-lived containers
    that are mostly still in use when a collection at 700 comes (a TUI tick's strips; a ramp's
    tasks, futures and records of a wave of requests), so those collections walked live objects
    and promoted them: 0.6-0.75 ms a TUI tick with 700, 0.2-0.26 ms with 10,000 (gc.callbacks
    over a replayed 3-arm session, benchmarks/tui_tick.py's). At 1,000 streams the load
    thread's collections also hold the GIL that the stamps' reads wait for."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


@runtime_checkable
class SessionSource(Protocol):
    """A session a front end can run: live, launched or replayed."""

    arms: list[ArmSpec]
    out_dir: Optional[Path]  # where it is recorded (a replay: the folder it plays)
    mode_label: str  # "live" | "replay x2" ...: the status bar's words
    stop_cause: Optional[str]  # whoever sets the stop event may say why first (model.END_CAUSES)

    async def run(self, emit: Emit, stop: asyncio.Event) -> str:
        """Emit the session's events until it ends or `stop` is set; the exit reason."""
        ...

    def mark(self, label: str) -> None:
        ...

    def pause_ramp(self) -> bool:
        """False when there is no ramp to pause."""
        ...

    def resume_ramp(self) -> bool:
        ...

    def skip_level(self) -> bool:
        """False when there is no ramp level to skip."""
        ...


class RampHost(Protocol):
    """What the ramp may ask of the live session it runs in, and nothing more."""

    def set_level(self, level: Optional[int], offered: Optional[int]) -> None:
        ...

    def info(self, arm: str) -> Optional[ArmInfo]:
        ...

    def samples_for(self, arm: str, t0: float, t1: float) -> list[Sample]:
        ...

    def newest_metrics(self, arm: str) -> Optional[MetricsSnapshot]:
        """The arm's latest /metrics scrape (cumulative), None without /metrics."""
        ...

    def predicted(self, arm: str) -> Optional[PredictedKnee]:
        ...

    def mark(self, label: str) -> None:
        ...

    async def between_levels(self, level_index: int, restart: bool) -> None:
        ...

    def fleet_workers(self, arm: str) -> list[ArmSpec]:
        """The workers watched behind `arm` when the ramp's arm is a gateway (its fleet's arms,
        now); [] for any other arm. info, samples_for and newest_metrics answer for them too."""
        ...


class FleetSource(Protocol):
    """Where a fleet's workers come from: a gateway's registry (sources/gateway/) or the series
    of a Prometheus server (sources/promfleet/). Polled once a tick, read-only."""

    name: str
    kind: str  # "gateway" (its workers' load goes through it) | "prometheus"
    url: str  # the gateway's or the Prometheus server's base URL

    async def poll(self) -> FleetReading:
        """Never raises: a fleet that cannot be read is a FleetStatus with up=False and a reason."""
        ...

    def need_figures_of(self, urls: set[str]) -> None:
        """Before a poll: the workers (URLs) the session cannot scrape itself now. A gateway reads
        its own figures of those only; a source that reads every worker anyway ignores it."""
        ...

    async def aclose(self) -> None:
        ...


class Supervision(Protocol):
    """Launch mode: the servers specmon started (servers/launch/supervisor.py Supervisor)."""

    @property
    def arms(self) -> list[ArmSpec]:
        ...

    async def start(self, emit: Emit) -> None:
        ...

    async def restart(self, emit: Optional[Emit] = None) -> None:
        ...

    def stop(self) -> None:
        ...

    def fill_from_log(self, s: Sample) -> Sample:
        ...

    def startup_phases(self, arm: str) -> Optional[dict[str, float]]:
        ...

    def gpu_indices(self) -> dict[str, list[int]]:
        ...
