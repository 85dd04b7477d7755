"""The observed knee: an arm's operating curve from its own samples, with no load sent.

Every fresh Sample of an arm adds its seconds to one bin of running requests: throughput,
throughput per running request and queued requests; a sample with requests waiting counts at the
most running of the last TURNOVER_S (a capped server's cohort turning over is not a lighter load).
Queue time and TTFT (the server's histograms' increase over their window, Sample.queue_time_mean_s
/ ttft_mean_s, never the cumulative average) count at the most running that window saw.
Adding is O(1); reading the knee is O(bins), and there are at most a few dozen bins whatever the
traffic (running counts above 32 share geometric bins), so a 64-worker fleet at 1 s stays cheap.

The knee is the lower of two points on that curve:
- plateau: the lowest running count from which each further running request adds less than 15 %
  of one lone request's tok/s (the ramp's plateau rule, on bins instead of levels), called only
  when the curve was seen past it, so still-rising traffic is never called a plateau;
- queue onset: the lowest running count at which requests waited most of the time (and every
  higher bin with evidence waited as well): requests queue before they run.

The limit is named from SGLang's own figures at and above the knee: running at the server's
max_running_requests (request_cap), the KV pool near full (kv_pool), requests waiting while the
pool has room and running is under the cap (token_budget: the prefill budget admits too few per
step), else throughput flat with neither cap hit (compute). Pure: no I/O, no Textual.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Optional

from specmon.analysis.request_latency import RequestLatencies
from specmon.model import ArmInfo, CurvePoint, ObservedKnee, ObservedRequest, Sample

MIN_BIN_S = 3.0  # a bin with fewer seconds of samples is shown, never used for the knee
MIN_BIN_SHARE = 0.01  # ... nor one with under 3 % of the arm's seconds (a passing moment between loads)
MIN_RUNNING = 4  # traffic that never ran more than 3 at once says nothing about a knee
# The plateau, as the ramp's plateau knee has it (analysis/knee.py): from the running count on which
# each further running request adds less than 15 % of what one request gives alone.
PLATEAU_THETA = 0.15
QUEUED_SHARE = 0.5  # a bin "queues" when a request waited in at least half its seconds,
QUEUE_TTFT_SHARE = 0.5  # or when queue time is at least half of TTFT (the ramp's queueing rule)
QUEUE_RISE = 2.0  # ... and at least twice the queue time of the lightest load
KV_FULL = 0.9  # KV usage this high at the knee: the pool binds
HIST_WINDOW_S = 30.0  # a sample's queue time and TTFT cover the scrapes of this many wall seconds
# Requests waiting while fewer run than did a moment ago are a turnover, not a lighter load: a
# server at its cap finishes a cohort together and, until the waiting ones are admitted, shows
# running 2 of 4 with 2 queued. Real SGLang 0.5.23 on CPU held such moments for up to 3 s at a time
# and 15 s in all over a ramp, enough to call "requests queue from 2 running" at a cap of 4. Such
# a sample counts at the most running of this many seconds before it.
TURNOVER_S = 10.0
MAX_GAP_S = 10.0  # a gap between fresh samples longer than this counts as this much
CONFIDENCE_S = ((300.0, "high"), (60.0, "medium"), (0.0, "low"))


def bin_of(running: int) -> tuple[int, int]:
    """(lowest running count, width) of the bin that holds `running`: width 1 below 32, then 16
    bins an octave (32-63 by 2, 64-127 by 4, ...)."""
    if running < 32:
        return running, 1
    width = 1 << (running.bit_length() - 5)
    return running - running % width, width


@dataclass
class _Bin:
    lo: int
    width: int
    seconds: float = 0.0
    tok_s: float = 0.0  # sums weighted by seconds; *_w: the seconds the figure was known
    tok_w: float = 0.0
    per_user: float = 0.0
    queued: float = 0.0
    queued_s: float = 0.0
    queue_s: float = 0.0
    queue_w: float = 0.0
    ttft_s: float = 0.0
    ttft_w: float = 0.0
    # queue time's share of TTFT, sample by sample (each at most 1), weighted by seconds, counted in
    # the bin of the most running the histograms' window saw (OperatingCurve.add): what says
    # whether the bin queues. The bin's mean queue time over its mean TTFT does not: one request
    # cohort finishing together at a capped server shows running 4 of 12 for a sample while the
    # histograms' window holds seconds of queueing, and a few such samples (queue 1-4 s) outweighed
    # a whole level's steady 15 ms at 4 running (it called the knee at 4 against the ramp's 12).
    share_s: float = 0.0
    share_w: float = 0.0
    kv_max: Optional[float] = None
    capped_s: float = 0.0  # seconds at the request cap
    kv_full_s: float = 0.0  # seconds with no free and no evictable KV left, or retracting (0.5.23)
    busy_max: Optional[float] = None  # the scheduler's busy share, highest (0.5.23)

    def queue_share(self) -> Optional[float]:
        return self.share_s / self.share_w if self.share_w else None

    def point(self) -> CurvePoint:
        return CurvePoint(
            running=self.lo, width=self.width, evidence_s=round(self.seconds, 3),
            tok_s=self.tok_s / self.tok_w if self.tok_w else None,
            per_user_tok_s=self.per_user / self.tok_w if self.tok_w else None,
            queued_mean=self.queued / self.seconds if self.seconds else None,
            queued_share=self.queued_s / self.seconds if self.seconds else None,
            queue_s=self.queue_s / self.queue_w if self.queue_w else None,
            ttft_s=self.ttft_s / self.ttft_w if self.ttft_w else None,
            kv_usage_max=self.kv_max, kv_full_share=self.kv_full_s / self.seconds if self.seconds else None,
            busy_max=self.busy_max)


class RunningPeak:
    """The most running requests seen in the last `window_s` seconds, amortized O(1) a sample:
    (ts, running) pairs with running falling from the left, so the first is the most."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._seen: deque[tuple[float, int]] = deque()

    def see(self, ts: float, running: int) -> int:
        while self._seen and self._seen[-1][1] <= running:
            self._seen.pop()
        self._seen.append((ts, running))
        while self._seen[0][0] < ts - self.window_s:
            self._seen.popleft()
        return self._seen[0][1]


