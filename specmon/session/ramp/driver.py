"""RampDriver: the ramp's controls (pause, resume, skip from any thread), its run loop (levels in
sequence, flush between them), one level run and judged into events, and the arms' time scales.
The level runners and the judging are mixins (closed.py, open_loop.py, judge.py, sending.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Optional, Sequence

from specmon import clock
from specmon.analysis.knee import queue_share, queueing_ttft
from specmon.analysis.levels import Window, level_result
from specmon.analysis.search import search_step
from specmon.errors import UsageError
from specmon.load import GenerateClient, LoadLoop, RequestOutcome, Trace, Workload, trace_from_plan
from specmon.model import (
    ArmBackoff, ArmSpec, KneesSummary, LevelFinished, LevelProgress, LevelResult, LevelStarted, LoadClientStats,
    RampFinished, RampPlan, RampStarted, RequestFinished,
)
from specmon.session.fleet_ramp import FleetRamp
from specmon.session.ramp.closed import ClosedLoop
from specmon.session.ramp.judge import Judge, _window_histogram
from specmon.session.ramp.open_loop import OpenLoop
from specmon.session.ramp.outcomes import _in_flight, compact
from specmon.session.ramp.pace import PACE_TOLERANCE, STALL_PACE_SHARE, request_pace, server_pace
from specmon.session.ramp.sending import Sending
from specmon.session.ramp.state import _LevelState
from specmon.session.source import Emit, RampHost
from specmon.sources.derive import cache_counter_deltas

INFO_WAIT_S = 20.0

# Levels of at least this many streams (all arms together) pace the load loop (LoadLoop.pace),
# where every server runs at real time.
PACE_FROM_STREAMS = 64


class RampDriver(ClosedLoop, OpenLoop, Judge, Sending):
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
        self.client_stats: list[LoadClientStats] = []
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
        meter = self._load.begin_level()
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
        stats = self._load.level_stats(meter, level=i, offered_concurrency=c, tokens=tokens)
        stats.connect_s, stats.connections_opened_ahead = level.connect_s, level.connected
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
        stats.server_pace = paces or None
        backoff: dict[str, ArmBackoff] = {}
        for arm in self.arms:
            a = arm.name
            if level.backoff_s[a] or level.refused[a] or level.no_answer[a]:
                span = level.streams[a] * ((level.t_stop or t_end) - level.t0)
                backoff[a] = ArmBackoff(backoff_s=round(level.backoff_s[a], 3),
                                        backoff_share=round(level.backoff_s[a] / span, 4) if span > 0 else None,
                                        http=dict(sorted(level.refused[a].items())), no_answer=dict(level.no_answer[a]))
        stats.backoff = backoff or None
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
