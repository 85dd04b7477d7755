"""Readings that cannot be true are unknown, not recorded: one pass over every Sample and GPU
reading of a tick, whatever source filled it (a worker's /metrics, /v1/loads, a gateway, a
Prometheus fleet, a server's log, NVML or a simulated card), before the front ends and the
session folder see it.

KV usage has its own rule (model.kv_usage_of: the other figure is tried first); here the rest:
a share (accept rate, prefix-cache hit rate, scheduler busy share) outside 0-1, a GPU
utilization outside 0-100 %, an acceptance length outside 1-MAX_ACCEPT_LENGTH tokens, a CPU
share, power or rate that is negative or not finite. A misbehaving exporter wrote 5,500 % and
1e+308; such a cell is left empty rather than drawn or averaged into a level.
"""

from __future__ import annotations

import math
from typing import Optional

from specmon.model import MAX_KV_USAGE, GpuSnapshot, Sample

MAX_ACCEPT_LENGTH = 256.0  # tokens per verify step: draft trees this deep do not exist

_SHARES = ("accept_rate", "cache_hit_rate", "scheduler_busy_share")
_NONNEG = ("gen_tok_s", "gen_tok_s_gauge", "server_cpu_pct", "gpu_power_w", "retractions_per_s",
           "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "ttft_mean_s", "queue_time_p50_s", "queue_time_mean_s",
           "itl_mean_s", "scrape_s", "stale_s")


def _within(v: Optional[float], lo: float, hi: float) -> Optional[float]:
    if v is None:
        return None
    try:
        return v if math.isfinite(v) and lo <= v <= hi else None
    except TypeError:
        return None


def sane_sample(s: Sample) -> Sample:
    """`s` with every impossible figure made unknown (in place; returned for chaining)."""
    for name in _SHARES:
        setattr(s, name, _within(getattr(s, name), 0.0, 1.0))
    for name in _NONNEG:
        setattr(s, name, _within(getattr(s, name), 0.0, math.inf))
    s.kv_usage = _within(s.kv_usage, 0.0, MAX_KV_USAGE)
    s.accept_length = _within(s.accept_length, 1.0, MAX_ACCEPT_LENGTH)
    for r in s.ranks or ():
        r.kv_usage = _within(r.kv_usage, 0.0, MAX_KV_USAGE)
    return s


def sane_gpus(snap: Optional[GpuSnapshot]) -> Optional[GpuSnapshot]:
    """Each GPU's utilization within 0-100 %, its power and temperature finite and not negative."""
    for g in snap.gpus if snap is not None else ():
        g.util_pct = _within(g.util_pct, 0.0, 100.0)
        g.power_w = _within(g.power_w, 0.0, math.inf)
        g.temp_c = _within(g.temp_c, -273.15, math.inf)
    return snap
