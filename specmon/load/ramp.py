"""RampDriver: a closed-loop concurrency ramp against every arm at once.

For each level C (plan.levels): every arm gets exactly C streams, each sending its next request
as soon as the previous one ends (closed loop), for plan.level_duration_s or until
plan.requests_per_level requests were sent per arm. The first plan.settle_s of a level are left
out of its statistics (the previous population drains, the batch fills). When the level stops
issuing, the requests in flight finish (drain) so slow requests are not cut out of the
percentiles; then the level's LevelResult per arm is computed (analysis.levels), knees are
checked (analysis.knee), rows are written, and `live.between_levels(i)` runs (launch mode
restarts servers there), then an optional POST /flush_cache.

Durations in the plan (level duration, settle) are in the arms' time: simulated seconds for a
sped-up simulator (ArmInfo.time_scale = X), so the wall time of a level is duration / X.
Client durations are recorded x the arm's scale; for a simulator that cannot keep up with its
--speed on a busy CPU, the scale used is the pace it really kept (server_pace, measured from its
own meta_info stamps; recorded per level in session.json load_client[].server_pace).

All HTTP runs on LoadLoop (its own thread and event loop); this coroutine, on the session's
loop, only starts levels, polls progress once a second, writes rows and emits events.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import Any, Callable, Optional, Sequence

from specmon.analysis.knee import knees_summary, plateau_knee, queue_share, queueing_knee, queueing_ttft
from specmon.analysis.levels import Window, level_result
from specmon.load.client import GenerateClient, RequestOutcome
from specmon.load.loop import LoadLoop
from specmon.load.workload import Workload
from specmon.sources.derive import histogram_delta
from specmon.sources.prom import Histogram
from specmon.model import (
    ArmSpec, Event, KneeCalled, LevelFinished, LevelProgress, LevelResult, LevelStarted, RampFinished, RampPlan,
)

Emit = Callable[[Event], None]
INFO_WAIT_S = 20.0
PACE_TOLERANCE = 0.03


def _newest_metrics(live: Any, arm: str) -> Any:
    """The arm's latest /metrics scrape (cumulative), or None (no /metrics, or not a LiveSession)."""
    c = live.collector(arm) if hasattr(live, "collector") else None
    return c.window.newest if c is not None and getattr(c, "window", None) is not None else None


def _window_histogram(old: Any, new: Any, name: str) -> Optional[Histogram]:
    """A server histogram's increase between two scrapes: the observations of one level's window.
    None when either scrape is missing or the server restarted between them."""
    if old is None or new is None or new is old:
        return None
    h_new = new.histogram(name)
    if h_new is None:
        return None
    h_old = old.histogram(name)
    return h_new if h_old is None else histogram_delta(h_new, h_old)


def server_pace(outcomes: Sequence[RequestOutcome]) -> Optional[float]:
    """Server seconds per wall second over a level, from the server's own stamps.

    With --enable-metrics the final meta_info carries request_received_ts and
    request_finished_ts (the simulator writes its simulated clock there). Their span over the
    level, divided by the wall span the client saw for the same requests, is the pace the server
    really ran at: ~1 for a real server, ~X for a simulator that keeps up with --speed X, less
    when the simulator is CPU-bound and holds its clock back. None without those stamps.
    """
    first_rx = last_fin = first_sent = last_end = None
    for o in outcomes:
        m = o.final_meta or {}
        rx, fin = m.get("request_received_ts"), m.get("request_finished_ts")
        if o.status != "ok" or not isinstance(rx, (int, float)) or not isinstance(fin, (int, float)):
            continue
        end = o.wall(o.t_end)
        first_rx = rx if first_rx is None else min(first_rx, rx)
        last_fin = fin if last_fin is None else max(last_fin, fin)
        first_sent = o.t_sent_wall if first_sent is None else min(first_sent, o.t_sent_wall)
        last_end = end if last_end is None else max(last_end, end)
    if first_rx is None or last_end - first_sent <= 1.0:
        return None  # under a wall second the network and HTTP latencies would dominate
    return (last_fin - first_rx) / (last_end - first_sent)


class _LevelState:
    """Shared between the load thread (writes) and the session loop (reads): appends only."""

    def __init__(self, arms: Sequence[str]):
        self.outcomes: dict[str, list[RequestOutcome]] = {a: [] for a in arms}
        self.finished: collections.deque[tuple[str, RequestOutcome]] = collections.deque()
        self.done: dict[str, int] = {a: 0 for a in arms}
        self.t0 = time.time()
        self.window_t0 = self.t0
        self.t_stop: Optional[float] = None
        self.paused_during = False


