"""The ServerArgs dict of /server_info, resolved the way SGLang resolves it for this profile."""

from __future__ import annotations

import copy
import random

from specmon.servers.sim.server_args_defaults import SERVER_ARGS_DEFAULTS
from specmon.servers.sim.server_args_defaults_0523 import SERVER_ARGS_DEFAULTS_0523


def build_server_args(cfg, ph) -> dict:
    a, p = cfg.args, cfg.profile
    new = getattr(a, "sglang_version", "0.5.23") != "0.5.10"
    d = copy.deepcopy(SERVER_ARGS_DEFAULTS_0523 if new else SERVER_ARGS_DEFAULTS)
    spec = p.drafter
    quant = a.ignored_quantization or p.quantization
    d.update({
        "model_path": cfg.model_path,
        "tokenizer_path": cfg.model_path,
        "served_model_name": cfg.served_model_name,
        "host": a.host,
        "port": a.port,
        "device": a.ignored_device or "cuda",
        "load_format": a.ignored_load_format or "auto",
        "trust_remote_code": bool(a.ignored_trust_remote_code),
        "skip_server_warmup": bool(a.ignored_skip_server_warmup),
        "quantization": quant,
        "kv_cache_dtype": p.kv_cache_dtype,
        "mem_fraction_static": p.mem_fraction_static,
        "max_total_tokens": p.max_total_tokens,
        "max_running_requests": ph.max_running_requests if (a.max_running_requests or spec.algorithm) else None,
        "chunked_prefill_size": p.chunked_prefill_size,
        "max_prefill_tokens": p.max_prefill_tokens,
        "attention_backend": a.ignored_attention_backend or p.attention_backend,
        "tp_size": a.tp_size,
        "random_seed": random.Random(a.seed).randrange(10 ** 9),
        "enable_metrics": bool(a.enable_metrics),
        "decode_log_interval": a.decode_log_interval,
        "api_key": a.api_key,
        "log_level": a.ignored_log_level or "info",
        "speculative_algorithm": spec.algorithm,
        "speculative_draft_model_path": (spec.draft_model_path or cfg.model_path) if spec.algorithm else None,
        "speculative_num_steps": spec.num_steps if spec.algorithm else None,
        "speculative_eagle_topk": spec.eagle_topk if spec.algorithm else None,
        "speculative_num_draft_tokens": spec.num_draft_tokens if spec.algorithm else None,
        "disable_overlap_schedule": bool(spec.algorithm),
        "disable_radix_cache": bool(a.disable_radix_cache),
        "enable_cache_report": bool(a.enable_cache_report),
        "export_metrics_to_file": bool(getattr(a, "export_metrics_to_file", False)),
        "export_metrics_to_file_dir": getattr(a, "export_metrics_to_file_dir", None),
        "dp_size": a.dp_size,
        "enable_metrics_for_all_schedulers": bool(a.enable_metrics_for_all_schedulers),
        "disaggregation_mode": a.disaggregation_mode,
        "disaggregation_bootstrap_port": a.disaggregation_bootstrap_port,
        "disaggregation_transfer_backend": a.disaggregation_transfer_backend,
        # SGLang resolves its "auto": a PD prefill follows the bootstrap room, the rest round-robin.
        "load_balance_method": "follow_bootstrap_room" if a.disaggregation_mode == "prefill" else "round_robin",
        "cuda_graph_max_bs": 48 if spec.algorithm else 256,
        "context_length": None,
    })
    d.pop("cuda_graph_bs", None)
    d["cuda_graph_bs"] = list(range(1, 9)) + list(range(10, (d["cuda_graph_max_bs"] or 8) + 1, 2))
    if new:
        # 0.5.23: the decode graphs' sizes live in cuda_graph_config (the per-phase flags stay
        # None unless given); the two 0.5.10 keys are gone.
        dec = d["cuda_graph_config"].setdefault("decode", {})
        dec["max_bs"] = d.pop("cuda_graph_max_bs")
        dec["bs"] = d.pop("cuda_graph_bs")
    return d
