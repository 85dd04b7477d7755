"""Windows of the requests a server reported itself (sources/request_metrics.py): every window_s
of specmon's clock, the aggregates of the records read in it (ObservedWindow: count, TTFT,
queue time and e2e percentiles, mean lengths, acceptance). Records are grouped by when they were
read, not by the server's stamps: a simulator's stamps run on its own (sped-up) clock, and a
record is read within a tick of its line being written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from specmon import clock
from specmon.analysis.stats import mean, percentiles
from specmon.model import Event, ObservedRequest, ObservedWindow
from specmon.sources.request_metrics import RequestMetricsSource

DEFAULT_WINDOW_S = 10.0


def window_stats(arm: str, t0: float, t1: float, records: Sequence[ObservedRequest], bad_lines: int = 0) -> ObservedWindow:
    """The aggregates of the records read in [t0, t1)."""
    ttft = percentiles([r.ttft_s for r in records], (50, 90))
    queue = percentiles([r.queue_s for r in records], (50, 90))
    e2e = percentiles([r.e2e_s for r in records], (50,))
    spec = [r for r in records if r.spec_verify_ct and r.output_tokens is not None]
    verify = sum(r.spec_verify_ct for r in spec)
    drafts = [r for r in records if r.spec_proposed_drafts and r.spec_accepted_drafts is not None]
    proposed = sum(r.spec_proposed_drafts for r in drafts)
    return ObservedWindow(
        arm=arm, t0=t0, t1=t1, count=len(records), ttft_p50_s=ttft[0], ttft_p90_s=ttft[1],
        queue_p50_s=queue[0], queue_p90_s=queue[1], e2e_p50_s=e2e[0],
        mean_prompt_tokens=mean([r.prompt_tokens for r in records]),
        mean_output_tokens=mean([r.output_tokens for r in records]),
        output_tokens=sum(r.output_tokens or 0 for r in records),
        accept_length=sum(r.output_tokens for r in spec) / verify if verify else None,
        accept_rate=sum(r.spec_accepted_drafts for r in drafts) / proposed if proposed else None,
        bad_lines=bad_lines, ts=t1)


@dataclass
class _Window:
    t0: float
    records: list[ObservedRequest] = field(default_factory=list)
    bad: int = 0


class RequestWindowFeed:
    """A source's records as events: each poll's ObservedRequestsRead, and an ObservedWindow
    each time window_s has passed (a window with no request is one of count 0: the server was idle)."""

    def __init__(self, source: RequestMetricsSource, window_s: float = DEFAULT_WINDOW_S):
        self.source = source
        self.arm = source.arm
        self.window_s = window_s
        self._window: Optional[_Window] = None

    def poll(self, now: Optional[float] = None) -> list[Event]:
        now = clock.wall() if now is None else now
        if self._window is None:
            self._window = _Window(t0=now)
        read = self.source.poll(now)
        events: list[Event] = [] if read is None else [read]
        w = self._window
        if now - w.t0 >= self.window_s:  # the window closes before this poll's records
            events.append(window_stats(self.arm, w.t0, now, w.records, w.bad))
            self._window = w = _Window(t0=now)
        if read is not None:
            w.records.extend(read.records)
            w.bad += read.bad_lines
        return events

    def close(self, now: Optional[float] = None) -> list[Event]:
        """What was appended until now, and the last (partial) window when it holds anything."""
        now = clock.wall() if now is None else now
        events = self.poll(now)
        w = self._window
        if w is not None and (w.records or w.bad):
            events.append(window_stats(self.arm, w.t0, now, w.records, w.bad))
        self._window = None
        return events


@dataclass
class Occupancy:
    """Time-weighted requests in [t0, t1) of the server's clock, from its own per-request stamps:
    `running` from admission (received + queue time) to finish, `queued` from receipt to
    admission; `finished` and `output_tokens` of the requests that ended in it. Complete only for
    a window every overlapping request of which has finished (a later line may still add to it)."""

    t0: float
    t1: float
    running: float
    queued: float
    finished: int
    output_tokens: int

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / (self.t1 - self.t0)


def occupancy(records: Sequence[ObservedRequest], t0: float, t1: float) -> Optional[Occupancy]:
    """The exact operating point of [t0, t1) from the records (None for an empty span or when no
    record carries the stamps: received_ts, finished_ts and queue_s)."""
    if t1 <= t0:
        return None
    span = t1 - t0
    run = queue = 0.0
    finished = tokens = 0
    known = False
    for r in records:
        if r.received_ts is None or r.finished_ts is None or r.queue_s is None:
            continue
        known = True
        admitted = min(r.received_ts + r.queue_s, r.finished_ts)
        queue += max(0.0, min(admitted, t1) - max(r.received_ts, t0))
        run += max(0.0, min(r.finished_ts, t1) - max(admitted, t0))
        if t0 <= r.finished_ts < t1:
            finished += 1
            tokens += r.output_tokens or 0
    if not known:
        return None
    return Occupancy(t0=t0, t1=t1, running=run / span, queued=queue / span, finished=finished, output_tokens=tokens)
