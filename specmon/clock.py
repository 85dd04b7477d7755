"""The wall clock of everything specmon stamps: epoch seconds that never jump.

time.time() follows the system clock, which NTP or an operator may step by seconds in the middle
of a session. Two requests sent either side of a step would then be that many seconds apart in
requests.csv, and a level's window, its tok/s, a counter's rate between two scrapes and the
TTFT timeline would all be off by the step. So every stamp a session records is read here: the
system clock once, when specmon starts, plus the monotonic clock since (NTP slews it with the
system clock but never steps it). Within one process the stamps keep the true intervals; they
read as the system clock does to the microsecond until that is stepped, and by the step after.

What stays on time.time(): anything compared with another machine's clock as it is now (an
HTTP Retry-After date, the times of a Prometheus query) and the simulated server (a server
stamps by its own clock).
"""

from __future__ import annotations

import time

_PERF0 = time.perf_counter()
_WALL0 = time.time()


def wall() -> float:
    """Now, in epoch seconds on the session's clock."""
    return _WALL0 + (time.perf_counter() - _PERF0)


def wall_of(perf_stamp: float) -> float:
    """A time.perf_counter() stamp (or a kernel stamp on that clock) in epoch seconds."""
    return _WALL0 + (perf_stamp - _PERF0)
