"""SGLang's load reports: /v1/loads (one entry a DP rank, in 0.5.10's or 0.5.23's shape, as JSON
or Prometheus text) and 0.5.10's deprecated /get_load."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse

from specmon.servers.sim.dp import DPScheduler

if TYPE_CHECKING:
    from specmon.servers.sim.app import SimState


class LoadsApi:
    """GET /v1/loads and /get_load for one simulated server."""

    def __init__(self, st: SimState):
        self.st = st
        self.sched = st.sched

    def rates(self, sched) -> dict:
        """The pool's fill and the rates, in the order both versions list them (the rates read 0
        without --enable-metrics)."""
        metrics = self.st.enable_metrics
        return {"token_usage": round(sched.token_usage, 4),
                "gen_throughput": round(sched.last_gen_throughput, 2) if metrics else 0.0,
                "cache_hit_rate": round(sched.last_cache_hit_rate, 4) if metrics else 0.0,
                "utilization": 0.0}

    def sections(self, include: set, sched, *, gb_digits: int, prefill_queue: str, more_queues: dict) -> dict:
        """The sections ?include= asks for. The versions differ only in the memory figures' digits,
        the name of the prefill's first disaggregation queue and 0.5.23's extra queue counts."""
        st = self.st
        e = {}
        if "memory" in include:
            e["memory"] = {"weight_gb": round(st.ph.weight_bytes / 1e9, gb_digits),
                           "kv_cache_gb": round(st.ph.kv_cache_gb, gb_digits),
                           "graph_gb": st.ph.graph_gb, "token_capacity": st.ph.max_total_tokens}
        if "spec" in include and sched.lifetime_accept_length is not None \
                and sched.decode_steps >= sched.decode_log_interval:
            e["speculative"] = {"accept_length": sched.lifetime_accept_length,
                                "accept_rate": sched.last_spec_accept_rate if st.enable_metrics else 0.0}
        if "disagg" in include:
            e["disaggregation"] = {"mode": st.disagg_mode, prefill_queue: 0, "prefill_inflight_queue_reqs": 0,
                                   "decode_prealloc_queue_reqs": 0, "decode_transfer_queue_reqs": 0,
                                   "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0,
                                   "kv_transfer_latency_ms": 0.0}
        if "queues" in include:
            e["queues"] = {"waiting": len(sched.waiting), "grammar": 0, "paused": 0, "retracted": 0, **more_queues}
        return e

    def loads_entry(self, include: set, sched, dp_rank: Optional[int]) -> dict:
        # One DP rank's scheduler, as SGLang reports it (dp_rank left out for a server without DP ranks).
        if self.st.new_shapes:
            return self.loads_entry_0523(include, sched, dp_rank or 0)
        e = {} if dp_rank is None else {"dp_rank": dp_rank}
        e.update({"num_running_reqs": len(sched.running), "num_waiting_reqs": len(sched.waiting),
                  "num_used_tokens": sched.num_used_tokens, "max_total_num_tokens": sched.max_total_tokens,
                  **self.rates(sched), "max_running_requests": sched.max_running_requests})
        e.update(self.sections(include, sched, gb_digits=2, prefill_queue="prefill_prealloc_queue_reqs",
                               more_queues={}))
        e["num_total_reqs"] = len(sched.running) + len(sched.waiting)
        return e

    def loads_entry_0523(self, include: set, sched, dp_rank: int) -> dict:
        # 0.5.23: every rank says its dp_rank and stamp; token counts from the pool and the queue.
        st = self.st
        used = sched.num_used_tokens
        pending = sched.pending_tokens
        run = sched.running
        e = {"timestamp": st.clock.epoch(st.clock.now()), "dp_rank": dp_rank,
             "num_running_reqs": len(run), "num_waiting_reqs": len(sched.waiting),
             "num_waiting_uncached_tokens": pending, "num_used_tokens": used,
             "num_total_tokens": used + pending, "num_active_tokens": used + pending,
             "num_prealloc_ready_tokens": 0, "max_total_num_tokens": sched.max_total_tokens,
             "max_running_requests": sched.max_running_requests, **self.rates(sched),
             "total_prefill_uncached_tokens": sched.total_prefill_uncached_tokens,
             "total_prefill_busy_us": int(sched.total_prefill_busy_s * 1e6),
             "decode_moments": list(sched.decode_moment_totals) if sched.decode_moment_totals[0] > 0 else None}
        e.update(self.sections(include, sched, gb_digits=3, prefill_queue="prefill_bootstrap_queue_reqs",
                               more_queues={"prealloc_ready": 0}))
        return e

    async def v1_loads(self, request: Request):
        st = self.st
        t0 = time.perf_counter()
        try:
            return await self._v1_loads(request)
        finally:
            if st.enable_metrics and st.metrics is not None:
                st.metrics.observe_get_loads(time.perf_counter() - t0)

    async def _v1_loads(self, request: Request):
        st = self.st
        inc = request.query_params.get("include", "all")
        include = {x.strip() for x in inc.split(",")}
        if "all" in include:
            include = {"core", "memory", "spec", "lora", "disagg", "queues"}
        multi = isinstance(self.sched, DPScheduler)
        entries = [self.loads_entry(include, s, k if multi else None) for k, s in enumerate(st.ranks)]
        want = request.query_params.get("dp_rank")
        if want is not None:
            try:
                k = int(want)
            except ValueError:
                return JSONResponse({"detail": [{"type": "int_parsing", "loc": ["query", "dp_rank"],
                                                 "msg": "Input should be a valid integer, unable to parse string "
                                                        "as an integer", "input": want}]}, status_code=422)
            entries = [e for e in entries if e.get("dp_rank") == k]
        if request.query_params.get("format") == "prometheus":
            lines = []
            for e in entries:
                rank = e.get("dp_rank")
                for k, v in e.items():
                    if k == "dp_rank":
                        continue
                    if isinstance(v, dict):
                        for k2, v2 in v.items():
                            if isinstance(v2, (int, float)) and not isinstance(v2, bool):
                                lines.append(f'sglang_{k}_{k2}{{dp_rank="{rank}"}} {v2}')
                    elif isinstance(v, (int, float)):
                        lines.append(f'sglang_{k}{{dp_rank="{rank}"}} {v}')
            return PlainTextResponse("\n".join(lines) + "\n")
        n = len(entries)
        if st.new_shapes:  # 0.5.23: no aggregate, no rank count; the accelerator instead
            return JSONResponse({"timestamp": datetime.now(timezone.utc).isoformat(), "version": st.version_string,
                                 "accelerator": st.ph.p.gpu.name,
                                 "num_accelerators": st.cfg.args.tp_size, "loads": entries})  # per DP rank, as SGLang counts
        return JSONResponse({
            "timestamp": datetime.now(timezone.utc).isoformat(), "version": st.version_string, "dp_rank_count": n,
            "loads": entries,
            "aggregate": {"total_running_reqs": sum(e["num_running_reqs"] for e in entries),
                          "total_waiting_reqs": sum(e["num_waiting_reqs"] for e in entries),
                          "total_reqs": sum(e["num_total_reqs"] for e in entries),
                          "avg_token_usage": round(sum(e["token_usage"] for e in entries) / n, 4) if n else 0.0,
                          "avg_throughput": round(sum(e["gen_throughput"] for e in entries) / n, 2) if n else 0.0,
                          "avg_utilization": 0.0}})

    async def get_load(self, request: Request):
        st = self.st
        if st.new_shapes:  # gone in 0.5.23
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        st.log.warning("The /get_load endpoint is deprecated; use /v1/loads.")
        multi = isinstance(self.sched, DPScheduler)
        return JSONResponse([{"rid": None, "http_worker_ipc": None, "dp_rank": k if multi else None,
                              "num_reqs": len(s.running) + len(s.waiting),
                              "num_waiting_reqs": len(s.waiting),
                              "num_tokens": s.num_used_tokens + sum(r.prompt_len for r in s.waiting),
                              "ts_tic": time.perf_counter()} for k, s in enumerate(st.ranks)])
