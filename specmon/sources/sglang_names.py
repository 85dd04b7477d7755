"""Every name specmon reads from SGLang, per release: one table instead of literals in each reader.

Supported releases: 0.5.10 (0.5.10.post1) through 0.5.23. Where a name changed, both are listed
and the readers try the newest first (a server answers with one or the other, never both). The
recorded fixtures in tests/data/sglang-versions/<release>/ are the evidence for every entry here,
and tests/unit/test_sglang_versions.py fails when a figure reads empty where a fixture has it.

Metric names are bare (no `sglang:` prefix). Label changes that matter:
- `engine_type` (0.5.23, every series) and `is_streaming` (0.5.23, request counters and
  histograms) split one quantity into parts: SPLIT_LABELS; prom.py sums over them rather than
  picking one part.
- `spec_accept_rate` changed meaning: 0.5.10 "accepted tokens / total draft tokens", 0.5.23
  "accepted drafts / proposed drafts" (both per decode window). ACCEPT_RATE_MEANING says which.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

RELEASES = ("0.5.10", "0.5.23")
NEWEST = RELEASES[-1]


@dataclass(frozen=True)
class Name:
    """One thing specmon reads, by release: the name it has there, or None when that release has none."""

    what: str
    by_release: tuple[tuple[str, Optional[str]], ...]

    @property
    def aliases(self) -> tuple[str, ...]:
        """Every name it has had, newest release first, each once."""
        out: list[str] = []
        for _, name in reversed(self.by_release):
            if name is not None and name not in out:
                out.append(name)
        return tuple(out)

    def in_release(self, release: str) -> Optional[str]:
        return dict(self.by_release).get(release)


def _n(what: str, old: Optional[str], new: Optional[str] = "same") -> Name:
    return Name(what, (("0.5.10", old), ("0.5.23", old if new == "same" else new)))


# ---- /metrics --------------------------------------------------------------------------------
METRICS: dict[str, Name] = {
    "running": _n("requests in the running batch (gauge)", "num_running_reqs"),
    "queued": _n("requests waiting for admission (gauge)", "num_queue_reqs"),
    "kv_used": _n("KV tokens held by requests (gauge)", "num_used_tokens"),
    "kv_used_split": _n("KV tokens actively used, next to evictable and available (gauge)", None, "kv_used_tokens"),
    "kv_evictable": _n("KV tokens held only by the radix cache, free to evict (gauge)", None, "kv_evictable_tokens"),
    "kv_available": _n("free KV token slots (gauge)", None, "kv_available_tokens"),
    "kv_capacity": _n("KV pool size in tokens (gauge)", "max_total_num_tokens"),
    "token_usage": _n("KV pool usage 0-1 (gauge)", "token_usage"),
    "gen_throughput": _n("output tok/s of the last decode log window (gauge)", "gen_throughput"),
    "accept_length": _n("speculative accept length, last decode window (gauge)", "spec_accept_length"),
    "accept_rate": _n("speculative accept rate, last decode window (gauge; meaning changed)", "spec_accept_rate"),
    "new_token_ratio": _n("the scheduler's decode-room estimate (gauge)", "new_token_ratio"),
    "requests_total": _n("finished requests (counter; 0.5.23 split by is_streaming)", "num_requests_total"),
    "prompt_tokens": _n("prompt tokens of finished requests (counter)", "prompt_tokens_total"),
    "generation_tokens": _n("output tokens of finished requests (counter)", "generation_tokens_total"),
    "realtime_tokens": _n("tokens per step by mode: decode, prefill_compute, prefill_cache (counter)",
                          "realtime_tokens_total"),
    "cached_tokens": _n("cached prompt tokens of finished requests (counter, per cache_source)", "cached_tokens_total"),
    "http_requests": _n("HTTP requests by endpoint (counter)", "http_requests_total"),
    "ttft": _n("time to first token (histogram; 0.5.23 split by is_streaming)", "time_to_first_token_seconds"),
    "queue_time": _n("time in the waiting queue (histogram; 0.5.23 adds small buckets)", "queue_time_seconds"),
    "itl": _n("inter-token latency (histogram)", "inter_token_latency_seconds"),
    "retracted_reqs": _n("requests retracted (gauge)", "num_retracted_reqs"),
    "retractions_hist": _n("retractions per finished request (histogram; gone in 0.5.23)", "num_retractions", None),
    "scheduler_idle": _n("scheduler wall seconds with no work (counter)", None, "scheduler_idle_seconds_total"),
    "startup_phases": _n("start-up seconds by `phase` label (gauge)", None, "startup_time_seconds"),
    "startup_total_old": _n("start-up seconds (gauge; 0.0 on the CPU engine)", "engine_startup_time", None),
    "load_weights_old": _n("weight loading seconds (gauge; 0.0 on the CPU engine)", "engine_load_weights_time", None),
    "bootstrap_queue": _n("PD prefill bootstrap queue (gauge)", "num_prefill_prealloc_queue_reqs",
                          "num_prefill_bootstrap_queue_reqs"),
    "num_pages": _n("KV pages (0.5.10: a label of cache_config_info)", None, "num_pages"),
    "page_size": _n("tokens per KV page (0.5.10: a label of cache_config_info)", None, "page_size"),
    "cache_config_info": _n("info series with num_pages, page_size labels (gone in 0.5.23)", "cache_config_info", None),
}

# Series SGLang creates at their first increment (absent from /metrics until then): cached tokens
# at the first prefix-cache hit; 0.5.10's labelled ITL histogram at its first observation.
BORN_AT_FIRST_USE = ("cached_tokens", "itl")

# Labels that cut one quantity into parts (not copies): a figure is the sum over them.
SPLIT_LABELS = ("engine_type", "is_streaming")

# What spec_accept_rate divides, per release (the gauge's HELP text).
ACCEPT_RATE_MEANING = {"0.5.10": "accepted tokens / draft tokens", "0.5.23": "accepted drafts / proposed drafts"}

# ---- /server_info ----------------------------------------------------------------------------
SERVER_INFO: dict[str, Name] = {
    "max_running_requests": _n("running-batch cap as resolved (internal_states[0])",
                               "effective_max_running_requests_per_dp"),
    "max_running_requests_flag": _n("--max-running-requests", "max_running_requests"),
    "kv_capacity": _n("KV pool tokens", "max_total_num_tokens"),
    "kv_capacity_mem": _n("KV pool tokens (internal_states[0].memory_usage)", "token_capacity"),
    "chunked_prefill_size": _n("--chunked-prefill-size (default 2048 in 0.5.10, 4096 in 0.5.23 here)",
                               "chunked_prefill_size"),
    "graph_mem": _n("cuda-graph memory, GB (0.5.10 a number, 0.5.23 a dict by phase)", "graph"),
    "cuda_graph_bs": _n("captured batch sizes (0.5.23 split by phase)", "cuda_graph_bs", "cuda_graph_bs_decode"),
    "cuda_graph_max_bs": _n("largest captured batch (0.5.23 split by phase)", "cuda_graph_max_bs",
                            "cuda_graph_max_bs_decode"),
    "startup_time": _n("start-up seconds by phase (a dict; absent in 0.5.10)", None, "startup_time"),
    "schedule_conservativeness": _n("--schedule-conservativeness as resolved (x 0.3 with DP attention; "
                                    "internal_states[0], else top level)", "schedule_conservativeness"),
}

# ---- scheduler defaults ----------------------------------------------------------------------
# The decode-room estimate SGLang admits by (new_token_ratio), per release, from its source
# (0.5.10: managers/scheduler.py and environ.py; 0.5.23: scheduler_components/
# new_token_ratio_tracker.py and environ.py). Both start at min(init x schedule_conservativeness,
# 1), fall by (start - start x min_factor) / decay_steps after each decode step with no
# retraction, go back to the start when the server is idle, and after a retraction jump to
# (decoded + retract_decode_steps x reqs) / (max_new_tokens + 1) over the running requests.
# schedule_conservativeness defaults to 1.0 and is x 0.3 with DP attention. The two releases
# agree on every figure; the table says so rather than assuming it.
SCHEDULER_DEFAULTS: dict[str, dict[str, float]] = {
    release: {"init_new_token_ratio": 0.7,  # SGLANG_INIT_NEW_TOKEN_RATIO
              "min_new_token_ratio_factor": 0.14,  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
              "new_token_ratio_decay_steps": 600,  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
              "retract_decode_steps": 20,  # SGLANG_RETRACT_DECODE_STEPS
              "schedule_conservativeness": 1.0}
    for release in RELEASES
}


def release_of(version: Optional[str]) -> str:
    """The supported release whose names a server of `version` uses: the newest one not newer
    than it (0.5.10.post1 -> 0.5.10, 0.5.20 -> 0.5.10, 0.5.24 -> 0.5.23); the oldest for an
    older server, the newest when the version is unknown or unreadable."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    if m is None:
        return NEWEST
    have = tuple(int(x or 0) for x in m.groups())
    best = RELEASES[0]
    for r in RELEASES:
        if tuple(int(x) for x in r.split(".")) <= have:
            best = r
    return best

