"""Simulated time: `speed` simulated seconds per wall second, never more than a short lag ahead of
the scheduler.

When the CPU cannot keep up (a huge --speed, a busy 2-core box), the clock is held back to the
scheduler's position instead of racing ahead, so every timestamp stays consistent: the simulation
merely runs slower than asked. Simulated durations are what the server reports everywhere.
"""

from __future__ import annotations

import time
from typing import Optional


class SimClock:
    def __init__(self, speed: float, max_lead_wall_s: float = 0.05):
        self.speed = float(speed)
        self.epoch0 = time.time()
        self._wall0 = time.monotonic()
        self._sim0 = 0.0
        self._limit: Optional[float] = None
        self._last = 0.0
        # How far simulated time may run ahead of a busy scheduler: about one decode step.
        self.max_lead = min(max_lead_wall_s * self.speed, 0.05)

    def now(self) -> float:
        v = self._sim0 + (time.monotonic() - self._wall0) * self.speed
        if self._limit is not None and v > self._limit:
            # Hold time back: re-anchor so the clock continues smoothly from the limit.
            self._sim0, self._wall0 = self._limit, time.monotonic()
            v = self._limit
        if v < self._last:          # never backwards
            v = self._last
        self._last = v
        return v

    def hold_near(self, sched_t: Optional[float]) -> None:
        """The scheduler is busy up to sched_t: do not run more than max_lead ahead of it.
        None = the scheduler is idle, time flows freely."""
        self._limit = None if sched_t is None else max(sched_t + self.max_lead, self._last)

    def wall_delay(self, sim_t: float) -> float:
        """Wall seconds until the clock reaches sim_t (<= 0 when already there)."""
        return (sim_t - self.now()) / self.speed

    def epoch(self, sim_t: float) -> float:
        """Simulated time as a Unix timestamp (what SGLang's *_ts fields carry)."""
        return self.epoch0 + sim_t
