"""Exact TTFT and queue time on the operating curve: the requests a server wrote itself
(`attach --request-metrics-dir`, sources/request_metrics.py), each placed at the running count the
arm's own samples showed while it waited.

Without them a curve's TTFT and queue time per bin are the histograms' increase over the
collector's window (30 s or more), which smears one load's queueing into the next bins when the
load changes faster than that. A request's own line says exactly how long it waited, and its
arrival (the time specmon read the line, less its end-to-end latency) and its queue time say
which load it met: it is counted at the highest running count the arm's samples showed from its
arrival to its admission, the load that made it wait (a request that did not wait: the running
count it found on arrival). A bin with at least MIN_REQUESTS such requests takes their means and their queue
share of TTFT (request by request) in place of the histograms' figures; a bin with fewer keeps
the histograms'. Pure: no I/O.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Callable, Optional

from specmon.model import ObservedRequest

HISTORY_S = 3600.0  # running counts kept this long: a request that took longer is not placed
MAX_GAP_S = 10.0  # the sample before an arrival is that old at most (the arm was not watched else)
MIN_REQUESTS = 3  # a bin takes per-request figures from this many requests on
RECENT_S = 30.0  # "queue share of TTFT now": the requests read this recently


@dataclass
class Cell:
    """Sums of the requests placed at one running count (or one bin of them)."""

    n: int = 0
    queue_sum: float = 0.0
    queue_n: int = 0
    ttft_sum: float = 0.0
    ttft_n: int = 0
    share_sum: float = 0.0  # queue time / TTFT, request by request (each at most 1)
    share_n: int = 0

    def merge(self, o: "Cell") -> None:
        self.n += o.n
        self.queue_sum += o.queue_sum
        self.queue_n += o.queue_n
        self.ttft_sum += o.ttft_sum
        self.ttft_n += o.ttft_n
        self.share_sum += o.share_sum
        self.share_n += o.share_n

    @property
    def queue_s(self) -> Optional[float]:
        return self.queue_sum / self.queue_n if self.queue_n else None

    @property
    def ttft_s(self) -> Optional[float]:
        return self.ttft_sum / self.ttft_n if self.ttft_n else None

    @property
    def share(self) -> Optional[float]:
        return self.share_sum / self.share_n if self.share_n else None


class RequestLatencies:
    """One arm's requests placed by running count: `note` every fresh sample's running count,
    `add` every record read; `binned` groups them as the curve bins its samples."""

    def __init__(self) -> None:
        self._ts: list[float] = []
        self._running: list[int] = []
        self.cells: dict[int, Cell] = {}
        self.placed = 0
        self.unplaced = 0  # arrived before the kept history, in a gap, or with no figure
        self._recent: deque[tuple[float, float]] = deque()  # (read at, queue share) of the newest

    def note(self, ts: float, running: int) -> None:
        if self._ts and ts <= self._ts[-1]:
            if ts == self._ts[-1]:
                self._running[-1] = running
            return
        self._ts.append(ts)
        self._running.append(running)
        if ts - self._ts[0] > 2 * HISTORY_S:  # trimmed in halves: O(1) a sample on average
            cut = bisect.bisect_left(self._ts, ts - HISTORY_S)
            del self._ts[:cut], self._running[:cut]

    def add(self, r: ObservedRequest, time_scale: float = 1.0) -> bool:
        """Place one finished request; False when it cannot be (no TTFT nor queue time, or no
        sample of the arm near its arrival)."""
        if r.ttft_s is None and r.queue_s is None:
            self.unplaced += 1
            return False
        took = r.e2e_s
        if took is None and r.finished_ts is not None and r.received_ts is not None:
            took = r.finished_ts - r.received_ts
        # the server's seconds (a sped-up simulator's run time_scale to the wall second)
        arrival = r.ts_read - max(0.0, took or 0.0) / (time_scale or 1.0)
        i = bisect.bisect_right(self._ts, arrival) - 1
        if i < 0 or arrival - self._ts[i] > MAX_GAP_S:
            self.unplaced += 1
            return False
        # the load that kept it waiting: the most running seen from its arrival to its admission
        # (a sample taken just as a cohort finished shows a few running with the queue full, and a
        # request arriving then waited for the full load, not for those few)
        admitted = arrival + max(0.0, r.queue_s or 0.0) / (time_scale or 1.0)
        j = bisect.bisect_right(self._ts, admitted, lo=i)
        running = max(self._running[i:max(j, i + 1)])
        c = self.cells.get(running)
        if c is None:
            c = self.cells[running] = Cell()
        c.n += 1
        if r.queue_s is not None and r.queue_s >= 0:
            c.queue_sum += r.queue_s
            c.queue_n += 1
        if r.ttft_s is not None and r.ttft_s >= 0:
            c.ttft_sum += r.ttft_s
            c.ttft_n += 1
            if r.queue_s is not None and r.ttft_s > 0:
                share = min(1.0, max(0.0, r.queue_s) / r.ttft_s)
                c.share_sum += share
                c.share_n += 1
                self._recent.append((r.ts_read, share))
                while self._recent[0][0] < r.ts_read - RECENT_S:
                    self._recent.popleft()
        self.placed += 1
        return True

    def binned(self, bin_of: Callable[[int], tuple[int, int]]) -> dict[int, Cell]:
        """The cells grouped by the curve's bins (keyed by the bin's lowest running count), only
        bins with MIN_REQUESTS requests or more."""
        out: dict[int, Cell] = {}
        for running, c in self.cells.items():
            lo = bin_of(running)[0]
            out.setdefault(lo, Cell()).merge(c)
        return {lo: c for lo, c in out.items() if c.n >= MIN_REQUESTS}

    def share_now(self, now: float) -> Optional[float]:
        """Queue time's share of TTFT over the requests read in the last RECENT_S (None: none)."""
        while self._recent and self._recent[0][0] < now - RECENT_S:
            self._recent.popleft()
        if not self._recent:
            return None
        return sum(s for _, s in self._recent) / len(self._recent)
