"""SGLang's endpoints about the server rather than a generation: health, server and model info,
the model list, the scheduler's internal state (read through /server_info, reset through
/set_internal_state) and the prefix cache flush."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from specmon.servers.sim.server_args_defaults import INTERNAL_STATE_EXTRA
from specmon.servers.sim.server_args_defaults_0523 import EMBEDDING_INFO_0523, TOP_LEVEL_ONLY_0523

if TYPE_CHECKING:
    from specmon.servers.sim.app import SimState


class InfoApi:
    """The info, state and cache endpoints of one simulated server."""

    def __init__(self, st: SimState):
        self.st = st
        self.sched = st.sched

    async def health(self, request: Request):
        return Response(status_code=200 if self.st.ready else 503)

    def internal_state(self, s) -> dict:
        st = self.st
        d = dict(st.server_args)
        if st.new_shapes:
            for k in TOP_LEVEL_ONLY_0523:  # 0.5.23's scheduler copy leaves these out
                d.pop(k, None)
            d["world_size"] = st.cfg.args.tp_size
            d["startup_time"] = st.startup_time
            graphs = [k for k in st.server_args.get("cuda_graph_config", {}).get("decode", {}).get("bs", [])]
            d["decode_cuda_graph_bs"] = graphs
            d["decode_cuda_graph_memory_gb"] = round(st.graph_gb_by_phase.get("decode", st.ph.graph_gb), 3)
        else:
            d.update(INTERNAL_STATE_EXTRA)
        d["last_gen_throughput"] = s.last_gen_throughput
        d["memory_usage"] = {"weight": round(st.ph.weight_bytes / 1e9 + st.ph.draft_weight_bytes / 1e9, 2),
                             "kvcache": round(st.ph.kv_cache_gb, 2), "token_capacity": st.ph.max_total_tokens,
                             "graph": st.ph.graph_gb}
        if st.new_shapes:  # 0.5.23: graph memory by phase, the startup free memory, the SWA pool (none)
            d["memory_usage"] = {"weight": d["memory_usage"]["weight"], "kvcache": d["memory_usage"]["kvcache"],
                                 "startup_available": round(st.startup_available_gb, 3),
                                 "token_capacity": st.ph.max_total_tokens, "token_capacity_swa": None,
                                 "graph": {k: round(v, 3) for k, v in st.graph_gb_by_phase.items()}}
        d["effective_max_running_requests_per_dp"] = s.max_running_requests
        acc = s.lifetime_accept_length
        if acc is not None and s.decode_steps >= s.decode_log_interval:
            d["avg_spec_accept_length"] = acc
        return d

    async def server_info(self, request: Request):
        st = self.st
        info = dict(st.server_args)
        info.update({"status": "ready", "max_total_num_tokens": st.ph.max_total_tokens,
                     "max_req_input_len": min(st.ph.max_total_tokens - 1, st.ph.p.model.context_len) - 1,
                     "internal_states": [self.internal_state(s) for s in st.ranks], "version": st.version_string,
                     "sim_speed": st.clock.speed, "sim_profile": st.cfg.profile.name})
        if st.new_shapes:
            info["startup_time"] = st.startup_time
            info["launch_command"] = " ".join(getattr(st.cfg.args, "launch_argv", []))
        return JSONResponse(info)

    async def model_info(self, request: Request):
        st = self.st
        if st.new_shapes:  # 0.5.23's keys, in its order
            sa = st.server_args
            return JSONResponse({
                "model_path": st.cfg.model_path, "served_model_name": st.served_model_name,
                "tokenizer_path": st.cfg.model_path, "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default", "load_format": sa.get("load_format", "auto"),
                "reasoning_parser": sa.get("reasoning_parser"), "tool_call_parser": sa.get("tool_call_parser"),
                "disaggregation_mode": st.disagg_mode, "has_image_understanding": False,
                "has_audio_understanding": False, "model_type": "qwen3",
                "architectures": [st.ph.p.model.architecture], "embedding": dict(EMBEDDING_INFO_0523)})
        return JSONResponse({"model_path": st.cfg.model_path, "tokenizer_path": st.cfg.model_path,
                             "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                             "has_image_understanding": False, "has_audio_understanding": False,
                             "model_type": "qwen3", "architectures": [st.ph.p.model.architecture]})

    async def models(self, request: Request):
        st = self.st
        return JSONResponse({"object": "list", "data": [{
            "id": st.served_model_name, "object": "model", "created": int(st.started_epoch), "owned_by": "sglang",
            "root": st.served_model_name, "parent": None, "max_model_len": st.ph.p.model.context_len}]})

    async def flush_cache(self, request: Request):
        st, sched = self.st, self.sched
        timeout = request.query_params.get("timeout")
        if timeout is not None:
            try:
                deadline = time.monotonic() + float(timeout)
            except ValueError:
                deadline = time.monotonic()
            while not sched.is_idle() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        if not sched.is_idle():
            st.log.warning(f"Cache not flushed because there are pending requests. "
                           f"#queue-req: {len(sched.waiting)}, #running-req: {len(sched.running)}")
            return PlainTextResponse("Cache not flushed. Please check backend logs for more details. "
                                     "(When there are running or waiting requests, the operation will not be performed.)\n",
                                     status_code=400)
        sched.flush_prefix_cache()
        st.log.info("Cache flushed successfully!")
        return Response("Cache flushed.\nPlease check backend logs for more details. "
                        "(When there are running or waiting requests, the operation will not be performed.)\n")

    async def set_internal_state(self, request: Request):
        self.sched.lifetime_verify = 0
        self.sched.lifetime_spec_tokens = 0
        return JSONResponse({"updated": True, "server_args": self.st.server_args})
