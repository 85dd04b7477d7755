"""The load generator's own event loop, in its own thread.

The UI (Textual) and the scrapers share the main loop; if a repaint takes 50 ms there, a
stream's chunks would be stamped 50 ms late. Running every HTTP stream on a separate loop in a
separate thread keeps the stamps honest (the GIL is released while sockets wait). The loop also
measures its own lag: a ticker that asks to wake every 250 ms and records how late it woke.

The loop is uvloop's where it is installed (a dependency, except on Windows): its socket-to-
protocol path is C, where asyncio's selector loop runs a few Python calls per read; at 1,000
streams each read is one chunk of one stream, so that path is most of what the client costs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any, Coroutine, Optional

from specmon.analysis.stats import percentile
from specmon.load import native, pacing
from specmon.model import LoadClientStats, PacerStats

try:
    import uvloop
except ImportError:  # Windows, or an install without it: asyncio's own loop
    uvloop = None

# Each tick is a wake-up of the load thread, and a wake-up is what costs on the 2-core box: a
# thread's own CPU per wake-up (its schedstat) read 36 us after a 1 ms sleep and 90-180 us after
# 100 ms, whatever ran. At 10 ticks a second the ~750 ticks of a 1,000-stream level were ~0.1 s
# of a ~2.3 s run; at 4 a second a 10 s level still has 40 samples for its lag p99, the default
# 60 s level 240 (its p50 and p99 read the same at 2 and 10 a second).
LAG_TICK_S = 0.25
# The pacer's pause (see LoadLoop.pace): half the gaps' 1st percentile between two chunks of one
# stream in the level so far (the kernel's stamps, a decode step apart; tracked by the reader,
# pacing.py), within these bounds, so a pause holds two chunks of a stream in one read
# for well under 1 % of the reads. Before the first gap, the shortest.
PACE_PAUSE_S = 0.001
PACE_PAUSE_MAX_S = 0.004
PACE_GAP_SHARE = 0.5


def pace_pause(gap: Optional[float]) -> float:
    """The pause after a pass, from the chunk gaps' 1st percentile so far (None: none seen yet):
    the pacer's rule (pacing.py) with the load loop's bounds."""
    return pacing.pause_for(gap, PACE_PAUSE_S, PACE_PAUSE_MAX_S, PACE_GAP_SHARE)


@dataclass(frozen=True)
class LevelMeter:
    """The load loop's counters at a level's start (LoadLoop.begin_level)."""

    cpu_s: float
    pauses: int


class LoadLoop:
    def __init__(self, name: str = "specmon-load"):
        self.loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._lags: list[float] = []
        self._lag_timer: Optional[asyncio.TimerHandle] = None
        self._lag_due = 0.0
        self._ticked_cpu_s = 0.0  # the thread's CPU seconds at the lag ticker's newest tick
        self.pacing = False
        # the pacer (pacing.py), one for either reader: its pauses and their lengths are its fields
        self._pacer = pacing.Pacer(self.loop, PACE_PAUSE_S, PACE_PAUSE_MAX_S, PACE_GAP_SHARE)
        self._thread.start()
        # The thread's own CPU clock, read from any thread (Unix): a level's client CPU is then
        # exact at its ends, not as old as the lag ticker's newest tick.
        try:
            self._cpu_clock: Optional[int] = time.pthread_getcpuclockid(self._thread.ident)
        except (AttributeError, OSError):
            self._cpu_clock = None

    @property
    def cpu_s(self) -> float:
        """CPU seconds the load thread has spent so far (the ticker's reading where the thread's
        clock cannot be read)."""
        if self._cpu_clock is not None and self._thread.is_alive():
            try:
                return time.clock_gettime(self._cpu_clock)
            except OSError:
                pass
        return self._ticked_cpu_s

    @property
    def pauses(self) -> int:
        """The pacer's pauses so far: loop passes that read a socket while pacing."""
        return self._pacer.pauses

    @property
    def pause_s(self) -> float:
        """The pacer's newest pause ..."""
        return self._pacer.pause_s

    @property
    def chunk_gap_s(self) -> Optional[float]:
        """... and the chunk gaps' 1st percentile it was a share of (None: none seen yet)."""
        return self._pacer.chunk_gap_s

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> "asyncio.Future[Any]":
        """Run coro on the load loop; the returned future can be awaited from any other loop."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def call(self, coro: Coroutine[Any, Any, Any], timeout: Optional[float] = None) -> Any:
        """Blocking variant for code that is not on an event loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # ---- pacing -------------------------------------------------------------------------------
    def pace(self, on: bool) -> None:
        """Pause after each loop pass that read a socket, while `on` (from any thread): 1-4 ms,
        half the 1st percentile of the gaps between two chunks of a stream since it was turned on.

        Why: a server writes one decode step's chunks to its C streams one after another, so
        without a pause the loop wakes for nearly every chunk alone: at 1,000 streams ~87k
        wake-ups (an epoll wait and a thread switch each) for ~98k reads. After a pause the
        next pass finds every socket that became readable meanwhile (the C Poller reads every
        ready socket of a pass in one callback): at 1 ms ~9-12k thread switches a run, at 4 ms
        ~5.8k, each ~40-50 us of CPU on the 2-core CI box. The stamps do not move: a read's
        stamp is the kernel's receive time (_KernelStamped), not the time of the read. What a
        pause delays is this client's own next step: a closed-
        loop stream's next request goes out up to PACE_PAUSE_MAX_S later (its TTFT still counts
        from its own send stamp), and the loop-lag figure includes the pauses. The ramp turns
        it on only for levels of many streams, where the wake-ups cost. One pacer (pacing.py)
        pauses for either reader, so the same plan offers the same load with or without the C
        reader built."""
        self.loop.call_soon_threadsafe(self._set_pace, on)

    def _set_pace(self, on: bool) -> None:  # on the load thread: the readers' pacer is per thread
        self.pacing = on
        if on:
            self._pacer.start()  # a new level: its own streams' gaps
        else:
            self._pacer.stop()

    # ---- a level's figures ----------------------------------------------------------------------
    def begin_level(self) -> LevelMeter:
        """A level starts: its lag samples from now, its CPU and pauses counted from here."""
        self.lag_stats(reset=True)
        return LevelMeter(cpu_s=self.cpu_s, pauses=self.pauses)

    def level_stats(self, since: LevelMeter, *, level: int, offered_concurrency: int, tokens: int) -> LoadClientStats:
        """What the load thread cost and how it kept pace since `since`, for a level whose
        requests streamed `tokens` output tokens (the caller adds what it knows of the level:
        connections, server pace, back-off)."""
        cpu = self.cpu_s - since.cpu_s
        lag = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in self.lag_stats().items()}
        stats = LoadClientStats(level=level, offered_concurrency=offered_concurrency, reader=native.READER,
                                tokens=tokens, client_cpu_s=round(cpu, 3),
                                cpu_ms_per_1k_tokens=round(cpu / tokens * 1e6, 3) if tokens else None,
                                lag_p50_s=lag["lag_p50_s"], lag_p99_s=lag["lag_p99_s"], lag_max_s=lag["lag_max_s"],
                                lag_samples=lag["lag_samples"])
        if self.pacing:  # the pacer's pauses this level, the last one's length and its reason
            gap = self.chunk_gap_s
            stats.pacer = PacerStats(pauses=self.pauses - since.pauses, pause_ms=round(self.pause_s * 1000, 3),
                                     chunk_gap_ms=None if gap is None else round(gap * 1000, 3))
        return stats

    # ---- lag ----------------------------------------------------------------------------------
    def start_lag_probe(self) -> None:
        self.loop.call_soon_threadsafe(self._start_lag)

    def _start_lag(self) -> None:
        if self._lag_timer is None:
            self._lag_due = time.perf_counter() + LAG_TICK_S
            self._lag_timer = self.loop.call_later(LAG_TICK_S, self._lag_tick)

    def _lag_tick(self) -> None:
        # A plain timer callback, not a task sleeping in a loop: asyncio.sleep's future and
        # task step cost ~70 us a tick, 10 ticks a second for the whole session.
        now = time.perf_counter()
        self._lags.append(max(0.0, now - self._lag_due))
        self._ticked_cpu_s = time.thread_time()
        if len(self._lags) > 100_000:
            del self._lags[:50_000]
        self._lag_due = now + LAG_TICK_S
        self._lag_timer = self.loop.call_later(LAG_TICK_S, self._lag_tick)

    def lag_stats(self, reset: bool = False) -> dict[str, Optional[float]]:
        lags = list(self._lags)
        if reset:
            self._lags.clear()
        return {"lag_p50_s": percentile(lags, 50), "lag_p99_s": percentile(lags, 99),
                "lag_max_s": max(lags) if lags else None, "lag_samples": len(lags)}

    async def _shutdown(self) -> None:
        if self._lag_timer is not None:
            self._lag_timer.cancel()
            self._lag_timer = None
        if self.pacing:
            self._set_pace(False)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        """Cancel whatever still runs on the load loop, then stop it and join the thread."""
        if self.loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(5)
            except Exception:
                pass
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()
