"""A gateway in front of SGLang workers: SGLang Model Gateway (`smg`, the `sglang-router` package).

Read-only, GETs only, from the gateway (`GatewayFleet.poll`, once a tick):
- `/workers`: the registry. `{"workers": [{"url", "worker_type": regular|prefill|decode,
  "is_healthy", "load", "bootstrap_port"?, "metadata": {...}}, ...], "total": N, "stats": {...}}`;
  under `--dp-aware` one entry per rank, `URL@RANK` (grouped back into one worker here);
- `/readiness`: `{"status": "ready", "healthy_workers": H, "total_workers": N}` (200) or 503;
- `/get_loads`: the gateway's fan-out to every worker, `{"workers": [{"worker": URL, "load": N}]}`
  (N tokens, -1 when the gateway got no answer); newer gateways add `"details": {"loads": [...]}`,
  one entry per DP rank in /v1/loads' shape;
- `/engine_metrics`: every worker's /metrics merged, each series labelled `worker_addr`; it
  answers 500 when two workers' families carry different label sets (a DP worker's dp_rank
  beside a worker without DP ranks, prefill and decode series), and then the workers' figures
  come from specmon's own scrapes only (said in the fleet's reason);
- the gateway's own Prometheus metrics, on their own port (`--prometheus-port`, 29000 by
  default): `smg_router_requests_total` (routed requests, a counter: routed req/s),
  `smg_worker_requests_active{worker}`, `smg_worker_health{worker}`, `smg_worker_cb_state{worker}`
  (0 closed, 1 open, 2 half_open; -1 once a worker is removed), `smg_worker_selection_total{policy}`
  (the routing policy, once a request has been routed). The gateway does not say where they are:
  `--gateway-metrics URL`, else the default port on the gateway's host is tried and taken only
  when its workers are this gateway's workers; unknown, the fleet's reason says so.

The parse functions are pure (bytes or JSON in, plain values out, never an exception), so they can
be fuzzed; `detect_gateway` tells a gateway from a plain SGLang server (which has no /workers).
"""


# One module per idea: urls and values (reading the gateway's URLs and values), registry (/workers,
# /readiness), loads (/get_loads), metrics (its own Prometheus series), engine (its figures for a
# worker: smg_engine_*, /engine_metrics), client (the GETs), probe (what answers at a URL) and
# fleet (GatewayFleet). The names below are this package's API, as the one module had them.
from specmon.sources.gateway.client import JSON_MAX_BYTES, METRICS_MAX_BYTES
from specmon.sources.gateway.engine import (
    ENGINE_METRICS_PATH, engine_sample, overlay_load, split_engine_metrics,
)
from specmon.sources.gateway.fleet import GatewayFleet
from specmon.sources.gateway.loads import LOADS_PATH, WorkerLoad, parse_loads
from specmon.sources.gateway.metrics import (
    CIRCUIT, DEFAULT_METRICS_PORT, ENGINE_SERIES, PD_SERIES, GatewayMetrics, parse_gateway_metrics,
)
from specmon.sources.gateway.probe import Probe, detect_gateway, is_sglang_metrics, probe
from specmon.sources.gateway.registry import (
    READINESS_PATH, REGISTRY_PATH, ROLES, Readiness, RegistryWorker, parse_readiness, parse_registry,
)
from specmon.sources.gateway.urls import base_url, worker_name

__all__ = [
    "CIRCUIT", "DEFAULT_METRICS_PORT", "ENGINE_METRICS_PATH", "ENGINE_SERIES", "JSON_MAX_BYTES", "LOADS_PATH",
    "METRICS_MAX_BYTES", "PD_SERIES", "READINESS_PATH", "REGISTRY_PATH", "ROLES", "GatewayFleet", "GatewayMetrics",
    "Probe", "Readiness", "RegistryWorker", "WorkerLoad", "base_url", "detect_gateway",
    "engine_sample", "is_sglang_metrics", "overlay_load", "parse_gateway_metrics", "parse_loads",
    "parse_readiness", "parse_registry", "probe", "split_engine_metrics", "worker_name",
]
