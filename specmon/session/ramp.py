"""RampDriver: a closed-loop concurrency ramp (or open-loop rate levels, or an SLO search)
against every arm at once.

For each level C (plan.levels): every arm gets exactly C streams, each sending its next request
as soon as the previous one ends (closed loop), for plan.level_duration_s or until
plan.requests_per_level requests were sent per arm. The first plan.settle_s of a level are left
out of its statistics (the previous population drains, the batch fills). When the level stops
issuing, the requests in flight finish (drain) so slow requests are not cut out of the
percentiles; then the level's LevelResult per arm is computed (analysis.levels), knees are
checked (analysis.knee), and everything leaves as events (RampStarted, LevelStarted,
LevelProgress, RequestFinished per request, KneeCalled, LevelFinished, RampFinished): the ramp
writes nothing itself. Then `host.between_levels(i, restart)` runs (launch mode restarts
servers there), then an optional POST /flush_cache (--flush-cache: before the first level too).
A first level whose prompts the server had cached already (a second ramp with the same seed)
is said in a mark and its note, with --flush-cache offered (_warm_cache). The ramp sees the session only through
source.RampHost.

Durations in the plan (level duration, settle) are in the arms' time: simulated seconds for a
sped-up simulator (ArmInfo.time_scale = X), so the wall time of a level is duration / X.
Client durations are recorded x the arm's scale; for a simulator that cannot keep up with its
--speed on a busy CPU, the scale used is the pace it really kept (server_pace, measured from its
own meta_info stamps; recorded per level in session.json load_client[].server_pace).

All HTTP runs on LoadLoop (its own thread and event loop); this coroutine, on the session's
loop, only starts levels, emits events and polls progress once a second. Each finished request
is handed over to the session's loop as it finishes (loop.call_soon_threadsafe, one wake-up for
however many finished since the last), so its requests.csv row is written within milliseconds:
a kill -9 loses at most the requests in flight (benchmarks/kill9_rows.py counts them).

A server that refuses the load is not hammered (see Backoff): after any 4xx/5xx answer (a 429 or
503, but also the 404s of a path it does not serve or the 500s of a broken server), or no answer
at all (refused, reset), each stream waits before its next request, honouring Retry-After (capped)
or backing off exponentially with jitter (50 ms doubling to 1 s); a success resets it. The failed requests are
recorded as failed (requests.csv keeps their HTTP status), the time spent waiting is counted per
arm (session.json load_client[].backoff), and a level that spent most of it waiting says so in
its invalid_reason. A 401/403 is not retried at all: the arm's level stops at the first one, one
Marker says why, and that arm gets no more requests for the rest of the ramp (`denied`; the
command exits 2). A server that stopped answering is named in the level's reason ("server at URL
stopped answering: connection refused"), never the client; an arm whose server is gone when the
ramp ends is in `gone` (the command exits 3).

Multi-turn conversations (plan.turns > 1): each stream runs one conversation at a time (load/
workload.py Conversation: each turn resends the history, the server's reply included), waits
plan.think_time_s between two turns (the time it thinks is handed to the level's statistics,
which count only the streams not thinking), and starts the next conversation when one ends.

Open-loop levels (plan.rates): level i offers rates[i] requests per second per arm, at seeded
arrival times (load/workload.py arrival_times; recorded per request as t_scheduled), each sent
when it is due whatever is in flight, at most plan.max_concurrency at once (the rest wait for a
slot, still counted in the backlog). Once the window has run half its length, the backlog
(arrived and not finished) over the second half of what ran so far is checked every poll
(analysis/levels.py backlog_trend); when it grows, the arm is over-saturated: its level is cut
short there (requests in flight and waiting cancelled), marked knee = over_saturation with the
trend in its note, and never taken for a steady state (not valid). A level that ran its course
is checked once more over its window's second half.

A trace (plan.trace, load/trace.py) is one open-loop level whose arrivals are the trace's (divided
by plan.trace_speed, in the arm's seconds) and whose requests have the trace's lengths; it runs to
its last arrival and is never cut short for over-saturation (its backlog is what the trace did).

SLO search (plan.search, one arm): the levels are chosen as the ramp goes by
analysis/search.py's policy (double, then bisect on the Wilson lower bound of SLO attainment);
the search's state travels in the arm's KneesSummary.search.
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
import time
from typing import Any, Iterator, Optional, Sequence

from specmon import clock
from specmon.analysis.knee import (
    knee_level, knees_summary, label_knee, plateau_knee, queue_share, queueing_knee, queueing_ttft,
)
from specmon.analysis.levels import BacklogTrend, Window, backlog_trend, level_result
from specmon.analysis.search import level_meets, search_step
from specmon.errors import UsageError
from specmon.load.client import GenerateClient, RequestOutcome, TokenStamps
from specmon.load.loop import LoadLoop
from specmon.load.trace import Trace, trace_from_plan
from specmon.load.workload import Prompt, Workload, arrival_times
from specmon.model import (
    ArmSpec, KneeCalled, KneesSummary, LevelFinished, LevelProgress, LevelResult, LevelStarted, RampFinished,
    RampPlan, RampStarted, RequestFinished,
)
from specmon.session.fleet_ramp import FleetRamp
from specmon.session.folder import public_url
from specmon.session.source import Emit, RampHost
from specmon.sources.derive import cache_counter_deltas, histogram_delta
from specmon.sources.prom import Histogram, MetricsSnapshot

INFO_WAIT_S = 20.0
PACE_TOLERANCE = 0.03
# A level whose pace (server seconds per wall second over the level) is under this share of its
# requests' median pace held a stall: the next level is planned with the median instead.
STALL_PACE_SHARE = 0.5
# A stream's wait after a 4xx/5xx or no answer (wall seconds): Retry-After when the server sends
# one, at most RETRY_AFTER_CAP_S; else BACKOFF_FIRST_S doubling to BACKOFF_MAX_S (README says
# 1 s), each wait drawn in [1/2, 1] of its step so C streams refused together do not come back
# together. At the cap a stream sends at most ~1.3 requests a second to a server that fails them all.
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0
RETRY_AFTER_CAP_S = 10.0
BACKOFF_MOSTLY = 0.5
# A first level whose prefix-cache hit rate reaches WARM_CACHE_HIT, and WARM_CACHE_MARGIN above
# what the workload shares by design, measured a cache an earlier run filled (see _warm_cache).
WARM_CACHE_HIT = 0.5
WARM_CACHE_MARGIN = 0.3  # a level whose streams waited this share of it or more is invalid
_DENIALS = {401: "401 Unauthorized", 403: "403 Forbidden"}
_STATUS_TEXT = {429: "429 Too Many Requests", 503: "503 Service Unavailable"}


# Levels of at least this many streams (all arms together) pace the load loop (LoadLoop.pace),
# where every server runs at real time.
PACE_FROM_STREAMS = 64


class Backoff:
    """One stream's wait before its next request, from how its last request ended."""

    def __init__(self, rng: Optional[random.Random] = None):
        self.step = 0.0
        # random's shared generator unless given one: a Random() of its own per stream read
        # os.urandom to seed itself, ~15 us each, 1,000 at the start of a level at C=1,000
        self._rng = rng or random

    def after(self, o: RequestOutcome) -> float:
        """Seconds to wait now: 0 after a success (or a cancel); else the next back-off step."""
        refused = _refused(o)
        if not refused and o.no_answer is None:
            self.step = 0.0
            return 0.0
        self.step = min(BACKOFF_MAX_S, self.step * 2 or BACKOFF_FIRST_S)
        if refused and o.retry_after_s is not None:
            return min(o.retry_after_s, RETRY_AFTER_CAP_S)
        return self.step * self._rng.uniform(0.5, 1.0)


