"""The live fleet (PrometheusFleet, a FleetSource): the queries of each poll asked in a task of
their own, a slow answer read again with its ages grown, back-off after failures; first_reading
for a command's check before its session starts."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import httpx

from specmon.model import FleetReading
from specmon.sources.promfleet.api import _Api, _gather_queries, _one, prometheus_base
from specmon.sources.promfleet.parse import PromQueryError, parse_config_interval, parse_targets, parse_vector
from specmon.sources.promfleet.queries import FleetQueries, Key, WorkerFigures, key_of, read_results, selector_matchers
from specmon.sources.promfleet.view import FleetView

DISCOVER_EVERY_S = 30.0
TARGETS_EVERY_S = 30.0
TARGETS_DOWN_EVERY_S = 5.0  # a worker is down: its target's last error, at most this often


class PrometheusFleet:
    """A FleetSource (session/source.py) over Prometheus's HTTP API. `interval_s` is how often
    specmon polls (its tick); back-off after failures starts there.

    A poll never waits long for Prometheus: the queries run in a task of their own, and a poll
    whose answer is not back within half a tick reads the last answer again, its ages grown by
    the time since it was asked (so a slow Prometheus shows as figures growing old, then stale,
    never as a stalled tick). Prometheus's figures move once a scrape interval, so within half of
    one since the last answer nothing is asked either. An answer later than `timeout_s` (default
    the longer of 5 s and 3 ticks) is a failure: the fleet is down."""

    kind = "prometheus"

    def __init__(self, url: str, selector: Optional[str] = "{}", interval_s: float = 1.0, *,
                 name: str = "prometheus", timeout_s: Optional[float] = None,
                 transport: Optional[httpx.AsyncBaseTransport] = None):
        self.url = prometheus_base(url)
        self.selector = selector or "{}"
        self.matchers = selector_matchers(selector)
        self.name = name
        self.interval_s = interval_s
        self.timeout_s = timeout_s or max(5.0, 3 * interval_s)
        self.answer_within_s = 0.5 * interval_s
        self.retry_max_s = max(8 * interval_s, 2.0)
        self.view = FleetView(name, self.url, self.matchers)
        self._transport = transport
        self._api: Optional[_Api] = None
        self._failures = 0
        self._retry_at = 0.0
        self._error: Optional[PromQueryError] = None
        self._targets_at = -math.inf
        self._discover_at = -math.inf
        self._task: Optional[asyncio.Task] = None  # the queries in flight
        # The last answer, read: each worker's figures, `up`, the answer's time, when it was asked.
        self._last: Optional[tuple[dict[Key, WorkerFigures], dict[tuple[str, str], float], float, float]] = None
        self.queries = 0  # requests of the last answer (the benchmark reads these)
        self.poll_s: Optional[float] = None  # how long that answer took

    def _client(self) -> _Api:
        if self._api is None:  # made in the loop that polls
            self._api = _Api(self.url, self.timeout_s, self._transport)
        return self._api

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._api is not None:
            await self._api.aclose()
            self._api = None

    async def _ask(self) -> tuple[dict[Key, WorkerFigures], dict[tuple[str, str], float], float, float]:
        """Every query of one poll (and, when due, the targets and the look-back discovery)."""
        api = self._client()
        before = api.requests
        t0 = time.monotonic()
        try:
            await self._refresh(api, t0)
            queries = FleetQueries(self.matchers, self.view.scrape_interval_s() or self.interval_s).poll(self.view.jobs)
            if "up" not in queries:  # nothing matched so far: look back for workers again next time
                self._discover_at = -math.inf
            results = await _gather_queries(api, "/api/v1/query", queries, {"timeout": f"{self.timeout_s:g}s"},
                                            parse_vector)
        finally:
            self.queries = api.requests - before
            self.poll_s = time.monotonic() - t0
        ts = max((p[1] for pts in results.values() for p in pts), default=time.time())
        workers, up = read_results(results)
        return workers, up, ts, t0

    def _reading(self, workers: dict[Key, WorkerFigures], up: dict[tuple[str, str], float], ts: float,
                 poll_s: Optional[float]) -> FleetReading:
        reading = self.view.read_figures(workers, up, ts, poll_s=poll_s)
        if (any(s.state == "down" for s in reading.samples.values())
                and time.monotonic() - self._targets_at >= TARGETS_DOWN_EVERY_S):
            self._targets_at = -math.inf  # the next answer reads the targets' last errors
        return reading

    def _aged(self) -> FleetReading:
        """The last answer read again, every age grown by the time since it was asked."""
        assert self._last is not None
        workers, up, ts, at = self._last
        dt = time.monotonic() - at
        aged = {k: replace(w, age_s=None if w.age_s is None else w.age_s + dt) for k, w in workers.items()}
        return self._reading(aged, up, ts + dt, None)

    async def read(self) -> FleetReading:
        """One fresh reading; PromQueryError when Prometheus gave no usable answer (no back-off)."""
        self._last = await self._ask()
        return self._reading(*self._last[:3], self.poll_s)

    async def _refresh(self, api: _Api, now: float) -> None:
        """The slow cadence: targets (intervals, URLs, errors) and the look-back discovery."""
        if now - self._targets_at >= TARGETS_EVERY_S:
            self.view.targets = parse_targets(await _one(api, "/api/v1/targets", "targets", {"state": "active"}))
            self._targets_at = now
            if not any(t.interval_s for t in self.view.targets.values()) and self.view.config_interval_s is None:
                self.view.config_interval_s = parse_config_interval(
                    await _one(api, "/api/v1/status/config", "config"))
        if now - self._discover_at >= DISCOVER_EVERY_S:
            q = FleetQueries(self.matchers).discover()
            found = await _gather_queries(api, "/api/v1/query", {"discover": q}, {}, parse_vector)
            self.view.discovered = {key_of(lab) for lab, _, _ in found["discover"] if lab.get("instance")}
            self._discover_at = now

    def _fresh_enough(self, now: float) -> bool:
        every = self.view.scrape_interval_s() or 0.0
        return (self._last is not None and now - self._last[3] < every / 2
                and now - self._targets_at < TARGETS_EVERY_S)

    def need_figures_of(self, urls: set[str]) -> None:
        """Prometheus holds every worker's series: nothing to choose."""

    async def poll(self) -> FleetReading:
        """Never raises: Prometheus down, slow or erring is a FleetStatus with up=False and why."""
        now = time.monotonic()
        if self._error is not None and now < self._retry_at:
            return self._down(self._error, self._retry_at - now)
        if self._task is None and not self._fresh_enough(now):
            self._task = asyncio.create_task(self._ask())
        if self._task is not None:
            # The first answer is waited for whole; later ones for half a tick, else the last again.
            await asyncio.wait({self._task}, timeout=None if self._last is None else self.answer_within_s)
            if self._task.done():
                task, self._task = self._task, None
                try:
                    answer = task.result()
                except PromQueryError as e:
                    return self._failed(e)
                except asyncio.CancelledError:
                    return self._failed(PromQueryError("the queries were cancelled", "error"))
                except Exception as e:  # a case not foreseen: the fleet's state, never the session's end
                    return self._failed(PromQueryError(f"{type(e).__name__}: {str(e)[:160]}", "error"))
                self._failures, self._retry_at, self._error = 0, 0.0, None
                self._last = answer
                return self._reading(*answer[:3], self.poll_s)
        return self._aged()

    def _failed(self, e: PromQueryError) -> FleetReading:
        self._failures += 1
        delay = min(self.retry_max_s, self.interval_s * 2.0 ** min(self._failures - 1, 30))
        self._retry_at = time.monotonic() + delay
        self._error = e
        self._targets_at = -math.inf  # after a failure: targets and discovery again, it may be a new server
        self._discover_at = -math.inf
        self._last = None
        return self._down(e, delay)

    def _down(self, e: PromQueryError, retry_in: float) -> FleetReading:
        retry = f"retrying in {retry_in:.0f} s" if retry_in >= 1.5 else "retrying"
        state = e.kind if e.kind in ("refused", "timeout") else "down"
        return self.view.down(f"at {self.url}: {e.describe()}; {retry}", time.time(), state=state)


async def first_reading(url: str, selector: Optional[str], interval_s: float,
                        timeout_s: Optional[float] = None) -> FleetReading:
    """One reading with a fleet of its own (closed after): PromQueryError when Prometheus cannot
    answer (kind bad_query: it refused the selector)."""
    fleet = PrometheusFleet(url, selector, interval_s, timeout_s=timeout_s or 15.0)
    try:
        return await fleet.read()
    finally:
        await fleet.aclose()
