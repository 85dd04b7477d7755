"""The HTTP side: the state the handlers share, SGLang's endpoints routed on Starlette (the
handlers live in native_api, openai_api, info_api and loads_api), /metrics, and pure-ASGI
middlewares for the API key, the HTTP metrics, the request log and the 503 fault
(BaseHTTPMiddleware would buffer streams)."""

from __future__ import annotations

import asyncio
import hmac
import json
import random
import re
import time
from typing import Optional

from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route

from specmon.servers.sim.dp import DPScheduler, routed_rank
from specmon.servers.sim.engine import Scheduler, SimRequest
from specmon.servers.sim.info_api import InfoApi
from specmon.servers.sim.loads_api import LoadsApi
from specmon.servers.sim.native_api import NativeApi
from specmon.servers.sim.openai_api import OpenAIApi
from specmon.servers.sim.stablehash import stable_hash
from specmon.servers.sim.tokens import TokenCounter

VERSION = "0.5.10.post1"  # --sglang-version 0.5.10; SimState.version_string says which one a server speaks

_WIRE_ID = re.compile(rb'"id":\s*"([^"]+)"')  # the rid in a /generate chunk's meta_info


class SimState:
    """Everything the handlers share."""

    def __init__(self, *, cfg, physics, scheduler: Scheduler, clock, metrics, server_args: dict,
                 logger):
        self.cfg = cfg
        self.ph = physics
        self.sched = scheduler
        self.clock = clock
        self.metrics = metrics
        self.server_args = server_args
        self.log = logger
        self.tokens = TokenCounter(cfg.model_path)  # text prompts: the model's tokenizer or an estimate
        self.ready = False
        self.in_flight = 0
        self.served_model_name = cfg.served_model_name
        a = cfg.args
        self.enable_metrics = bool(a.enable_metrics)
        self.enable_cache_report = bool(a.enable_cache_report)
        self.api_key: Optional[str] = a.api_key
        self.spec = bool(physics.p.drafter.algorithm)
        self.num_draft_tokens = physics.num_draft_tokens
        self.started_epoch = time.time()
        self.seed = int(a.seed)
        self.rid_rng = random.Random(stable_hash(self.seed, "rid"))
        self.disagg_mode = a.disaggregation_mode  # "null" | "prefill" | "decode"
        from specmon.servers.sim.config import SGLANG_VERSION_STRINGS
        self.sglang_version = getattr(a, "sglang_version", "0.5.23")  # "0.5.23" | "0.5.10"
        self.new_shapes = self.sglang_version != "0.5.10"
        self.version_string = SGLANG_VERSION_STRINGS[self.sglang_version]
        # Filled by main.py once the simulated startup ran (0.5.23's startup_time and gauges).
        self.startup_time: dict = {}
        self.startup_available_gb = 0.0
        self.graph_gb_by_phase: dict = {}
        self.rank_metrics: list = []
        self._bootstrap_seen: dict = {}  # decode: (host, port) -> None (answered) or the failure

    @property
    def ranks(self) -> list:
        """The DP ranks' schedulers (one for a server without --dp-size)."""
        return self.sched.ranks if isinstance(self.sched, DPScheduler) else [self.sched]

    async def bootstrap_problem(self, body: dict) -> Optional[str]:
        """A PD decode asks the prefill's bootstrap server for its parallel layout before it can
        take a request's KV (SGLang's KV receiver: GET /route with every rank -1). None: it
        answered (once per prefill), else why it did not."""
        host, port = body.get("bootstrap_host"), body.get("bootstrap_port")
        if self.disagg_mode != "decode" or host is None:
            return None
        if isinstance(host, list):
            host = host[0] if host else None
        if isinstance(port, list):
            port = port[0] if port else None
        if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
            return f"no usable bootstrap address (bootstrap_host={host!r}, bootstrap_port={port!r})"
        key = (host, port)
        if self._bootstrap_seen.get(key, "unasked") is None:
            return None
        import httpx

        url = f"http://{host}:{port}/route"
        try:
            async with httpx.AsyncClient(timeout=5.0, trust_env=False) as c:
                r = await c.get(url, params={"prefill_dp_rank": -1, "prefill_cp_rank": -1,
                                             "target_tp_rank": -1, "target_pp_rank": -1})
            problem = None if r.status_code == 200 else f"{url} answered HTTP {r.status_code}"
        except httpx.HTTPError as e:
            problem = f"{url}: {type(e).__name__} {e}".strip()
        self._bootstrap_seen[key] = problem
        return None if problem is None else f"Failed to get prefill server info from the bootstrap server: {problem}"

    def submit(self, r: SimRequest, body: dict) -> None:
        if isinstance(self.sched, DPScheduler):
            self.sched.submit(r, routed_rank(body))
        else:
            self.sched.submit(r)


