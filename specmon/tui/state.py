"""What the TUI knows, as plain Python: one object fed every Event, read by the widgets.

The live session may call `emit` from its own thread (the ramp runs its load on a separate
event loop), so `apply` and every reader take the same lock. Widgets copy what they need under
the lock and render outside it. Nothing here imports Textual, so it is unit-testable.
"""

from __future__ import annotations

import threading
from collections import deque
from itertools import islice
from dataclasses import dataclass, field
from typing import Deque, Optional

from specmon.model import (
    ArmInfo,
    ArmInfoUpdated,
    ArmPhase,
    ArmSpec,
    FleetChanged,
    ObservedKnee,
    ObservedKneesUpdated,
    FleetStatus,
    Event,
    GpuSnapshot,
    HostReading,
    KneeCalled,
    KneesSummary,
    LevelFinished,
    LevelProgress,
    LevelResult,
    LevelStarted,
    LogLine,
    Marker,
    RampFinished,
    Sample,
    SamplesTick,
    SessionEnded,
    SessionStarted,
)
from specmon.analysis.knee import label_knee
from specmon.panes import shown
from specmon.session.folder import public_url

HISTORY_POINTS = 600  # ten minutes at 1 Hz: more than any pane is wide
LOG_LINES = 5000
FLEET_NOTES = 200  # joins/leaves kept (a churning fleet sends one a tick; the CSVs keep them all)

# The per-arm series a pane can chart; the key is the Sample attribute it comes from.
SERIES = (
    "gpu_mem_used_bytes",
    "kv_usage",
    "accept_length",
    "running_reqs",
    "queued_reqs",
    "gen_tok_s",
    "ttft_p50_s",
    "ttft_p90_s",
)

def knee_news(k: Optional[KneesSummary]) -> bool:
    """Whether an arm's knees give the banner something to say: a confirmed power or goodput
    knee, or an SLO verdict."""
    return k is not None and (k.power.confirmed or k.slo is not None)


@dataclass
class ArmState:
    name: str
    index: int  # order of appearance: picks the arm's colour and plot glyph
    url: Optional[str] = None
    info: Optional[ArmInfo] = None
    info_source: Optional[str] = None
    last: Optional[Sample] = None
    phase: Optional[str] = None
    phase_detail: Optional[str] = None
    history: dict[str, Deque[Optional[float]]] = field(default_factory=dict)
    logs: Deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    log_total: int = 0  # lines ever received (the deque forgets the oldest)
    levels: list[LevelResult] = field(default_factory=list)
    knees: list[KneeCalled] = field(default_factory=list)
    predicted_knee: Optional[KneeCalled] = None
    knees_summary: Optional[KneesSummary] = None  # after the arm's latest finished level
    fleet: Optional[str] = None  # the gateway / Prometheus fleet it was discovered in
    role: Optional[str] = None
    left: bool = False  # a fleet's worker that has left: kept in the record, no longer shown
    # watched: scraped, listed at the start or by its fleet. An arm only the ramp names (a gateway
    # the ramp loads while its workers are watched), or only its launcher (a launched gateway's
    # phases and log lines), has no panel.
    watched: bool = False
    samples_seen: int = 0
    observed: Optional[ObservedKnee] = None  # the knee of the traffic it served (analysis/observed.py)

    def __post_init__(self) -> None:
        for key in SERIES:
            self.history.setdefault(key, deque(maxlen=HISTORY_POINTS))

    @property
    def confirmed_knee(self) -> Optional[KneeCalled]:
        return self.knees[-1] if self.knees else None

    @property
    def plateau_resolved(self) -> Optional[bool]:
        """False when the confirmed plateau knee is within the noise (its 95% bounds do not settle it)."""
        return next((k.resolved for k in self.knees if k.definition == "plateau"), None)

    @property
    def knee_news(self) -> bool:
        """Whether the knee banner has a line for this arm."""
        return bool(self.knees) or knee_news(self.knees_summary)

    @property
    def speculation(self) -> Optional[bool]:
        """True/False once the server said so (ArmInfo, or the sample's flag); None while unknown."""
        if self.info is not None and (self.info.speculative_algorithm or self.info.model is not None):
            return self.info.speculative_algorithm is not None
        if self.last is not None and self.last.spec_enabled is not None:
            return self.last.spec_enabled
        return None


