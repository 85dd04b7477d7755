"""The load generator's own event loop, in its own thread.

The UI (Textual) and the scrapers share the main loop; if a repaint takes 50 ms there, a
stream's chunks would be stamped 50 ms late. Running every HTTP stream on a separate loop in a
separate thread keeps the stamps honest (the GIL is released while sockets wait). The loop also
measures its own lag: a ticker that asks to wake every 50 ms and records how late it woke.

The loop is uvloop's where it is installed (a dependency, except on Windows): its socket-to-
protocol path is C, where asyncio's selector loop runs a few Python calls per read; at 1,000
streams each read is one chunk of one stream, so that path is most of what the client costs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Coroutine, Optional

from specmon.analysis.stats import percentile

try:
    import uvloop
except ImportError:  # Windows, or an install without it: asyncio's own loop
    uvloop = None

LAG_TICK_S = 0.05


class LoadLoop:
    def __init__(self, name: str = "specmon-load"):
        self.loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._lags: list[float] = []
        self._lag_task: Optional[asyncio.Future] = None
        self.cpu_s = 0.0  # CPU seconds this thread spent, updated by the lag ticker
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> "asyncio.Future[Any]":
        """Run coro on the load loop; the returned future can be awaited from any other loop."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def call(self, coro: Coroutine[Any, Any, Any], timeout: Optional[float] = None) -> Any:
        """Blocking variant for code that is not on an event loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start_lag_probe(self) -> None:
        if self._lag_task is None:
            self._lag_task = asyncio.run_coroutine_threadsafe(self._lag_probe(), self.loop)

    async def _lag_probe(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(LAG_TICK_S)
            self._lags.append(max(0.0, time.perf_counter() - t - LAG_TICK_S))
            self.cpu_s = time.thread_time()
            if len(self._lags) > 100_000:
                del self._lags[:50_000]

    def lag_stats(self, reset: bool = False) -> dict[str, Optional[float]]:
        lags = list(self._lags)
        if reset:
            self._lags.clear()
        return {"lag_p50_s": percentile(lags, 50), "lag_p99_s": percentile(lags, 99),
                "lag_max_s": max(lags) if lags else None, "lag_samples": len(lags)}

    async def _shutdown(self) -> None:
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
