"""The closed-loop level: on the load loop, every arm's C streams each send their next request as
soon as the previous one ends, until the level's clock (stopped while paused) or its request
count runs out, a skip, or every arm is denied; then what is in flight drains."""

from __future__ import annotations

import asyncio
import time

from specmon import clock
from specmon.load import GenerateClient, RequestOutcome
from specmon.session.folder import public_url
from specmon.session.ramp.outcomes import Backoff
from specmon.session.ramp.sending import gather_all
from specmon.session.ramp.state import _LevelState


class ClosedLoop:
    """Mixed into RampDriver (driver.py): reads its plan, workload, arms, denied and pause flag, and
    sets the level wake that pause / resume / skip poke (_poke_level)."""

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
            await gather_all(tasks)  # drain what is in flight
        except asyncio.CancelledError:
            await gather_all(tasks, cancel=True)
            raise
