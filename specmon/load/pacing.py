"""The load loop's pacer: one for either reader, so one plan offers the same load either way.

Why a load loop paces at all is in loop.py (LoadLoop.pace). The pause, its rule and its figures
are here once; what each reader does is only what it sees while reading:

- the chunk gaps' estimate of their 1st percentile: each read's token events update it (a gap
  below it takes it 10 % down, one above 0.1 % up; two events of a stream in one read count a
  gap of 0), reset when pacing is turned on for a level. The C reader (_fastread.c, track_gap)
  keeps it without a Python call per read; the Python reader (client.py, _Exchange.feed)
  through `Pacer.read`;
- the first read of a loop pass while no pause is due has the loop call `Pacer._pause` after
  the pass (call_soon: after every reader of the pass): share x the estimate within [lo, hi],
  lo before the first gap; time.sleep releases the GIL.

The pacer is per thread (the load loop's): `start` and `stop` on that thread, `active` from its
Python readers.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import Optional

from specmon.load import native

GAP_DOWN = 0.9
GAP_UP = 1.001

_local = threading.local()


def pause_for(gap: Optional[float], lo: float, hi: float, share: float) -> float:
    """The pause after a pass: share x the chunk gaps' estimate within [lo, hi]; lo before the
    first gap (None)."""
    if gap is None:
        return lo
    return max(lo, min(hi, gap * share))


class Pacer:
    """The pause after a pass that read a socket, and what it did (read from any thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lo: float, hi: float, share: float) -> None:
        if not (0 < lo < 1 and 0 < hi < 1 and share > 0):  # (lo above hi: every pause is lo)
            raise ValueError(f"Pacer: expected pauses lo and hi within (0, 1) s and share > 0, got {lo}, {hi}, {share}")
        self.loop, self.lo, self.hi, self.share = loop, lo, hi, share
        self.pauses = 0
        self.pause_s = 0.0  # the newest pause ...
        self.chunk_gap_s: Optional[float] = None  # ... and the estimate it was a share of
        self._fastread = native.fastread  # the reader that reads on this loop (fixed at import)
        self._gap_low = math.inf  # the Python reader's estimate
        self._due = False

    # ---- on the load loop's thread ------------------------------------------------------------
    def start(self) -> None:
        """Pace this thread's readers from now on, with the gaps of a new level."""
        fr = self._fastread
        if fr is not None:
            fr.reset_chunk_gap()
            fr.set_pacer(self.loop, self._pause)
        else:
            self._gap_low = math.inf
            self._due = False
            _local.pacer = self

    def stop(self) -> None:
        fr = self._fastread
        if fr is not None:
            fr.set_pacer(None, None)
        else:
            _local.pacer = None

    def read(self, now: float, last_t: float, events: int) -> None:
        """The Python reader's read that brought `events` token events of a stream whose previous
        one was stamped `last_t` (0.0: none yet)."""
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
        fr = self._fastread
        if fr is not None:
            gap = fr.chunk_gap()
        else:
            gap = None if self._gap_low == math.inf else self._gap_low
        pause = pause_for(gap, self.lo, self.hi, self.share)
        self.pauses += 1
        self.pause_s, self.chunk_gap_s = pause, gap
        time.sleep(pause)
        if fr is not None:
            fr.pause_done()
        else:
            self._due = False


def active() -> Optional[Pacer]:
    """The pacer of this thread's Python readers (None: they do not pace)."""
    return getattr(_local, "pacer", None)
