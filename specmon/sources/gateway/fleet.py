"""GatewayFleet, the fleet source for one gateway, polled once a tick: its registry, readiness,
loads and metrics read into the fleet's status, its workers as arms, and the gateway's figures
for the workers specmon cannot reach."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Optional
from urllib.parse import urlsplit

# httpx (~0.16 s to import) only when a GET needs it (sources/get.py).
if TYPE_CHECKING:
    import httpx

from specmon import clock
from specmon.model import ArmSpec, FleetReading, FleetStatus, Sample, WorkerStatus
from specmon.sources.gateway.client import JSON_MAX_BYTES, METRICS_MAX_BYTES, _Http, _json
from specmon.sources.gateway.engine import (
    ENGINE_METRICS_PATH, _engine_load_sample, overlay_load, split_engine_metrics,
)
from specmon.sources.gateway.loads import LOADS_PATH, WorkerLoad, parse_loads
from specmon.sources.gateway.metrics import DEFAULT_METRICS_PORT, GatewayMetrics, parse_gateway_metrics
from specmon.sources.gateway.registry import (
    READINESS_PATH, REGISTRY_PATH, RegistryWorker, parse_readiness, parse_registry,
)
from specmon.sources.gateway.urls import worker_name
from specmon.sources.prom import MetricsParseError
from specmon.sources.sglang import ArmCollector, with_ranks


class GatewayFleet:
    """A FleetSource (session/source.py) for one gateway: its workers become arms (scraped
    directly: scrape_workers=True) and, for a worker specmon cannot reach, the gateway's own
    figures stand in (FleetReading.samples). poll() never raises."""

    kind = "gateway"

    def __init__(self, url: str, *, name: Optional[str] = None, metrics_url: Optional[str] = None,
                 api_key_env: Optional[str] = None, admin_key_env: Optional[str] = None, timeout_s: float = 3.0, engine_metrics_every_s: float = 10.0,
                 discover_metrics: bool = True, transport: Optional[httpx.AsyncBaseTransport] = None,
                 names: Optional[dict[str, str]] = None):
        self.url = url.rstrip("/")
        # worker URL -> the arm name it already goes by (a launched layout's own names)
        self.names = {k.rstrip("/"): v for k, v in (names or {}).items()}
        self.name = name or f"gateway {worker_name(self.url)}"
        self.api_key_env = api_key_env
        # the variable holding the admin key smg 1.x asks on its worker routes (/workers, /get_loads);
        # read at each request, never kept or written
        self.admin_key_env = admin_key_env
        self.timeout_s = timeout_s
        self.metrics_url = metrics_url.rstrip("/") if metrics_url else None
        if self.metrics_url and not urlsplit(self.metrics_url).path:
            self.metrics_url += "/metrics"
        self._metrics_given = metrics_url is not None
        self._discover = discover_metrics and not self._metrics_given
        self._discover_due = 0.0
        self.engine_metrics_every_s = engine_metrics_every_s
        # The worker URLs whose figures the session needs from the gateway because it cannot reach
        # them itself (LiveSession says, need_figures_of, before each poll); None: every worker's (no session says).
        # /engine_metrics is asked for, and read, only for those: every worker's /metrics merged is
        # the costliest thing the gateway serves, and parsing it (64 workers: about 3 MB) would
        # hold the load generator's thread back in a ramp through the gateway.
        self.needs_figures: Optional[set[str]] = None
        self._engine_due = 0.0
        self._engine_problem: Optional[str] = None
        self._engine: dict[str, tuple[float, Sample]] = {}  # worker URL -> (when, its Sample from /engine_metrics)
        self._collectors: dict[str, ArmCollector] = {}  # windows for /engine_metrics rates and percentiles
        self._routed_prev: Optional[tuple[float, float]] = None
        self._engine_covered: set[str] = set()  # workers the last metrics scrape had smg_engine_* series of
        self._pd_prev: dict[str, tuple[float, float]] = {}  # smg_pd_* (sum, count) at the last poll
        self._pd_mean: dict[str, Optional[float]] = {}  # their mean over the last window with requests
        self._registry_read: Optional[tuple[bytes, list[RegistryWorker]]] = None  # the last /workers body, read
        self._http = _Http(self.url, timeout_s, transport)
        self._transport = transport
        self.polls = 0

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.admin_key_env) if self.admin_key_env else None
        key = key or (os.environ.get(self.api_key_env) if self.api_key_env else None)
        return {"Authorization": f"Bearer {key}"} if key and key.isascii() else {}

    async def aclose(self) -> None:
        await self._http.aclose()
        for c in self._collectors.values():
            await c.aclose()

    def need_figures_of(self, urls: set[str]) -> None:
        self.needs_figures = set(urls)

    async def poll(self) -> FleetReading:
        try:
            return await self._poll()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # never raises: a bug or a case not foreseen is this fleet's reason
            return FleetReading(status=FleetStatus(name=self.name, kind="gateway", url=self.url, up=False,
                                                   reason=f"poll failed: {type(e).__name__}: {str(e)[:200]}"))

    async def _poll(self) -> FleetReading:
        now = clock.wall()
        self.polls += 1
        h = self._headers()
        get = lambda path, most=JSON_MAX_BYTES: self._http.get(self.url + path, h, most)  # noqa: E731
        reg_status, reg_body, reg_problem = await get(REGISTRY_PATH)
        if reg_status == 200 and self._registry_read is not None and reg_body == self._registry_read[0]:
            # The registry reads as it did (a fleet's membership and health rarely move): the
            # workers read from it then (nothing changes a RegistryWorker once parsed; 64
            # workers: ~0.6 ms of JSON and parsing a tick otherwise).
            registry = self._registry_read[1]
        else:
            registry = parse_registry(_json(reg_body)) if reg_status == 200 else None
            self._registry_read = (reg_body, registry) if registry is not None else None
        if registry is None:
            why = reg_problem or (f"HTTP {reg_status}" if reg_status != 200 else "not a worker registry")
            if reg_status in (401, 403):
                why += (" (the gateway wants its admin key: --gateway-key-env VAR)" if not self.admin_key_env
                        else f" (the key in ${self.admin_key_env} is not one it takes)")
            return FleetReading(status=FleetStatus(name=self.name, kind="gateway", url=self.url, up=False,
                                                   reason=f"{REGISTRY_PATH}: {why}", source="workers"),
                                scrape_workers=True)
        jobs = {"ready": get(READINESS_PATH), "loads": get(LOADS_PATH)}
        if self.metrics_url is None and self._discover and now >= self._discover_due:
            jobs["discover"] = self._discover_metrics(registry)
        if self.metrics_url is not None:
            jobs["metrics"] = self._http.get(self.metrics_url, h, METRICS_MAX_BYTES)
        wanted = self.needs_figures
        # smg 1.x re-exports every worker's load per DP rank on its metrics port (smg_engine_*),
        # scraped on every poll anyway: when those cover every worker the session needs, the
        # gateway's merge of all the workers' /metrics (the costliest thing it serves) is not asked
        covered = wanted is not None and bool(wanted) and wanted <= self._engine_covered
        if now >= self._engine_due and registry and (wanted is None or wanted) and not covered:
            jobs["engine"] = get(ENGINE_METRICS_PATH, METRICS_MAX_BYTES)
            self._engine_due = now + self.engine_metrics_every_s
        done = dict(zip(jobs, await asyncio.gather(*jobs.values())))
        reasons: list[str] = []

        ready = parse_readiness(done["ready"][0], _json(done["ready"][1]))
        if ready.ready is False:
            reasons.append(f"not ready: {ready.reason}")
        elif ready.ready is None:
            reasons.append(f"{READINESS_PATH}: {done['ready'][2] or ready.reason}")

        loads_status, loads_body, loads_problem = done["loads"]
        loads = parse_loads(_json(loads_body)) if loads_status == 200 else {}
        if loads_status != 200:
            reasons.append(f"{LOADS_PATH}: {loads_problem or f'HTTP {loads_status}'}")

        gm: Optional[GatewayMetrics] = None
        if "discover" in done and done["discover"] is not None:
            gm = done["discover"]
        elif "metrics" in done:
            m_status, m_body, m_problem = done["metrics"]
            if m_status == 200:
                gm = parse_gateway_metrics(m_body.decode("utf-8", errors="replace"))
                if not gm.is_gateway:
                    reasons.append(f"{self.metrics_url} has no smg_ series")
                    gm = None
            else:
                reasons.append(f"gateway metrics {self.metrics_url}: {m_problem or f'HTTP {m_status}'}")
        if gm is None and self.metrics_url is None:
            reasons.append("gateway metrics: port unknown (pass --gateway-metrics URL): routed req/s, "
                           "requests per worker and circuit states not known")

        # a worker the gateway marks unhealthy keeps its last smg_engine_* values: not a reading
        self._engine_covered = {u for u in gm.engine if gm.health.get(u) is not False} if gm is not None else set()
        if "engine" in done:
            await self._read_engine_metrics(done["engine"], registry, now, wanted)
        elif wanted is not None and (not wanted or covered):
            self._engine_problem = None  # not asked for: every worker answers specmon itself, or smg_engine_* cover them
            if covered:
                self._engine.clear()  # no counters over the load from here on, rather than ones that age out
        if self._engine_problem:
            reasons.append(self._engine_problem)

        routed = None
        if gm is not None and gm.routed_total is not None:
            if self._routed_prev is not None and gm.routed_total >= self._routed_prev[1] and now > self._routed_prev[0]:
                routed = (gm.routed_total - self._routed_prev[1]) / (now - self._routed_prev[0])
            self._routed_prev = (now, gm.routed_total)

        pd_s = self._pd_window(gm.pd) if gm is not None and gm.pd else {}

        specs, statuses, samples = [], [], {}
        taken: set[str] = set()
        for w in registry:
            name = self.names.get(w.url) or worker_name(w.url)
            if name in taken:
                name = f"{name} ({w.role})"
            taken.add(name)
            specs.append(ArmSpec(name=name, url=w.url, api_key_env=self.api_key_env, fleet=self.name, role=w.role))
            statuses.append(WorkerStatus(
                url=w.url, arm=name, role=w.role,
                healthy=w.healthy if w.healthy is not None else (gm.health.get(w.url) if gm else None),
                # the gauge appears with the worker's first routed request: a live worker without it has none
                active_requests=(gm.active.get(w.url, 0 if w.url in gm.workers else None)) if gm else None,
                circuit=gm.circuit.get(w.url) if gm else None))
            fresh = gm is not None and w.healthy is not False and gm.health.get(w.url) is not False
            s = self._worker_sample(name, w, loads.get(w.url), now, gm.engine.get(w.url) if fresh else None)
            if s is not None:
                samples[name] = s
        healthy = ready.healthy
        total = ready.total
        if healthy is None or total is None:
            known = [w.healthy for w in registry]
            healthy = sum(1 for x in known if x) if all(x is not None for x in known) else None
            total = len(registry)
        status = FleetStatus(
            name=self.name, kind="gateway", url=self.url, up=True, reason="; ".join(reasons) or None,
            workers=statuses, healthy=healthy, total=total, routed_req_s=routed,
            policy=", ".join(gm.policies) if gm and gm.policies else None, source="workers",
            pd_ttft_s=pd_s.get("ttft"), pd_prefill_s=pd_s.get("prefill"))
        for gone in set(self._collectors) - {w.url for w in registry}:
            await self._collectors.pop(gone).aclose()
            self._engine.pop(gone, None)
        return FleetReading(status=status, workers=specs, samples=samples, scrape_workers=True)

    def _pd_window(self, pd: dict[str, tuple[float, float]]) -> dict[str, Optional[float]]:
        """Each smg_pd_* histogram's mean over the polls since the last: (Δsum / Δcount); a window
        without requests keeps the last mean shown (a PD gateway between bursts)."""
        for key, (total, n) in pd.items():
            prev = self._pd_prev.get(key)
            if prev is not None and n > prev[1] and total >= prev[0]:
                self._pd_mean[key] = (total - prev[0]) / (n - prev[1])
            elif prev is None or n < prev[1]:  # first sight, or the gateway restarted
                self._pd_mean.setdefault(key, total / n if n > 0 else None)
            self._pd_prev[key] = (total, n)
        return self._pd_mean

    def _worker_sample(self, name: str, w: RegistryWorker, load: Optional[WorkerLoad], now: float,
                       engine: Optional[dict[int, dict[str, float]]] = None) -> Optional[Sample]:
        """The gateway's reading of one worker, for a tick when specmon cannot reach it itself:
        smg 1.x's smg_engine_* series from this poll's scrape of its metrics port (per DP rank; token
        counts from /get_loads where it answered), else its share of /engine_metrics (newest within
        two periods), else the loads fan-out alone."""
        eng = self._engine.get(w.url)
        fresh = eng is not None and now - eng[0] <= 2 * self.engine_metrics_every_s + self.timeout_s
        if fresh and not engine:
            s = eng[1]
            out = Sample(**{**s.__dict__, "ts": now, "arm": name})
            out.stale_s = round(now - eng[0], 3)
            out.reason = "from the gateway's /engine_metrics"
            return out
        if engine and fresh:
            # both: /engine_metrics was asked because the session wants the worker's counters and
            # histograms (smg_engine_* have none); this poll's smg_engine_* give the load as it is now
            live = _engine_load_sample(name, w, load, engine, now)
            return overlay_load(Sample(**{**eng[1].__dict__, "ts": now, "arm": name}), live, round(now - eng[0], 3))
        if engine:
            return _engine_load_sample(name, w, load, engine, now)
        if load is None:
            if w.healthy is False:  # smg 1.x lists no load for a worker it cannot reach
                return Sample(ts=now, arm=name, up=False, state="down", source="gateway", worker=w.url, role=w.role,
                              reason="the gateway marks it unhealthy and has no load of it")
            return None
        if load.load is None and not load.ranks:
            return Sample(ts=now, arm=name, up=False, state="down", source="gateway", worker=w.url, role=w.role,
                          reason="the gateway got no load from it either (/get_loads load -1)")
        s = Sample(ts=now, arm=name, up=True, state="up", source="gateway", worker=w.url, role=w.role,
                   gen_tok_s_gauge=load.gen_tok_s_gauge)
        if load.ranks:
            if len(load.ranks) > 1 or w.dp_size and w.dp_size > 1:
                with_ranks(s, load.ranks)
            else:
                r = load.ranks[0]
                s.running_reqs, s.queued_reqs = r.running_reqs, r.queued_reqs
                s.kv_used_tokens, s.kv_capacity_tokens, s.kv_usage = r.kv_used_tokens, r.kv_capacity_tokens, r.kv_usage
            s.reason = "from the gateway's /get_loads"
        else:
            s.reason = f"the gateway's /get_loads gives only its load: {load.load:,} tokens (running and queued)"
        return s

    async def _read_engine_metrics(self, answer: tuple, registry: list[RegistryWorker], now: float,
                                   only: Optional[set[str]] = None) -> None:
        status, body, problem = answer
        if status != 200:
            words = problem or f"HTTP {status}"
            self._engine_problem = (f"the gateway's {ENGINE_METRICS_PATH} answered {words}: worker figures come "
                                    "from specmon's own scrape of each worker")
            self._engine.clear()
            return
        try:
            # every worker's series at once: parsed in a thread (about 1 s for 12 workers on 2 cores),
            # so the session's ticks go on meanwhile
            per = await asyncio.to_thread(split_engine_metrics, body.decode("utf-8", errors="replace"), only)
        except (MetricsParseError, ValueError) as e:
            self._engine_problem = (f"the gateway's {ENGINE_METRICS_PATH} could not be read ({e}): worker figures "
                                    "come from specmon's own scrape of each worker")
            self._engine.clear()
            return
        self._engine_problem = None
        roles = {w.url: w for w in registry}
        for url, snap in per.items():
            w = roles.get(url)
            if w is None:
                continue
            c = self._collectors.get(url)
            if c is None:
                c = self._collectors[url] = ArmCollector(ArmSpec(name=worker_name(url), url=url),
                                                         transport=self._transport)
            s = c.read_snapshot(snap, now)
            if s is not None:
                s.source, s.worker, s.role = "gateway", url, w.role
                self._engine[url] = (now, s)

    async def _discover_metrics(self, registry: list[RegistryWorker]) -> Optional[GatewayMetrics]:
        """The gateway does not say where its metrics are: try its host at smg's default port,
        and keep that only when the series there name this gateway's workers."""
        self._discover_due = clock.wall() + 60.0
        u = urlsplit(self.url)
        host = u.hostname or ""
        candidate = f"http://{'[' + host + ']' if ':' in host else host}:{DEFAULT_METRICS_PORT}/metrics"
        if u.port == DEFAULT_METRICS_PORT:
            return None
        status, body, _ = await self._http.get(candidate, self._headers(), METRICS_MAX_BYTES)
        if status != 200:
            return None
        gm = parse_gateway_metrics(body.decode("utf-8", errors="replace"))
        mine = {w.url for w in registry}
        if not gm.is_gateway or not (gm.workers & mine) or not gm.workers <= mine:
            return None  # another gateway's metrics (or none): not these
        self.metrics_url = candidate
        return gm