class OperatingCurve:
    """One arm's curve, fed every Sample of the arm in order (`add`), read with `knee()`."""

    def __init__(self, arm: str):
        self.arm = arm
        self.bins: dict[int, _Bin] = {}
        self.evidence_s = 0.0
        self.running_max: Optional[int] = None
        self.last: Optional[Sample] = None  # the newest fresh sample
        self._last_ts: Optional[float] = None
        self.request_cap: Optional[int] = None
        self.kv_capacity: Optional[int] = None
        # seconds of evidence are the arm's (a sped-up simulator's x seconds per wall second), as
        # its tok/s already are
        self.time_scale = 1.0
        self.requests = RequestLatencies()  # the server's own per-request lines, where read
        # Tokens generated and requests finished since the first reading (counter deltas, a
        # restart's reset counted from zero): the mean output of a request, for the pool's room
        self._generated = 0.0
        self._finished = 0.0
        self._finished_last: Optional[float] = None
        self._hist_peak = RunningPeak(HIST_WINDOW_S)  # the most running the histograms' window saw
        self._turnover_peak = RunningPeak(TURNOVER_S)

    def set_info(self, info: Optional[ArmInfo]) -> None:
        if info is not None:
            self.request_cap = info.max_running_requests or self.request_cap
            self.kv_capacity = info.kv_capacity_tokens or self.kv_capacity
            self.time_scale = info.time_scale or 1.0

    def add(self, s: Sample, interval_s: float = 1.0) -> None:
        """Count one Sample. Rows that repeat an older scrape of the worker itself (stale_s set on a
        metrics/loads row: a fleet worker not scraped this tick) and rows with no reading add
        nothing: the next fresh one covers the gap. A Prometheus or gateway row is its own reading
        (its stale_s is the series' age), so it counts."""
        if not s.up or s.running_reqs is None or (s.stale_s and s.source in ("metrics", "loads")):
            return
        if self._last_ts is None or s.ts <= self._last_ts:
            dt = interval_s
        else:
            dt = min(s.ts - self._last_ts, max(MAX_GAP_S, 3 * interval_s))
        dt *= self.time_scale
        self._last_ts, self.last = s.ts, s
        r = s.running_reqs
        self.requests.note(s.ts, r)
        hist_peak = self._hist_peak.see(s.ts, r)
        recent = self._turnover_peak.see(s.ts, r)
        q = s.queued_reqs or 0
        counted = recent if q > 0 else r  # the running count this sample is evidence for
        lo, width = bin_of(counted)
        b = self.bins.get(lo)
        if b is None:
            b = self.bins[lo] = _Bin(lo, width)
        b.seconds += dt
        self.evidence_s += dt
        if self.running_max is None or r > self.running_max:
            self.running_max = r
        fin = s.requests_finished_total
        if fin is not None:
            if self._finished_last is not None:
                self._finished += fin - self._finished_last if fin >= self._finished_last else fin
                if s.gen_tok_s is not None:
                    self._generated += s.gen_tok_s * dt
            self._finished_last = fin
        if s.gen_tok_s is not None:
            b.tok_s += s.gen_tok_s * dt
            b.per_user += (s.gen_tok_s / counted if counted else 0.0) * dt
            b.tok_w += dt
        b.queued += q * dt
        if q > 0:
            b.queued_s += dt
        # The histograms' requests queued when running was at its most in their window, not at
        # the count now: once load falls from past the knee, 30 s of samples at the lower count
        # still carry the heavier load's queue times and TTFT (on a diurnal trace's falling side
        # it called a knee of 8 for a server capped at 12), as do a capped server's cohort moments
        # (running 4 for a scrape between cohorts). Their figures count in that bin.
        peak = self.bins[bin_of(hist_peak)[0]]
        if s.queue_time_mean_s is not None:
            peak.queue_s += s.queue_time_mean_s * dt
            peak.queue_w += dt
        if s.ttft_mean_s is not None:
            peak.ttft_s += s.ttft_mean_s * dt
            peak.ttft_w += dt
            if s.queue_time_mean_s is not None and s.ttft_mean_s > 0:
                peak.share_s += min(1.0, s.queue_time_mean_s / s.ttft_mean_s) * dt
                peak.share_w += dt
        kv = s.kv_usage
        if kv is None and s.kv_used_tokens is not None and (s.kv_capacity_tokens or self.kv_capacity):
            kv = s.kv_used_tokens / (s.kv_capacity_tokens or self.kv_capacity)
        if kv is not None and (b.kv_max is None or kv > b.kv_max):
            b.kv_max = kv
        if self.request_cap and r >= self.request_cap:
            b.capped_s += dt
        # SGLang 0.5.23's own pool figures, where the sample has them: nothing free and nothing the
        # radix cache could give back, or requests retracted, is a full pool whatever token_usage
        # says. So is a pool without room for one more request while requests wait (_no_room).
        free, evictable = s.kv_available_tokens, s.kv_evictable_tokens
        cap = s.kv_capacity_tokens or self.kv_capacity
        room = (free + evictable if free is not None and evictable is not None
                else None if kv is None or not cap else (1.0 - kv) * cap)
        if ((free is not None and evictable is not None and cap and room <= 0.02 * cap)
                or (s.retracted_reqs or 0) > 0 or (s.retractions_per_s or 0) > 0
                or (q > 0 and r > 0 and room is not None and self._no_room(s, r, room, kv, cap))):
            b.kv_full_s += dt
        busy = getattr(s, "scheduler_busy_share", None)
        if busy is not None and (b.busy_max is None or busy > b.busy_max):
            b.busy_max = busy

    def output_mean(self) -> Optional[float]:
        """Mean tokens a finished request generated, over what was read (None under 5 requests)."""
        return self._generated / self._finished if self._finished >= 5 else None

    def _no_room(self, s: Sample, r: int, room: float, kv: Optional[float], cap: Optional[int]) -> bool:
        """SGLang admits a request only with room (free + evictable) for its prompt and all of its
        max_new_tokens beside the output its running requests may still write (both releases'
        PrefillAdder; 0.5.23 keeps all of it for requests that ignore EOS). With requests of a
        mean output o, each running one holding its prompt and ~o/2 so far (used / r), the next
        needs used / r + o / 2 and the running ones r x o / 2 more: the real 0.5.23 with a
        1,024-token pool and 176-token requests queued from 3-5 running at 63-85% used. Without a
        mean output, what one running request holds is the least the next one needs."""
        used = s.kv_used_tokens if s.kv_used_tokens is not None else (None if kv is None or not cap else kv * cap)
        if not used:
            return False
        o = self.output_mean() or 0.0
        return room < used / r + o / 2 + r * o / 2

    def curve(self) -> list[CurvePoint]:
        points = [self.bins[k].point() for k in sorted(self.bins)]
        cells = self.requests.binned(bin_of)
        for p in points:  # a bin with enough requests of its own: their exact figures
            c = cells.get(p.running)
            if c is not None:
                p.queue_s, p.ttft_s, p.requests = c.queue_s, c.ttft_s, c.n
        return points

    def _share(self, lo: int, cells: dict) -> Optional[float]:
        c = cells.get(lo)
        return c.share if c is not None and c.share is not None else self.bins[lo].queue_share()

    def knee(self) -> ObservedKnee:
        points = self.curve()
        now = self._now(points)
        rmax = self.running_max
        if rmax is None or rmax < MIN_RUNNING:
            seen = "no running requests seen" if rmax is None else f"running never above {rmax}"
            return ObservedKnee(
                concurrency=None, limit=None, evidence_s=round(self.evidence_s, 1), running_max=rmax,
                reason=f"{seen} in {self.evidence_s:.0f} s; need traffic reaching ~{self._needed()} running",
                curve=points, **now)
        floor = max(MIN_BIN_S, MIN_BIN_SHARE * self.evidence_s)
        used = [p for p in points if p.evidence_s >= floor]
        plateau = _plateau(used)
        cells = self.requests.binned(bin_of)
        onset = _queue_onset(used, {p.running: self._share(p.running, cells) for p in used})
        candidates = [c for c in (plateau, onset) if c is not None]
        if not candidates:
            if self.request_cap and rmax >= self.request_cap:
                # at the cap already: more running cannot come, only requests waiting behind it
                need = (f"running reached the request cap {self.request_cap} with too little queueing seen in "
                        f"{self.evidence_s:.0f} s; need traffic past the cap (requests waiting)")
            else:
                need = (f"throughput still rising and no queueing up to {rmax} running in "
                        f"{self.evidence_s:.0f} s; need traffic reaching ~{self._needed()} running")
            return ObservedKnee(
                concurrency=None, limit=None, evidence_s=round(self.evidence_s, 1), running_max=rmax,
                reason=need, curve=points, **now)
        knee = min(candidates)
        at = [p for p in used if p.running + p.width > knee]
        limit, why = self._limit(at, knee, queued=onset is not None and onset <= knee)
        past_s = sum(p.evidence_s for p in at)
        confidence = next(name for floor, name in CONFIDENCE_S if past_s >= floor)
        words = []
        if plateau is not None:
            words.append(f"throughput flat from {plateau} running")
        if onset is not None:
            words.append(f"requests queue from {onset} running")
        headroom = None if now["running_now"] is None else max(0, knee - now["running_now"])
        return ObservedKnee(
            concurrency=knee, limit=limit, evidence_s=round(self.evidence_s, 1),
            reason=f"{'; '.join(words)}; {why} ({past_s:.0f} s at or past it)", confidence=confidence,
            plateau=plateau, queue_onset=onset, running_max=rmax, headroom=headroom, curve=points, **now)

    # ---- parts -------------------------------------------------------------------------------
    def _now(self, points: list[CurvePoint]) -> dict:
        placed = sum(p.requests or 0 for p in points)
        source = ("requests" if placed else
                  "histograms" if any(p.ttft_s is not None for p in points) else None)
        s = self.last
        if s is None:
            return {"running_now": None, "queue_share_now": None, "latency_source": source, "latency_requests": placed}
        # the requests read lately where the server writes them, else the histograms' newest window
        share = self.requests.share_now(s.ts)
        if share is None and s.queue_time_mean_s is not None and s.ttft_mean_s:
            share = min(1.0, s.queue_time_mean_s / s.ttft_mean_s)
        return {"running_now": s.running_reqs, "queue_share_now": share, "latency_source": source,
                "latency_requests": placed}

    def _needed(self) -> int:
        """Running requests the traffic should reach to show a knee: twice the highest seen (at
        least MIN_RUNNING x 2), no more than the request cap."""
        want = max(2 * MIN_RUNNING, 2 * (self.running_max or 0))
        return min(want, self.request_cap) if self.request_cap else want

    def _limit(self, at: list[CurvePoint], knee: int, queued: bool) -> tuple[str, str]:
        cap = self.request_cap
        kv = max((p.kv_usage_max for p in at if p.kv_usage_max is not None), default=None)
        full = max((p.kv_full_share for p in at if p.kv_full_share is not None), default=0.0)
        used = kv
        if full >= 0.25 and (kv is None or kv < KV_FULL):
            # for a quarter of a bin the pool had no room for another request (nothing free nor
            # evictable, requests retracted, or, with requests waiting, less room than the next
            # one needs beside the running ones' output: _no_room)
            kv = KV_FULL
        top = max(p.running + p.width - 1 for p in at)
        if cap and top >= cap - max(1, math.ceil(0.02 * cap)) and (kv is None or kv < KV_FULL):
            return "request_cap", f"running reached the request cap {cap}"
        if kv is not None and kv >= KV_FULL:
            if used is None or used < KV_FULL:
                at_most = f" at {used:.0%} used" if used is not None else ""
                return "kv_pool", f"KV pool without room for another request{at_most}"
            return "kv_pool", f"KV pool {kv:.0%} full"
        if queued:
            room = f"KV at most {kv:.0%}" if kv is not None else "KV usage unknown"
            cap_words = f"running under the cap {cap}" if cap else "no request cap known"
            return "token_budget", f"requests wait with {room} and {cap_words}"
        busy = max((p.busy_max for p in at if p.busy_max is not None), default=None)
        engine = f" (scheduler busy {busy:.0%})" if busy is not None else ""
        return "compute", f"neither the KV pool nor the request cap binds: the decode step slows{engine}"


