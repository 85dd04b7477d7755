"""The open-loop level: on the load loop, requests sent at seeded arrival times (or a trace's),
whatever is in flight; on the session's loop, the backlog watched and an over-saturated arm cut
short, and a level whose backlog grew marked so at its end."""

from __future__ import annotations

import asyncio
import time
from typing import Optional

from specmon import clock
from specmon.analysis.levels import Window, backlog_trend
from specmon.load import GenerateClient, RequestOutcome, arrival_times
from specmon.model import LevelResult
from specmon.session.folder import public_url
from specmon.session.ramp.outcomes import _backlog_spans
from specmon.session.ramp.sending import gather_all
from specmon.session.ramp.state import _LevelState
from specmon.session.source import RampHost


class OpenLoop:
    """Mixed into RampDriver (driver.py): reads its plan, workload, trace, arms and pause flag."""

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
                await gather_all(sends, cancel=cut.is_set())  # drain (or the cancelled)
            except asyncio.CancelledError:
                await gather_all(sends, cancel=True)
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
            await gather_all(tasks)
        except asyncio.CancelledError:
            await gather_all(tasks, cancel=True)
            raise
        if level.t_stop is None:
            level.t_stop = max(level.arm_stop.values(), default=clock.wall())

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