# ---- /v1/loads -------------------------------------------------------------------------------
# Both releases list one entry per DP rank under "loads" with the same per-rank keys specmon
# reads (num_running_reqs, num_waiting_reqs, num_used_tokens, max_total_num_tokens,
# token_usage, gen_throughput, max_running_requests); 0.5.23 drops "aggregate", "dp_rank_count"
# and loads[].num_total_reqs and writes dp_rank in every entry.
LOADS: dict[str, Name] = {
    "bootstrap_queue": _n("disaggregation.<this>", "prefill_prealloc_queue_reqs", "prefill_bootstrap_queue_reqs"),
    "total_reqs": _n("loads[].num_total_reqs (gone in 0.5.23)", "num_total_reqs", None),
    "aggregate": _n("top-level totals (gone in 0.5.23)", "aggregate", None),
}

# ---- /generate meta_info ---------------------------------------------------------------------
META_INFO: dict[str, Name] = {
    "retractions": _n("times the request was retracted", "total_retractions", "num_retractions"),
    "queue_time": _n("seconds queued (measured in 0.5.23; 0.0 in 0.5.10 here)", "queue_time"),
    "cached_tokens": _n("prompt tokens served from the prefix cache", "cached_tokens"),
    "first_token_latency": _n("server-side time to first token (0.5.23)", None, "first_token_latency"),
}