def _plateau(points: list[CurvePoint]) -> Optional[int]:
    """The lowest running count from which every further bin adds less than PLATEAU_THETA of one
    lone request's tok/s per added request; None unless the curve was seen past it."""
    rising = [p for p in points if p.tok_s is not None and p.running > 0]
    if len(rising) < 3:
        return None
    # one request's tok/s: the median of the lowest three bins' per-request figure (one bin
    # caught between loads must not set the scale)
    lone = sorted(p.tok_s / p.running for p in rising[:3])[1]  # type: ignore[operator]
    if lone <= 0:
        return None
    plateau = None
    for a, b in zip(reversed(rising[:-1]), reversed(rising[1:])):
        gain = (b.tok_s - a.tok_s) / (b.running - a.running) / lone  # type: ignore[operator]
        if gain >= PLATEAU_THETA:
            break
        plateau = a.running
    return plateau


def _queues(p: CurvePoint, base_queue_s: float, share: Optional[float]) -> bool:
    """Requests wait in this bin: one waited in most of its seconds, or queue time was most of
    TTFT (`share`: sample by sample, over the bin's seconds) and has risen above the lightest
    load's (a server whose prefill keeps up only in bursts shows this before the first; a
    scheduler's few-millisecond admission wait is not queueing)."""
    if (p.queued_share or 0) >= QUEUED_SHARE:
        return True
    if p.queue_s is None or share is None:
        return False
    return share >= QUEUE_TTFT_SHARE and p.queue_s > QUEUE_RISE * base_queue_s