def _refused(o: RequestOutcome) -> bool:
    """The server answered this request with an HTTP error (4xx/5xx): the stream backs off."""
    return o.status not in ("ok", "cancelled") and o.http_status is not None and o.http_status >= 400


def _status_text(code: int) -> str:
    return _STATUS_TEXT.get(code, f"HTTP {code}")


def _lost_connection(o: RequestOutcome) -> Optional[str]:
    """Why the server dropped this request's connection (no answer, or cut mid-response); None
    when it answered (even with an error) or the request was cancelled."""
    if o.status == "cancelled":
        return None
    if o.no_answer is not None:
        return o.no_answer
    return "connection closed mid-response" if o.cut_mid_response else None


def _window_histogram(old: Optional[MetricsSnapshot], new: Optional[MetricsSnapshot], name: str) -> Optional[Histogram]:
    """A server histogram's increase between two scrapes: the observations of one level's window.
    None when either scrape is missing or the server restarted between them."""
    if old is None or new is None or new is old:
        return None
    h_new = new.histogram(name)
    if h_new is None:
        return None
    h_old = old.histogram(name)
    return h_new if h_old is None else histogram_delta(h_new, h_old)


def _server_stamped(outcomes: Sequence[RequestOutcome]) -> Iterator[tuple[RequestOutcome, float, float]]:
    """(request, received, finished on the server's clock) of each request that finished ok
    with both stamps in its final meta_info."""
    for o in outcomes:
        m = o.final_meta or {}
        rx, fin = m.get("request_received_ts"), m.get("request_finished_ts")
        if o.status == "ok" and o.t_end is not None and isinstance(rx, (int, float)) and isinstance(fin, (int, float)):
            yield o, rx, fin


def server_pace(outcomes: Sequence[RequestOutcome]) -> Optional[float]:
    """Server seconds per wall second over a level, from the server's own stamps.

    With --enable-metrics the final meta_info carries request_received_ts and
    request_finished_ts (the simulator writes its simulated clock there). Their span over the
    level, divided by the wall span the client saw for the same requests, is the pace the server
    really ran at: ~1 for a real server, ~X for a simulator that keeps up with --speed X, less
    when the simulator is CPU-bound and holds its clock back. None without those stamps.
    """
    first_rx = last_fin = first_sent = last_end = None
    for o, rx, fin in _server_stamped(outcomes):
        end = o.wall(o.t_end)
        first_rx = rx if first_rx is None else min(first_rx, rx)
        last_fin = fin if last_fin is None else max(last_fin, fin)
        first_sent = o.t_sent_wall if first_sent is None else min(first_sent, o.t_sent_wall)
        last_end = end if last_end is None else max(last_end, end)
    if first_rx is None or last_end - first_sent <= 1.0:
        return None  # under a wall second the network and HTTP latencies would dominate
    return (last_fin - first_rx) / (last_end - first_sent)


