"""One arm at one ramp level: client statistics joined with the server's samples.

Definitions (every "unknown" is None, never 0):
- Window W = [level start + settle, time the level stopped issuing requests] (wall clock). The
  settle window lets the population of the previous level drain and the server's batch fill;
  nothing in it counts. If the level ended before the settle did, W is the whole level.
- output_tok_s = tokens the client received inside W (each streamed event carries its
  completion_tokens delta and its arrival stamp) / |W|. Counting arrivals inside W, not whole
  requests, needs no guess about requests that straddle its edges.
- Latency percentiles (TTFT, TPOT, ITL, e2e) use the ok requests *sent* inside W ("in window");
  the ramp lets them finish (drain) so long requests are not cut out.
- running_mean / queued_mean = mean of the server's num_running_reqs / num_queue_reqs samples in W;
  queued_share = share of those samples with queued > 5 % of C; capped_share = share with the
  running count at the server's cap or KV usage >= 0.95 (the pool is full).
- achieved_concurrency = running_mean when the server reports it (what it actually runs), else
  the client's time-averaged in-flight count over W.
- per_user_tok_s = output_tok_s / achieved_concurrency.
- littles_law_ratio rho = lambda x E / C with lambda = completions per second inside W and E their
  mean e2e. In a closed loop at C streams rho ~ 1.
- valid = False when the client, not the server, limited the level: the server's running +
  queued stayed below 80 % of C - eps while the client believed it had C in flight (eps = the
  requests in prefill, in neither gauge: C x (TTFT - queue time) / e2e, Little's law), or the
  client's own time-averaged in-flight count stayed under 90 % of C, or |rho - 1| > 0.1 + C / N
  (N completions in W: counting them is off by up to one per stream at W's edges) on a level
  long enough to judge (>= 3 mean e2e), or no request succeeded.
- accept_length = sum(output tokens) / sum(spec_verify_ct) over in-window requests (per-request
  meta_info); the server gauge is a last-interval value, so it is only a fallback.
- SLO attainment (D3, only when slo_ttft_s or slo_tpot_s is given): the in-window
  requests that were not cancelled are judged (slo_n); one meets the SLOs (slo_met) when it
  succeeded and its TTFT <= slo_ttft_s and its TPOT <= slo_tpot_s (a bound that is None is not
  judged; a one-token answer has no TPOT and is judged on TTFT alone). A failed request never
  meets them. slo_attainment = slo_met / slo_n.
- All client durations are multiplied by `scale` (simulated seconds per wall second) and rates
  divided by it; server-reported durations (queue_time) are already in server seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from specmon.analysis.stats import mean, mean_se, percentile, rate_batches, ratio
from specmon.model import LevelResult, Sample
from specmon.sources.derive import histogram_quantile
from specmon.sources.prom import Histogram

QUEUED_SHARE_DELTA = 0.05  # queued > 5 % of C counts as a queueing sample (D2)
KV_FULL = 0.95
# The server check allows 20 % slack below C - eps: the gauges are sampled, move only when the
# scheduler reports, and the trip back (last token -> next request arriving) is in neither gauge;
# a sped-up simulator stretches that trip by its speed. A client capped below C (a connection
# pool of 100 under C=150 is 67 %) still falls well under it.
SERVER_SEEN_MIN = 0.8
THROUGHPUT_BATCH_S = 5.0  # batch-means batch length, in the arm's seconds (analysis/knee.py)
MIN_BATCHES = 4


@dataclass
class Window:
    t0: float  # wall clock
    t1: float

    @property
    def length(self) -> float:
        return max(self.t1 - self.t0, 0.0)


class TimedRequest(Protocol):
    """What the level statistics read of one request: load.client.RequestOutcome is one. Declared
    here so that analysis does not depend on the load generator (load depends on analysis)."""

    t_sent: Optional[float]
    t_sent_wall: Optional[float]
    t_end: Optional[float]
    token_events: list[tuple[float, int]]
    completion_tokens: Optional[int]
    final_meta: Optional[dict[str, Any]]
    status: str

    def wall(self, perf_stamp: float) -> float:
        ...

    @property
    def e2e(self) -> Optional[float]:
        ...

    def timed(self, scale: float) -> tuple[Optional[float], Optional[float], str]:
        ...

    def itls(self) -> list[float]:
        ...


def level_result(arm: str, level: int, offered: int, outcomes: Sequence[TimedRequest],
                 window: Window, level_t0: float, level_t1: float, samples: Sequence[Sample],
                 scale: float = 1.0, max_running: Optional[int] = None,
                 queue_hist: Optional[Histogram] = None, slo_ttft_s: Optional[float] = None,
                 slo_tpot_s: Optional[float] = None) -> LevelResult:
    r = LevelResult(arm=arm, level=level, offered_concurrency=offered)
    r.duration_s = (level_t1 - level_t0) * scale
    r.ok = sum(1 for o in outcomes if o.status == "ok")
    # Requests cancelled by a skip or a stop are neither ok nor failed: the server did nothing wrong.
    r.failed = sum(1 for o in outcomes if o.status not in ("ok", "cancelled"))
    W = window.length
    in_win = [o for o in outcomes if o.t_sent_wall is not None and window.t0 <= o.t_sent_wall < window.t1]
    ok_in = [o for o in in_win if o.status == "ok"]

    # Throughput from token arrivals inside W.
    if W > 0:
        toks = 0
        arrivals: list[tuple[float, float]] = []  # (arm seconds since W opened, tokens)
        for o in outcomes:
            if o.t_sent is None:
                continue
            for stamp, n in o.token_events:
                t = o.wall(stamp)
                if window.t0 <= t < window.t1:
                    toks += n
                    arrivals.append(((t - window.t0) * scale, n))
        r.output_tok_s = toks / (W * scale)
        batches = rate_batches(arrivals, 0.0, W * scale, THROUGHPUT_BATCH_S, MIN_BATCHES)
        r.output_tok_s_batches = len(batches) or None
        r.output_tok_s_se = mean_se(batches)[1]

    # TTFT and e2e in the arm's seconds: this client's clock, or a sped-up simulator's own stamps
    # (load.client RequestOutcome.timed says why).
    timed = [o.timed(scale) for o in ok_in]
    ttfts = [t for t, _, _ in timed if t is not None]
    e2es = [e for _, e, _ in timed if e is not None]
    # per request, aligned with ok_in: None for a one-token answer or an unknown TTFT/e2e
    tpot_of = [(e2e - ttft) / (o.completion_tokens - 1)
               if ttft is not None and e2e is not None and o.completion_tokens and o.completion_tokens > 1 else None
               for o, (ttft, e2e, _) in zip(ok_in, timed)]
    tpots = [t for t in tpot_of if t is not None]
    itls: list[float] = []
    for o in ok_in:
        itls.extend(x * scale for x in o.itls())
    r.ttft_p50_s, r.ttft_p90_s, r.ttft_p99_s = (percentile(ttfts, q) for q in (50, 90, 99))
    r.ttft_mean_s = mean(ttfts)
    r.tpot_p50_s = percentile(tpots, 50)
    r.itl_p50_s, r.itl_p99_s = percentile(itls, 50), percentile(itls, 99)
    r.e2e_mean_s = mean(e2es)
    if slo_ttft_s is not None or slo_tpot_s is not None:
        judged = [o for o in in_win if o.status != "cancelled"]
        met = 0
        for (ttft, _, _), tpot in zip(timed, tpot_of):
            if slo_ttft_s is not None and (ttft is None or ttft > slo_ttft_s):
                continue
            if slo_tpot_s is not None and tpot is not None and tpot > slo_tpot_s:
                continue
            met += 1
        r.slo_n, r.slo_met = len(judged), met
        r.slo_attainment = met / len(judged) if judged else None

    out_sum = verify_sum = 0
    for o in ok_in:
        v = (o.final_meta or {}).get("spec_verify_ct")
        if isinstance(v, (int, float)) and v > 0 and o.completion_tokens:
            out_sum += o.completion_tokens
            verify_sum += v
    r.accept_length = out_sum / verify_sum if verify_sum else None
    qts = [(o.final_meta or {}).get("queue_time") for o in ok_in]
    qts = [float(q) for q in qts if isinstance(q, (int, float))]
    r.queue_time_p50_s = percentile(qts, 50)
    r.queue_time_mean_s = mean(qts)

    # Server side, from the samples recorded inside W.
    up = [s for s in samples if s.up]
    running = [s.running_reqs for s in up if s.running_reqs is not None]
    queued = [s.queued_reqs for s in up if s.queued_reqs is not None]
    r.running_mean = mean(running)
    r.queued_mean = mean(queued)
    if queued:
        r.queued_share = sum(1 for q in queued if q > QUEUED_SHARE_DELTA * offered) / len(queued)
    capped = []
    for s in up:
        if s.running_reqs is None and s.kv_usage is None:
            continue
        at_cap = max_running is not None and s.running_reqs is not None and s.running_reqs >= max_running
        full = s.kv_usage is not None and s.kv_usage >= KV_FULL
        capped.append(at_cap or full)
    r.capped_share = sum(capped) / len(capped) if capped else None
    kvs = [s.kv_usage for s in up if s.kv_usage is not None]
    r.kv_usage_max = max(kvs) if kvs else None
    if r.accept_length is None:
        r.accept_length = mean(s.accept_length for s in up if s.spec_enabled is not False)
    # Queue time: per request from meta_info when the server measured it, else the server's
    # sglang:queue_time_seconds histogram over exactly this window (bucket deltas between the
    # scrapes that bracket it), else the mean of the samples' sliding windows (which straddle the
    # previous level, so it is the last resort). Real SGLang 0.5.10 drops the per-request value.
    if r.queue_time_mean_s is None and queue_hist is not None and queue_hist.count:
        r.queue_time_mean_s = queue_hist.sum / queue_hist.count if queue_hist.sum is not None else None
        r.queue_time_p50_s = histogram_quantile(0.5, queue_hist.buckets)
    if r.queue_time_p50_s is None:
        r.queue_time_p50_s = percentile([s.queue_time_p50_s for s in up], 50)
    if r.queue_time_mean_s is None:
        r.queue_time_mean_s = mean(s.queue_time_mean_s for s in up)

    # Client in-flight, time-averaged over W (wall clock; a count needs no scaling).
    client_inflight = None
    if W > 0:
        busy = 0.0
        for o in outcomes:
            if o.t_sent_wall is None or o.t_end is None:
                continue
            a, b = o.t_sent_wall, o.wall(o.t_end)
            busy += max(0.0, min(b, window.t1) - max(a, window.t0))
        client_inflight = busy / W
    r.achieved_concurrency = r.running_mean if r.running_mean is not None else client_inflight

    done_in = [o for o in outcomes if o.status == "ok" and o.t_end is not None and o.t_sent_wall is not None
               and window.t0 <= o.wall(o.t_end) < window.t1]
    e_wall = mean((o.t_end - o.t_sent) for o in done_in)
    if W > 0 and done_in and e_wall:
        r.littles_law_ratio = (len(done_in) / W) * e_wall / offered
    r.per_user_tok_s = ratio(r.output_tok_s, r.achieved_concurrency)

    r.valid, r.invalid_reason = True, None
    reasons = []
    if r.ok == 0:
        reasons.append("no request succeeded")
    # Requests in prefill (and on the wire) are in neither gauge: SGLang counts the decode batch
    # as running and the waiting list as queued. By Little's law that stage holds
    # eps = C x (TTFT - queue time) / e2e requests, so the server should see about C - eps.
    both = [s.running_reqs + s.queued_reqs for s in up if s.running_reqs is not None and s.queued_reqs is not None]
    server_seen = mean(both)
    eps = 0.0
    if r.ttft_mean_s is not None and r.e2e_mean_s:
        eps = offered * max(r.ttft_mean_s - (r.queue_time_mean_s or 0.0), 0.0) / r.e2e_mean_s
    # A sped-up simulator timed by its own stamps: the rest of each request's wall span (the wire,
    # both HTTP stacks, this client's loop), magnified by the speed, is held by neither gauge
    # either. Little's law again: C x (client span - server span) / client span.
    wire = [(o.e2e * scale - e2e, o.e2e * scale) for o, (_, e2e, how) in zip(ok_in, timed)
            if how == "server" and e2e is not None and o.e2e]
    if wire:
        eps += offered * max(sum(w for w, _ in wire), 0.0) / sum(span for _, span in wire)
    expected = offered - eps
    # One request of slack on top: a prefill report (SGLang writes the gauges after every prefill
    # batch) counts the running batch *before* its new sequences join, so with short requests and
    # frequent arrivals the gauge reads one low for a good part of the level (at C=3 that is 33%).
    # Who held the level back is a statement about steady state: it needs a window of a few
    # request lifetimes and a few scrapes in it. A count-based level close to its concurrency
    # (16 requests at C=12) is mostly ramp-down; its short full-C window proves nothing about
    # the client (it was idle), so it says that it is short instead of blaming anyone.
    judged = e_wall is not None and W >= 3 * e_wall and len(both) >= 3
    if not judged and r.ok > 0:
        lifetimes = f", {W / e_wall:.1f} request lifetimes of {e_wall * scale:.2f} s" if e_wall else ""
        short_note = (f"short level: {offered} in flight together for {W * scale:.1f} s{lifetimes}, "
                      f"{len(both)} server samples; too short to tell who limited it")
        r.note = short_note
    if (judged and server_seen is not None and server_seen < SERVER_SEEN_MIN * expected - 1.0
            and (client_inflight is None or client_inflight >= 0.9 * offered)):
        reasons.append(f"server reported {server_seen:.1f} running+queued (mean of {len(both)} samples) where "
                       f"{expected:.1f} were expected ({offered} offered, {eps:.1f} in prefill or on the wire) while the client "
                       f"held {client_inflight:.1f}: the client is the bottleneck")
    elif judged and client_inflight is not None and client_inflight < 0.9 * offered and r.ok > 0:
        reasons.append(f"client held only {client_inflight:.1f} of {offered} in flight")
    # Counting completions in W is off by up to one per stream at W's edges, i.e. by C / N
    # relative: the tolerance grows by that much, so short levels do not fail on edge noise.
    long_enough = e_wall is not None and W >= 3 * e_wall
    tolerance = 0.1 + (offered / len(done_in) if done_in else 1.0)
    if r.littles_law_ratio is not None and long_enough and abs(r.littles_law_ratio - 1) > tolerance:
        reasons.append(f"Little's law ratio {r.littles_law_ratio:.2f} (expected ~1 in a closed loop)")
    if reasons:
        r.valid, r.invalid_reason = False, "; ".join(reasons)
    return r
