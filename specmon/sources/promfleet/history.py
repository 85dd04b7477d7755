"""A past window of a fleet (PrometheusHistory): the live poll's queries as range queries
(/api/v1/query_range) in chunks, each step read into the reading a live poll then would have made."""

from __future__ import annotations

import asyncio
import math
from contextlib import suppress
from datetime import datetime, timezone
from typing import TYPE_CHECKING, AsyncIterator, Optional

if TYPE_CHECKING:
    import httpx

from specmon.model import FleetReading
from specmon.sources.promfleet.api import _Api, _gather_queries, _one, prometheus_base
from specmon.sources.promfleet.parse import (
    Point, PromQueryError, parse_config_interval, parse_matrix, parse_targets, parse_vector,
)
from specmon.sources.promfleet.queries import DISCOVER_LOOKBACK_S, FleetQueries, key_of, selector_matchers
from specmon.sources.promfleet.view import FleetView

MAX_RANGE_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series in one query_range
MAX_HISTORY_STEPS = 200_000
# Without --step a history steps at the scrape interval, coarser when the window is long: at most
# AUTO_HISTORY_STEPS steps (a week at 5 minutes). What the operating curve needs sets this, not the
# scrape interval: a bin takes part in the knee from 1 % of the window's seconds (20 steps here),
# and a step coarser than the scrapes reads every scrape inside it (FleetQueries.averaged), so a
# finer step only makes more rows, queries and Prometheus work for the same curve (a week of 500
# workers at 1-minute scrapes would be 10,080 steps, 5 M worker rows: docs/observed-knee.md,
# "History at scale").
AUTO_HISTORY_STEPS = 2_016
# A history's query covers hundreds of workers over hours: the TTFT percentiles of 500 workers over
# 200 steps took Prometheus most of a minute on a busy 2-core machine (docs/observed-knee.md).
# Nothing live waits on it, so it may take longer than a live poll's answer ever may.
HISTORY_TIMEOUT_S = 300.0


# --------------------------------------------------------------------------------------------
# History: the same queries over a past window (/api/v1/query_range)


class PrometheusHistory:
    """A past window of a fleet, step by step: `readings()` yields (step time, FleetReading), the
    same readings a live poll at that time would have made (FleetView.read on each step's points)."""

    def __init__(self, url: str, selector: Optional[str], start: float, end: float,
                 step_s: Optional[float] = None, *, name: str = "prometheus", timeout_s: float = HISTORY_TIMEOUT_S):
        self.url = prometheus_base(url)
        self.selector = selector or "{}"
        self.matchers = selector_matchers(selector)
        if not end > start:
            raise ValueError(f"--from must be before --to (got {_iso(start)} .. {_iso(end)})")
        if step_s is not None and not (math.isfinite(step_s) and step_s > 0):
            raise ValueError(f"--step: expected a positive number of seconds, got {step_s}")
        self.start, self.end, self.step_s = start, end, step_s
        self.name, self.timeout_s = name, timeout_s
        self.view = FleetView(name, self.url, self.matchers)
        self.queries = 0  # requests made to Prometheus so far
        self._api: Optional[_Api] = None

    @property
    def steps(self) -> int:
        return int(math.floor((self.end - self.start) / (self.step_s or 1.0) + 1e-9)) + 1

    async def prepare(self, transport: Optional[httpx.AsyncBaseTransport] = None) -> int:
        """Scrape interval (the default step), the bound on steps and the workers of the window;
        returns how many workers were seen. PromQueryError, ValueError (too many steps)."""
        if self._api is None:
            self._api = _Api(self.url, self.timeout_s, transport)
        api = self._api
        self.view.targets = parse_targets(await _one(api, "/api/v1/targets", "targets", {"state": "active"}))
        if not any(t.interval_s for t in self.view.targets.values()):
            self.view.config_interval_s = parse_config_interval(await _one(api, "/api/v1/status/config", "config"))
        if self.step_s is None:
            self.step_s = max(self.view.scrape_interval_s() or 15.0,
                              math.ceil((self.end - self.start) / AUTO_HISTORY_STEPS))
        if self.steps > MAX_HISTORY_STEPS:
            raise ValueError(f"--from/--to/--step: {self.steps:,} steps of {self.step_s:g} s; at most "
                             f"{MAX_HISTORY_STEPS:,}: give a larger --step or a shorter window")
        window = max(self.end - self.start, 1.0) + DISCOVER_LOOKBACK_S
        q = FleetQueries(self.matchers).discover(window)
        found = await _gather_queries(api, "/api/v1/query", {"discover": q}, {"time": f"{self.end:.3f}"}, parse_vector)
        self.view.discovered = {key_of(lab) for lab, _, _ in found["discover"] if lab.get("instance")}
        self.queries = api.requests
        return len(self.view.discovered)

    async def readings(self) -> AsyncIterator[tuple[float, FleetReading]]:
        """Each step's reading, in order (after prepare)."""
        if self._api is None:
            await self.prepare()
        api = self._api
        assert api is not None
        n = len(self.view.discovered)
        step = float(self.step_s or 1.0)
        # Points per query bounded: Prometheus's own per-series limit, and the answer's size.
        per_chunk = max(10, min(MAX_RANGE_POINTS, 100_000 // max(1, n)))
        queries = FleetQueries(self.matchers, self.view.scrape_interval_s() or step, step).poll(self.view.jobs,
                                                                                                 split=True)

        def ask(i: int) -> asyncio.Task:
            j = min(self.steps, i + per_chunk)
            t0, t1 = self.start + i * step, self.start + (j - 1) * step
            params = {"start": f"{t0:.3f}", "end": f"{t1:.3f}", "step": f"{step:g}", "timeout": f"{self.timeout_s:g}s"}
            return asyncio.ensure_future(_gather_queries(api, "/api/v1/query_range", queries, params, parse_matrix))

        # The next chunk is asked for before this one's readings are made: Prometheus evaluates it
        # while specmon reads and records (each about half of the wall time, one after the other)
        i, pending = 0, ask(0)
        try:
            while i < self.steps:
                j = min(self.steps, i + per_chunk)
                results = await pending
                self.queries = api.requests
                pending = ask(j) if j < self.steps else None
                await asyncio.sleep(0)  # its requests on their way before the readings take the loop
                by_step: dict[int, dict[str, list[Point]]] = {}
                for qname, points in results.items():
                    for labels, ts, v in points:
                        k = int(round((ts - self.start) / step))
                        if i <= k < j:
                            by_step.setdefault(k, {}).setdefault(qname, []).append((labels, ts, v))
                for k in range(i, j):
                    ts = self.start + k * step
                    yield ts, self.view.read(by_step.get(k, {}), ts)
                i = j
        finally:
            # left early (or failed): the chunk asked ahead is cancelled, and its outcome taken
            # even when it had already failed (an exception never retrieved is logged at exit)
            if pending is not None:
                pending.cancel()
                with suppress(asyncio.CancelledError, PromQueryError):
                    await pending

    async def aclose(self) -> None:
        if self._api is not None:
            await self._api.aclose()
            self._api = None


def _iso(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        return str(ts)