class SessionState:
    """Everything the panes show, updated by `apply(event)` in event order."""

    def __init__(self, arm_urls: Optional[list[tuple[str, str]]] = None) -> None:
        self.lock = threading.RLock()
        self.arms: dict[str, ArmState] = {}
        self.gpus: Optional[GpuSnapshot] = None
        self.host: Optional[HostReading] = None
        self.level: Optional[LevelStarted] = None
        self.progress: Optional[LevelProgress] = None
        self.levels_total: Optional[int] = None
        self.levels_done: int = 0
        self.knee_events: list[KneeCalled] = []
        self.markers: list[Marker] = []
        self.ramp_started = False
        self.ramp_finished: Optional[str] = None
        self.ended: Optional[str] = None
        self.first_ts: Optional[float] = None
        self.last_ts: Optional[float] = None
        self.ticks = 0
        self.events = 0
        self.panes: Optional[list[str]] = None  # the layout's choice (specmon/panes.py); None: all
        self.fleets: list[FleetStatus] = []  # this tick's gateways / Prometheus fleets
        self.fleet_notes: Deque[FleetChanged] = deque(maxlen=FLEET_NOTES)  # the newest
        for name, url in arm_urls or []:
            self.arm(name).url = url
            self.arms[name].watched = True

    # -- reading -----------------------------------------------------------------------------

    def arm(self, name: str) -> ArmState:
        """The arm's state, created on first mention (arms can appear mid-session in launch mode)."""
        with self.lock:
            arm_state = self.arms.get(name)
            if arm_state is None:
                arm_state = self.arms[name] = ArmState(name=name, index=len(self.arms))
            return arm_state

    def arm_names(self) -> list[str]:
        """The arms to show, in order of appearance (workers that left a fleet are not, nor an
        arm only the ramp names: a gateway it loads)."""
        with self.lock:
            return [name for name, a in self.arms.items() if a.watched and not a.left]

    def series(self, arm: str, key: str, last: Optional[int] = None) -> list[Optional[float]]:
        """The arm's history of `key`, oldest first; only the newest `last` points when given
        (a pane as wide as 40 points need not copy 600 of them every tick)."""
        with self.lock:
            if arm not in self.arms:
                return []
            d = self.arms[arm].history[key]
            if last is None or last >= len(d):
                return list(d)
            return list(islice(d, len(d) - max(last, 0), None))

    def level_rows(self) -> list[LevelResult]:
        """Every finished (level, arm) result, in level order then arm order; in a ramp through a
        gateway the gateway's row before its workers' rows."""
        with self.lock:
            rows = [r for arm_state in self.arms.values() for r in arm_state.levels]
        order = {name: i for i, name in enumerate(self.arms)}
        return sorted(rows, key=lambda r: (r.level, r.worker is not None, order.get(r.arm, 0)))

    @property
    def elapsed_s(self) -> Optional[float]:
        if self.first_ts is None or self.last_ts is None:
            return None
        return self.last_ts - self.first_ts

    # -- writing -----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        with self.lock:
            self.events += 1
            if self.first_ts is None:
                self.first_ts = event.ts
            self.last_ts = max(self.last_ts or event.ts, event.ts)
            handler = getattr(self, "_on_" + type(event).__name__, None)
            if handler is not None:
                handler(event)

    def _on_SessionStarted(self, ev: SessionStarted) -> None:
        self.panes = list(ev.panes) if ev.panes is not None else None
        for spec in ev.arms:
            self._add_arm(spec)

    def _add_arm(self, spec: ArmSpec) -> None:
        arm_state = self.arm(spec.name)
        arm_state.url = arm_state.url or public_url(spec.url)
        arm_state.fleet, arm_state.role, arm_state.left = spec.fleet, spec.role, False
        arm_state.watched = True

    def _on_FleetChanged(self, ev: FleetChanged) -> None:
        for spec in ev.added:
            self._add_arm(spec)
        for name in ev.removed:
            if name in self.arms:
                arm_state = self.arms[name]
                arm_state.left = True
                # Nothing draws a worker that left (its rows stay in the CSVs): a fleet whose
                # workers come and go under new names would otherwise keep 8 x 600 points of each.
                for series in arm_state.history.values():
                    series.clear()
        self.fleet_notes.append(ev)

    def shows(self, pane: str) -> bool:
        return shown(self.panes, pane)

    def _on_SamplesTick(self, ev: SamplesTick) -> None:
        self.ticks += 1
        self.fleets = list(ev.fleets)
        if ev.gpus is not None:
            self.gpus = ev.gpus
        if ev.host is not None:
            self.host = ev.host
        for s in ev.samples:
            arm_state = self.arm(s.arm)
            arm_state.watched = True
            arm_state.last = s
            arm_state.samples_seen += 1
            for key in SERIES:
                v = getattr(s, key)
                arm_state.history[key].append(None if v is None else float(v))

    def _on_ArmInfoUpdated(self, ev: ArmInfoUpdated) -> None:
        arm_state = self.arm(ev.arm)
        arm_state.watched = True
        arm_state.info = ev.info
        arm_state.info_source = ev.source

    def _on_ArmPhase(self, ev: ArmPhase) -> None:
        arm_state = self.arm(ev.arm)
        arm_state.phase = ev.phase
        arm_state.phase_detail = ev.detail

    def _on_LogLine(self, ev: LogLine) -> None:
        arm_state = self.arm(ev.arm)
        arm_state.logs.append(ev.line)
        arm_state.log_total += 1

    def _on_LevelStarted(self, ev: LevelStarted) -> None:
        self.ramp_started = True
        self.level = ev
        self.progress = None
        self.levels_total = ev.levels_total

    def _on_LevelProgress(self, ev: LevelProgress) -> None:
        self.progress = ev

    def _on_LevelFinished(self, ev: LevelFinished) -> None:
        self.levels_done = max(self.levels_done, ev.level + 1)
        for r in ev.results:
            arm_state = self.arm(r.arm)
            arm_state.levels = [x for x in arm_state.levels if x.level != r.level] + [r]
            arm_state.levels.sort(key=lambda x: x.level)
        for arm, k in ev.knees.items():
            self.arm(arm).knees_summary = k

    def _on_KneeCalled(self, ev: KneeCalled) -> None:
        arm_state = self.arm(ev.arm)
        if ev.definition == "predicted":
            arm_state.predicted_knee = ev
        else:
            arm_state.knees.append(ev)
            self.knee_events.append(ev)
            if ev.knee_level is not None:  # the knee's own row in the ramp table
                labelled = label_knee(arm_state.levels, ev.arm, ev.knee_level, ev.definition)
                if labelled is not None:
                    arm_state.levels = [labelled if x.level == ev.knee_level else x for x in arm_state.levels]

    def _on_ObservedKneesUpdated(self, ev: ObservedKneesUpdated) -> None:
        for name, k in ev.knees.items():
            self.arm(name).observed = k

    def _on_RampFinished(self, ev: RampFinished) -> None:
        self.ramp_finished = ev.reason

    def _on_Marker(self, ev: Marker) -> None:
        self.markers.append(ev)

    def _on_SessionEnded(self, ev: SessionEnded) -> None:
        self.ended = ev.reason
