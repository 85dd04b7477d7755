"""The gateway's own Prometheus metrics (its --prometheus-port): routed requests, requests per
worker, worker health and circuit states, the routing policy, smg 1.x's smg_engine_* loads and
smg_pd_* timings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from specmon.sources.gateway.urls import base_url
from specmon.sources.gateway.values import _count
from specmon.sources.prom import MetricsParseError, plain_sample, slow_series

DEFAULT_METRICS_PORT = 29000  # smg's --prometheus-port default
CIRCUIT = {0: "closed", 1: "open", 2: "half_open"}
# smg 1.x re-exports each worker's load, per DP rank, as its load monitor last read it (labels
# worker, model, dp_rank): what stands in for a worker specmon cannot reach, from the one scrape
ENGINE_SERIES = {"smg_engine_running_requests": "running", "smg_engine_waiting_requests": "waiting",
                 "smg_engine_token_usage": "token_usage", "smg_engine_gen_throughput": "gen_tok_s"}
# smg 1.x's PD timing, histograms only a PD gateway sees (seconds): their _sum and _count
PD_SERIES = {"smg_pd_ttft_seconds": "ttft", "smg_pd_prefill_duration_seconds": "prefill",
             "smg_pd_decode_ttft_seconds": "decode_ttft", "smg_pd_kv_transfer_duration_seconds": "kv_transfer"}
_READ_SERIES = frozenset(("smg_router_requests_total", "smg_worker_requests_active", "smg_worker_health",
                          "smg_worker_cb_state", "smg_worker_selection_total", *ENGINE_SERIES,
                          *(n + "_sum" for n in PD_SERIES), *(n + "_count" for n in PD_SERIES)))
# what parse_gateway_metrics reads


@dataclass
class GatewayMetrics:
    """The gateway's own Prometheus series that the fleet header shows."""

    routed_total: Optional[float] = None  # smg_router_requests_total summed over its labels
    active: dict[str, int] = field(default_factory=dict)  # worker base URL -> requests routed, not finished
    health: dict[str, bool] = field(default_factory=dict)
    circuit: dict[str, str] = field(default_factory=dict)
    policies: list[str] = field(default_factory=list)
    workers: set[str] = field(default_factory=set)  # workers with a live health series (whose metrics these are)
    is_gateway: bool = False  # any smg_ series at all
    # smg_engine_*: worker base URL -> DP rank -> {"running"|"waiting"|"token_usage"|"gen_tok_s": value}
    engine: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    # smg_pd_*: "ttft"|"prefill"|... -> (sum of seconds, count), summed over their label sets
    pd: dict[str, tuple[float, float]] = field(default_factory=dict)


def parse_gateway_metrics(text: str) -> GatewayMetrics:
    """The gateway's /metrics text; lines it cannot read are skipped (never an exception)."""
    m = GatewayMetrics()
    routed = []
    for line in text.splitlines()[:200_000]:
        if not line.startswith("smg_"):
            continue
        if m.is_gateway:
            # Most of smg's lines are series not read here (request-duration buckets, circuit
            # outcome counters: ~2/3 of a 64-worker gateway's): past the first readable smg_ line
            # (is_gateway) they are skipped by name, as the word-by-word reading names them,
            # before anything is parsed.
            head = line.split("{", 1)[0] if "{" in line else line.partition(" ")[0]
            if head.strip() not in _READ_SERIES:
                continue
        # the plain form (no escapes, no timestamp) read once per name{labels}; else word by word
        plain = plain_sample(line)
        name, labels, value = plain if plain is not None else _odd_sample(line)
        if name is None:
            continue
        m.is_gateway = True
        if name == "smg_router_requests_total":
            if math.isfinite(value) and value >= 0:
                routed.append(value)
            continue
        if name == "smg_worker_selection_total":
            p = labels.get("policy")
            if p and p not in m.policies and len(m.policies) < 8:
                m.policies.append(p[:64])
            continue
        if name.startswith("smg_pd_"):
            base, _, part = name.rpartition("_")
            key = PD_SERIES.get(base)
            if key is not None and part in ("sum", "count") and math.isfinite(value) and value >= 0:
                total, n = m.pd.get(key, (0.0, 0.0))
                m.pd[key] = (total + value, n) if part == "sum" else (total, n + value)
            continue
        url = base_url(labels.get("worker", "")) if "worker" in labels else None
        if url is None or not math.isfinite(value):
            continue
        if name in ENGINE_SERIES:
            rank = _count(labels.get("dp_rank", "0") or "0")
            if rank is not None and value >= 0 and len(m.engine) < 100_000:
                m.engine.setdefault(url, {}).setdefault(rank, {})[ENGINE_SERIES[name]] = value
            continue
        if name == "smg_worker_requests_active":
            if value >= 0:
                m.active[url] = m.active.get(url, 0) + int(value)
        elif name == "smg_worker_health":
            if value >= 0:  # -1: removed from the gateway
                m.workers.add(url)
                m.health[url] = value > 0
        elif name == "smg_worker_cb_state":
            state = CIRCUIT.get(int(value)) if value >= 0 and value.is_integer() else None
            if state is not None:
                m.circuit[url] = state
    # The counter appears with the first routed request: readable metrics without it routed none yet.
    m.routed_total = sum(routed) if routed else (0.0 if m.is_gateway else None)
    return m


def _odd_sample(line: str) -> tuple[Optional[str], dict[str, str], float]:
    """(name, labels, value) of a line not in the plain form (escaped labels, a timestamp), as
    prometheus_client's parser reads it; (None, {}, nan) where it cannot."""
    try:
        series = slow_series(line + "\n")
    except MetricsParseError:
        return None, {}, math.nan
    for name, rows in series.items():
        labels, value = rows[0]
        return name, labels, value
    return None, {}, math.nan
