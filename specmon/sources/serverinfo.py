"""What a server says about itself: /server_info -> ArmInfo, /v1/loads -> live values.

/server_info echoes every ServerArgs field, including `api_key` in clear text (reference 3.2).
We copy named fields only, so the key never enters an ArmInfo, a CSV or session.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from specmon.model import ArmInfo


def _int(v: Any) -> Optional[int]:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _float(v: Any) -> Optional[float]:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _str(v: Any) -> Optional[str]:
    return None if v in (None, "") else str(v)


def arm_info_from_server_info(d: dict) -> ArmInfo:
    states = d.get("internal_states") or []
    st0 = states[0] if states and isinstance(states[0], dict) else {}
    mem = st0.get("memory_usage") or {}
    # The effective running-batch cap: SGLang resolves it (e.g. 48 under speculation) per DP rank.
    cap = _int(st0.get("effective_max_running_requests_per_dp"))
    if cap is None:
        cap = _int(d.get("max_running_requests"))
    pool = _int(d.get("max_total_num_tokens"))
    if pool is None:
        pool = _int(mem.get("token_capacity"))
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
        chunked_prefill_size=_int(d.get("chunked_prefill_size")),
        context_length=_int(d.get("context_length")),
        enable_metrics=d.get("enable_metrics") if isinstance(d.get("enable_metrics"), bool) else None,
        decode_log_interval=_int(d.get("decode_log_interval")),
        weight_gb=_float(mem.get("weight")),
        kv_cache_gb=_float(mem.get("kvcache")),
        graph_gb=_float(mem.get("graph")),
        time_scale=scale if scale and scale > 0 else 1.0,
    )


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


def parse_loads(d: dict) -> Optional[LoadsReading]:
    loads = d.get("loads")
    if not isinstance(loads, list) or not loads or not isinstance(loads[0], dict):
        return None
    l0 = loads[0]
    spec = l0.get("speculative") or {}
    return LoadsReading(
        running=_int(l0.get("num_running_reqs")),
        waiting=_int(l0.get("num_waiting_reqs")),
        used_tokens=_int(l0.get("num_used_tokens")),
        capacity_tokens=_int(l0.get("max_total_num_tokens")),
        token_usage=_float(l0.get("token_usage")),
        gen_throughput=_float(l0.get("gen_throughput")),
        accept_length=_float(spec.get("accept_length")),
        accept_rate=_float(spec.get("accept_rate")),
        max_running_requests=_int(l0.get("max_running_requests")),
    )