# ---- log lines (the text each release prints) ------------------------------------------------
LOG: dict[str, Name] = {
    "init_dist_begin": _n("distributed init starts", "Init torch distributed begin.", "Init parallel begin."),
    "init_dist_end": _n("distributed init ends", "Init torch distributed ends.", "Init parallel ends."),
    "pending_token": _n("Prefill batch field after #queue-req (0.5.23)", None, "#pending-token:"),
    "startup_timings": _n("one line of start-up seconds by phase (0.5.23)", None, "Engine startup timings (s):"),
    # 0.5.10 has no timings line: its start-up seconds are the `elapsed` of single phases.
    "load_weight_end": _n("weight load ends, with its seconds", "Load weight end. elapsed="),
    "server_args": _n("how server_args= is printed", "server_args=ServerArgs(", "server_args={"),
    "kv_allocated": _n("KV pool line (0.5.23 puts the dtype before #tokens)", "KV Cache is allocated. #tokens:",
                       "KV Cache is allocated. dtype:"),
}


def metric(key: str) -> tuple[str, ...]:
    """The bare metric names of `key` (METRICS), newest release first."""
    return METRICS[key].aliases


def metric1(key: str) -> str:
    """The one name `key` has in every release that has it (a KeyError-free literal for readers)."""
    names = METRICS[key].aliases
    if len(names) != 1:
        raise ValueError(f"{key} has several names: {names}")
    return names[0]


def used_metrics(*keys: str) -> frozenset[str]:
    """Every name of `keys`, for MetricsSnapshot.parse(only=...)."""
    return frozenset(n for k in keys for n in METRICS[k].aliases)