def build_app(st: SimState) -> Starlette:
    """SGLang's routes over the handlers of native_api, openai_api, info_api and loads_api, the
    simulator's own GPU route and, with --enable-metrics, /metrics."""
    native, oai, info, loads = NativeApi(st), OpenAIApi(st), InfoApi(st), LoadsApi(st)
    routes = [
        Route("/generate", native.generate, methods=["POST", "PUT"]),
        Route("/v1/completions", oai.completions, methods=["POST"]),
        Route("/v1/chat/completions", oai.chat_completions, methods=["POST"]),
        Route("/health", info.health, methods=["GET"]),
        Route("/health_generate", info.health, methods=["GET"]),
        Route("/server_info", info.server_info, methods=["GET"]),
        Route("/get_server_info", info.server_info, methods=["GET"]),
        Route("/model_info", info.model_info, methods=["GET"]),
        Route("/get_model_info", info.model_info, methods=["GET"]),
        Route("/v1/models", info.models, methods=["GET"]),
        Route("/v1/loads", loads.v1_loads, methods=["GET"]),
        Route("/get_load", loads.get_load, methods=["GET"]),
        Route("/flush_cache", info.flush_cache, methods=["GET", "POST"]),
        Route("/set_internal_state", info.set_internal_state, methods=["POST", "PUT"]),
    ]
    # The simulator's own (SGLang has no such endpoint): the GPU it simulates (gpu.py).
    from specmon.servers.sim.gpu import make_route as simulated_gpu_route
    routes.append(simulated_gpu_route(st))
    if st.enable_metrics and st.metrics is not None:
        mount = Mount("/metrics", app=metrics_app(st))
        # As SGLang does: serve /metrics itself, not only /metrics/ (no redirect).
        mount.path_regex = re.compile("^/metrics(?P<path>.*)$")
        routes.append(mount)
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_found})
    return app


async def _not_found(request, exc):
    detail = "Method Not Allowed" if exc.status_code == 405 else "Not Found"
    headers = getattr(exc, "headers", None)
    return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)


def metrics_app(st: SimState):
    import prometheus_client

    inner = prometheus_client.make_asgi_app(st.metrics.registry)
    fault = st.cfg.args.fault_metrics

    async def app(scope, receive, send):
        if fault == "absent":
            await PlainTextResponse("Not Found", status_code=404)(scope, receive, send)
            return
        if fault == "slow":
            await asyncio.sleep(5.0)
        if fault == "malformed":
            body = b"# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{engine_type=\"unified\" 12.0.0\n\x00garbage {{{\n"
            await Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")(scope, receive, send)
            return
        await inner(scope, receive, send)

    return app


ARRIVAL_KEY = "specmon.sim.t_arrival"