def request_pace(outcomes: Sequence[RequestOutcome], min_wall_s: float = 0.01) -> Optional[float]:
    """The median over the level's requests of each one's server span over its wall span
    (requests of at least min_wall_s wall seconds). Unlike server_pace it is not pulled down by a
    stretch in which the server's clock stood still (a stalled simulator): only the few requests
    in flight then are slow. A request's HTTP latency makes it read a few % low at x50: a
    figure to plan the next level with, not to scale figures by. None with fewer than 5."""
    paces = []
    for o, rx, fin in _server_stamped(outcomes):
        wall = o.wall(o.t_end) - o.t_sent_wall
        if wall >= min_wall_s and fin > rx:
            paces.append((fin - rx) / wall)
    if len(paces) < 5:
        return None
    paces.sort()
    n = len(paces)
    return paces[n // 2] if n % 2 else (paces[n // 2 - 1] + paces[n // 2]) / 2


def compact(o: RequestOutcome) -> None:
    """What a finished request keeps while its level runs (its requests.csv row is written):
    the token events as load.client.TokenStamps (two arrays, as the stream wrote them from the
    start), no answer text or ids (a multi-turn stream has taken them). Called on the session's loop once the load loop is done with the request."""
    if not isinstance(o.token_events, TokenStamps):
        o.token_events = TokenStamps(o.token_events)
    o.output_ids = o.output_text = None


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


def _backlog_spans(outcomes: Sequence[RequestOutcome]) -> list[tuple[float, Optional[float]]]:
    """(arrival, end) wall stamps of an open-loop level's requests (end None: not finished);
    a request cancelled before it was sent left no backlog."""
    spans = []
    for o in list(outcomes):  # the load thread appends meanwhile: a copy
        if o.t_end is not None and o.t_sent is not None:
            spans.append((o.t_scheduled_wall, o.wall(o.t_end)))
        elif o.t_end is None and o.status != "cancelled":
            spans.append((o.t_scheduled_wall, None))
    return spans


def _in_flight(outcomes: Sequence[RequestOutcome]) -> int:
    return sum(1 for o in list(outcomes) if o.t_end is None and o.status != "cancelled")


class RampDriver:
    def __init__(self, arms: Sequence[ArmSpec], plan: RampPlan, *, workload: Optional[Workload] = None,
                 trace: Optional[Trace] = None):
        if not plan.steps and not plan.search:
            raise ValueError("RampPlan has no levels")
        if plan.search and len(arms) > 1:
            raise UsageError(f"--search: one server at a time (each needs its own levels), got {len(arms)}")
        self.arms = list(arms)
        self.plan = plan
        self.workload = workload or Workload.from_plan(plan)
        self.workload.sharers = len(self.arms)  # every arm sends prompt i: kept until all have
        # --trace: the one open-loop level's arrivals and lengths (load/trace.py)
        self.trace = trace if trace is not None or plan.trace is None else trace_from_plan(plan)
        self._search_next: Optional[float] = None  # the level the SLO search asked for next
        self.results: dict[str, list[LevelResult]] = {a.name: [] for a in self.arms}
        self.knees: dict[str, KneesSummary] = {}
        self.scales: dict[str, float] = {}
        self._measured: dict[str, float] = {}  # simulator pace measured on the last level, per arm
        self.client_stats: list[dict[str, Any]] = []
        self._paused = threading.Event()
        self._skip = threading.Event()
        # What the running closed-loop level waits on (on the load loop): a stream ending, the
        # level's clock running out, or pause / resume / skip from any thread (_poke_level).
        self._level_wake: Optional[asyncio.Future] = None
        self._next_prompt: dict[str, int] = {a.name: 0 for a in self.arms}
        self._called: set[tuple[str, str]] = set()
        self._load: Optional[LoadLoop] = None
        # The outcomes of the last finished level (per arm, their token events compacted), for
        # benchmarks and checks; dropped when the next level starts (token stamps of a long ramp
        # would not fit in memory).
        self.last_outcomes: dict[str, list[RequestOutcome]] = {}
        self.last_window: Optional[Window] = None
        # arm -> why it got no more requests: its server answered 401/403 (the command exits 2)
        self.denied: dict[str, str] = {}
        # arm -> why its server is gone: every stream's last request lost its connection on the
        # last level that sent it any (the command exits 3 when one is left at the end)
        self.gone: dict[str, str] = {}
        self.fleet = FleetRamp(self.arms)  # an arm that is a gateway: its workers' rows (fleet_ramp.py)

    # ---- controls (any thread) --------------------------------------------------------------
    def pause(self) -> None:
        """Stop issuing new requests (those in flight finish); the level clock stops."""
        self._paused.set()
        self._poke_level()

    def resume(self) -> None:
        self._paused.clear()
        self._poke_level()

    def skip_level(self) -> None:
        """End the current level now: stop issuing and cancel what is in flight."""
        self._skip.set()
        self._poke_level()

    def _poke_level(self) -> None:
        """Wake the running level's wait on the load loop (it reads the flags again)."""
        load = self._load
        if load is not None and self._level_wake is not None:
            try:
                load.loop.call_soon_threadsafe(self._wake_level)
            except RuntimeError:  # the load loop is closed: no level to wake
                pass

    def _wake_level(self) -> None:  # on the load loop
        fut = self._level_wake
        if fut is not None and not fut.done():
            fut.set_result(None)

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    def _never_succeeded(self) -> Optional[str]:
        """Why the ramp measured nothing, when requests were sent and not one succeeded on any
        arm (a server that fails every request): one text naming each arm's answers; None when
        one succeeded, or none was sent (a ramp stopped before its first request ended)."""
        rows = [r for rs in self.results.values() for r in rs]
        if not rows or any(r.ok for r in rows) or not any(r.failed for r in rows):
            return None
        parts = []
        for arm, rs in self.results.items():
            failed = sum(r.failed for r in rs)
            why = next((r.invalid_reason for r in reversed(rs) if r.invalid_reason), None)
            parts.append(f"{arm}: {failed} requests failed" + (f" ({why})" if why else ""))
        return "no request of the ramp succeeded: " + "; ".join(parts)

    # ---- the ramp ---------------------------------------------------------------------------
    async def run(self, emit: Emit, live: RampHost) -> str:
        self._load = load = LoadLoop()
        load.start_lag_probe()
        plan = self.plan
        top = (plan.max_concurrency or 1) if plan.open_loop else (
            int(plan.search_max) if plan.search else max(plan.levels))
        clients: dict[str, GenerateClient] = {}
        reason = "done"
        try:
            for arm in self.arms:
                clients[arm.name] = await load.submit(self._make_client(arm, top))
            await self._read_scales(live)
            emit(RampStarted(plan=self.plan, time_scale=dict(self.scales), workload=self.workload.describe()
                             if self.trace is None else {**self.workload.describe(), **self.trace.describe()}))
            if plan.flush_cache:  # before the first level too: nothing cached by an earlier run counts
                await self._flush(clients, live)
            i = 0
            step = search_step([], start=plan.search_start, max_level=plan.search_max, rates=plan.open_loop,
                               target=plan.attainment)[0] if plan.search else plan.steps[0]
            while step is not None:
                c, rate = (plan.max_concurrency or 0, float(step)) if plan.open_loop else (int(step), None)
                await self._run_level(i, c, clients, emit, live, rate=rate)
                if len(self.denied) == len(self.arms):
                    reason = "stopped: every server refused the credentials"
                    break
                step = self._search_next if plan.search else (
                    plan.steps[i + 1] if i + 1 < len(plan.steps) else None)
                if step is not None:
                    await live.between_levels(i, self.plan.restart_between_levels)
                    if self.plan.flush_cache:
                        await self._flush(clients, live)
                i += 1
        except asyncio.CancelledError:
            emit(self._end_event("cancelled"))
            raise
        except Exception as e:
            emit(self._end_event(f"error: {type(e).__name__}: {e}"))
            raise
        finally:
            live.set_level(None, None)
            for c in clients.values():
                try:
                    await asyncio.wait_for(load.submit(c.aclose()), 5)
                except Exception:
                    pass
            load.stop()
        emit(self._end_event(reason))
        return reason

    def _end_event(self, reason: str) -> RampFinished:
        """The ramp's last event: how it ended, and what keeps it from standing as a measurement."""
        return RampFinished(reason=reason, denied=dict(self.denied), gone=dict(self.gone),
                            never_succeeded=self._never_succeeded())

    async def _flush(self, clients: dict[str, GenerateClient], live: RampHost) -> None:
        """POST /flush_cache to every arm that still gets requests (--flush-cache)."""
        for arm in self.arms:
            if arm.name in self.denied:
                continue
            err = await self._load.submit(clients[arm.name].flush_cache())
            if err:
                live.mark(f"flush_cache {arm.name} failed: {err}")

    def _warm_cache(self, r: LevelResult) -> Optional[str]:
        """The warning for a first level whose prompts the server had cached already: its hit rate
        far above what this workload shares by design (a second ramp with the same seed on one
        server measures a warm prefix cache: low TTFT, little prefill). None when it looks cold."""
        plan = self.plan
        if r.cache_hit_rate is None or plan.turns > 1 or plan.flush_cache or self.trace is not None:
            return None  # multi-turn resends its history: hits are the workload's own
        shared = (plan.shared_prefix_len or 0) / plan.input_len if plan.input_len else 0.0
        if r.cache_hit_rate < max(WARM_CACHE_HIT, shared + WARM_CACHE_MARGIN):
            return None
        return (f"{r.arm}: {r.cache_hit_rate:.0%} of level 1's prompt tokens came from the server's prefix cache "
                f"(this workload shares {shared:.0%} by design): the server has these prompts from an earlier run "
                f"(same --seed?), so TTFT and prefill read low; run again with --flush-cache (POST /flush_cache "
                f"before each level) or another --seed")

    async def _make_client(self, arm: ArmSpec, top: int) -> GenerateClient:
        return GenerateClient(arm.url, max_concurrency=top, timeout_s=self.plan.timeout_s, api_key_env=arm.api_key_env)

    async def _read_scales(self, live: RampHost) -> None:
        """Each arm's time_scale from live.info(); waits for the first /server_info a while."""
        deadline = time.monotonic() + INFO_WAIT_S
        while True:
            missing = []
            for arm in self.arms:
                info = live.info(arm.name)
                known = info is not None and (info.model is not None or info.version is not None
                                              or info.kv_capacity_tokens is not None)
                if known:
                    self.scales[arm.name] = float(info.time_scale or 1.0)
                else:
                    missing.append(arm.name)
            if not missing or time.monotonic() > deadline:
                for name in missing:
                    self.scales[name] = 1.0
                return
            await asyncio.sleep(0.2)

    def _pace(self) -> float:
        """Server seconds per wall second to plan the next level with: the slowest arm's pace
        (measured on the previous level when it differed from the reported scale), so every arm
        gets at least the planned duration in its own time. An arm that gets no more requests
        (401/403) no longer counts."""
        paces = [self._measured.get(a, s) for a, s in self.scales.items() if a not in self.denied]
        return min(paces) if paces else 1.0

    def _wall(self, arm_seconds: float) -> float:
        return arm_seconds / self._pace()

    async def _run_level(self, i: int, c: int, clients: dict[str, GenerateClient], emit: Emit, live: RampHost,
                         rate: Optional[float] = None) -> None:
        plan = self.plan
        live.set_level(i, c if rate is None else None)
        self._skip.clear()
        self.last_outcomes = {}  # the previous level's requests: judged, their rows written
        emit(LevelStarted(level=i, offered_concurrency=c, planned_s=plan.level_duration_s if not plan.requests_per_level else None,
                          levels_total=len(plan.steps), offered_rate=rate))
        level = _LevelState([a.name for a in self.arms])
        for client in clients.values():
            await self._load.submit(client.drop_idle())  # idle since the last level: maybe closed
        cpu0, pauses0 = self._load.cpu_s, self._load.pauses
        self._load.lag_stats(reset=True)
        loop = asyncio.get_running_loop()

        def drain() -> None:  # on the session's loop: the finished requests and notices so far
            level.woken = False  # first: a request finishing from here on schedules another drain
            self._emit_finished(level, i, c, emit)
            while level.notices:
                live.mark(level.notices.popleft())

        def wake() -> None:  # on the load thread
            loop.call_soon_threadsafe(drain)

        # Closed-loop levels of many streams on servers at real time: a simulator sped up 20x
        # steps in under a millisecond, and a pause would put two of a stream's chunks in one read.
        ahead = self._undenied()
        self._load.pace(rate is None and c * len(ahead) >= PACE_FROM_STREAMS
                        and all(self.scales.get(a, 1.0) == 1.0 for a in ahead))

        level.wake = wake
        fut = self._load.submit(self._level_on_load_loop(i, c, level, clients) if rate is None
                                else self._rate_level_on_load_loop(i, rate, level, clients))
        opened: Optional[dict[str, Any]] = None  # each arm's /metrics scrape when the window opened
        opened_run = 0  # the level's run (level.reruns) that scrape belongs to
        while not fut.done():
            try:
                await asyncio.wait([fut], timeout=1.0)
            except asyncio.CancelledError:
                fut.cancel()  # reaches the task on the load loop
                raise
            if (opened is None or opened_run != level.reruns) and clock.wall() >= level.window_t0:
                opened_run = level.reruns  # a re-run (after a pause) opens its own window
                opened = {a.name: live.newest_metrics(a.name) for a in self.arms}
                self.fleet.window_opened(live)
            drain()
            in_flight = {}
            if rate is not None and self.trace is None:  # a trace level runs its course: its backlog is the trace's
                self._watch_backlog(level, rate, live)
                in_flight = {a.name: _in_flight(level.outcomes[a.name]) for a in self.arms}
            # The level's clock: stopped while paused, never past its plan (after the plan the
            # level drains what is in flight: `draining`); the same seconds on the wall clock,
            # which the ETA uses, so a front end can show one clock.
            now = level.paused_at if level.paused_at is not None else clock.wall()
            planned = plan.level_duration_s if not plan.requests_per_level else None
            wall_elapsed = max(now - level.t0, 0.0)
            elapsed = wall_elapsed * self._pace()
            draining = level.t_stop is not None or (planned is not None and elapsed >= planned)
            if planned is not None:
                elapsed = min(elapsed, planned)
                wall_elapsed = min(wall_elapsed, self._wall(planned))
            emit(LevelProgress(level=i, elapsed_s=elapsed, planned_s=planned,
                               done_requests=dict(level.done), eta_s=self._wall_eta(i, elapsed), in_flight=in_flight,
                               paused=level.paused_at is not None, draining=draining,
                               elapsed_wall_s=round(wall_elapsed, 3),
                               planned_wall_s=None if planned is None else round(self._wall(planned), 3)))
        level.wake = None
        fut.result()
        drain()
        t_end = clock.wall()
        results = []
        for arm in self.arms:
            stopped = level.arm_stop.get(arm.name) or level.t_stop or t_end  # a cut arm stopped early
            window = Window(level.window_t0, stopped)
            if window.length <= 0:
                window = Window(level.t0, stopped)  # level shorter than its settle: use all of it
            info = live.info(arm.name)
            think = sum(max(0.0, min(b, window.t1) - max(a, window.t0)) for a, b in level.think[arm.name])
            r = level_result(arm.name, i, c, level.outcomes[arm.name], window, level.t0, stopped,
                             live.samples_for(arm.name, window.t0, window.t1),
                             scale=self._scale(arm.name, self._this_run(level, arm.name)),
                             max_running=info.max_running_requests if info is not None else None,
                             queue_hist=_window_histogram((opened or {}).get(arm.name), live.newest_metrics(arm.name),
                                                          "queue_time_seconds"),
                             slo_ttft_s=plan.slo_ttft_s, slo_tpot_s=plan.slo_tpot_s, offered_rate=rate,
                             server_cache=cache_counter_deltas((opened or {}).get(arm.name),
                                                               live.newest_metrics(arm.name)),
                             idle_s=think)
            if rate is not None and self.trace is None:
                self._over_saturation(arm.name, r, level, window, live)
            if level.reruns:  # measured again after the pause, the pause left out
                said = (f"paused {level.paused_s * self._pace():.0f} s; re-run from the resume "
                        f"(its figures and duration are from after the pause)")
                r.note = "; ".join(x for x in (r.note, said) if x)
            self._explain_failures(arm, r, level, (level.t_stop or t_end) - level.t0)
            warm = self._warm_cache(r) if i == 0 else None
            if warm is not None:
                live.mark(warm)
                r.note = "; ".join(x for x in (r.note, "warm prefix cache: prompts cached before the ramp") if x)
            r.queue_ttft_share = queue_share(r)
            note = queueing_ttft(r)
            r.ttft_note = note[1] if note else None
            results.append(r)
            self.results[arm.name].append(r)
            # the ramp's last planned level: a knee there is called now (no level will confirm it)
            self._call_knees(arm.name, r, emit, live, final=not plan.search and i == len(plan.steps) - 1)
        self.last_outcomes = level.outcomes
        self.last_window = Window(level.window_t0, level.t_stop or t_end)
        tokens = sum(o.completion_tokens or 0 for outs in level.outcomes.values() for o in outs)
        cpu = self._load.cpu_s - cpu0
        stats = {"level": i, "offered_concurrency": c, "tokens": tokens, "client_cpu_s": round(cpu, 3),
                 "cpu_ms_per_1k_tokens": round(cpu / tokens * 1e6, 3) if tokens else None,
                 "connect_s": level.connect_s, "connections_opened_ahead": level.connected,
                 **{k: (round(v, 5) if isinstance(v, float) else v) for k, v in self._load.lag_stats().items()}}
        if self._load.pacing:  # the pacer's pauses this level, the last one's length and its reason
            gap = self._load.chunk_gap_s
            stats["pacer"] = {"pauses": self._load.pauses - pauses0, "pause_ms": round(self._load.pause_s * 1000, 3),
                              "chunk_gap_ms": None if gap is None else round(gap * 1000, 3)}
        paces = {}
        for arm in self.arms:
            pace = server_pace(self._this_run(level, arm.name)) if arm.name not in self.fleet.gateways else None
            nominal = self.scales.get(arm.name, 1.0)
            if pace is None:
                continue
            paces[arm.name] = round(pace, 4)
            per_request = request_pace(self._this_run(level, arm.name)) if nominal != 1.0 else None
            stalled = per_request is not None and pace < STALL_PACE_SHARE * per_request
            if stalled:
                # the simulator's clock stood still for part of the level: planned with the pace
                # over the level, the next one would last as many times its plan (137 s for 3)
                self._measured[arm.name] = per_request
                live.mark(f"{arm.name}: the simulator stood still during level {i + 1} (x{pace:.2f} over the "
                          f"level, x{per_request:.2f} per request); level {i + 2} is planned with x{per_request:.2f}")
            elif nominal != 1.0:
                self._measured[arm.name] = pace
            if nominal != 1.0 and not stalled and abs(pace / nominal - 1) > PACE_TOLERANCE:
                live.mark(f"{arm.name}: the simulator kept x{pace:.2f}, not the x{nominal:g} it reports "
                          f"(CPU-bound); level {i + 1} figures use the measured pace")
        stats["server_pace"] = paces or None
        backoff = {}
        for arm in self.arms:
            a = arm.name
            if level.backoff_s[a] or level.refused[a] or level.no_answer[a]:
                span = level.streams[a] * ((level.t_stop or t_end) - level.t0)
                backoff[a] = {"backoff_s": round(level.backoff_s[a], 3),
                              "backoff_share": round(level.backoff_s[a] / span, 4) if span > 0 else None,
                              **{f"http_{code}": n for code, n in sorted(level.refused[a].items())},
                              **({"no_answer": dict(level.no_answer[a])} if level.no_answer[a] else {})}
        stats["backoff"] = backoff or None
        self.client_stats.append(stats)
        workers, worker_knees, fleets = self.fleet.level_finished(i, c, self.last_window, level.t0, results,
                                                                  self.knees, emit, live)
        emit(LevelFinished(level=i, results=results + workers, knees={
            **{a.name: self.knees[a.name] for a in self.arms if a.name in self.knees}, **worker_knees},
            load_client=stats, fleets=fleets))

    @staticmethod
    def _this_run(level: _LevelState, arm: str) -> list[RequestOutcome]:
        """The arm's requests of the level's last run: after a pause and its re-run, those sent
        before the resume would put the pause into the simulator's measured pace."""
        outs = level.outcomes[arm]
        return outs if not level.reruns else [o for o in outs if o.t_sent_wall is not None
                                              and o.t_sent_wall >= level.t0]

    def _wall_eta(self, i: int, elapsed: float) -> Optional[float]:
        """Wall seconds until the ramp ends: what the operator waits (level times are the arms')."""
        eta = self._eta(i, elapsed)
        return None if eta is None else eta / self._pace()

    def _eta(self, i: int, elapsed: float) -> Optional[float]:
        d = self.plan.level_duration_s
        if self.plan.requests_per_level or not d or self.plan.search:  # a search does not know its levels
            return None
        return max(d - elapsed, 0.0) + d * (len(self.plan.steps) - i - 1)

    def _watch_backlog(self, level: _LevelState, rate: float, live: RampHost) -> None:
        """On the session's loop, every poll of an open-loop level: once its window has run half
        its planned length, an arm whose backlog grew over the second half of what ran so far is
        cut short (the load loop cancels what it holds) and said so in a mark."""
        now = clock.wall()
        t1 = level.planned_t1
        if t1 is None or now >= t1 or now <= level.window_t0:
            return
        if now - level.window_t0 < 0.5 * (t1 - level.window_t0):
            return
        for spec in self.arms:
            arm = spec.name
            cut = level.cut.get(arm)
            if cut is None or arm in level.saturated or arm in self.denied:
                continue
            start = level.window_t0 + (now - level.window_t0) / 2
            trend = backlog_trend(_backlog_spans(level.outcomes[arm]), start, now, scale=self._record_scale(arm))
            if trend is not None and trend.growing:
                level.saturated[arm] = trend
                level.arm_stop[arm] = now
                self._load.loop.call_soon_threadsafe(cut.set)
                live.mark(f"{arm}: over-saturated at {rate:g} req/s: {trend.detail}; level cut short")

    def _over_saturation(self, arm: str, r: LevelResult, level: _LevelState, window: Window, live: RampHost) -> None:
        """Mark an open-loop level whose backlog grew (cut short live, or found over the second
        half of its window at its end): knee over_saturation, the trend in its note, not valid."""
        trend = level.saturated.get(arm)
        cut = trend is not None
        if trend is None:
            mid = window.t0 + window.length / 2
            trend = backlog_trend(_backlog_spans(level.outcomes[arm]), mid, window.t1, scale=self._record_scale(arm))
            if trend is None or not trend.growing:
                return
            live.mark(f"{arm}: over-saturated at {r.offered_rate:g} req/s: {trend.detail}")
        wall = window.t1 - level.t0  # the level's own figures' scale: duration_s is in the arm's seconds
        ran = r.duration_s if r.duration_s is not None else wall
        planned = ran * ((level.planned_t1 or window.t1) - level.t0) / wall if wall > 0 else ran
        r.knee = "over_saturation"
        r.note = (f"backlog grew: {trend.detail}"
                  + (f"; cut short after {ran:.0f} s of {planned:.0f} s" if cut else ""))
        r.valid = False
        r.invalid_reason = "over-saturated (" + trend.detail + ")" + (
            f"; {r.invalid_reason}" if r.invalid_reason else "")

    def _scale(self, arm: str, outcomes: Sequence[RequestOutcome]) -> float:
        """Server seconds per wall second for this arm's records: the reported time_scale, or,
        for a simulator (time_scale != 1) whose measured pace differs, the pace it really kept.
        A real server's stamps are never used this way (its clock may be offset from ours)."""
        nominal = self.scales.get(arm, 1.0)
        if nominal == 1.0:
            return 1.0
        pace = server_pace(outcomes) if arm not in self.fleet.gateways else None  # several workers' clocks
        return pace if pace is not None else nominal

    def _record_scale(self, arm: str) -> float:
        """The scale a request's row is written with as soon as it finishes: the one known so far.

        For a real server (time_scale 1.0) this is exact: _scale never uses a real server's own
        stamps, so the level's figures use 1.0 too. For a sped-up simulator it is the pace
        measured on the previous level, or its reported --speed before any was measured; the
        level's figures use the pace measured over this whole level, which differs by at most
        PACE_TOLERANCE unless a mark says the simulator fell behind. Such rows' TTFT, e2e and
        TPOT come from the simulator's own stamps (timing "server") and need no scale at all."""
        nominal = self.scales.get(arm, 1.0)
        return 1.0 if nominal == 1.0 else self._measured.get(arm, nominal)

    def _emit_finished(self, level: _LevelState, i: int, c: int, emit: Emit) -> None:
        while level.finished:
            arm, o = level.finished.popleft()
            in_window = o.t_sent_wall is not None and o.t_sent_wall >= level.window_t0
            emit(RequestFinished(record=o.record(arm, i, c, self._record_scale(arm), in_window)))
            compact(o)

    def _explain_failures(self, spec: ArmSpec, r: LevelResult, level: _LevelState, wall_s: float) -> None:
        """Put what the server did first in the level's reason, and take out what would blame the
        client for it: a client that waits because the server said 503, or holds nothing in
        flight because nothing answers, is not the bottleneck. Also updates `gone`."""
        name, url = spec.name, public_url(spec.url)
        blames_client = ("client held only", "server reported")
        reasons = [x for x in (r.invalid_reason or "").split("; ") if x]
        first: list[str] = []
        if name in self.denied:
            first.append(self.denied[name] if level.streams[name] else f"not sent: {self.denied[name]}")
            reasons = [x for x in reasons if x != "no request succeeded" and not x.startswith(blames_client)]
        lost = level.stream_lost[name]
        if lost and all(why is not None for why in lost.values()):
            whys = collections.Counter(why for why in lost.values())
            self.gone[name] = f"server at {url} stopped answering: {whys.most_common(1)[0][0]}"
            first.append(self.gone[name])
        elif any(why is None for why in lost.values()):
            self.gone.pop(name, None)  # it answered on this level after all
        if level.no_answer[name] and name not in self.gone:
            n = sum(level.no_answer[name].values())
            why = level.no_answer[name].most_common(1)[0][0]
            first.append(f"server at {url} did not answer {n} of {r.ok + r.failed} requests ({why})")
        if first and name not in self.denied:
            reasons = [x for x in reasons if not x.startswith(blames_client)]
        refused = level.refused[name]
        span = level.streams[name] * wall_s
        share = level.backoff_s[name] / span if span > 0 else 0.0
        if refused:
            answers = ", ".join(f"{n} answered {_status_text(code)}" for code, n in sorted(refused.items()))
            said = f"streams spent {share:.0%} of the level backing off ({answers})"
            if share >= BACKOFF_MOSTLY:
                first.append(said)
                reasons = [x for x in reasons if not x.startswith(blames_client)]
            elif any(x.startswith(blames_client) for x in reasons):
                first.append(said)  # it held fewer in flight because the server asked it to wait
                reasons = [x for x in reasons if not x.startswith(blames_client)]
        if first:
            r.valid = False
            r.invalid_reason = "; ".join(first + reasons)

    def _call_knees(self, arm: str, r: LevelResult, emit: Emit, live: RampHost, final: bool = False) -> None:
        levels = self.results[arm]
        for k in (plateau_knee(levels), queueing_knee(levels, final=final)):
            if k.confirmed_at == r.level and (arm, k.definition) not in self._called:
                self._called.add((arm, k.definition))
                r.knee_confirmed = ";".join(x for x in (r.knee_confirmed, k.definition) if x)
                at = knee_level(levels, k)
                if at is not None:  # the ramp's own rows (its final table); consumers label theirs
                    labelled = label_knee(levels, arm, at, k.definition)
                    levels[levels.index(next(x for x in levels if x.level == at))] = labelled
                emit(KneeCalled(arm=arm, definition=k.definition, concurrency=k.concurrency, detail=k.detail,
                                resolved=k.values.get("resolved"), knee_level=at, confirmed_level=r.level))
        self.knees[arm] = knees_summary(levels, live.predicted(arm),
                                        slo_ttft_s=self.plan.slo_ttft_s, slo_tpot_s=self.plan.slo_tpot_s,
                                        min_attainment=self.plan.attainment, final=final)
        plan = self.plan
        if plan.search:  # the policy names the next level from every level this arm ran
            tried = [(x.offered, level_meets(x, plan.attainment)) for x in levels]
            self._search_next, self.knees[arm].search = search_step(
                tried, start=plan.search_start, max_level=plan.search_max, rates=plan.open_loop,
                target=plan.attainment)

    # ---- on the load loop -------------------------------------------------------------------
    @staticmethod
    def _finished(level: _LevelState, arm: str, o: RequestOutcome) -> None:
        """Queue a finished request for the session's loop and wake it (once until it drains)."""
        level.finished.append((arm, o))
        if not level.woken and level.wake is not None:
            level.woken = True
            try:
                level.wake()
            except RuntimeError:  # the session's loop is closed: the level's own end drains it
                pass

    def _account(self, level: _LevelState, arm: str, k: int, o: RequestOutcome, url: str,
                 open_loop: bool = False) -> bool:
        """After one request (on the load loop): the connection losses, refusals and denials it
        tells of, then the hand-over of its row. False when it was a 401/403 (the arm is denied)."""
        if o.status != "cancelled":
            level.stream_lost[arm][k] = _lost_connection(o)
        denial = _DENIALS.get(o.http_status) if o.status != "ok" else None
        if denial is not None:
            self._deny(level, arm, denial)
            self._finished(level, arm, o)
            return False
        retries = "arrivals go on as scheduled" if open_loop else "its streams back off and retry"
        if o.no_answer is not None:
            level.no_answer[arm][o.no_answer] += 1
            if sum(level.no_answer[arm].values()) == 1:
                level.notices.append(f"{arm}: server at {url} gave no answer ({o.no_answer}); {retries}")
        if _refused(o):
            level.refused[arm][o.http_status] += 1
            if sum(level.refused[arm].values()) == 1:
                how = (f"Retry-After {o.retry_after_s:g} s (waits capped at {RETRY_AFTER_CAP_S:g} s)"
                       if o.retry_after_s is not None else
                       f"{BACKOFF_FIRST_S * 1000:g} ms doubling to {BACKOFF_MAX_S:g} s")
                then = ("an open-loop level keeps its schedule (the refused requests count as failed)" if open_loop
                        else f"each stream backs off ({how}) until it answers")
                level.notices.append(f"{arm}: server answered {_status_text(o.http_status)}; {then}")
        self._finished(level, arm, o)  # after the notices: one wake-up hands over both
        return True

    def _undenied(self) -> list[str]:
        """The names of the arms that still get requests (none refused this ramp's credentials)."""
        return [a.name for a in self.arms if a.name not in self.denied]

    def _take_prompt(self, arm: str) -> int:
        """The next prompt (conversation) index of this arm: every arm sends the same sequence."""
        idx = self._next_prompt[arm]
        self._next_prompt[arm] = idx + 1
        return idx

    def _deny(self, level: _LevelState, arm: str, denial: str) -> None:
        """The first 401/403: the arm gets no more requests, for the rest of the ramp."""
        if arm in self.denied:
            return
        spec = next(a for a in self.arms if a.name == arm)
        hint = (f"check --api-key-env (the key in ${spec.api_key_env} was refused)" if spec.api_key_env
                else "it wants an API key: pass --api-key-env VAR")
        self.denied[arm] = f"server at {public_url(spec.url)} answered {denial}: {hint}"
        level.notices.append(f"{arm}: {self.denied[arm]}; no more requests go to it")

    async def _send(self, level: _LevelState, arm: str, client: GenerateClient, prompt: Prompt, o: RequestOutcome,
                    cancelled_why: str, slots: Optional[asyncio.Semaphore] = None,
                    output_len: Optional[int] = None) -> None:
        """One request of a level (after a free slot, when given), its outcome filled whatever
        happens: a failure is the request's, never the ramp's; a cancel is recorded as the
        request's end (its row is written) and passed on."""
        n_out = self.plan.output_len if output_len is None else output_len  # a trace's request: its own
        try:
            if slots is None:
                await client.generate(prompt, n_out, o)
            else:
                async with slots:
                    await client.generate(prompt, n_out, o)
        except asyncio.CancelledError:
            o.status, o.error = "cancelled", cancelled_why
            self._finished(level, arm, o)
            raise
        except Exception as e:  # never let one request end the ramp
            o.status, o.error = "error", f"{type(e).__name__}: {e}"[:200]
        level.done[arm] += 1

    async def _level_on_load_loop(self, i: int, c: int, level: _LevelState, clients: dict[str, GenerateClient]) -> None:
        plan = self.plan
        # Each arm's C connections are opened before the level's clock starts: a request then
        # goes out on a kept-alive socket, so its TTFT (from the stamp just before its write)
        # holds no TCP connect, and the wave of C connects at the start of a level does not
        # count against the server either. What the connects took is recorded apart
        # (load_client connect_s); a connection that failed or went stale is opened again by
        # the request that needs it, and that request's TTFT includes its connect.
        ahead = self._undenied()
        t = time.monotonic()
        opened = await asyncio.gather(*(clients[a].prepare(c) for a in ahead), return_exceptions=True)
        level.connect_s = round(time.monotonic() - t, 4)
        level.connected = {a: (n if isinstance(n, int) else 0) for a, n in zip(ahead, opened)}
        level.t0 = clock.wall()
        level.window_t0 = level.t0 + self._wall(plan.settle_s)
        stop = asyncio.Event()
        issued = {a.name: 0 for a in self.arms}

        async def nap(seconds: float) -> float:
            """Wait `seconds` or until the level stops; the wall seconds waited."""
            t = time.monotonic()
            try:
                await asyncio.wait_for(stop.wait(), seconds)
            except asyncio.TimeoutError:
                pass
            return time.monotonic() - t

        turns = plan.turns > 1

        async def worker(arm: str, k: int) -> None:
            client = clients[arm]
            backoff = Backoff()
            conv = None  # multi-turn: this stream's conversation
            while not stop.is_set():
                if arm in self.denied:  # 401/403: this arm gets nothing more
                    return
                if self._paused.is_set():  # the level's own loop restarts the level at the resume
                    await asyncio.sleep(0.05)
                    continue
                if plan.requests_per_level and issued[arm] >= plan.requests_per_level:
                    return
                issued[arm] += 1
                if plan.requests_per_level and level.t_stop is None and all(
                        n >= plan.requests_per_level for a, n in issued.items() if a not in self.denied):
                    level.t_stop = clock.wall()  # the last request is out: the level stops issuing now
                if turns:
                    if conv is None or conv.done:
                        conv = self.workload.conversation(self._take_prompt(arm))
                    prompt = conv.next_prompt()
                else:
                    prompt = self.workload.prompt(self._take_prompt(arm))
                o = RequestOutcome(request_id=f"{arm}-L{i}-{issued[arm]}", t_scheduled_wall=clock.wall(),
                                   t_scheduled=time.perf_counter())
                if turns:
                    o.turn, o.keep_output = conv.sent, True
                level.outcomes[arm].append(o)
                await self._send(level, arm, client, prompt, o, "level skipped or ramp stopped")
                if turns:  # the next turn resends this answer; the outcome need not keep it
                    conv.reply(o.status == "ok", o.output_ids, o.output_text, o.completion_tokens)
                    o.output_ids = o.output_text = None
                if not self._account(level, arm, k, o, urls[arm]):
                    return  # 401/403: this arm gets nothing more
                wait = backoff.after(o)
                if wait > 0:
                    waited = await nap(wait)  # not `+= await`: that reads the sum before the wait
                    level.backoff_s[arm] += waited
                elif turns and plan.think_time_s > 0 and not conv.done:
                    t = clock.wall()  # the user reads the answer and types the next turn
                    await nap(self._wall(plan.think_time_s))
                    level.think[arm].append((t, clock.wall()))

        urls = {a.name: public_url(a.url) for a in self.arms}
        live_arms = self._undenied()
        for a in live_arms:
            level.streams[a] = c
        tasks = [asyncio.create_task(worker(a, k)) for a in live_arms for k in range(c)]
        duration = None if plan.requests_per_level else self._wall(plan.level_duration_s or 60.0)
        loop = asyncio.get_running_loop()
        running = [len(tasks)]

        def ended(_task: asyncio.Task) -> None:
            running[0] -= 1
            if not running[0]:  # every stream is done: every request out (or every arm denied)
                self._wake_level()

        for t in tasks:
            t.add_done_callback(ended)
        try:
            # Woken by events, not a poll of every stream: the last stream ending, pause /
            # resume / skip, or the level's clock (which stops while paused) running out.
            left = duration
            last = time.monotonic()
            paused = self._paused.is_set()
            if paused:
                level.paused_at = clock.wall()
            while True:
                now = time.monotonic()
                if not paused and left is not None:
                    left -= now - last
                last = now
                was_paused, paused = paused, self._paused.is_set()
                if paused and not was_paused:
                    level.paused_at = clock.wall()
                elif was_paused and not paused and level.t_stop is None:
                    level.rerun_from(clock.wall(), self._wall(plan.settle_s))
                    left = duration
                    for a in issued:  # --requests-per-level: the count starts again too
                        issued[a] = 0
                elif was_paused and not paused:
                    level.paused_at = None
                if self._skipped(level, stop, tasks):
                    break
                if left is not None and left <= 0:
                    break
                if not running[0]:
                    break
                fut = self._level_wake = loop.create_future()
                timer = None if paused or left is None else loop.call_later(left, self._wake_level)
                try:
                    await fut
                finally:
                    self._level_wake = None
                    if timer is not None:
                        timer.cancel()
            if level.t_stop is None:
                level.t_stop = clock.wall()
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)  # drain what is in flight
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def _skipped(self, level: _LevelState, stop: asyncio.Event, tasks: list[asyncio.Task]) -> bool:
        """`n` (skip_level) was asked: the level stops now, what it holds cancelled."""
        if not self._skip.is_set():
            return False
        level.t_stop = clock.wall()
        stop.set()
        for t in tasks:
            t.cancel()
        return True

    async def _rate_level_on_load_loop(self, i: int, rate: float, level: _LevelState,
                                       clients: dict[str, GenerateClient]) -> None:
        """An open-loop level: per arm, requests sent at seeded arrival times offering `rate` per
        second of the arm's time, at most plan.max_concurrency in flight (the rest wait for a
        slot); the schedule ends after the level's duration or requests_per_level arrivals. An
        arm cut short (over-saturation, set from the session's loop) stops issuing and cancels
        what it holds; a skip cancels everything; otherwise what is in flight finishes (drain)."""
        plan = self.plan
        level.t0 = clock.wall()
        pace = self._pace()
        level.window_t0 = level.t0 + plan.settle_s / pace
        n_max = plan.requests_per_level
        horizon = None if n_max else (plan.level_duration_s or 60.0)  # the arm's seconds
        trace = self.trace
        if trace is not None:  # the trace's own schedule (already cut to the plan's duration / count)
            n_max, horizon = len(trace.requests), None
        stop = asyncio.Event()
        urls = {a.name: public_url(a.url) for a in self.arms}
        live_arms = self._undenied()
        for a in live_arms:
            level.cut[a] = asyncio.Event()

        async def send(arm: str, n: int, o: RequestOutcome, prompt, slots: Optional[asyncio.Semaphore],
                       output_len: Optional[int] = None) -> None:
            await self._send(level, arm, clients[arm], prompt, o, "level cut short, skipped or ramp stopped", slots,
                             output_len)
            # "gone" is judged on the last 8 requests (an open loop has no streams of its own)
            self._account(level, arm, n % 8, o, urls[arm], open_loop=True)

        async def dispatch(arm: str) -> None:
            slots = asyncio.Semaphore(plan.max_concurrency) if plan.max_concurrency else None
            sends: set[asyncio.Task] = set()
            cut = level.cut[arm]
            n = 0  # requests sent by this arm in all runs of the level (their ids)

            def ended() -> bool:
                return stop.is_set() or cut.is_set() or arm in self.denied

            async def until(t: float, run: int) -> bool:
                """Wait until wall time t or the arm's level ends (True), or a pause that ends in
                a re-run (False: the schedule starts again from the resume). The pause itself is
                seen by the level's own loop below, which moves the level's clock."""
                while not ended():
                    if level.reruns != run:
                        return False
                    if level.paused_at is not None or self._paused.is_set():
                        await asyncio.sleep(0.02)
                        continue
                    delay = t - clock.wall()
                    if delay <= 0:
                        return True
                    await asyncio.sleep(min(delay, 0.05))
                return True

            async def schedule(run: int) -> bool:
                """One run of the level's schedule from level.t0; False when a pause cut it."""
                nonlocal n
                sent = 0
                offsets = (trace.offset(k) for k in range(len(trace.requests))) if trace is not None else \
                    arrival_times(plan.arrival, rate, plan.seed, i, plan.burstiness)
                for offset in offsets:
                    if (n_max and sent >= n_max) or (horizon is not None and offset >= horizon):
                        break
                    due = level.t0 + offset / pace
                    if not await until(due, run):
                        return False
                    if ended():
                        break
                    n += 1
                    sent += 1
                    o = RequestOutcome(request_id=f"{arm}-L{i}-{n}", t_scheduled_wall=due,
                                       t_scheduled=time.perf_counter() + (due - clock.wall()))
                    level.outcomes[arm].append(o)  # in the backlog from its arrival, slot or not
                    if trace is None:
                        task = asyncio.create_task(send(arm, n, o, self.workload.prompt(self._take_prompt(arm)), slots))
                    else:  # request k of the trace: its prompt (the plan's, for the diurnal pattern) and length
                        k, taken = sent - 1, self._take_prompt(arm)
                        prompt = self.workload.prompt(taken) if trace.kind == "diurnal" else trace.prompt(k)
                        task = asyncio.create_task(send(arm, n, o, prompt, slots, trace.requests[k].output_len))
                    sends.add(task)
                    task.add_done_callback(sends.discard)
                if horizon is not None:  # the schedule's last stretch without an arrival is the level's too
                    return await until(level.planned_t1, run)
                return True

            try:
                while not await schedule(level.reruns):
                    pass  # resumed after a pause: the schedule again from the new t0
                level.arm_stop.setdefault(arm, clock.wall())
                level.streams[arm] = n  # requests sent (an open loop has no streams)
                if cut.is_set():
                    for t in list(sends):
                        t.cancel()
                await asyncio.gather(*list(sends), return_exceptions=True)  # drain (or the cancelled)
            except asyncio.CancelledError:
                for t in list(sends):
                    t.cancel()
                await asyncio.gather(*list(sends), return_exceptions=True)
                raise

        def planned_t1(t0: float) -> float:
            if trace is not None:
                return t0 + trace.span_s / pace
            return t0 + (horizon if horizon is not None else n_max / rate) / pace

        level.planned_t1 = planned_t1(level.t0)
        tasks = [asyncio.create_task(dispatch(a)) for a in live_arms]
        try:
            while not all(t.done() for t in tasks):
                await asyncio.sleep(0.02)
                paused = self._paused.is_set()
                if paused and level.paused_at is None:
                    level.paused_at = clock.wall()
                elif not paused and level.paused_at is not None:
                    t = clock.wall()
                    level.planned_t1 = planned_t1(t)
                    level.rerun_from(t, plan.settle_s / pace)
                if self._skipped(level, stop, tasks):
                    break
            await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if level.t_stop is None:
            level.t_stop = max(level.arm_stop.values(), default=clock.wall())