def _queue_onset(points: list[CurvePoint], shares: dict[int, Optional[float]]) -> Optional[int]:
    """The running count that best splits the curve into bins that do not queue (below) and bins
    that do (at and above), by seconds of evidence on the wrong side; None when no split beats
    "nothing queues". A burst that came and went at a low count, or a low count passed through
    while the histograms' window still holds an earlier load's queueing, costs only its seconds."""
    pts = [p for p in points if p.running > 0]
    light = sorted(p.queue_s for p in pts[:3] if p.queue_s is not None)
    base = light[len(light) // 2] if light else 0.0  # the lightest load's queue time (median of 3)
    flags = [_queues(p, base, shares.get(p.running)) for p in pts]
    # wrong seconds with the onset at pts[i]: queueing bins below + non-queueing bins at and above
    wrong_above = sum(p.evidence_s for p, q in zip(pts, flags) if not q)
    wrong_below = 0.0
    best, onset = sum(p.evidence_s for p, q in zip(pts, flags) if q), None  # "nothing queues"
    for p, q in zip(pts, flags):
        if q and wrong_below + wrong_above < best:
            best, onset = wrong_below + wrong_above, p.running
        if q:
            wrong_below += p.evidence_s
        else:
            wrong_above -= p.evidence_s
    return onset


class ObservedCurves:
    """Every arm's curve: what a live session, a history replay and a report feed."""

    def __init__(self) -> None:
        self.curves: dict[str, OperatingCurve] = {}

    def add(self, s: Sample, info: Optional[ArmInfo] = None, interval_s: float = 1.0) -> None:
        c = self.curves.get(s.arm)
        if c is None:
            c = self.curves[s.arm] = OperatingCurve(s.arm)
        if info is not None:
            c.set_info(info)
        c.add(s, interval_s)

    def add_requests(self, records: list[ObservedRequest]) -> None:
        """Requests the server wrote itself (attach --request-metrics-dir), read after the samples
        of the ticks they ran in: placed on their arm's curve (request_latency.py)."""
        for r in records:
            c = self.curves.get(r.arm)
            if c is not None:
                c.requests.add(r, c.time_scale)

    def knees(self) -> dict[str, ObservedKnee]:
        return {arm: c.knee() for arm, c in self.curves.items() if c.evidence_s > 0}


def knee_line(arm: str, k: ObservedKnee) -> str:
    """The headless line: `knee [observed] ARM: ...`."""
    if k.concurrency is None:
        return f"knee [observed] {arm}: none yet ({k.reason})"
    head = ""
    if k.running_now is not None:
        head = (f"; running {k.running_now} of {k.concurrency}: room for ~{k.headroom} more before "
                f"{'queueing' if k.limit != 'compute' else 'throughput stops growing'}")
    share = f"; queue {k.queue_share_now:.0%} of TTFT now" if k.queue_share_now is not None else ""
    return (f"knee [observed] {arm}: {k.concurrency} running, limit {k.limit}, "
            f"{k.evidence_s:.0f} s of evidence ({k.confidence}){head}{share}; {k.reason}{latency_words(k)}")


def latency_words(k: ObservedKnee) -> str:
    """Where the curve's TTFT and queue time came from, for the headless line."""
    if k.latency_source == "requests":
        return f"; TTFT/queue from {k.latency_requests} requests' own lines"
    if k.latency_source == "histograms":
        return "; TTFT/queue from the histograms"
    return ""
