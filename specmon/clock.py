"""The wall clock of everything specmon stamps: epoch seconds that never jump.

time.time() follows the system clock, which NTP or an operator may step by seconds in the middle
of a session. Two requests sent either side of a step would then be that many seconds apart in
requests.csv, and a level's window, its tok/s, a counter's rate between two scrapes and the
TTFT timeline would all be off by the step. So every stamp a session records is read here: the
system clock once, plus the monotonic clock since (NTP slews it with the system clock but never
steps it). The stamps keep the true intervals; they read as the system clock does to the
microsecond until that is stepped, and by the step after.

The system clock is read at import and again as each live session is made (anchor()): a
session's stamps then agree with other processes' clocks (a server's log, the simulator's wire
log) unless the clock steps during that session, not merely since specmon started (a test
process runs many sessions).

What stays on time.time(): anything compared with another machine's clock as it is now (an
HTTP Retry-After date, the times of a Prometheus query) and the simulated server (a server
stamps by its own clock).
"""

from __future__ import annotations

import time

# the system clock minus the monotonic clock, as last read: one float, so a reader on another
# thread never mixes an old reading with a new one
_OFFSET = 0.0  # set by anchor(), at import (below) and as each live session is made


def system_minus_monotonic() -> float:
    """time.time() - time.perf_counter() as they read now: the system clock read between two
    monotonic reads, the pair least far apart of three (a thread preempted between two plain
    reads would be off by the stall: milliseconds on a busy host)."""
    best = None
    for _ in range(3):
        p0 = time.perf_counter()
        t = time.time()
        p1 = time.perf_counter()
        if best is None or p1 - p0 < best[0]:
            best = (p1 - p0, t - (p0 + p1) / 2)
    return best[1]


def anchor() -> None:
    """Read the system clock again. Without a step since the last reading this moves the stamps
    by microseconds (NTP slews both clocks alike); call it only when nothing is being timed."""
    global _OFFSET
    _OFFSET = system_minus_monotonic()


anchor()


def wall() -> float:
    """Now, in epoch seconds on the session's clock."""
    return time.perf_counter() + _OFFSET


def wall_of(perf_stamp: float) -> float:
    """A time.perf_counter() stamp (or a kernel stamp on that clock) in epoch seconds."""
    return perf_stamp + _OFFSET
