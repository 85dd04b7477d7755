"""The pacer of the load loop where the C reader is not built: the same rule as its Pacer.

Why a load loop paces at all is in loop.py (LoadLoop.pace). Without a pacer the Python reader
offered a different load than the C one: a closed-loop stream's next request went out at once
instead of after the pass's pause, so one plan sent more requests where no compiler had been
at install. Here the Python reader (client.py, _Exchange.feed) does what _fastread.c does:

- each read's token events update the chunk gaps' estimate of their 1st percentile (a gap
  below it takes it 10 % down, one above 0.1 % up; two events of a stream in one read count a
  gap of 0), reset when pacing is turned on for a level;
- the first read of a loop pass while no pause is due schedules one pause after the pass
  (call_soon: after every reader of the pass): share x the estimate within [lo, hi], lo
  before the first gap; time.sleep releases the GIL as the C pause does.

The pacer is per thread (the load loop's): `activate` on that thread, `active` from its readers.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Optional

GAP_DOWN = 0.9
GAP_UP = 1.001

_local = threading.local()


def pause_for(gap: Optional[float], lo: float, hi: float, share: float) -> float:
    """The pause after a pass: share x the chunk gaps' estimate within [lo, hi]; lo before the
    first gap (None). The C Pacer's rule (_fastread.c, pacer_pause_s) too."""
    if gap is None:
        return lo
    return max(lo, min(hi, gap * share))


class Pacer:
    """The pause after a pass that read a socket, and what it did (read from any thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lo: float, hi: float, share: float) -> None:
        self.loop, self.lo, self.hi, self.share = loop, lo, hi, share
        self.pauses = 0
        self.pause_s = 0.0  # the newest pause ...
        self.chunk_gap_s: Optional[float] = None  # ... and the estimate it was a share of
        self._gap_low = math.inf
        self._due = False

    def reset_gaps(self) -> None:
        self._gap_low = math.inf

    def read(self, now: float, last_t: float, events: int) -> None:
        """A read that brought `events` token events of a stream whose previous one was stamped
        `last_t` (0.0: none yet)."""
        if events:
            if last_t > 0:
                self._track(now - last_t)
            for _ in range(events - 1):
                self._track(0.0)
        if not self._due:
            self._due = True
            self.loop.call_soon(self._pause)

    def _track(self, gap: float) -> None:
        low = self._gap_low
        self._gap_low = gap if low == math.inf else low * (GAP_DOWN if gap < low else GAP_UP)

    def _pause(self) -> None:
        gap = None if self._gap_low == math.inf else self._gap_low
        pause = pause_for(gap, self.lo, self.hi, self.share)
        self.pauses += 1
        self.pause_s, self.chunk_gap_s = pause, gap
        time.sleep(pause)
        self._due = False


def activate(pacer: Optional[Pacer]) -> None:
    """This thread's readers pace with `pacer` from now on (None: they do not)."""
    if pacer is not None:
        pacer.reset_gaps()  # a new level: its own streams' gaps
    _local.pacer = pacer


def active() -> Optional[Pacer]:
    return getattr(_local, "pacer", None)
