"""SGLang's Prometheus families (0.5.23's, or 0.5.10.post1's with --sglang-version 0.5.10), served the way SGLang serves them:
prometheus_client in multiprocess mode (mmap files in a private temp dir, read back by a
MultiProcessCollector into a dedicated registry) behind make_asgi_app. That reproduces SGLang's
exposition exactly: sorted label keys, no _created series, `pid` on the two mode-less gauges,
livesum HTTP gauges, and the `sglang_` form for OpenMetrics clients.

Several servers in one process (`specmon sim --workers N`) cannot share multiprocess mode (one
directory per process): each then gets its own registry (`Families(registry)`), exposed as plain
prometheus_client does (the pid label SGLang's two mode-less gauges carry is added by hand).

Data-parallel ranks (`--dp-size N`): one SimMetrics per rank, all on the server's one Families,
so a family exists once and each rank writes its own children, labelled dp_rank="k" as SGLang's
schedulers label theirs when they run as a DP rank (every rank exports, with or without
--enable-metrics-for-all-schedulers); the tokenizer-side children (no rank label) are the same
objects for every rank.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Optional

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from specmon.servers.sim.engine import Hooks, Scheduler, SimRequest

TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0]
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
               400.0, 600.0, 1200.0, 1800.0, 2400.0]
QUEUE_BUCKETS_0510 = [0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0,
                 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0,
                 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0]
QUEUE_BUCKETS = [0.0, 0.001, 0.005, 0.01, 0.05] + QUEUE_BUCKETS_0510[1:]  # 0.5.23 added four small ones
TOKEN_LEN_BUCKETS = [100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0,
                     8000.0, 9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0, 27500.0,
                     30000.0, 35000.0, 40000.0, 60000.0, 80000.0, 100000.0, 200000.0, 300000.0, 400000.0,
                     600000.0, 800000.0, 1e6, 1.1e6]
GET_LOADS_BUCKETS = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0]
DP_IMBALANCE_BUCKETS = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0]
DP_SYNC_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]
GRAPH_PHASES = ["prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend"]
STAGE_CATEGORIES = ["other", "recv_requests", "process_input_requests", "get_next_batch_to_run", "process_queue",
                    "run_batch", "process_batch_result", "sanity_check_cache", "idle"]
STAGE_BUCKETS = [0.001 * 1.62 ** i for i in range(30)]
RETRACTION_BUCKETS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100]
ROUTING_KEY_EDGES = [1, 2, 3, 5, 7, 10, 20, 50, 100, 200]
EVICTION_BUCKETS = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.02, 0.03, 0.04, 0.05,
                    0.1, 0.2, 0.5, 1.0]

SCHED_LABELS = ["engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank"]


class Families:
    """The metric families of one simulated server, each made once (by name) and shared by its
    DP ranks. registry None: prometheus_client's multiprocess mode, read back by a
    MultiProcessCollector; else an own registry that holds the families themselves."""

    def __init__(self, registry: "CollectorRegistry | None" = None):
        self.own = registry
        self._made: dict = {}
        if registry is None:
            self.registry = CollectorRegistry()
            MultiProcessCollector(self.registry)
        else:
            self.registry = registry

    def get(self, cls, name: str, doc: str, labels=(), **kw):
        f = self._made.get(name)
        if f is None:
            if self.own is not None:
                kw["registry"] = self.own
            f = self._made[name] = cls(name, doc, list(labels), **kw)
        return f


def setup_multiprocess_dir() -> str:
    """Point prometheus_client at a private mmap directory (what SGLang's
    set_prometheus_multiproc_dir does); must run before any metric object is created."""
    d = tempfile.mkdtemp(prefix="specmon-sim-prom-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    values.ValueClass = values.get_value_class()
    prometheus_client.disable_created_metrics()
    return d


def cleanup_multiprocess_dir(d: str) -> None:
    try:
        mark_process_dead(os.getpid(), d)
    except Exception:
        pass
    shutil.rmtree(d, ignore_errors=True)


class SimMetrics(Hooks):
    def __init__(self, model_name: str, max_total_tokens: int, page_size: int = 1, *,
                 families: Optional[Families] = None, dp_rank: Optional[int] = None,
                 engine_type: str = "unified", sglang_version: str = "0.5.23"):
        self.new = sglang_version != "0.5.10"
        self.engine_type = engine_type
        self._children: dict = {}
        self.fam = families if families is not None else Families()
        self.registry = self.fam.registry
        F = self.fam.get
        L = dict(engine_type=engine_type, model_name=model_name, moe_ep_rank="0", pp_rank="0", tp_rank="0")
        sched_labels = list(SCHED_LABELS)
        if dp_rank is not None:
            L["dp_rank"] = str(dp_rank)
            sched_labels.append("dp_rank")
        self.L = L
        self.sched_labels = sched_labels
        self.model_name = model_name

        def g(name: str, doc: str, extra=(), mode: str = "mostrecent"):
            labels = sorted(sched_labels + list(extra))
            kw = {"multiprocess_mode": mode} if mode else {}
            return F(Gauge, name, doc, labels, **kw)

        def sg(name: str, doc: str, mode: str = "mostrecent"):
            return g(name, doc, mode=mode).labels(**L)

        # --- scheduler gauges -------------------------------------------------------------------
        self.num_running_reqs = sg("sglang:num_running_reqs", "The number of running requests.")
        self.num_used_tokens = sg("sglang:num_used_tokens", "The number of used tokens.")
        self.token_usage = sg("sglang:token_usage", "The token usage.")
        self.full_token_usage = sg("sglang:full_token_usage", "The token usage for full attention layers.")
        self.pending_prealloc_token_usage = sg("sglang:pending_prealloc_token_usage",
                                               "The token usage for pending preallocated tokens (not preallocated yet).")
        self.swa_token_usage = sg("sglang:swa_token_usage", "The token usage for SWA layers.")
        self.mamba_usage = sg("sglang:mamba_usage", "The token usage for Mamba layers.")
        self.decode_sum_seq_lens = sg("sglang:decode_sum_seq_lens", "The sum of all sequence lengths in decode.")
        self.gen_throughput = sg("sglang:gen_throughput", "The generation throughput (token/s).")
        self.num_queue_reqs = sg("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.num_grammar_queue_reqs = sg("sglang:num_grammar_queue_reqs",
                                         "The number of requests in the grammar waiting queue.")
        self.num_running_reqs_offline_batch = None if self.new else sg(
            "sglang:num_running_reqs_offline_batch",
            "The number of running low-priority offline batch requests(label is 'batch').")
        self.cache_hit_rate = sg("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.max_total_num_tokens = sg("sglang:max_total_num_tokens",
                                       "Maximum total number of tokens in the KV cache pool.")
        self.spec_accept_length = sg("sglang:spec_accept_length",
                                     "The average acceptance length of speculative decoding.")
        self.spec_accept_rate = sg("sglang:spec_accept_rate",
                                   "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)." if self.new
                                   else "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).")
        self.pd_queues = [
            sg("sglang:num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue.")
            if self.new else
            sg("sglang:num_prefill_prealloc_queue_reqs", "The number of requests in the prefill prealloc queue."),
            sg("sglang:num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
            sg("sglang:num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
            sg("sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
        ]
        self.utilization = sg("sglang:utilization", "The utilization.")
        if self.new:
            self.engine_startup_time = self.engine_load_weights_time = None
            self._new_scheduler_families(sg, g, L)
        else:
            self.engine_startup_time = sg("sglang:engine_startup_time", "The time taken for the engine to start up.")
            self.engine_load_weights_time = sg("sglang:engine_load_weights_time",
                                               "The time taken for the engine to load weights.")
        self.new_token_ratio = sg("sglang:new_token_ratio", "The new token ratio.")
        self.is_cuda_graph = sg("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.")
        self.num_unique_running_routing_keys = sg("sglang:num_unique_running_routing_keys",
                                                  "Number of unique routing keys in running batch.")
        rk_run = g("sglang:routing_key_running_req_count",
                   "Distribution of routing keys by running request count (gt < count <= le).", extra=("gt", "le"))
        rk_all = g("sglang:routing_key_all_req_count",
                   "Distribution of routing keys by running+waiting request count (gt < count <= le).",
                   extra=("gt", "le"))
        self.routing_buckets = []
        edges = [0] + ROUTING_KEY_EDGES
        for i, lo in enumerate(edges):
            hi = str(edges[i + 1]) if i + 1 < len(edges) else "+Inf"
            self.routing_buckets.append(rk_run.labels(gt=str(lo), le=hi, **L))
            self.routing_buckets.append(rk_all.labels(gt=str(lo), le=hi, **L))
        # The two gauges without a multiprocess mode carry SGLang's pid label ("all" mode).
        pid = {} if self.fam.own is None else {"pid": str(os.getpid())}  # multiprocess mode adds it itself
        self.num_retracted_reqs = g("sglang:num_retracted_reqs", "The number of retracted requests.",
                                    extra=tuple(pid), mode="").labels(**L, **pid)
        self.num_paused_reqs = g("sglang:num_paused_reqs", "The number of paused requests by async weight sync.",
                                 extra=tuple(pid), mode="").labels(**L, **pid)
        if self.new:  # 0.5.23: two gauges in place of the info gauge
            self.num_pages.set(max_total_tokens // page_size)
            self.page_size.set(page_size)
        else:
            self.cache_config_info = F(Gauge, "sglang:cache_config_info", "Cache configuration information.",
                                       ["num_pages", "page_size"], multiprocess_mode="mostrecent")
            self.cache_config_info.labels(num_pages=str(max_total_tokens // page_size), page_size=str(page_size)).set(1)

        # --- scheduler counters / histograms ------------------------------------------------------
        self.cuda_graph_passes = F(Counter, "sglang:cuda_graph_passes_total",
                                   "Total number of forward passes categorized by CUDA graph.",
                                   sorted(sched_labels + ["mode"]))
        self.realtime_tokens = F(
            Counter,
            "sglang:realtime_tokens_total",
            "Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.",
            sorted(sched_labels + ["mode"]))
        self.passes_decode = self.cuda_graph_passes.labels(mode="decode_cuda_graph", **L)
        self.passes_prefill = self.cuda_graph_passes.labels(mode="prefill_none", **L)
        self.rt_decode = self.realtime_tokens.labels(mode="decode", **L)
        self.rt_prefill_compute = self.realtime_tokens.labels(mode="prefill_compute", **L)
        # As real SGLang's: the prefill_cache series exists only from the first prefix-cache hit on
        # (tests/real/test_real_sglang_cache.py saw it absent before one, and counting from there).
        self.rt_prefill_cache = None
        self.queue_time = F(Histogram, "sglang:queue_time_seconds", "Histogram of queueing time in seconds.",
                            sorted(sched_labels), buckets=QUEUE_BUCKETS if self.new else QUEUE_BUCKETS_0510).labels(**L)
        self.per_stage = F(Histogram, "sglang:per_stage_req_latency_seconds", "The latency of each stage of requests.",
                           sorted(sched_labels + ["stage"]), buckets=STAGE_BUCKETS)
        self.stage_request_process = self.per_stage.labels(stage="request_process", **L)
        self.stage_prefill_forward = self.per_stage.labels(stage="prefill_forward", **L)
        self.stage_chunked_prefill = self.per_stage.labels(stage="chunked_prefill", **L)
        self._retract_counters = None
        self._eviction = None

        # --- tokenizer side -----------------------------------------------------------------------
        # 0.5.23 labels the request series with the engine type, and most of them with whether the
        # request streamed (is_streaming="true"/"false"): a series per value, made when first used.
        TL = ["engine_type", "model_name"] if self.new else ["model_name"]
        TLS = ["engine_type", "is_streaming", "model_name"] if self.new else ["model_name"]
        self.f_prompt_tokens = F(Counter, "sglang:prompt_tokens_total", "Number of prefill tokens processed.", TLS)
        self.f_generation_tokens = F(Counter, "sglang:generation_tokens_total",
                                     "Number of generation tokens processed.", TLS)
        self.f_num_requests = F(Counter, "sglang:num_requests_total", "Number of requests processed.", TLS)
        self.cached_tokens = F(Counter, "sglang:cached_tokens_total",
                               "Number of cached prompt tokens by source (device/host/storage).",
                               sorted(["cache_source"] + TL))
        self._aborted = None
        self.f_ttft = F(Histogram, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                        TLS, buckets=TTFT_BUCKETS)
        # Labelled series exist only once used: no ITL series until a streamed chunk follows a first one.
        self._itl_family = F(Histogram, "sglang:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", TL, buckets=ITL_BUCKETS)
        self.itl = None
        self.f_e2e = F(Histogram, "sglang:e2e_request_latency_seconds",
                       "Histogram of End-to-end request latency in seconds", TLS, buckets=E2E_BUCKETS)
        if self.new:
            self.num_retractions = None
            self.f_tpot = F(Histogram, "sglang:request_time_per_output_token_seconds",
                            "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
                            TLS, buckets=ITL_BUCKETS)
            tl = dict(engine_type=engine_type, model_name=model_name)
            self.prompt_len_hist = F(Histogram, "sglang:prompt_tokens_histogram", "Histogram of prompt token length.",
                                     TL, buckets=TOKEN_LEN_BUCKETS).labels(**tl)
            self.uncached_len_hist = F(Histogram, "sglang:uncached_prompt_tokens_histogram",
                                       "Histogram of uncached (compute) prompt token length.", TL,
                                       buckets=TOKEN_LEN_BUCKETS).labels(**tl)
            self.gen_len_hist = F(Histogram, "sglang:generation_tokens_histogram",
                                  "Histogram of generation token length.", TL, buckets=TOKEN_LEN_BUCKETS).labels(**tl)
            self.get_loads_duration = F(Histogram, "sglang:get_loads_duration_seconds",
                                        "Time spent serving /v1/loads requests (seconds).", TL,
                                        buckets=GET_LOADS_BUCKETS).labels(**tl)
        else:
            self.num_retractions = F(Histogram, "sglang:num_retractions", "Histogram of retraction counts per request.",
                                     TL, buckets=RETRACTION_BUCKETS).labels(model_name=model_name)
        self.http_requests_total = F(Counter, "sglang:http_requests_total",
                                     "Total number of HTTP requests by endpoint and method",
                                     ["endpoint", "method"])
        self.http_responses_total = F(Counter, "sglang:http_responses_total",
                                      "Total number of HTTP responses by endpoint and status code",
                                      ["endpoint", "method", "status_code"])
        self.http_requests_active = F(Gauge, "sglang:http_requests_active", "Number of currently active HTTP requests",
                                      ["endpoint", "method"], multiprocess_mode="livesum")
        self.routing_keys_active = F(Gauge, "sglang:routing_keys_active",
                                     "Number of unique routing keys with active requests",
                                     multiprocess_mode="livesum")
        self.routing_keys_active.set(0)
        self.process_cpu = F(Counter, "sglang:process_cpu_seconds_total",
                             "Total CPU time consumed by this process (user + system)", ["component"])

    def _new_scheduler_families(self, sg, g, L) -> None:
        """0.5.23's scheduler series (unified mode). The pool gauges are set from the scheduler's
        pool and prefix cache at each report; the startup ones once, by set_startup()."""
        self.kv_used_tokens = sg("sglang:kv_used_tokens", "Number of actively used token slots in the KV cache pool.")
        self.kv_available_tokens = sg("sglang:kv_available_tokens", "Number of free token slots in the KV cache pool.")
        self.kv_evictable_tokens = sg("sglang:kv_evictable_tokens",
                                      "Number of evictable (radix-cached) token slots in the KV cache pool.")
        # A full-attention model: the SWA and mamba pools do not exist (0, as SGLang reports them).
        self.zero_gauges = [sg(f"sglang:{pool}_{k}_tokens", f"Token slots ({k}) in the {pool} pool.")
                            for pool in ("swa", "mamba") for k in ("available", "evictable", "used")]
        self.zero_gauges += [
            sg("sglang:prealloc_full_token_usage", "Share of the full-attention KV pool held by decode requests "
                                                   "whose KV transfer is pending."),
            sg("sglang:prealloc_swa_token_usage", "Share of the SWA KV pool held by decode requests whose KV "
                                                  "transfer is pending."),
            sg("sglang:num_decode_host_receive_queue_reqs", "Requests in the decode transfer queue receiving into "
                                                            "host memory."),
            sg("sglang:num_decode_deferred_kv_release_reqs", "The number of failed decode requests whose KV "
                                                             "allocations are held pending transfer drain."),
            sg("sglang:spec_cap_length", "Mean confidence-scheduled verify window per verify step (0 when off)."),
            sg("sglang:spec_block_accept_length", "Mean uncapped full-block accept length per verify step."),
        ]
        self.fwd_occupancy = sg("sglang:fwd_occupancy", "Forward pass GPU occupancy percentage.")
        self.weight_memory_gb = sg("sglang:weight_memory_usage_gb", "Memory used by model weights in GB.")
        self.kv_cache_memory_gb = sg("sglang:kv_cache_memory_usage_gb", "Memory used by the KV cache pools in GB.")
        gm = g("sglang:graph_memory_usage_gb", "Memory used by captured device graphs in GB.", extra=("phase",))
        self.graph_memory_gb = {ph: gm.labels(phase=ph, **L) for ph in GRAPH_PHASES}
        self.page_size = sg("sglang:page_size", "KV cache page size in tokens.")
        self.num_pages = sg("sglang:num_pages", "Number of KV cache pages.")
        self.context_len = sg("sglang:context_len", "Maximum context length.")
        self.startup_avail_gb = sg("sglang:startup_available_gpu_memory_gb", "Available GPU memory in GB at startup.")
        self.spec_num_steps = sg("sglang:spec_num_steps", "Currently active speculative_num_steps.")
        self.spec_num_draft_tokens = sg("sglang:spec_num_draft_tokens",
                                        "Currently active speculative_num_draft_tokens.")
        F = self.fam.get
        pl = ["engine_type", "model_name", "phase"]
        self.startup_time = F(Gauge, "sglang:startup_time_seconds", "Engine startup duration by phase in seconds.",
                              pl, multiprocess_mode="mostrecent")
        self.startup_graph_time = F(Gauge, "sglang:startup_cuda_graph_time_seconds",
                                    "CUDA graph capture duration by phase in seconds.", pl,
                                    multiprocess_mode="mostrecent")
        sl = sorted(self.sched_labels)
        self.idle_seconds = F(Counter, "sglang:scheduler_idle_seconds_total",
                              "Total wall time while the scheduler has no runnable or queued work.", sl).labels(**L)
        self.sched_cpu = F(Counter, "sglang:scheduler_process_cpu_seconds_total",
                           "Total CPU time consumed by the scheduler process across all threads.", sl).labels(**L)
        stage = F(Counter, "sglang:scheduler_stage_seconds_total",
                  "Total scheduler-loop wall time exclusively attributed to each stage.",
                  sorted(sl + ["category", "forward_overlap"]))
        self.stage = {c: stage.labels(category=c, forward_overlap="none", **L) for c in STAGE_CATEGORIES}
        eff = F(Counter, "sglang:prefill_effective_tokens_total",
                "Effective prefill tokens with retracted-request re-counts excluded. mode: device_hit, host_hit, "
                "storage_hit, input.", sorted(sl + ["mode"]))
        self.eff = {m: eff.labels(mode=m, **L) for m in ("input", "device_hit", "host_hit", "storage_hit")}
        # DP attention's MLP-sync series: present, never observed (no DP attention in the simulator).
        for kind_name, lab, vals in (("sglang:dp_attention_tokens_total", "kind", ("scheduled", "imbalance")),
                                     ("sglang:dp_attention_pairs_total", "kind", ("scheduled", "imbalance")),
                                     ("sglang:dp_attention_steps_total", "rank_state", ("active", "idle"))):
            fam = F(Counter, kind_name, "MLP-sync steps of DP attention on this DP rank.", sorted(sl + [lab]))
            for v in vals:
                fam.labels(**{lab: v}, **L)
        F(Histogram, "sglang:dp_attention_token_imbalance_ratio",
          "Per MLP-sync step, max tokens over mean tokens across the DP ranks.", sl,
          buckets=DP_IMBALANCE_BUCKETS).labels(**L)
        F(Histogram, "sglang:dp_attention_sync_wait_seconds",
          "Wall time of this DP rank's scheduler MLP-sync all-gather per step.", sl, buckets=DP_SYNC_BUCKETS).labels(**L)
        self._seen_idle = 0.0
        self._seen_busy = 0.0
        self._last_report_t: Optional[float] = None

    def set_startup(self, *, phases: dict, graph_phases: dict, graph_gb: dict, weight_gb: float, kv_gb: float,
                    avail_gb: float, context_len: int, spec_steps: int, spec_draft_tokens: int) -> None:
        """0.5.23's startup series, from the simulated startup (main.py)."""
        if not self.new:
            return
        tl = dict(engine_type=self.engine_type, model_name=self.model_name)
        for ph, v in phases.items():
            self.startup_time.labels(phase=ph, **tl).set(v)
        for ph in GRAPH_PHASES:
            self.startup_graph_time.labels(phase=ph, **tl).set(graph_phases.get(ph, 0.0))
            self.graph_memory_gb[ph].set(graph_gb.get(ph, 0.0))
        self.weight_memory_gb.set(weight_gb)
        self.kv_cache_memory_gb.set(kv_gb)
        self.startup_avail_gb.set(avail_gb)
        self.context_len.set(context_len)
        self.spec_num_steps.set(spec_steps)
        self.spec_num_draft_tokens.set(spec_draft_tokens)

    def _pool_and_time(self, s: Scheduler) -> None:
        """0.5.23's pool gauges and scheduler-time counters, from the scheduler's own state: used /
        free / evictable slots of its pool and prefix cache, and its idle and busy simulated
        seconds (busy: the scheduler drives forward passes; SGLang's scheduler thread spends that
        time on the CPU launching and waiting for them)."""
        self.kv_used_tokens.set(s.num_used_tokens)
        self.kv_available_tokens.set(s.kv_available_tokens)
        self.kv_evictable_tokens.set(s.kv_evictable_tokens)
        for z in self.zero_gauges:
            z.set(0)
        now = s.clock.now()
        idle = s.idle_seconds
        d_idle = max(0.0, idle - self._seen_idle)
        self._seen_idle = idle
        self.idle_seconds.inc(d_idle)
        self.stage["idle"].inc(d_idle)
        if self._last_report_t is not None and now > self._last_report_t:
            span = now - self._last_report_t
            busy = max(0.0, span - d_idle)
            self.sched_cpu.inc(busy)
            self.stage["run_batch"].inc(busy)
            self.fwd_occupancy.set(100.0 * busy / span)
        self._last_report_t = now

    def observe_get_loads(self, seconds: float) -> None:
        if self.new:
            self.get_loads_duration.observe(seconds)

    def _req(self, fam, r: SimRequest):
        """The request's child of a tokenizer-side family (0.5.23: by engine type and streaming)."""
        key = (fam._name, bool(getattr(r, "stream", False)))
        c = self._children.get(key)
        if c is None:
            if self.new:
                c = fam.labels(engine_type=self.engine_type, is_streaming="true" if key[1] else "false",
                               model_name=self.model_name)
            else:
                c = fam.labels(model_name=self.model_name)
            self._children[key] = c
        return c

    # --- helpers ------------------------------------------------------------------------------------
    def _common_gauges(self, s: Scheduler, running: int) -> None:
        self.num_running_reqs.set(running)
        self.num_queue_reqs.set(len(s.waiting))
        used = s.num_used_tokens
        self.num_used_tokens.set(used)
        usage = s.token_usage
        self.token_usage.set(usage)
        self.full_token_usage.set(usage)
        self.swa_token_usage.set(0)
        self.mamba_usage.set(0)
        self.pending_prealloc_token_usage.set(0)
        self.max_total_num_tokens.set(s.max_total_tokens)
        self.num_grammar_queue_reqs.set(0)
        if self.num_running_reqs_offline_batch is not None:
            self.num_running_reqs_offline_batch.set(0)
        for q in self.pd_queues:
            q.set(0)
        self.utilization.set(0)
        if self.new:
            self._pool_and_time(s)
        else:
            self.engine_startup_time.set(0)
            self.engine_load_weights_time.set(0)
        self.is_cuda_graph.set(0)
        self.num_retracted_reqs.set(s.__dict__.pop("_retracted_since_report", 0))
        self.num_paused_reqs.set(0)
        self.spec_accept_length.set(s.last_spec_accept_length)
        self.spec_accept_rate.set(s.last_spec_accept_rate)
        self.gen_throughput.set(s.last_gen_throughput)

    # --- Hooks --------------------------------------------------------------------------------------
    def on_prefill_report(self, s, new_seqs, new_tokens, cached, running_before, input_tput):
        self._common_gauges(s, running_before)
        self.cache_hit_rate.set(s.last_cache_hit_rate)
        self.new_token_ratio.set(s.new_token_ratio)

    def on_decode_report(self, s, window):
        self._common_gauges(s, window["bs"])
        self.cache_hit_rate.set(0)
        self.decode_sum_seq_lens.set(window["sum_seq"])
        self.num_unique_running_routing_keys.set(0)
        for b in self.routing_buckets:
            b.set(0)

    def on_idle_report(self, s):
        self._common_gauges(s, len(s.running))
        self.token_usage.set(round(s.token_usage, 2))
        self.gen_throughput.set(0)

    def on_prefill_pass(self, s, new_tokens, cached):
        self.passes_prefill.inc()
        self.rt_prefill_compute.inc(new_tokens)
        if cached:
            if self.rt_prefill_cache is None:
                self.rt_prefill_cache = self.realtime_tokens.labels(mode="prefill_cache", **self.L)
            self.rt_prefill_cache.inc(cached)

    def on_decode_pass(self, s, tokens):
        self.passes_decode.inc()
        self.rt_decode.inc(tokens)

    def on_first_scheduled(self, s, r: SimRequest):
        if r.retractions == 0:
            self.stage_request_process.observe(0.0004)
            self.queue_time.observe(max(0.0, r.t_forward_entry - r.t_queued))

    def on_prefill_done(self, s, r: SimRequest):
        if self.new and r.retractions == 0:  # a retracted request's re-prefill is not counted again
            self.eff["input"].inc(r.prompt_len)
            if r.cached_tokens:
                self.eff["device_hit"].inc(r.cached_tokens)
        if r.t_forward_entry is not None:
            self.stage_prefill_forward.observe(max(0.0, r.t_prefill_done - r.t_forward_entry))

    def on_chunk(self, s, r: SimRequest, new_tokens, t):
        if not r.log_metrics or new_tokens <= 0:
            return
        if r.t_last_delivery is None:
            self._req(self.f_ttft, r).observe(max(0.0, t - r.t_created))
        else:
            if self.itl is None:
                self.itl = self._itl_family.labels(model_name=self.model_name, **(
                    {"engine_type": self.engine_type} if self.new else {}))
            gap = t - r.t_last_delivery
            per = gap / new_tokens
            for _ in range(new_tokens):
                self.itl.observe(per)
        r.t_last_delivery = t

    def on_finish(self, s, r: SimRequest):
        if not r.log_metrics:
            return
        self._req(self.f_prompt_tokens, r).inc(r.prompt_len)
        self._req(self.f_generation_tokens, r).inc(r.output_len)
        self._req(self.f_num_requests, r).inc()
        if r.cached_tokens > 0:
            self.cached_tokens.labels(cache_source="device", model_name=self.model_name, **(
                {"engine_type": self.engine_type} if self.new else {})).inc(r.cached_tokens)
        self._req(self.f_e2e, r).observe(max(0.0, r.t_finished - r.t_created))
        if self.new:
            if r.t_first_token is not None and r.output_len > 1:
                self._req(self.f_tpot, r).observe(max(0.0, r.t_finished - r.t_first_token) / (r.output_len - 1))
            self.prompt_len_hist.observe(r.prompt_len)
            self.uncached_len_hist.observe(r.prompt_len - r.cached_tokens)
            self.gen_len_hist.observe(r.output_len)
        else:
            self.num_retractions.observe(r.retractions)

    def on_retract(self, s, r, in_tok, out_tok):
        if self._retract_counters is None:
            mk = lambda n, d: self.fam.get(Counter, n, d, sorted(self.sched_labels)).labels(**self.L)  # noqa: E731
            self._retract_counters = (
                mk("sglang:num_retracted_requests_total", "The number of retracted requests."),
                mk("sglang:num_retracted_input_tokens_total", "The number of retracted input tokens."),
                mk("sglang:num_retracted_output_tokens_total", "The number of retracted output tokens."),
            )
        a, b, c = self._retract_counters
        a.inc()
        b.inc(in_tok)
        c.inc(out_tok)
        s.__dict__["_retracted_since_report"] = s.__dict__.get("_retracted_since_report", 0) + 1

    def on_evict(self, s, tokens, duration_s):
        # SGLang's RadixCacheMetricsCollector (labels {"cache_type": <cache class>}): its series
        # appear with the first eviction.
        if self._eviction is None:
            lab = {"cache_type": "RadixCache"}
            self._eviction = (
                self.fam.get(Counter, "sglang:evicted_tokens_total", "The number of tokens evicted from GPU to CPU.",
                             list(lab)).labels(**lab),
                self.fam.get(Histogram, "sglang:eviction_duration_seconds",
                             "Time taken to evict memory from GPU to CPU in seconds.",
                             list(lab), buckets=EVICTION_BUCKETS).labels(**lab),
            )
        count, duration = self._eviction
        count.inc(tokens)
        duration.observe(duration_s)

    def on_abort(self):
        if self._aborted is None:
            self._aborted = self.fam.get(Counter, "sglang:num_aborted_requests_total", "Number of requests aborted.",
                                         ["model_name"]).labels(model_name=self.model_name)
        self._aborted.inc()

    def sample_cpu(self, tokenizer_s: float, detok_s: float) -> None:
        self.process_cpu.labels(component="tokenizer").inc(tokenizer_s)
        self.process_cpu.labels(component="detokenizer").inc(detok_s)
