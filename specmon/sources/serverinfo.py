"""What a server says about itself: /server_info -> ArmInfo, /v1/loads -> live values.

/server_info echoes every ServerArgs field, including `api_key` in clear text (docs/field-notes.md, SGLang notes 3.2).
We copy named fields only, so the key never enters an ArmInfo, a CSV or session.json.

Any JSON value is accepted without an exception: a field of the wrong type or an odd number
(NaN, +-Inf, an integer past 2**63, a negative count) reads as unknown (None), and a body that
is not a JSON object reads as no information at all (None).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional

from specmon.model import ArmInfo, RankReading, kv_usage_of
from specmon.sources import sglang_names as names
from specmon.sources.prom import finite_sum

_INT_LIMIT = 2**63  # past any field SGLang reports; a bigger integer is not a reading


def json_body(body: bytes) -> Any:
    """The JSON value of a response body. ValueError (and nothing else) when it is not JSON;
    nesting too deep for the decoder counts as not JSON."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _int(v: Any) -> Optional[int]:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, float) and not math.isfinite(v):
        return None
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return i if -_INT_LIMIT <= i <= _INT_LIMIT else None


def _count(v: Any) -> Optional[int]:
    """A number of things (requests, tokens): a non-negative int, else None."""
    i = _int(v)
    return i if i is not None and i >= 0 else None


def _float(v: Any) -> Optional[float]:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def _rate(v: Any) -> Optional[float]:
    """A non-negative quantity (a usage, a throughput, an acceptance): else None."""
    f = _float(v)
    return f if f is not None and f >= 0 else None


def _str(v: Any) -> Optional[str]:
    if v is None or v == "" or isinstance(v, (dict, list)):
        return None
    return str(v)


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def arm_info_from_server_info(d: Any) -> Optional[ArmInfo]:
    """The ArmInfo of a /server_info JSON value; None when it is not a JSON object."""
    if not isinstance(d, dict):
        return None
    states = d.get("internal_states")
    st0 = _dict(states[0]) if isinstance(states, list) and states else {}
    mem = _dict(st0.get("memory_usage"))
    # The effective running-batch cap: SGLang resolves it (e.g. 48 under speculation) per DP rank.
    si = {k: n.aliases[0] for k, n in names.SERVER_INFO.items() if n.aliases}
    cap = _count(st0.get(si["max_running_requests"]))
    if cap is None:
        cap = _count(d.get(si["max_running_requests_flag"]))
    pool = _count(d.get(si["kv_capacity"]))
    if pool is None:
        pool = _count(mem.get(si["kv_capacity_mem"]))
    algo = _str(d.get("speculative_algorithm"))
    if algo is not None and algo.upper() in ("NONE", "NULL"):
        algo = None
    scale = _float(d.get("sim_speed"))
    return ArmInfo(
        model=_str(d.get("model_path")),
        served_model_name=_str(d.get("served_model_name")),
        version=_str(d.get("version")),
        tp_size=_int(d.get("tp_size")),
        speculative_algorithm=algo,
        speculative_num_steps=_int(d.get("speculative_num_steps")) if algo else None,
        speculative_eagle_topk=_int(d.get("speculative_eagle_topk")) if algo else None,
        speculative_num_draft_tokens=_int(d.get("speculative_num_draft_tokens")) if algo else None,
        speculative_draft_model_path=_str(d.get("speculative_draft_model_path")) if algo else None,
        kv_cache_dtype=_str(d.get("kv_cache_dtype")),
        quantization=_str(d.get("quantization")),
        mem_fraction_static=_float(d.get("mem_fraction_static")),
        max_total_tokens=_int(d.get("max_total_tokens")),
        kv_capacity_tokens=pool,
        max_running_requests=cap,
        chunked_prefill_size=_int(d.get(si["chunked_prefill_size"])),
        context_length=_int(d.get("context_length")),
        enable_metrics=d.get("enable_metrics") if isinstance(d.get("enable_metrics"), bool) else None,
        decode_log_interval=_int(d.get("decode_log_interval")),
        weight_gb=_float(mem.get("weight")),
        kv_cache_gb=_float(mem.get("kvcache")),
        graph_gb=_graph_gb(mem.get(names.SERVER_INFO["graph_mem"].in_release(names.NEWEST))),
        schedule_conservativeness=_conservativeness(st0.get(si["schedule_conservativeness"]),
                                                    d.get(si["schedule_conservativeness"])),
        startup_s=_startup_phases(d.get(names.SERVER_INFO["startup_time"].in_release(names.NEWEST))),
        time_scale=scale if scale is not None and scale > 0 else 1.0,
        simulated=isinstance(d.get("sim_profile"), str) and bool(d.get("sim_profile")),
    )


