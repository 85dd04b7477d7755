"""What the TUI knows, as plain Python: one object fed every Event, read by the widgets.

The live session may call `emit` from its own thread (the ramp runs its load on a separate
event loop), so `apply` and every reader take the same lock. Widgets copy what they need under
the lock and render outside it. Nothing here imports Textual, so it is unit-testable.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Optional

from specmon.analysis.knee import slo_condition
from specmon.model import (
    ArmInfo,
    ArmInfoUpdated,
    ArmPhase,
    Event,
    GpuSnapshot,
    HostReading,
    KneeCalled,
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
)

HISTORY_POINTS = 600  # ten minutes at 1 Hz: more than any pane is wide
LOG_LINES = 5000

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

# Queue time above this share of TTFT means "TTFT is queueing, not prefill" (issue 4.5).
QUEUE_DOMINATES = 0.5


def queue_share(sample: Optional[Sample]) -> Optional[float]:
    """queue_time_mean_s / ttft_mean_s over the scrape window, None when either is unknown."""
    if sample is None or sample.queue_time_mean_s is None or not sample.ttft_mean_s:
        return None
    return sample.queue_time_mean_s / sample.ttft_mean_s


@dataclass
class KneeSummary:
    """The D3 knees of one arm after its latest level (from LevelFinished.knees, the
    analysis.knee.knees_summary dict the ramp also writes to session.json)."""

    power_c: Optional[float] = None  # Kleinrock power X / TTFT p50: argmax level
    power_confirmed: bool = False
    slo: Optional[str] = None  # the SLOs in words ('TTFT<=2 s, TPOT<=30 ms'); None: no SLO given
    c_slo: Optional[float] = None  # largest C whose attainment's lower 95% bound >= 90%
    c_goodput: Optional[float] = None  # argmax of tok/s x attainment
    goodput_confirmed: bool = False

    @classmethod
    def from_summary(cls, k: dict) -> "KneeSummary":
        pw = k.get("power") or {}
        out = cls(power_c=pw.get("concurrency"), power_confirmed=bool(pw.get("confirmed")))
        slo = k.get("slo")
        if slo:
            out.slo = slo_condition(slo.get("slo_ttft_s"), slo.get("slo_tpot_s"))
            out.c_slo, out.c_goodput = slo.get("c_slo"), slo.get("c_goodput")
            out.goodput_confirmed = bool(slo.get("goodput_confirmed"))
        return out

    @property
    def news(self) -> bool:
        """Something the knee banner should say: a confirmed D3 knee, or an SLO verdict."""
        return self.power_confirmed or self.goodput_confirmed or self.slo is not None


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
    d3: Optional[KneeSummary] = None  # after the arm's latest finished level
    samples_seen: int = 0

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
        return bool(self.knees) or (self.d3 is not None and self.d3.news)

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
        for name, url in arm_urls or []:
            self.arm(name).url = url

    # -- reading -----------------------------------------------------------------------------

    def arm(self, name: str) -> ArmState:
        """The arm's state, created on first mention (arms can appear mid-session in launch mode)."""
        with self.lock:
            st = self.arms.get(name)
            if st is None:
                st = self.arms[name] = ArmState(name=name, index=len(self.arms))
            return st

    def arm_names(self) -> list[str]:
        with self.lock:
            return list(self.arms)

    def series(self, arm: str, key: str) -> list[Optional[float]]:
        with self.lock:
            return list(self.arms[arm].history[key]) if arm in self.arms else []

    def level_rows(self) -> list[LevelResult]:
        """Every finished (level, arm) result, in level order then arm order."""
        with self.lock:
            rows = [r for st in self.arms.values() for r in st.levels]
        order = {name: i for i, name in enumerate(self.arms)}
        return sorted(rows, key=lambda r: (r.level, order.get(r.arm, 0)))

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

    def _on_SamplesTick(self, ev: SamplesTick) -> None:
        self.ticks += 1
        if ev.gpus is not None:
            self.gpus = ev.gpus
        if ev.host is not None:
            self.host = ev.host
        for s in ev.samples:
            st = self.arm(s.arm)
            st.last = s
            st.samples_seen += 1
            for key in SERIES:
                v = getattr(s, key)
                st.history[key].append(None if v is None else float(v))

    def _on_ArmInfoUpdated(self, ev: ArmInfoUpdated) -> None:
        st = self.arm(ev.arm)
        st.info = ev.info
        st.info_source = ev.source

    def _on_ArmPhase(self, ev: ArmPhase) -> None:
        st = self.arm(ev.arm)
        st.phase = ev.phase
        st.phase_detail = ev.detail

    def _on_LogLine(self, ev: LogLine) -> None:
        st = self.arm(ev.arm)
        st.logs.append(ev.line)
        st.log_total += 1

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
            st = self.arm(r.arm)
            st.levels = [x for x in st.levels if x.level != r.level] + [r]
            st.levels.sort(key=lambda x: x.level)
        for arm, k in ev.knees.items():
            self.arm(arm).d3 = KneeSummary.from_summary(k)

    def _on_KneeCalled(self, ev: KneeCalled) -> None:
        st = self.arm(ev.arm)
        if ev.definition == "predicted":
            st.predicted_knee = ev
        else:
            st.knees.append(ev)
            self.knee_events.append(ev)

    def _on_RampFinished(self, ev: RampFinished) -> None:
        self.ramp_finished = ev.reason

    def _on_Marker(self, ev: Marker) -> None:
        self.markers.append(ev)

    def _on_SessionEnded(self, ev: SessionEnded) -> None:
        self.ended = ev.reason
