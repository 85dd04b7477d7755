"""The values that travel between specmon's parts.

Collectors (`sources/`), the load generator (`load/`), the analysis (`analysis/`), the
recorder (`session/`) and the two front ends (the Textual app in `tui/` and the headless
printer) speak only in these plain dataclasses. Nothing here imports Textual.

Convention: a value that is not known is ``None``, never a made-up 0. The CSV writer turns
``None`` into an empty cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Optional

from specmon import clock

if TYPE_CHECKING:
    from specmon.plan import RampPlan


def __getattr__(name: str) -> Any:
    # The ramp plan (validated where it is built: see plan.py) is reached through this module for
    # `from specmon.model import RampPlan` and the events that carry one, but imported only when
    # asked for: attach never builds a plan.
    if name == "RampPlan":
        from specmon.plan import RampPlan
        return RampPlan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# --------------------------------------------------------------------------------------------
# Static description of one server ("arm")


@dataclass
class ArmSpec:
    """What the user asked for: a name and where the server answers."""

    name: str
    url: str  # base URL, e.g. http://127.0.0.1:30000 (no trailing slash)
    api_key_env: Optional[str] = None  # name of the env var holding the key; the key itself is never stored
    launched: bool = False  # True when specmon started this server (launch mode / demo)
    pid: Optional[int] = None  # server process id when local and known
    fleet: Optional[str] = None  # the gateway / Prometheus fleet this worker was discovered in
    role: Optional[str] = None  # regular | prefill | decode (a gateway's registry says)


@dataclass
class ArmInfo:
    """What the server says about itself (from /server_info); filled in once it answers."""

    model: Optional[str] = None
    served_model_name: Optional[str] = None
    version: Optional[str] = None
    tp_size: Optional[int] = None
    speculative_algorithm: Optional[str] = None  # None = no speculation
    speculative_num_steps: Optional[int] = None
    speculative_eagle_topk: Optional[int] = None
    speculative_num_draft_tokens: Optional[int] = None
    speculative_draft_model_path: Optional[str] = None
    kv_cache_dtype: Optional[str] = None
    quantization: Optional[str] = None
    mem_fraction_static: Optional[float] = None
    max_total_tokens: Optional[int] = None  # the flag (None = sized by memory)
    kv_capacity_tokens: Optional[int] = None  # the pool SGLang actually allocated (max_total_num_tokens)
    max_running_requests: Optional[int] = None  # effective running-batch cap
    chunked_prefill_size: Optional[int] = None
    # --schedule-conservativeness as the scheduler resolved it: scales the new_token_ratio SGLang
    # starts from (analysis/predict.py); None where /server_info does not say
    schedule_conservativeness: Optional[float] = None
    context_length: Optional[int] = None
    enable_metrics: Optional[bool] = None
    decode_log_interval: Optional[int] = None
    weight_gb: Optional[float] = None
    kv_cache_gb: Optional[float] = None
    graph_gb: Optional[float] = None
    # Simulated seconds per wall second. 1.0 for a real server; `specmon sim --speed X` reports X
    # in /server_info as "sim_speed". Client-side durations are multiplied by it and client-side
    # rates divided by it, so a sped-up demo shows the times the simulated GPU would show.
    time_scale: float = 1.0
    # The server said it is specmon's simulator (/server_info's sim_profile, which SGLang never
    # writes): only then does specmon ask it for the GPU it simulates (sources/simgpu.py).
    simulated: bool = False
    # Start-up seconds by phase as the server reports them (0.5.23's /server_info startup_time:
    # load_weight, kv_cache_allocation, scheduler_e2e, cuda_graph (its phases summed),
    # tokenizer_e2e); None where it does not.
    startup_s: Optional[dict[str, float]] = None

    @property
    def speculative(self) -> Optional[bool]:
        if self.model is None and self.speculative_algorithm is None:
            return None  # not known yet
        return self.speculative_algorithm is not None

    def server_args(self) -> dict[str, Any]:
        """The server settings that matter, as written to session.json (never the API key)."""
        return {
            "model": self.model,
            "speculative_algorithm": self.speculative_algorithm,
            "speculative_num_steps": self.speculative_num_steps,
            "speculative_eagle_topk": self.speculative_eagle_topk,
            "speculative_num_draft_tokens": self.speculative_num_draft_tokens,
            "speculative_draft_model_path": self.speculative_draft_model_path,
            "kv_cache_dtype": self.kv_cache_dtype,
            "quantization": self.quantization,
            "mem_fraction_static": self.mem_fraction_static,
            "max_total_tokens": self.max_total_tokens,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "max_running_requests": self.max_running_requests,
            "tp_size": self.tp_size,
            "chunked_prefill_size": self.chunked_prefill_size,
            "schedule_conservativeness": self.schedule_conservativeness,
            "startup_s": self.startup_s,
        }


# --------------------------------------------------------------------------------------------
# GPU and host readings


@dataclass
class GpuProcess:
    pid: int
    name: Optional[str]
    used_bytes: Optional[int]  # None when the driver does not say (virtualised GPUs, containers)


@dataclass
class GpuReading:
    index: int
    name: Optional[str]
    uuid: Optional[str]
    mem_used_bytes: Optional[int]
    mem_total_bytes: Optional[int]
    util_pct: Optional[float]
    power_w: Optional[float]
    temp_c: Optional[float]
    processes: Optional[list[GpuProcess]] = None  # None = the driver refused to list them
    # "nvml": this host's card, read through NVML. "simulated": the card a simulated arm (`specmon
    # sim`) says it simulates, read from that arm alone (sources/simgpu.py); never a host reading.
    source: str = "nvml"
    arm: Optional[str] = None  # a simulated GPU's arm
    # What holds the memory, as the simulator accounts it (NVML does not say: None there).
    weights_bytes: Optional[int] = None
    kv_pool_bytes: Optional[int] = None
    cuda_graph_bytes: Optional[int] = None
    power_limit_w: Optional[float] = None

    @property
    def simulated(self) -> bool:
        return self.source == "simulated"


@dataclass
class GpuSnapshot:
    """One NVML reading of every GPU on this host (available/reason/driver_version are NVML's),
    followed by the simulated GPUs of the simulated arms (GpuReading.source "simulated")."""

    ts: float
    available: bool
    reason: Optional[str] = None  # why NVML is unavailable, e.g. "no NVIDIA driver (libnvidia-ml.so.1 not found)"
    driver_version: Optional[str] = None
    gpus: list[GpuReading] = field(default_factory=list)

    @property
    def host_gpus(self) -> list[GpuReading]:
        return [g for g in self.gpus if not g.simulated]

    @property
    def simulated_gpus(self) -> list[GpuReading]:
        return [g for g in self.gpus if g.simulated]


@dataclass
class HostReading:
    ts: float
    cpu_pct: Optional[float]
    mem_used_bytes: Optional[int]
    mem_total_bytes: Optional[int]
    server_rss_bytes: Optional[int] = None  # only when the server process is local and known
    server_cpu_pct: Optional[float] = None


# --------------------------------------------------------------------------------------------
# Fleets


@dataclass
class RankReading:
    """One data-parallel rank of a worker (SGLang labels its series with dp_rank)."""

    dp_rank: int
    running_reqs: Optional[int] = None
    queued_reqs: Optional[int] = None
    kv_used_tokens: Optional[int] = None
    kv_capacity_tokens: Optional[int] = None
    kv_usage: Optional[float] = None


@dataclass
class WorkerStatus:
    """What a gateway (or Prometheus) says about one worker, beside what the worker says itself."""

    url: str
    arm: str  # the arm name specmon shows it under
    role: Optional[str] = None  # regular | prefill | decode
    healthy: Optional[bool] = None
    active_requests: Optional[int] = None  # the gateway's count of requests routed and not finished
    circuit: Optional[str] = None  # circuit-breaker state: closed | open | half_open
    reachable: Optional[bool] = None  # specmon can scrape the worker itself


@dataclass
class FleetStatus:
    """One tick of a fleet: a gateway in front of workers, or a Prometheus server's view."""

    name: str
    kind: str  # "gateway" | "prometheus"
    url: str
    up: bool
    reason: Optional[str] = None
    workers: list[WorkerStatus] = field(default_factory=list)
    healthy: Optional[int] = None
    total: Optional[int] = None
    routed_req_s: Optional[float] = None  # requests the gateway routed per second, over the last window
    policy: Optional[str] = None  # routing policy
    source: Optional[str] = None  # where worker figures come from: "workers" (scraped directly) | "gateway" | "prometheus"
    scrape_interval_s: Optional[float] = None  # Prometheus: the targets' scrape interval
    # A PD gateway's own timing (smg 1.x smg_pd_*), means over its last window with requests:
    pd_ttft_s: Optional[float] = None  # prefill dispatch to the first decode token
    pd_prefill_s: Optional[float] = None  # the prefill phase (queueing and compute on the prefill worker)


@dataclass
class FleetReading:
    """What one poll of a fleet source found: its status, the workers to watch now, and, for
    workers the fleet measures itself (Prometheus; a gateway's fan-out for a worker specmon cannot
    reach), a Sample each."""

    status: FleetStatus
    workers: list[ArmSpec] = field(default_factory=list)
    samples: dict[str, Sample] = field(default_factory=dict)  # arm -> the fleet's own reading
    scrape_workers: bool = True  # True: scrape each worker directly as well (a gateway's workers)


# --------------------------------------------------------------------------------------------
# One scrape of one arm


@dataclass
class Sample:
    """One reading of one arm at one tick. Columns of samples.csv come from here."""

    ts: float
    arm: str
    up: bool
    state: str = "up"  # up | starting | down | refused | timeout | unauthorized | error | failed | stale
    reason: Optional[str] = None  # human words for a state other than "up"
    source: Optional[str] = None  # "metrics" | "loads" | "log" | "prometheus": which source filled the values
    running_reqs: Optional[int] = None
    queued_reqs: Optional[int] = None
    kv_used_tokens: Optional[int] = None
    kv_capacity_tokens: Optional[int] = None
    kv_usage: Optional[float] = None
    gen_tok_s: Optional[float] = None
    gen_tok_s_gauge: Optional[float] = None  # SGLang's own gen_throughput gauge (last decode log window)
    accept_length: Optional[float] = None  # None also when speculation is off (see spec_enabled)
    accept_rate: Optional[float] = None
    spec_enabled: Optional[bool] = None
    ttft_p50_s: Optional[float] = None
    ttft_p90_s: Optional[float] = None
    ttft_p99_s: Optional[float] = None
    queue_time_p50_s: Optional[float] = None
    queue_time_mean_s: Optional[float] = None  # mean server queue time over the window
    ttft_mean_s: Optional[float] = None  # mean server TTFT over the window
    itl_mean_s: Optional[float] = None
    requests_finished_total: Optional[float] = None
    server_restarted: bool = False  # a counter went backwards since the previous scrape
    gpu_mem_used_bytes: Optional[int] = None
    gpu_mem_total_bytes: Optional[int] = None
    gpu_power_w: Optional[float] = None
    gpu_source: Optional[str] = None  # "nvml" | "simulated": where the gpu_* figures came from
    offered_concurrency: Optional[int] = None
    level: Optional[int] = None  # index of the ramp level (0-based), None outside a ramp
    scrape_s: Optional[float] = None  # how long the scrape took
    server_rss_bytes: Optional[int] = None  # server process tree, when local
    server_cpu_pct: Optional[float] = None  # server process tree, % of one core, when local
    # Fleets (a gateway's workers, a Prometheus-scraped fleet): which worker this arm is, its
    # role and, per data-parallel rank, what each rank runs (summed gauges never hide a rank).
    worker: Optional[str] = None  # the worker's URL or id; None for a plain server
    role: Optional[str] = None  # regular | prefill | decode
    ranks: Optional[list[RankReading]] = None  # one per DP rank when the server exports them
    stale_s: Optional[float] = None  # fleets: age of the newest value behind this row (series, turn)
    cache_hit_rate: Optional[float] = None  # prefix-cache hits / prompt tokens over a window (Prometheus fleets)
    # SGLang 0.5.23's split of the KV pool: used (kv_used_tokens) + evictable (held only by the
    # radix cache, freed on demand) + available (free) = capacity. None where the server lacks them.
    kv_evictable_tokens: Optional[int] = None
    kv_available_tokens: Optional[int] = None
    # 1 - the share of wall time the scheduler was idle over the rate window (0.5.23's
    # scheduler_idle_seconds_total): how busy the engine loop is, independent of batch size.
    scheduler_busy_share: Optional[float] = None
    retracted_reqs: Optional[int] = None  # SGLang's num_retracted_reqs gauge
    # retractions per second of finished requests (0.5.10's num_retractions histogram; 0.5.23 has no counter)
    retractions_per_s: Optional[float] = None


def kv_usage_of(usage: Optional[float], used: Optional[int], capacity: Optional[int]) -> Optional[float]:
    """KV pool usage: the server's own figure when it gives one, else used / capacity; None when
    neither is known. Every source and pane fills kv_usage through this one rule. A share outside
    [0, MAX_KV_USAGE] or not finite is a bad reading (5,500 % and 1e+308 were written), not a usage:
    the other figure is tried, else None."""
    for share in (usage, used / capacity if used is not None and capacity else None):
        if share is not None and math.isfinite(share) and 0.0 <= share <= MAX_KV_USAGE:
            return share
    return None


MAX_KV_USAGE = 1.5  # a pool counted over its size for a moment (retraction) stays; beyond is an error


# The contract columns of samples.csv, in order (users' scripts rely on them), then our additions.
SAMPLE_COLUMNS = [
    "ts", "arm", "up", "running_reqs", "queued_reqs", "kv_used_tokens", "kv_capacity_tokens",
    "kv_usage", "gen_tok_s", "accept_length", "accept_rate", "ttft_p50_s", "ttft_p90_s",
    "gpu_mem_used_bytes", "gpu_mem_total_bytes", "gpu_power_w", "offered_concurrency", "level",
    # additions (after the contract columns so scripts that index by position keep working)
    "state", "reason", "source", "ttft_p99_s", "queue_time_p50_s", "queue_time_mean_s",
    "ttft_mean_s", "itl_mean_s", "server_restarted", "scrape_s", "marker",
    "gen_tok_s_gauge", "spec_enabled", "requests_finished_total", "server_rss_bytes", "server_cpu_pct",
    # fleets: a row per worker (and, with DP ranks, a row per rank with dp_rank set)
    "worker", "role", "dp_rank", "stale_s",
    "cache_hit_rate",
    "gpu_source",
    # SGLang 0.5.23's KV split, scheduler busy share, retractions
    "kv_evictable_tokens", "kv_available_tokens", "scheduler_busy_share", "retracted_reqs", "retractions_per_s",
]


# gpus.csv: one row per GPU per tick (every GPU of the host, whichever arm uses it), so a
# multi-GPU host (TP=8) keeps a per-GPU history that replays through the GPU pane.
GPU_COLUMNS = [
    "ts", "gpu", "name", "uuid", "mem_used_bytes", "mem_total_bytes", "util_pct", "power_w", "temp_c",
    "processes",  # "pid:bytes;pid:bytes" ("pid:" when the driver hides a process's memory); "-" none; empty = refused
    "available", "reason",
    # "nvml" | "simulated" (a simulated arm's card: `arm` says whose), then the simulator's memory split
    "source", "arm", "weights_bytes", "kv_pool_bytes", "cuda_graph_bytes", "power_limit_w",
]


# --------------------------------------------------------------------------------------------
# Load: one request, one level


@dataclass
class RequestRecord:
    """One request the ramp sent, timed on the client. Columns of requests.csv."""

    arm: str
    level: int
    offered_concurrency: int
    request_id: str
    t_scheduled: float  # wall clock (specmon.clock) when the ramp wanted to send it
    t_start: float  # wall clock when the request was sent
    t_end: Optional[float] = None  # wall clock when its last byte arrived (None if it never ended)
    ttft_s: Optional[float] = None  # first token (not first byte) after t_start
    e2e_s: Optional[float] = None
    prompt_tokens: Optional[int] = None  # as the server counted them
    output_tokens: Optional[int] = None
    itl_mean_s: Optional[float] = None
    itl_p99_s: Optional[float] = None
    tpot_s: Optional[float] = None  # (e2e - ttft) / (output_tokens - 1)
    spec_verify_ct: Optional[int] = None
    accept_length: Optional[float] = None  # output_tokens / spec_verify_ct
    first_byte_s: Optional[float] = None
    queue_time_s: Optional[float] = None  # server-side, from meta_info when --enable-metrics
    chunks: Optional[int] = None
    in_window: bool = True  # False when it started in the settle window of its level
    # Which clock timed ttft_s/e2e_s/tpot_s: "client" (specmon's, always for a real server) or
    # "server" (a sped-up simulator's own stamps; see load/client.py RequestOutcome.timed).
    timing: str = "client"
    status: str = "ok"  # ok | error | timeout | cancelled
    error: Optional[str] = None
    cached_tokens: Optional[int] = None  # prompt tokens the server's prefix cache held (meta_info)
    turn: Optional[int] = None  # multi-turn runs: the turn of its conversation (1 = the first)
    # The server's own id for the request (SGLang's meta_info.id, its rid; the "id" of an OpenAI
    # chunk): what joins this row with the server's logs, traces and a wire log.
    rid: Optional[str] = None
    # SGLang's own speculative counts for it (meta_info; sources/spec_counts.py lists their names): drafts
    # accepted, drafts proposed, and the accepted-drafts-per-verify-step histogram as `k:count`
    # pairs. None where the server did not return them.
    spec_accepted_drafts: Optional[int] = None
    spec_proposed_drafts: Optional[int] = None
    spec_accept_hist: Optional[str] = None


REQUEST_COLUMNS = [
    "arm", "level", "offered_concurrency", "request_id", "t_start", "ttft_s", "e2e_s",
    "prompt_tokens", "output_tokens", "itl_mean_s", "itl_p99_s", "spec_verify_ct", "status", "error",
    # additions
    "t_scheduled", "first_byte_s", "tpot_s", "accept_length", "queue_time_s", "chunks", "in_window",
    "timing", "t_end", "cached_tokens", "turn", "rid",
    "spec_accepted_drafts", "spec_proposed_drafts", "spec_accept_hist",
]


@dataclass
class LevelResult:
    """One arm at one ramp level. Columns of levels.csv."""

    arm: str
    level: int
    offered_concurrency: int
    achieved_concurrency: Optional[float] = None
    duration_s: Optional[float] = None
    ok: int = 0
    failed: int = 0
    output_tok_s: Optional[float] = None
    per_user_tok_s: Optional[float] = None
    ttft_p50_s: Optional[float] = None
    ttft_p90_s: Optional[float] = None
    ttft_p99_s: Optional[float] = None
    ttft_mean_s: Optional[float] = None
    tpot_p50_s: Optional[float] = None
    itl_p50_s: Optional[float] = None
    itl_p99_s: Optional[float] = None
    e2e_mean_s: Optional[float] = None
    accept_length: Optional[float] = None
    queue_time_p50_s: Optional[float] = None
    kv_usage_max: Optional[float] = None
    running_mean: Optional[float] = None  # server running requests, mean over the window
    queued_mean: Optional[float] = None
    queued_share: Optional[float] = None  # share of samples with queued > 5% of C
    littles_law_ratio: Optional[float] = None  # completions/s x mean e2e / C: ~1 in a valid closed loop
    valid: bool = True
    invalid_reason: Optional[str] = None
    # The knee's own level carries its definition ("plateau", "queueing", both ";"-separated), even
    # when it was confirmed a level or two later; the confirming level names it in knee_confirmed.
    knee: Optional[str] = None
    knee_confirmed: Optional[str] = None
    note: Optional[str] = None  # e.g. a level too short to say who limited it (analysis/levels.py)
    # added by LOAD: inputs of the queueing knee and of the queueing-TTFT call
    queue_time_mean_s: Optional[float] = None  # server queue time per request, mean (meta_info or histogram)
    capped_share: Optional[float] = None  # share of samples with running at the cap or KV >= 95 %
    queue_ttft_share: Optional[float] = None  # mean queue time / mean TTFT
    ttft_note: Optional[str] = None  # e.g. "TTFT 4.0 s: 3.2 s queue, 0.8 s prefill" when queue > 50 %
    # added by ANALYSIS: the confidence of output_tok_s (batch means over the window, 5 s batches
    # in the arm's seconds; analysis/levels.py) and SLO attainment when the ramp has SLOs
    output_tok_s_se: Optional[float] = None  # standard error of output_tok_s
    output_tok_s_batches: Optional[int] = None  # batches behind it (SE has batches - 1 degrees of freedom)
    slo_n: Optional[int] = None  # in-window requests judged against the SLOs (ok + failed)
    slo_met: Optional[int] = None  # of them, ok with TTFT <= slo_ttft_s and TPOT <= slo_tpot_s
    slo_attainment: Optional[float] = None  # slo_met / slo_n
    # Open-loop levels (--rates): the request rate offered and the rate of completions in the
    # window, per second of the arm's time; offered_rate None: a closed-loop (concurrency) level.
    offered_rate: Optional[float] = None
    achieved_rate: Optional[float] = None
    # The prefix cache over the level: cached prompt tokens / prompt tokens (analysis/levels.py
    # says from which of SGLang's figures), and the cached tokens behind it.
    cache_hit_rate: Optional[float] = None
    cached_tokens: Optional[int] = None
    accept_length_source: Optional[str] = None  # "requests" (meta_info) | "server" (the gauge)
    # A ramp through a gateway: beside the gateway's row (the fleet, client-side figures) one row
    # per worker, from that worker's own samples over the level's window (analysis/fleet_levels.py);
    # `worker` is the worker's URL on those rows and None on every other row.
    worker: Optional[str] = None
    # The statistics window (analysis/levels.py): the level after its settle window, to when it
    # stopped sending. Throughput, percentiles and shares are over it; duration_s is the whole
    # level, settle included. window_start is wall epoch seconds, window_s the arm's seconds.
    window_start: Optional[float] = None
    window_s: Optional[float] = None
    # The level's exact acceptance from its in-window requests' own counts (meta_info): accepted
    # / proposed drafts, and the accepted-drafts-per-verify-step histogram summed over them
    # (`k:count` pairs, `;`-separated). None where the requests did not carry them.
    accept_rate: Optional[float] = None
    accept_hist: Optional[str] = None

    @property
    def offered(self) -> float:
        """What the level offered: its request rate (open loop) or its concurrency."""
        return self.offered_rate if self.offered_rate is not None else self.offered_concurrency

    @property
    def label(self) -> str:
        """'C=4' for a concurrency level, 'r=4/s' for a rate level."""
        return offered_label(self.offered_concurrency, self.offered_rate)


def offered_label(concurrency: Optional[float], rate: Optional[float] = None) -> str:
    """A level's offer in a few characters: 'r=2.5/s' when it offered a rate, else 'C=8'."""
    if rate is not None:
        return f"r={rate:g}/s"
    return f"C={'?' if concurrency is None else f'{concurrency:g}'}"


def offered_key(x: float) -> str:
    """A level's offered value as a mapping key (knees, SLO levels): '8', '2.5'."""
    return f"{x:g}"


LEVEL_COLUMNS = [
    "arm", "offered_concurrency", "achieved_concurrency", "duration_s", "ok", "failed",
    "output_tok_s", "per_user_tok_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s",
    "itl_p50_s", "itl_p99_s", "accept_length", "queue_time_p50_s", "kv_usage_max", "knee",
    # additions
    "level", "ttft_mean_s", "e2e_mean_s", "running_mean", "queued_mean", "queued_share",
    "littles_law_ratio", "valid", "invalid_reason",
    "queue_time_mean_s", "capped_share", "queue_ttft_share", "ttft_note",
    "output_tok_s_se", "output_tok_s_batches", "slo_n", "slo_met", "slo_attainment", "knee_confirmed", "note",
    "offered_rate", "achieved_rate", "cache_hit_rate", "cached_tokens", "accept_length_source",
    "window_start", "window_s", "worker", "accept_rate", "accept_hist",
]


# --------------------------------------------------------------------------------------------
# Knees: what analysis.knee concludes about one arm (session.json's `knees`, the TUI's knee
# banner, the headless summary and the report all read this one shape)


@dataclass
class PredictedKnee:
    """The knee knowable before any load, from the KV pool and the request cap (analysis/predict.py).

    `concurrency` is the prediction: the lower of what SGLang admits at once (a request needs its
    prompt and its whole output free, each running one keeps osl x new_token_ratio, or its whole
    output on 0.5.23 when it ignores EOS) and the request cap. `kv_full_length`
    (pool / (isl + osl), every request at full length) is shown beside it, never used as the knee."""

    concurrency: Optional[float]
    kv_admitted: Optional[int] = None  # 1 + floor((pool - isl - osl) / (isl + osl x ratio))
    kv_full_length: Optional[float] = None
    request_cap: Optional[int] = None
    new_token_ratio: Optional[float] = None
    ratio_assumed: bool = False  # True: the server did not export its ratio, SGLang's initial one is used
    isl: Optional[int] = None
    osl: Optional[int] = None
    bound_by: Optional[str] = None  # "KV pool" | "request cap"
    detail: str = ""


@dataclass
class PowerKneeSummary:
    concurrency: Optional[float] = None  # argmax of X / TTFT p50 over valid levels
    power_tok_s_per_s_ttft: Optional[float] = None
    confirmed: bool = False


@dataclass
class HeadlineKnee:
    """The one knee an operator acts on, per arm (analysis/knee.py headline_knee): the queueing
    knee (past it requests wait), else the throughput plateau. The other figures stay in
    KneesSummary, one key away in the TUI and after it in headless output."""

    definition: str  # "queueing" | "plateau"
    concurrency: float  # offered C (or rate) of the knee's level
    confirmed: bool  # False: called on the ramp's last level, no higher level confirmed it
    words: str  # "queueing knee C=72 (ramp's last level: add a level to confirm)"


@dataclass
class SloSummary:
    slo_ttft_s: Optional[float] = None
    slo_tpot_s: Optional[float] = None
    min_attainment: float = 0.9
    c_slo: Optional[float] = None  # largest C whose attainment's Wilson lower 95% bound >= min_attainment
    c_goodput: Optional[float] = None  # argmax of tok/s x attainment
    goodput_tok_s: Optional[float] = None
    goodput_confirmed: bool = False
    levels: dict[str, Any] = field(default_factory=dict)  # C -> attainment figures


@dataclass
class SearchSummary:
    """The SLO search (analysis/search.py) for one arm: the highest level whose attainment's
    Wilson lower 95% bound met the target, between `lo` (the highest that met it) and `hi` (the
    lowest that did not); `answer` is lo, None when even the first level missed it."""

    unit: str  # "concurrency" | "rate"
    target: float  # the attainment the lower bound must reach
    start: float
    max_level: float
    tried: dict[str, bool] = field(default_factory=dict)  # offered value -> met, in the order run
    lo: Optional[float] = None
    hi: Optional[float] = None
    answer: Optional[float] = None
    done: bool = False
    levels_used: int = 0
    reason: str = ""  # why it stopped, in words


@dataclass
class FleetLevels:
    """A ramp through a gateway, for its ramp arm: the workers behind it, how evenly the gateway
    spread the load on each level, and which worker saturated first (analysis/fleet_levels.py)."""

    arm: str  # the ramp's arm: the gateway
    fleet: str  # the fleet source's name
    workers: list[str] = field(default_factory=list)  # arm names of the workers seen in the ramp
    # level index (as text) -> max / mean of the workers' mean running requests (1.0: even)
    imbalance: dict[str, Optional[float]] = field(default_factory=dict)
    busiest: dict[str, Optional[str]] = field(default_factory=dict)  # level index -> the worker at the max
    # the worker whose knee (queueing or plateau, on its own rows) came at the lowest offered level
    first_saturated: Optional[str] = None
    first_saturated_at: Optional[float] = None  # that knee's offered level (the fleet's C)
    first_saturated_by: Optional[str] = None  # "queueing" | "plateau"
    fleet_knee: Optional[float] = None  # the fleet row's own knee (queueing, else plateau)
    detail: str = ""


@dataclass
class KneesSummary:
    """Every knee definition's value for one arm over its finished levels (analysis.knee)."""

    plateau: Optional[float] = None
    plateau_confirmed_at_level: Optional[int] = None
    plateau_detail: str = ""
    plateau_resolved: Optional[bool] = None  # False: within the noise
    queueing: Optional[float] = None
    queueing_confirmed_at_level: Optional[int] = None
    queueing_detail: str = ""
    c_90: Optional[float] = None
    eta: Optional[dict[str, Optional[float]]] = None  # C -> added tok/s per added stream, relative
    eta_upper95: Optional[dict[str, Optional[float]]] = None
    plateau_theta: Optional[float] = None
    plateau_point_estimate_at: Optional[list[int]] = None
    eta_halfwidth_median: Optional[float] = None
    output_tok_s_se: dict[str, Optional[float]] = field(default_factory=dict)
    queueing_levels: Optional[list[int]] = None
    queue_share_of_ttft: dict[str, Optional[float]] = field(default_factory=dict)
    power: PowerKneeSummary = field(default_factory=PowerKneeSummary)
    ttft_dispersion_levels: list[int] = field(default_factory=list)
    predicted: Optional[PredictedKnee] = None
    invalid_levels: list[int] = field(default_factory=list)
    slo: Optional[SloSummary] = None  # None: the ramp had no SLOs
    search: Optional[SearchSummary] = None  # the SLO search, when the ramp was one
    # The one knee to act on (queueing, else plateau); None: neither is called yet. `ramp_end`:
    # what the ramp's end says about a knee it could not confirm ("the ramp ended at the knee:
    # add a level"), "" otherwise.
    headline: Optional[HeadlineKnee] = None
    ramp_end: str = ""


# --------------------------------------------------------------------------------------------
# Events: what the live session tells its front end (TUI or headless), in order.
# Functional tests assert on the sequence of these.


@dataclass
class Event:
    ts: float = field(default_factory=clock.wall, kw_only=True)


@dataclass
class ArmInfoUpdated(Event):
    arm: str
    info: ArmInfo
    source: Optional[str] = None  # "metrics" | "loads"


@dataclass
class SamplesTick(Event):
    """One tick: a Sample for every arm, the GPU and host readings of this tick."""

    samples: list[Sample]
    gpus: Optional[GpuSnapshot] = None
    host: Optional[HostReading] = None
    fleets: list[FleetStatus] = field(default_factory=list)


@dataclass
class ArmPhase(Event):
    """Launch mode: a startup phase of a launched server (loading weights, KV pool, graphs, ready, failed)."""

    arm: str
    phase: str
    detail: Optional[str] = None


@dataclass
class LogLine(Event):
    arm: str
    line: str


@dataclass
class LevelStarted(Event):
    level: int
    offered_concurrency: int  # a rate level: its max_concurrency cap (0: none)
    planned_s: Optional[float]
    levels_total: int  # 0: not known in advance (an SLO search)
    offered_rate: Optional[float] = None  # requests per second per arm (open loop); None: concurrency


@dataclass
class LevelProgress(Event):
    level: int
    elapsed_s: float
    planned_s: Optional[float]
    done_requests: dict[str, int]  # per arm
    eta_s: Optional[float] = None  # whole ramp, in wall seconds (elapsed_s/planned_s are the arms' seconds)
    in_flight: dict[str, int] = field(default_factory=dict)  # rate levels: per arm, arrived and not finished
    paused: bool = False  # the ramp is paused: elapsed_s holds still (the level re-runs at the resume)
    # the level's plan has run out (elapsed_s == planned_s, never past it): in-flight requests drain
    draining: bool = False
    # elapsed_s / planned_s on the wall clock (eta_s's clock), for a sped-up simulator's ramp
    elapsed_wall_s: Optional[float] = None
    planned_wall_s: Optional[float] = None


@dataclass
class PacerStats:
    """The load loop's pacer over one level of many streams (load/loop.py LoadLoop.pace)."""

    pauses: int  # pauses this level: loop passes that read a socket while pacing
    pause_ms: float  # the newest pause's length
    chunk_gap_ms: Optional[float] = None  # the chunk gaps' 1st percentile it was a share of (None: none seen)


@dataclass
class ArmBackoff:
    """How one arm's streams waited on one level after refused or unanswered requests."""

    backoff_s: float  # stream-seconds spent waiting before a next request
    backoff_share: Optional[float] = None  # of the level's stream-seconds (None: a level of no length)
    # HTTP status -> requests it refused; session.json writes each as its own "http_<status>" key,
    # as the figures were written before they were typed
    http: dict[int, int] = field(default_factory=dict)
    no_answer: dict[str, int] = field(default_factory=dict)  # why -> requests; the key only when any

    def to_plain(self) -> dict[str, Any]:
        out: dict[str, Any] = {"backoff_s": self.backoff_s, "backoff_share": self.backoff_share}
        out.update((f"http_{code}", n) for code, n in sorted(self.http.items()))
        if self.no_answer:
            out["no_answer"] = dict(self.no_answer)
        return out

    @classmethod
    def from_plain(cls, obj: dict[str, Any]) -> "ArmBackoff":
        if not isinstance(obj, dict):
            raise TypeError(f"expected an object for ArmBackoff, got {type(obj).__name__}")
        no_answer = obj.get("no_answer") or {}
        if not isinstance(no_answer, dict):
            raise TypeError(f"expected an object for no_answer, got {type(no_answer).__name__}")
        return cls(backoff_s=_as_float(obj["backoff_s"]), backoff_share=_as_float(obj.get("backoff_share")),
                   http={int(k[5:]): v for k, v in obj.items() if k.startswith("http_") and k[5:].isdigit()},
                   no_answer=dict(no_answer))


@dataclass
class LoadClientStats:
    """What the load client cost and how it kept pace on one level: one entry of session.json's
    load_client list. The fields are in the order of the JSON's keys."""

    level: int
    offered_concurrency: int  # a rate level: its max_concurrency cap (0: none)
    reader: Optional[str] = None  # "C" | "Python" (load/native.py); None: recorded before it was said
    tokens: Optional[int] = None  # output tokens the level's requests streamed
    client_cpu_s: Optional[float] = None  # the load thread's CPU over the level
    cpu_ms_per_1k_tokens: Optional[float] = None  # None: no tokens
    connect_s: Optional[float] = None  # connections opened before the level's first request
    connections_opened_ahead: Optional[dict[str, int]] = None  # arm -> connections opened then
    # the load loop's lag behind its 100 ms ticker over the level (wall seconds)
    lag_p50_s: Optional[float] = None
    lag_p99_s: Optional[float] = None
    lag_max_s: Optional[float] = None
    lag_samples: Optional[int] = None
    pacer: Optional[PacerStats] = None  # a paced level only: session.json has no "pacer" key otherwise
    server_pace: Optional[dict[str, float]] = None  # arm -> simulated s per wall s it kept; None: none known
    backoff: Optional[dict[str, ArmBackoff]] = None  # the arms that waited; None: none did

    def to_plain(self) -> dict[str, Any]:
        """The JSON object session.json and events.jsonl hold: the dict the ramp wrote before these
        figures were typed, key for key."""
        out: dict[str, Any] = {}
        for f in _LOAD_CLIENT_FIELDS:
            v = getattr(self, f)
            if f == "pacer":
                if v is None:
                    continue
                v = {"pauses": v.pauses, "pause_ms": v.pause_ms, "chunk_gap_ms": v.chunk_gap_ms}
            elif f == "backoff" and v is not None:
                v = {arm: b.to_plain() for arm, b in v.items()}
            elif isinstance(v, dict):
                v = dict(v)
            out[f] = v
        return out

    @classmethod
    def from_plain(cls, obj: dict[str, Any]) -> Optional["LoadClientStats"]:
        """Back from to_plain's object; older recordings lack later keys (they stay None) and a
        level finished without figures was written as {} (None here). A value of the wrong shape
        is a TypeError or KeyError, as codec.build raises for other dataclasses."""
        if not isinstance(obj, dict):
            raise TypeError(f"expected an object for LoadClientStats, got {type(obj).__name__}")
        if not obj:
            return None
        kw: dict[str, Any] = {f: obj[f] for f in _LOAD_CLIENT_FIELDS if f in obj}
        for f in ("client_cpu_s", "cpu_ms_per_1k_tokens", "connect_s", "lag_p50_s", "lag_p99_s", "lag_max_s"):
            if f in kw:
                kw[f] = _as_float(kw[f])
        for f in ("connections_opened_ahead", "server_pace", "backoff"):
            if kw.get(f) is not None and not isinstance(kw[f], dict):
                raise TypeError(f"expected an object for {f}, got {type(kw[f]).__name__}")
        if kw.get("server_pace") is not None:
            kw["server_pace"] = {arm: _as_float(p) for arm, p in kw["server_pace"].items()}
        if kw.get("pacer") is not None:
            p = kw["pacer"]
            if not isinstance(p, dict):
                raise TypeError(f"expected an object for pacer, got {type(p).__name__}")
            kw["pacer"] = PacerStats(pauses=p["pauses"], pause_ms=_as_float(p["pause_ms"]),
                                     chunk_gap_ms=_as_float(p.get("chunk_gap_ms")))
        if kw.get("backoff") is not None:
            kw["backoff"] = {arm: ArmBackoff.from_plain(b) for arm, b in kw["backoff"].items()}
        return cls(**kw)


def _as_float(v: Any) -> Any:
    # JSON writes 2.0 as 2.0, but a hand-made or older file may hold 2: read it as the float it stands for
    return float(v) if type(v) is int else v


_LOAD_CLIENT_FIELDS = tuple(f.name for f in fields(LoadClientStats))


@dataclass
class LevelFinished(Event):
    level: int
    results: list[LevelResult]  # one per arm
    # arm -> its knees over its levels so far; empty when the sender computed none.
    knees: dict[str, KneesSummary] = field(default_factory=dict)
    # What the load client cost and how it kept pace on this level (session.json load_client);
    # None where the sender measured no load (a rebuilt older folder, a test's level).
    load_client: Optional[LoadClientStats] = None
    # A ramp through a gateway: its arm -> the fleet's figures so far (session.json fleet_levels).
    fleets: dict[str, FleetLevels] = field(default_factory=dict)


@dataclass
class KneeCalled(Event):
    arm: str
    definition: str  # "plateau" | "queueing" | "predicted"
    concurrency: Optional[float]
    detail: str
    # plateau only: its 95% bounds settle it (True), it is within the noise (False), no SEs (None)
    resolved: Optional[bool] = None
    predicted: Optional[PredictedKnee] = None  # definition "predicted" only: every figure behind it
    knee_level: Optional[int] = None  # plateau/queueing: the level index the knee is at (its row is labelled)
    confirmed_level: Optional[int] = None  # plateau/queueing: the level index that confirmed it


@dataclass
class RampFinished(Event):
    reason: str  # "done" | "cancelled" | "stopped: ..." | "error: ..."
    # What keeps the ramp from standing as a measurement; the exit code is read from these.
    # arm -> the 401/403 its server answered (bad credentials are bad input: exit 2).
    denied: dict[str, str] = field(default_factory=dict)
    # arm -> how its server was still gone when the ramp ended (exit 3).
    gone: dict[str, str] = field(default_factory=dict)
    # Requests went out and not one succeeded: why, arm by arm (exit 3); None otherwise.
    never_succeeded: Optional[str] = None


@dataclass
class Marker(Event):
    label: str


@dataclass
class NoAnswer:
    """An arm whose server did not answer one scrape in the whole session."""

    arm: str
    url: str  # as shown: credentials left out
    reason: str  # the last scrape's failure


# What ended a session (SessionEnded.cause). A signal exits as the shell reports a process the
# signal ended (128 + N); the others are an ordinary end, or an error the caller reports.
END_CAUSES = ("ramp ended", "stopped", "duration", "interrupted", "terminated", "hangup",
              "recording failed", "error", "cancelled")


@dataclass
class SessionEnded(Event):
    reason: str  # as the operator reads it
    cause: str = "stopped"  # one of END_CAUSES; folders written before it read "stopped"
    # Every arm whose server never answered a scrape (all of them: the session measured nothing).
    never_answered: list[NoAnswer] = field(default_factory=list)


@dataclass
class SessionStarted(Event):
    """The first event of every session: what is watched, how, and where it is recorded."""

    mode: str  # attach | ramp | launch | demo | replay
    arms: list[ArmSpec]
    interval_s: Optional[float] = None
    isl: Optional[int] = None  # the lengths the predicted knee assumes
    osl: Optional[int] = None
    launch: Optional[LaunchContext] = None  # launch mode only
    panes: Optional[list[str]] = None  # the layout's `panes:` (specmon/panes.py); None: all


@dataclass
class LaunchContext:
    """Launch mode: the layout the servers came from (session.json layout, layout_file, logs_dir)."""

    layout: dict[str, Any]
    layout_file: Optional[str]
    logs_dir: Optional[str]
    gateway: Optional[dict[str, str]] = None  # a launched gateway: {"binary", "version"} of the smg that ran


@dataclass
class RampStarted(Event):
    plan: RampPlan
    time_scale: dict[str, float]  # arm -> simulated seconds per wall second (1.0 for a real server)
    workload: dict[str, Any]  # load.workload.Workload.describe()


@dataclass
class FleetChanged(Event):
    """Workers joined or left a fleet (a gateway's registry, Prometheus targets). Arms of workers
    that left stay in the record; their rows simply stop."""

    fleet: str
    added: list[ArmSpec]
    removed: list[str]  # arm names
    note: str


@dataclass
class RequestFinished(Event):
    """One request the ramp sent has ended (ok, failed or cancelled): a requests.csv row."""

    record: RequestRecord



# --------------------------------------------------------------------------------------------
# Requests a server reported itself (SGLang's --export-metrics-to-file; sources/request_metrics.py)

OBSERVED_REQUEST_COLUMNS = [
    "arm", "ts_read", "rid", "received_ts", "finished_ts", "ttft_s", "queue_s", "e2e_s", "prompt_tokens",
    "output_tokens", "cached_tokens", "spec_verify_ct", "spec_accepted_drafts", "spec_proposed_drafts",
    "spec_accept_length", "retractions", "finish_reason", "file",
]


@dataclass
class ObservedRequest:
    """One finished request as the server wrote it (traffic specmon may not have sent): its
    exact TTFT, queue time and lengths; None where the line does not say. Stamps are the
    server's clock (the same host's)."""

    arm: str
    ts_read: float  # when specmon read the line (its clock)
    rid: Optional[str] = None
    received_ts: Optional[float] = None
    finished_ts: Optional[float] = None
    ttft_s: Optional[float] = None
    queue_s: Optional[float] = None
    e2e_s: Optional[float] = None
    prompt_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    cached_tokens: Optional[int] = None
    spec_verify_ct: Optional[int] = None
    spec_accepted_drafts: Optional[int] = None
    spec_proposed_drafts: Optional[int] = None
    spec_accept_length: Optional[float] = None
    retractions: Optional[int] = None
    finish_reason: Optional[str] = None
    file: Optional[str] = None  # the export file's name (not its folder)


@dataclass
class ObservedRequestsRead(Event):
    """The requests of one arm's export files read on one tick (observed_requests.csv rows; not
    in events.jsonl, as RequestFinished is not)."""

    arm: str
    records: list[ObservedRequest]
    bad_lines: int = 0  # lines of these reads that were not a request's JSON


@dataclass
class ObservedWindow(Event):
    """Aggregates of one arm's observed requests read in [t0, t1) (specmon's clock): what the
    observed operating curve consumes per window."""

    arm: str
    t0: float
    t1: float
    count: int
    ttft_p50_s: Optional[float] = None
    ttft_p90_s: Optional[float] = None
    queue_p50_s: Optional[float] = None
    queue_p90_s: Optional[float] = None
    e2e_p50_s: Optional[float] = None
    mean_prompt_tokens: Optional[float] = None
    mean_output_tokens: Optional[float] = None
    output_tokens: int = 0
    accept_length: Optional[float] = None  # accepted tokens per verify step over the window
    accept_rate: Optional[float] = None  # accepted / proposed drafts over the window
    bad_lines: int = 0


# --------------------------------------------------------------------------------------------
# The observed knee: the operating curve of traffic specmon did not send (analysis/observed.py)


@dataclass
class CurvePoint:
    """One bin of running requests of an arm's operating curve, over every second seen there."""

    running: int  # the bin's lowest running count
    width: int  # running counts in the bin: [running, running + width)
    evidence_s: float  # seconds of samples in the bin
    tok_s: Optional[float] = None  # generated tok/s, mean over those seconds
    per_user_tok_s: Optional[float] = None  # tok/s per running request
    queued_mean: Optional[float] = None
    queued_share: Optional[float] = None  # share of the seconds with a request waiting
    queue_s: Optional[float] = None  # server queue time per request (the histogram's increase)
    ttft_s: Optional[float] = None  # server TTFT per request (the histogram's increase)
    kv_usage_max: Optional[float] = None
    kv_full_share: Optional[float] = None  # share of the seconds with nothing free nor evictable, or retracting
    busy_max: Optional[float] = None  # the scheduler's busy share, highest (SGLang 0.5.23)
    requests: Optional[int] = None  # requests whose own export lines gave queue_s and ttft_s (else the histograms)


@dataclass
class ObservedKnee:
    """session.json `observed_knees[arm]`: where the arm's own traffic stops gaining throughput or
    starts queueing. `concurrency` None (with `reason`) when the traffic was too little to tell."""

    concurrency: Optional[int]
    limit: Optional[str]  # "kv_pool" | "request_cap" | "token_budget" | "compute" | None
    evidence_s: float  # seconds of samples behind the whole curve
    reason: str
    confidence: Optional[str] = None  # "low" | "medium" | "high": seconds at and above the knee
    plateau: Optional[int] = None  # running where throughput reached 90 % of its highest
    queue_onset: Optional[int] = None  # lowest running with requests waiting most of the time
    running_max: Optional[int] = None  # highest running count seen
    running_now: Optional[int] = None
    headroom: Optional[int] = None  # knee - running now (0 when at or past it)
    queue_share_now: Optional[float] = None  # queue time / TTFT over the newest window
    curve: list[CurvePoint] = field(default_factory=list)
    # where the curve's TTFT and queue time came from: "requests" (the server's per-request export
    # lines, in some bins at least), "histograms" (their increase between scrapes), None (neither)
    latency_source: Optional[str] = None
    latency_requests: int = 0  # requests placed on the curve from the export lines


@dataclass
class ObservedKneesUpdated(Event):
    """The observed knee of every arm with samples, recomputed (every few seconds and at the end)."""

    knees: dict[str, ObservedKnee]
