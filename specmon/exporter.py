"""specmon as a Prometheus exporter: a consumer of the session's event stream (`--metrics-port`).

`Exporter()(event)` updates metrics in a registry of its own (never prometheus_client's global
one); `start(port, host)` serves that registry over HTTP with prometheus_client's server (a
daemon thread), `stop()` shuts it down. The exporter stops itself on SessionEnded.

Every series carries the label `arm`; request metrics also `level` (the ramp level's 0-based
index, as levels.csv), knees `definition`. A value that is not known (None, NaN, infinite) is
never exported as 0: a gauge's series is removed until the value is known again, a histogram
is simply not observed.

Durations are the arm's seconds, as requests.csv holds them: wall seconds for a real server, the
simulated GPU's seconds for a sped-up simulator (`specmon sim --speed X`).

Histogram buckets (seconds), chosen for LLM serving:
- TTFT: 10 ms (a short prompt on an idle server) to 2 min (a deep queue in overload);
- ITL and TPOT: 1 ms (a small model, speculative decoding) to 1 s (a starved decode batch);
- e2e: 100 ms to 10 min (long outputs under overload).

This module imports only specmon.model and prometheus_client (never Textual or the TUI).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from specmon.model import (
    Event, KneeCalled, LevelStarted, ObservedKneesUpdated, RampFinished, RequestFinished, RequestRecord, Sample, SamplesTick,
    SessionEnded, SessionStarted,
)

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)
TPOT_BUCKETS = ITL_BUCKETS
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)

# The server gauges specmon reads on every tick, re-exported per arm: (Sample field, name, help).
SERVER_GAUGES = (
    ("running_reqs", "specmon_server_running_requests", "Requests the server is running (its /metrics or /v1/loads)"),
    ("queued_reqs", "specmon_server_queued_requests", "Requests waiting in the server's queue"),
    ("kv_usage", "specmon_server_kv_usage_ratio", "Share of the server's KV cache pool in use (0 to 1)"),
    ("gen_tok_s", "specmon_server_gen_tokens_per_second",
     "Generated tokens per second on the server, as specmon derives it from its counters"),
    ("accept_length", "specmon_server_accept_length",
     "Speculative decoding: mean tokens accepted per verify step (unset when speculation is off)"),
)


def known(value: Any) -> Optional[float]:
    """`value` as a float when it is a real, finite number; None otherwise (None, NaN, inf, text)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class Exporter:
    """The session's events as Prometheus metrics (module docstring). Call it with each event."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.offered = Gauge("specmon_offered_concurrency",
                             "Concurrent streams the ramp offers the arm at its current level", ["arm"], registry=r)
        self.level = Gauge("specmon_ramp_level", "The ramp's current level, 0-based index into its levels",
                           ["arm"], registry=r)
        by_level = ["arm", "level"]
        self.ttft = Histogram("specmon_ttft_seconds",
                              "Time to first token of each ok request, timed by specmon's load client "
                              "(requests.csv ttft_s)",
                              by_level, buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("specmon_itl_mean_seconds",
                             "Inter-token latency of each ok request: the MEAN of its inter-token gaps "
                             "(one value per request, not every gap; requests.csv itl_mean_s)",
                             by_level, buckets=ITL_BUCKETS, registry=r)
        self.tpot = Histogram("specmon_tpot_seconds",
                              "Time per output token after the first of each ok request: "
                              "(e2e - TTFT) / (output tokens - 1)",
                              by_level, buckets=TPOT_BUCKETS, registry=r)
        self.e2e = Histogram("specmon_e2e_seconds", "End-to-end latency of each ok request",
                             by_level, buckets=E2E_BUCKETS, registry=r)
        self.requests = Counter("specmon_requests_total",
                                "Requests the ramp sent that ended, by status (ok, error, timeout, cancelled)",
                                ["arm", "level", "status"], registry=r)
        self.knee = Gauge("specmon_knee_concurrency",
                          "Concurrency of the arm's knee, by definition (plateau, queueing, ... and predicted, "
                          "known before any load)", ["arm", "definition"], registry=r)
        self.observed = Gauge("specmon_observed_knee_concurrency",
                              "Running requests at the knee of the traffic the arm served (specmon's or not); "
                              "absent while the traffic is too little to tell", ["arm"], registry=r)
        self.headroom = Gauge("specmon_headroom_requests",
                              "Requests the arm can take on before its observed knee: the knee less running now",
                              ["arm"], registry=r)
        self._observed_at: dict[str, int] = {}  # arm -> its observed knee's running count
        self.up = Gauge("specmon_arm_up", "1 when the arm's last scrape answered, else 0", ["arm"], registry=r)
        self.scrape = Gauge("specmon_scrape_seconds", "How long specmon's last scrape of the arm took",
                            ["arm"], registry=r)
        self.server = [(field, Gauge(name, text, ["arm"], registry=r)) for field, name, text in SERVER_GAUGES]
        self.arms: list[str] = []
        self._lock = threading.Lock()
        self._server: Any = None
        self._thread: Optional[threading.Thread] = None
        self.host: Optional[str] = None
        self.port: Optional[int] = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            SessionStarted: self._on_started, LevelStarted: self._on_level, SamplesTick: self._on_tick,
            RequestFinished: self._on_request, KneeCalled: self._on_knee, RampFinished: self._on_ramp_finished,
            SessionEnded: self._on_ended, ObservedKneesUpdated: self._on_observed,
        }

    # ---- serving -------------------------------------------------------------------------------
    def start(self, port: int, host: str = "127.0.0.1") -> int:
        """Listen on host:port now (port 0: any free one); the port bound. OSError when it cannot
        (the port in use, an address not on this machine, a name that does not resolve)."""
        with self._lock:
            if self._server is not None:
                raise RuntimeError(f"the exporter already listens on {self.host}:{self.port}")
            server, thread = start_http_server(port, addr=host, registry=self.registry)
            self._server, self._thread = server, thread
            self.host, self.port = host, int(server.server_address[1])
            return self.port

    @property
    def url(self) -> Optional[str]:
        if self.port is None or self.host is None:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    @property
    def serving(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        """Stop serving (idempotent); the metrics stay readable in `registry`."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    # ---- the event stream ----------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _on_started(self, e: SessionStarted) -> None:
        for spec in e.arms:
            self._arm(spec.name)

    def _arm(self, name: str) -> None:
        if name not in self.arms:
            self.arms.append(name)

    def _on_level(self, e: LevelStarted) -> None:
        # The ramp drives every arm of the session at the same level. A rate level (open loop)
        # offers no concurrency: its series is absent, not its in-flight cap.
        for arm in self.arms:
            _set(self.offered, (arm,), e.offered_concurrency if e.offered_rate is None else None)
            _set(self.level, (arm,), e.level)

    def _on_tick(self, e: SamplesTick) -> None:
        for s in e.samples:
            self._on_sample(s)

    def _on_sample(self, s: Sample) -> None:
        arm = (s.arm,)
        self._arm(s.arm)
        _set(self.offered, arm, s.offered_concurrency)
        _set(self.level, arm, s.level)
        self.up.labels(*arm).set(1 if s.up else 0)
        _set(self.scrape, arm, s.scrape_s)
        for field, gauge in self.server:
            _set(gauge, arm, getattr(s, field))
        knee = self._observed_at.get(s.arm)
        if knee is not None and s.up and s.running_reqs is not None:
            _set(self.headroom, arm, max(0, knee - s.running_reqs))

    def _on_observed(self, e: ObservedKneesUpdated) -> None:
        for arm, k in e.knees.items():
            _set(self.observed, (arm,), k.concurrency)
            _set(self.headroom, (arm,), k.headroom if k.concurrency is not None else None)
            if k.concurrency is None:
                self._observed_at.pop(arm, None)
            else:
                self._observed_at[arm] = k.concurrency

    def _on_request(self, e: RequestFinished) -> None:
        r: RequestRecord = e.record
        labels = (r.arm, str(r.level))
        self.requests.labels(*labels, r.status or "unknown").inc()
        if r.status != "ok":
            return  # a failed request's times describe the failure, not the service
        for hist, value in ((self.ttft, r.ttft_s), (self.itl, r.itl_mean_s), (self.tpot, r.tpot_s),
                            (self.e2e, r.e2e_s)):
            v = known(value)
            if v is not None and v >= 0:
                hist.labels(*labels).observe(v)

    def _on_knee(self, e: KneeCalled) -> None:
        _set(self.knee, (e.arm, e.definition), e.concurrency)

    def _on_ramp_finished(self, e: RampFinished) -> None:
        # No level is offered any more: unknown, not 0 (the next ticks agree: their level is None).
        for arm in self.arms:
            self.offered.remove(arm)
            self.level.remove(arm)

    def _on_ended(self, e: SessionEnded) -> None:
        self.stop()


def _set(gauge: Gauge, labels: tuple, value: Any) -> None:
    """Set the series to `value`, or remove it when the value is not known (never a made-up 0)."""
    v = known(value)
    if v is None:
        gauge.remove(*labels)
    else:
        gauge.labels(*labels).set(v)