class RampDriver:
    def __init__(self, arms: Sequence[ArmSpec], plan: RampPlan, *, workload: Optional[Workload] = None):
        if not plan.levels:
            raise ValueError("RampPlan.levels is empty")
        self.arms = list(arms)
        self.plan = plan
        self.workload = workload or Workload(input_len=plan.input_len, seed=plan.seed, tokenizer=plan.tokenizer,
                                             dataset=plan.dataset, category=plan.category)
        self.results: dict[str, list[LevelResult]] = {a.name: [] for a in self.arms}
        self.knees: dict[str, dict] = {}
        self.scales: dict[str, float] = {}
        self._measured: dict[str, float] = {}  # simulator pace measured on the last level, per arm
        self.client_stats: list[dict[str, Any]] = []
        self._paused = threading.Event()
        self._skip = threading.Event()
        self._next_prompt: dict[str, int] = {a.name: 0 for a in self.arms}
        self._called: set[tuple[str, str]] = set()
        self._load: Optional[LoadLoop] = None
        # The raw outcomes of the last finished level (per arm), for benchmarks and checks;
        # earlier levels are dropped (token stamps of a long ramp would not fit in memory).
        self.last_outcomes: dict[str, list[RequestOutcome]] = {}
        self.last_window: Optional[Window] = None

    # ---- controls (any thread) --------------------------------------------------------------
    def pause(self) -> None:
        """Stop issuing new requests (those in flight finish); the level clock stops."""
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def skip_level(self) -> None:
        """End the current level now: stop issuing and cancel what is in flight."""
        self._skip.set()

    @property
    def paused(self) -> bool:
        return self._paused.is_set()

    # ---- the ramp ---------------------------------------------------------------------------
    async def run(self, emit: Emit, live: Any) -> str:
        self._load = load = LoadLoop()
        load.start_lag_probe()
        top = max(self.plan.levels)
        clients: dict[str, GenerateClient] = {}
        reason = "done"
        try:
            for arm in self.arms:
                clients[arm.name] = await load.submit(self._make_client(arm, top))
            await self._read_scales(live)
            self._update_session(live, time_scale=dict(self.scales), ramp_workload=self.workload.describe())
            for i, c in enumerate(self.plan.levels):
                await self._run_level(i, c, clients, emit, live)
                if i < len(self.plan.levels) - 1:
                    await live.between_levels(i)
                    if self.plan.flush_cache:
                        for arm in self.arms:
                            err = await load.submit(clients[arm.name].flush_cache())
                            if err:
                                live.mark(f"flush_cache {arm.name} failed: {err}") if hasattr(live, "mark") else None
        except asyncio.CancelledError:
            reason = "cancelled"
            emit(RampFinished(reason=reason))
            raise
        except Exception as e:
            reason = f"error: {type(e).__name__}: {e}"
            emit(RampFinished(reason=reason))
            raise
        finally:
            live.set_level(None, None)
            for c in clients.values():
                try:
                    await asyncio.wait_for(load.submit(c.aclose()), 5)
                except Exception:
                    pass
            load.stop()
        emit(RampFinished(reason=reason))
        return reason

    async def _make_client(self, arm: ArmSpec, top: int) -> GenerateClient:
        return GenerateClient(arm.url, max_concurrency=top, timeout_s=self.plan.timeout_s, api_key_env=arm.api_key_env)

    async def _read_scales(self, live: Any) -> None:
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
        gets at least the planned duration in its own time."""
        paces = [self._measured.get(a, s) for a, s in self.scales.items()]
        return min(paces) if paces else 1.0

    def _wall(self, arm_seconds: float) -> float:
        return arm_seconds / self._pace()

    async def _run_level(self, i: int, c: int, clients: dict[str, GenerateClient], emit: Emit, live: Any) -> None:
        plan = self.plan
        live.set_level(i, c)
        self._skip.clear()
        emit(LevelStarted(level=i, offered_concurrency=c, planned_s=plan.level_duration_s if not plan.requests_per_level else None,
                          levels_total=len(plan.levels)))
        st = _LevelState([a.name for a in self.arms])
        for client in clients.values():
            await self._load.submit(client.drop_idle())  # idle since the last level: maybe closed
        cpu0 = self._load.cpu_s
        self._load.lag_stats(reset=True)
        fut = self._load.submit(self._level_on_load_loop(i, c, st, clients))
        opened: Optional[dict[str, Any]] = None  # each arm's /metrics scrape when the window opened
        while not fut.done():
            try:
                await asyncio.wait([fut], timeout=1.0)
            except asyncio.CancelledError:
                fut.cancel()  # reaches the task on the load loop
                raise
            if opened is None and time.time() >= st.window_t0:
                opened = {a.name: _newest_metrics(live, a.name) for a in self.arms}
            self._write_finished(st, i, c, live)
            elapsed = (time.time() - st.t0) * self._pace()
            emit(LevelProgress(level=i, elapsed_s=elapsed, planned_s=plan.level_duration_s if not plan.requests_per_level else None,
                               done_requests=dict(st.done), eta_s=self._wall_eta(i, elapsed)))
        fut.result()
        self._write_finished(st, i, c, live)
        t_end = time.time()
        results = []
        for arm in self.arms:
            window = Window(st.window_t0, st.t_stop or t_end)
            if window.length <= 0:
                window = Window(st.t0, st.t_stop or t_end)  # level shorter than its settle: use all of it
            info = live.info(arm.name)
            r = level_result(arm.name, i, c, st.outcomes[arm.name], window, st.t0, st.t_stop or t_end,
                             live.samples_for(arm.name, window.t0, window.t1), scale=self._scale(arm.name, st.outcomes[arm.name]),
                             max_running=getattr(info, "max_running_requests", None),
                             queue_hist=_window_histogram((opened or {}).get(arm.name), _newest_metrics(live, arm.name),
                                                          "queue_time_seconds"),
                             slo_ttft_s=plan.slo_ttft_s, slo_tpot_s=plan.slo_tpot_s)
            if st.paused_during:  # the window holds idle time: its rates and shares mean nothing
                r.valid = False
                r.invalid_reason = "paused during the level" + (f"; {r.invalid_reason}" if r.invalid_reason else "")
            r.queue_ttft_share = queue_share(r)
            note = queueing_ttft(r)
            r.ttft_note = note[1] if note else None
            results.append(r)
            self.results[arm.name].append(r)
            self._call_knees(arm.name, r, emit, live)
            if live.recorder is not None:
                live.recorder.write_level(r)
        self.last_outcomes = st.outcomes
        self.last_window = Window(st.window_t0, st.t_stop or t_end)
        tokens = sum(o.completion_tokens or 0 for outs in st.outcomes.values() for o in outs)
        cpu = self._load.cpu_s - cpu0
        stats = {"level": i, "offered_concurrency": c, "tokens": tokens, "client_cpu_s": round(cpu, 3),
                 "cpu_ms_per_1k_tokens": round(cpu / tokens * 1e6, 3) if tokens else None,
                 **{k: (round(v, 5) if isinstance(v, float) else v) for k, v in self._load.lag_stats().items()}}
        paces = {}
        for arm in self.arms:
            pace = server_pace(st.outcomes[arm.name])
            nominal = self.scales.get(arm.name, 1.0)
            if pace is None:
                continue
            paces[arm.name] = round(pace, 4)
            if nominal != 1.0:
                self._measured[arm.name] = pace
            if nominal != 1.0 and abs(pace / nominal - 1) > PACE_TOLERANCE and hasattr(live, "mark"):
                live.mark(f"{arm.name}: the simulator kept x{pace:.2f}, not the x{nominal:g} it reports "
                          f"(CPU-bound); level {i} figures use the measured pace")
        stats["server_pace"] = paces or None
        self.client_stats.append(stats)
        self._update_session(live, knees=self.knees, load_client=self.client_stats)
        emit(LevelFinished(level=i, results=results, knees={a.name: self.knees[a.name] for a in self.arms
                                                           if a.name in self.knees}))

    def _wall_eta(self, i: int, elapsed: float) -> Optional[float]:
        """Wall seconds until the ramp ends: what the operator waits (level times are the arms')."""
        eta = self._eta(i, elapsed)
        return None if eta is None else eta / self._pace()

    def _eta(self, i: int, elapsed: float) -> Optional[float]:
        d = self.plan.level_duration_s
        if self.plan.requests_per_level or not d:
            return None
        return max(d - elapsed, 0.0) + d * (len(self.plan.levels) - i - 1)

    def _scale(self, arm: str, outcomes: Sequence[RequestOutcome]) -> float:
        """Server seconds per wall second for this arm's records: the reported time_scale, or,
        for a simulator (time_scale != 1) whose measured pace differs, the pace it really kept.
        A real server's stamps are never used this way (its clock may be offset from ours)."""
        nominal = self.scales.get(arm, 1.0)
        if nominal == 1.0:
            return 1.0
        pace = server_pace(outcomes)
        return pace if pace is not None else nominal

    def _write_finished(self, st: _LevelState, i: int, c: int, live: Any) -> None:
        if not st.finished:
            return
        scales = {a.name: self._scale(a.name, st.outcomes[a.name]) for a in self.arms}
        while st.finished:
            arm, o = st.finished.popleft()
            if live.recorder is not None:
                in_window = o.t_sent_wall is not None and o.t_sent_wall >= st.window_t0
                live.recorder.write_request(o.record(arm, i, c, scales[arm], in_window))

    def _call_knees(self, arm: str, r: LevelResult, emit: Emit, live: Any) -> None:
        levels = self.results[arm]
        info = live.info(arm)
        for k in (plateau_knee(levels), queueing_knee(levels)):
            if k.confirmed_at == r.level and (arm, k.definition) not in self._called:
                self._called.add((arm, k.definition))
                if r.knee is None:
                    r.knee = k.definition  # first definition to confirm here labels the row
                emit(KneeCalled(arm=arm, definition=k.definition, concurrency=k.concurrency, detail=k.detail,
                                resolved=k.values.get("resolved")))
        self.knees[arm] = knees_summary(levels, getattr(info, "kv_capacity_tokens", None), self.plan.input_len,
                                        self.plan.output_len, getattr(info, "max_running_requests", None),
                                        slo_ttft_s=self.plan.slo_ttft_s, slo_tpot_s=self.plan.slo_tpot_s)

    def _update_session(self, live: Any, **fields: Any) -> None:
        if live.recorder is not None:
            live.recorder.update_session(**fields)

    # ---- on the load loop -------------------------------------------------------------------
    async def _level_on_load_loop(self, i: int, c: int, st: _LevelState, clients: dict[str, GenerateClient]) -> None:
        plan = self.plan
        st.t0 = time.time()
        st.window_t0 = st.t0 + self._wall(plan.settle_s)
        stop = asyncio.Event()
        issued = {a.name: 0 for a in self.arms}

        async def worker(arm: str) -> None:
            client = clients[arm]
            backoff = 0.0
            while not stop.is_set():
                if self._paused.is_set():
                    st.paused_during = True
                    await asyncio.sleep(0.05)
                    continue
                if plan.requests_per_level and issued[arm] >= plan.requests_per_level:
                    return
                issued[arm] += 1
                if plan.requests_per_level and st.t_stop is None and all(
                        n >= plan.requests_per_level for n in issued.values()):
                    st.t_stop = time.time()  # the last request is out: the level stops issuing now
                idx = self._next_prompt[arm]
                self._next_prompt[arm] = idx + 1
                o = RequestOutcome(request_id=f"{arm}-L{i}-{issued[arm]}", t_scheduled_wall=time.time(),
                                   t_scheduled=time.perf_counter())
                st.outcomes[arm].append(o)
                try:
                    await client.generate(self.workload.prompt(idx), plan.output_len, o)
                except asyncio.CancelledError:
                    o.status, o.error = "cancelled", "level skipped or ramp stopped"
                    st.finished.append((arm, o))
                    raise
                except Exception as e:  # never let one request end the ramp
                    o.status, o.error = "error", f"{type(e).__name__}: {e}"[:200]
                st.done[arm] += 1
                st.finished.append((arm, o))
                if o.status != "ok" and o.t_first_byte is None:
                    # No answer at all (refused, reset, down): back off 50 ms doubling to 1 s per
                    # stream instead of firing thousands of connects a second at a dead port
                    # (3,490 failed rows in a 3 s level before). Any answer resets it.
                    backoff = min(1.0, backoff * 2 or 0.05)
                    await asyncio.sleep(backoff)
                else:
                    backoff = 0.0

        tasks = [asyncio.create_task(worker(a.name)) for a in self.arms for _ in range(c)]
        duration = None if plan.requests_per_level else self._wall(plan.level_duration_s or 60.0)
        try:
            left = duration
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.02)
                now = time.monotonic()
                if not self._paused.is_set() and left is not None:
                    left -= now - last
                last = now
                if self._skip.is_set():
                    st.t_stop = time.time()
                    stop.set()
                    for t in tasks:
                        t.cancel()
                    break
                if left is not None and left <= 0:
                    break
                if left is None and all(t.done() for t in tasks):
                    break
            if st.t_stop is None:
                st.t_stop = time.time()
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)  # drain what is in flight
        except asyncio.CancelledError:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
