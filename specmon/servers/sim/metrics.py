"""SGLang's Prometheus families (0.5.10.post1, unified mode), served the way SGLang serves them:
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
QUEUE_BUCKETS = [0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0,
                 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0,
                 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0]
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
                 engine_type: str = "unified"):
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
        self.num_running_reqs_offline_batch = sg(
            "sglang:num_running_reqs_offline_batch",
            "The number of running low-priority offline batch requests(label is 'batch').")
        self.cache_hit_rate = sg("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.max_total_num_tokens = sg("sglang:max_total_num_tokens",
                                       "Maximum total number of tokens in the KV cache pool.")
        self.spec_accept_length = sg("sglang:spec_accept_length",
                                     "The average acceptance length of speculative decoding.")
        self.spec_accept_rate = sg("sglang:spec_accept_rate",
                                   "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).")
        self.pd_queues = [
            sg("sglang:num_prefill_prealloc_queue_reqs", "The number of requests in the prefill prealloc queue."),
            sg("sglang:num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
            sg("sglang:num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
            sg("sglang:num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
        ]
        self.utilization = sg("sglang:utilization", "The utilization.")
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
        # (tests/test_real_sglang_cache.py saw it absent before one, and counting from there).
        self.rt_prefill_cache = None
        self.queue_time = F(Histogram, "sglang:queue_time_seconds", "Histogram of queueing time in seconds.",
                            sorted(sched_labels), buckets=QUEUE_BUCKETS).labels(**L)
        self.per_stage = F(Histogram, "sglang:per_stage_req_latency_seconds", "The latency of each stage of requests.",
                           sorted(sched_labels + ["stage"]), buckets=STAGE_BUCKETS)
        self.stage_request_process = self.per_stage.labels(stage="request_process", **L)
        self.stage_prefill_forward = self.per_stage.labels(stage="prefill_forward", **L)
        self.stage_chunked_prefill = self.per_stage.labels(stage="chunked_prefill", **L)
        self._retract_counters = None
        self._eviction = None

        # --- tokenizer side -----------------------------------------------------------------------
        TL = ["model_name"]
        self.prompt_tokens = F(Counter, "sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                               TL).labels(model_name=model_name)
        self.generation_tokens = F(Counter, "sglang:generation_tokens_total",
                                   "Number of generation tokens processed.", TL).labels(model_name=model_name)
        self.num_requests = F(Counter, "sglang:num_requests_total", "Number of requests processed.",
                              TL).labels(model_name=model_name)
        self.cached_tokens = F(Counter, "sglang:cached_tokens_total",
                               "Number of cached prompt tokens by source (device/host/storage).",
                               ["cache_source", "model_name"])
        self._aborted = None
        self.ttft = F(Histogram, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                      TL, buckets=TTFT_BUCKETS).labels(model_name=model_name)
        # Labelled series exist only once used: no ITL series until a streamed chunk follows a first one.
        self._itl_family = F(Histogram, "sglang:inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", TL, buckets=ITL_BUCKETS)
        self.itl = None
        self.e2e = F(Histogram, "sglang:e2e_request_latency_seconds",
                     "Histogram of End-to-end request latency in seconds", TL,
                     buckets=E2E_BUCKETS).labels(model_name=model_name)
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
        self.num_running_reqs_offline_batch.set(0)
        for q in self.pd_queues:
            q.set(0)
        self.utilization.set(0)
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
        if r.t_forward_entry is not None:
            self.stage_prefill_forward.observe(max(0.0, r.t_prefill_done - r.t_forward_entry))

    def on_chunk(self, s, r: SimRequest, new_tokens, t):
        if not r.log_metrics or new_tokens <= 0:
            return
        if r.t_last_delivery is None:
            self.ttft.observe(max(0.0, t - r.t_created))
        else:
            if self.itl is None:
                self.itl = self._itl_family.labels(model_name=self.model_name)
            gap = t - r.t_last_delivery
            per = gap / new_tokens
            for _ in range(new_tokens):
                self.itl.observe(per)
        r.t_last_delivery = t

    def on_finish(self, s, r: SimRequest):
        if not r.log_metrics:
            return
        self.prompt_tokens.inc(r.prompt_len)
        self.generation_tokens.inc(r.output_len)
        self.num_requests.inc()
        if r.cached_tokens > 0:
            self.cached_tokens.labels(cache_source="device", model_name=self.model_name).inc(r.cached_tokens)
        self.e2e.observe(max(0.0, r.t_finished - r.t_created))
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