def _graph_gb(v: Any) -> Optional[float]:
    """Cuda-graph memory in GB: a number (0.5.10) or a dict by phase (0.5.23: prefill, decode,
    target_verify, draft_*), summed; None when no part is a number."""
    if isinstance(v, dict):
        parts = [f for f in map(_float, v.values()) if f is not None]
        return finite_sum(parts) if parts else None  # None too for parts that overflow
    return _float(v)


def _conservativeness(*candidates: Any) -> Optional[float]:
    """The scheduler's schedule_conservativeness (its own copy first: DP attention scales it);
    None when neither is a finite number >= 0."""
    for v in candidates:
        f = _float(v)
        if f is not None and math.isfinite(f) and f >= 0:
            return f
    return None


def _startup_phases(v: Any) -> Optional[dict[str, float]]:
    """0.5.23's /server_info startup_time: {phase: seconds}, a nested dict (cuda_graph by phase)
    summed into its phase; None when it holds no number (0.5.10 has no such key)."""
    if not isinstance(v, dict):
        return None
    out: dict[str, float] = {}
    for k, x in list(v.items())[:64]:
        f = _graph_gb(x)  # a number, or a dict of numbers summed
        if isinstance(k, str) and f is not None and f >= 0:
            out[k] = f
    return out or None


@dataclass
class LoadsReading:
    """The first DP rank of /v1/loads (values computed by the scheduler at call time)."""

    running: Optional[int]
    waiting: Optional[int]
    used_tokens: Optional[int]
    capacity_tokens: Optional[int]
    token_usage: Optional[float]
    gen_throughput: Optional[float]
    accept_length: Optional[float]  # lifetime mean since start (not windowed)
    accept_rate: Optional[float]
    max_running_requests: Optional[int]


def parse_loads(d: Any) -> Optional[LoadsReading]:
    """The first DP rank of a /v1/loads JSON value; None when it holds no load entry."""
    loads = d.get("loads") if isinstance(d, dict) else None
    if not isinstance(loads, list) or not loads or not isinstance(loads[0], dict):
        return None
    l0 = loads[0]
    spec = _dict(l0.get("speculative"))
    return LoadsReading(
        running=_count(l0.get("num_running_reqs")),
        waiting=_count(l0.get("num_waiting_reqs")),
        used_tokens=_count(l0.get("num_used_tokens")),
        capacity_tokens=_count(l0.get("max_total_num_tokens")),
        token_usage=_rate(l0.get("token_usage")),
        gen_throughput=_rate(l0.get("gen_throughput")),
        accept_length=_rate(spec.get("accept_length")),
        accept_rate=_rate(spec.get("accept_rate")),
        max_running_requests=_count(l0.get("max_running_requests")),
    )


def parse_loads_ranks(d: Any) -> list[RankReading]:
    """One RankReading per entry of /v1/loads that names its dp_rank (a server with DP ranks
    lists one per rank); [] for a server without DP ranks (one entry), or a value that holds no
    such entry."""
    loads = d.get("loads") if isinstance(d, dict) else None
    if not isinstance(loads, list):
        return []
    out: dict[int, RankReading] = {}
    for e in loads[:4096]:
        if not isinstance(e, dict):
            continue
        k = _count(e.get("dp_rank"))
        if k is None or k in out:
            continue
        used, cap = _count(e.get("num_used_tokens")), _count(e.get("max_total_num_tokens"))
        out[k] = RankReading(dp_rank=k, running_reqs=_count(e.get("num_running_reqs")),
                             queued_reqs=_count(e.get("num_waiting_reqs")), kv_used_tokens=used,
                             kv_capacity_tokens=cap, kv_usage=kv_usage_of(_rate(e.get("token_usage")), used, cap))
    # 0.5.23 writes dp_rank 0 in the one entry of a server without DP ranks: one rank is no
    # ranks (as /metrics, whose series carry no dp_rank there), never a second row per tick.
    return [out[k] for k in sorted(out)] if len(out) > 1 else []
