"""A running level's shared state (_LevelState): written by the load thread, read by the
session's loop."""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Optional, Sequence

from specmon import clock
from specmon.analysis.levels import BacklogTrend
from specmon.load import RequestOutcome


class _LevelState:
    """Shared between the load thread (writes) and the session loop (reads): appends only."""

    def __init__(self, arms: Sequence[str]):
        self.outcomes: dict[str, list[RequestOutcome]] = {a: [] for a in arms}
        self.finished: collections.deque[tuple[str, RequestOutcome]] = collections.deque()
        self.done: dict[str, int] = {a: 0 for a in arms}
        self.t0 = clock.wall()
        self.window_t0 = self.t0
        self.t_stop: Optional[float] = None
        # A pause (`space` in the TUI, RampDriver.pause) stops the level's clock (and an open
        # loop's arrivals); at the resume the level runs again from the start (rerun_from), so
        # its window holds no idle time. paused_at: wall time the running pause began (None: not
        # paused); paused_s: wall seconds paused in all.
        self.paused_at: Optional[float] = None
        self.paused_s = 0.0
        self.reruns = 0
        # Per arm: wall seconds streams spent backing off, the 429/503 answers, the requests with
        # no answer (by why), and each stream's last connection loss (None: its last request got
        # an answer); a server is gone when every stream's last request lost its connection.
        self.backoff_s: dict[str, float] = {a: 0.0 for a in arms}
        self.refused: dict[str, collections.Counter] = {a: collections.Counter() for a in arms}
        self.no_answer: dict[str, collections.Counter] = {a: collections.Counter() for a in arms}
        self.stream_lost: dict[str, dict[int, Optional[str]]] = {a: {} for a in arms}
        self.streams: dict[str, int] = {a: 0 for a in arms}
        # The hand-over to the session's loop: `wake` schedules the drain there; `woken` is set
        # by the load thread when it schedules one and cleared by the drain before it drains.
        self.notices: collections.deque[str] = collections.deque()
        self.wake: Optional[Any] = None
        self.woken = False
        # Multi-turn: per arm, the (start, end) wall spans streams spent thinking between turns.
        self.think: dict[str, list[tuple[float, float]]] = {a: [] for a in arms}
        # Open-loop levels: when the schedule ends (wall), per arm when it stopped issuing, the
        # event (on the load loop) that cuts it short, and the backlog trend that marked it.
        self.planned_t1: Optional[float] = None
        self.arm_stop: dict[str, float] = {}
        self.cut: dict[str, asyncio.Event] = {}
        self.saturated: dict[str, BacklogTrend] = {}
        # Closed-loop levels: wall seconds the connections opened before the clock took, and
        # how many opened per arm (None: none were opened ahead, an open-loop level).
        self.connect_s: Optional[float] = None
        self.connected: Optional[dict[str, int]] = None

    def rerun_from(self, t: float, settle_wall_s: float) -> None:
        """Resumed at wall time t: what ran before the pause and the drain during it are not a
        steady state, so the level runs again from t (its clock and settle anew). `reruns` moves
        last: an open loop's dispatchers restart their schedule from the new t0 once they see it."""
        self.paused_s += t - (self.paused_at if self.paused_at is not None else t)
        self.t0, self.window_t0 = t, t + settle_wall_s
        self.paused_at = None
        self.reruns += 1