def arrival_stamping_protocol():
    """uvicorn's h11 protocol (named, not left to uvicorn, which would pick httptools where it is
    installed, as specmon's load client needs it: h11 keeps the connection's state this reads), which
    stamps each request with the wall time the event loop read its first bytes, in the scope
    under ARRIVAL_KEY. The app's own first stamp comes later: uvicorn makes a task per request
    and the loop runs it after whatever it was doing, at a level's first wave after C other
    requests' parsing and every stream's chunks (the wire log keeps both stamps)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ArrivalStampingH11(H11Protocol):
        _t_first: Optional[float] = None

        def data_received(self, data: bytes) -> None:
            t = time.time()
            # The bytes begin a request when the connection is between requests (h11 stays IDLE
            # until the whole head is parsed: a head split over reads keeps its first stamp).
            if self._t_first is None and self.conn.their_state is h11.IDLE:
                self._t_first = t
            before = self.scope
            super().data_received(data)
            if self.scope is not before and self.scope is not None:
                self.scope[ARRIVAL_KEY] = self._t_first if self._t_first is not None else t
                self._t_first = None

    return ArrivalStampingH11


def wrap_middlewares(app, st: SimState):
    """Outermost first: request log, HTTP metrics, API key, overload 503."""
    request_log = st.cfg.args.request_log
    api_key = st.api_key
    limit_503 = st.cfg.args.fault_503_above
    m = st.metrics if st.enable_metrics else None
    gen_paths = {"/generate", "/v1/completions", "/v1/chat/completions"}
    log_fh = open(request_log, "a", buffering=1) if request_log else None
    wire_fh = open(st.cfg.args.wire_log, "a", buffering=1) if st.cfg.args.wire_log else None
    from specmon.servers.sim.config import coalesce_steps
    coalesce = coalesce_steps(st.cfg.args.speed)  # decode steps one chunk may hold (engine._deliver)

    async def asgi(scope, receive, send):
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if log_fh is not None:
            log_fh.write(f"{method} {path}\n")
        if api_key and method != "OPTIONS" and not (path.startswith("/health") or path.startswith("/metrics")):
            auth = ""
            for k, v in scope.get("headers", []):
                if k == b"authorization":
                    auth = v.decode("latin-1")
                    break
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
                await _count(m, path, method, 401,
                             JSONResponse({"error": "Unauthorized"}, status_code=401), scope, receive, send)
                return
        if limit_503 is not None and path in gen_paths and st.in_flight >= limit_503:
            await _count(m, path, method, 503, JSONResponse(
                {"object": "error", "message": "The server is overloaded (simulated fault).",
                 "type": "ServiceUnavailableError", "param": None, "code": 503}, status_code=503),
                scope, receive, send)
            return
        is_gen = path in gen_paths
        if is_gen:
            st.in_flight += 1
        status = {"code": 500}
        # Wall-clock wire stamps (time.time(), the clock a client on this host reads): when the
        # event loop read the request's first bytes (t_arrival, arrival_stamping_protocol), when
        # it reached this app (t_in) and each moment a body chunk was handed to the socket.
        # Ground truth for a client's timing that leaves out the scheduler-to-socket path and the
        # body parse, which SGLang's own *_ts stamps do not cover.
        wire = {"t_arrival": scope.get(ARRIVAL_KEY), "t_in": time.time(), "first": None, "last": None,
                "last_token": None, "bodies": 0, "rid": None} \
            if (wire_fh is not None and is_gen) else None

        async def send_wrap(msg):
            if msg["type"] == "http.response.start":
                status["code"] = msg["status"]
            await send(msg)
            if wire is not None and msg["type"] == "http.response.body" and msg.get("body"):
                t = time.time()
                if wire["first"] is None:
                    wire["first"] = t
                    found = _WIRE_ID.search(msg["body"])
                    wire["rid"] = found.group(1).decode() if found else None
                wire["last"] = t
                if not msg["body"].startswith(b"data: [DONE]"):
                    wire["last_token"] = t
                wire["bodies"] += 1

        if m is not None:
            m.http_requests_total.labels(endpoint=path, method=method).inc()
            active = m.http_requests_active.labels(endpoint=path, method=method)
            active.inc()
        try:
            await app(scope, receive, send_wrap)
        finally:
            if is_gen:
                st.in_flight -= 1
            if wire is not None:
                wire_fh.write(json.dumps({"path": path, "status": status["code"], "rid": wire["rid"],
                                          "t_arrival": wire["t_arrival"],
                                          "t_in": wire["t_in"], "t_first_body": wire["first"],
                                          "t_last_token_body": wire["last_token"], "t_last_body": wire["last"],
                                          "bodies": wire["bodies"], "coalesce_steps": coalesce}) + "\n")
            if m is not None:
                active.dec()
                m.http_responses_total.labels(endpoint=path, method=method, status_code=str(status["code"])).inc()

    return asgi


async def _count(m, path, method, code, response, scope, receive, send):
    if m is not None:
        m.http_requests_total.labels(endpoint=path, method=method).inc()
        m.http_responses_total.labels(endpoint=path, method=method, status_code=str(code)).inc()
    await response(scope, receive, send)
