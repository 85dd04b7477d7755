"""One arm at one ramp level: client statistics joined with the server's samples.

Definitions (every "unknown" is None, never 0):
- Window W = [level start + settle, time the level stopped issuing requests] (wall clock). The
  settle window lets the population of the previous level drain and the server's batch fill;
  nothing in it counts. If the level ended before the settle did, W is the whole level.
  levels.csv says W as window_start (wall epoch) and window_s (|W| in the arm's seconds); every
  rate, share and percentile of the row is over W, while duration_s is the whole level, settle
  window included (output_tok_s x window_s is the tokens counted, not output_tok_s x duration_s).
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
  meta_info); the server gauge is a last-interval value (SGLang's last decode log window, not
  this level's), so it is only a fallback. accept_length_source says which: "requests" |
  "server".
- Prefix cache: cache_hit_rate = sum(meta_info cached_tokens) / sum(prompt_tokens) over the
  in-window ok requests that report both (cached_tokens = that sum): each request's own hit, as
  SGLang counted it when it was scheduled. Without per-request figures, the server's counters
  over the level (`server_cache`: the increase of sglang:cached_tokens_total and
  prompt_tokens_total between the scrapes around the window, else realtime_tokens_total's
  prefill_cache / (prefill_cache + prefill_compute); sources/derive.py cache_hit_share).
- Open-loop levels (offered_rate given, requests per second of the arm's time): achieved_rate
  = ok completions inside W / |W|; the closed-loop checks (C held in flight, Little's law) do
  not apply, and "queued > 5 % of C" is judged against the requests the client held in flight.
  Whether the backlog grew through the level is backlog_trend's call (the ramp cuts such a level
  short and marks it over_saturation; never a steady state).
- Multi-turn levels with think time: `idle_s` is the stream-seconds inside W that streams spent
  thinking between two turns (they hold no request on purpose). The closed-loop checks and
  Little's law use the streams that were not thinking, C - idle_s / |W|, in place of C.
- SLO attainment (D3, only when slo_ttft_s or slo_tpot_s is given): the in-window
  requests that were not cancelled are judged (slo_n); one meets the SLOs (slo_met) when it
  succeeded and its TTFT <= slo_ttft_s and its TPOT <= slo_tpot_s (a bound that is None is not
  judged; a one-token answer has no TPOT and is judged on TTFT alone). A failed request never
  meets them. slo_attainment = slo_met / slo_n.
- All client durations are multiplied by `scale` (simulated seconds per wall second) and rates
  divided by it; server-reported durations (queue_time) are already in server seconds.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from specmon.analysis.stats import (batch_grid, mean, mean_se, percentile, percentiles, percentiles_of_numbers, ratio,
                                    t_upper_95)
from specmon.model import LevelResult, Sample
from specmon.sources.derive import cache_hit_share, histogram_quantile
from specmon.sources.spec_counts import hist_text, merge_hist, spec_counts
from specmon.sources.prom import Histogram

QUEUED_SHARE_DELTA = 0.05  # queued > 5 % of C counts as a queueing sample (D2)
KV_FULL = 0.95
# The server check allows 20 % slack below C - eps: the gauges are sampled, move only when the
# scheduler reports, and the trip back (last token -> next request arriving) is in neither gauge;
# a sped-up simulator stretches that trip by its speed. A client capped below C (a connection
# pool of 100 under C=150 is 67 %) still falls well under it.
SERVER_SEEN_MIN = 0.8
JUDGE_LIFETIMES = 1.5  # a level shorter than this many request lifetimes is not judged client- or server-bound
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
    t_scheduled_wall: float
    completion_tokens: Optional[int]
    prompt_tokens: Optional[int]
    final_meta: Optional[dict[str, Any]]
    status: str

    def wall(self, perf_stamp: float) -> float:
        ...

    @property
    def e2e(self) -> Optional[float]:
        ...

    def timed(self, scale: float) -> tuple[Optional[float], Optional[float], str]:
        ...

    def window_tokens(self, w0: float, w1: float, scale: float, span: float, width: float, sums: Any) -> int:
        ...

    def itls(self) -> list[float]:
        ...


def level_result(arm: str, level: int, offered: int, outcomes: Sequence[TimedRequest],
                 window: Window, level_t0: float, level_t1: float, samples: Sequence[Sample],
                 scale: float = 1.0, max_running: Optional[int] = None,
                 queue_hist: Optional[Histogram] = None, slo_ttft_s: Optional[float] = None,
                 slo_tpot_s: Optional[float] = None, offered_rate: Optional[float] = None,
                 server_cache: Optional[dict[str, float]] = None, idle_s: float = 0.0) -> LevelResult:
    r = LevelResult(arm=arm, level=level, offered_concurrency=offered, offered_rate=offered_rate)
    r.duration_s = (level_t1 - level_t0) * scale
    r.ok = sum(1 for o in outcomes if o.status == "ok")
    # Requests cancelled by a skip or a stop are neither ok nor failed: the server did nothing wrong.
    r.failed = sum(1 for o in outcomes if o.status not in ("ok", "cancelled"))
    W = window.length
    r.window_start, r.window_s = window.t0, W * scale
    in_win = [o for o in outcomes if o.t_sent_wall is not None and window.t0 <= o.t_sent_wall < window.t1]
    ok_in = [o for o in in_win if o.status == "ok"]

    # Throughput from token arrivals inside W, and its batch means (stats.rate_batches' batches
    # of the arrivals in arm seconds since W opened), each request adding its own.
    if W > 0:
        span = W * scale
        n_batches, width = batch_grid(span, THROUGHPUT_BATCH_S, MIN_BATCHES)
        sums = array("d", [0.0]) * n_batches
        toks = sum(o.window_tokens(window.t0, window.t1, scale, span, width, sums) for o in outcomes)
        r.output_tok_s = toks / span
        batches = [x / width for x in sums]
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
        if scale == 1.0:
            itls.extend(o.itls())
        else:
            itls.extend([x * scale for x in o.itls()])
    r.ttft_p50_s, r.ttft_p90_s, r.ttft_p99_s = percentiles(ttfts, (50, 90, 99))
    r.ttft_mean_s = mean(ttfts)
    r.tpot_p50_s = percentile(tpots, 50)
    r.itl_p50_s, r.itl_p99_s = percentiles_of_numbers(itls, (50, 99))  # ~250k at 1,000 streams: sorted once
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
    r.accept_length_source = "requests" if r.accept_length is not None else None
    acc_sum = prop_sum = 0
    hist: dict[int, int] = {}
    for o in ok_in:
        sc = spec_counts(o.final_meta)
        if sc.accepted is not None and sc.proposed:
            acc_sum += sc.accepted
            prop_sum += sc.proposed
        merge_hist(hist, sc.hist)
    r.accept_rate = acc_sum / prop_sum if prop_sum else None
    r.accept_hist = hist_text(hist)
    cached_sum = prompt_sum = 0
    reported = False
    for o in ok_in:
        c = (o.final_meta or {}).get("cached_tokens")
        if isinstance(c, int) and not isinstance(c, bool) and c >= 0 and o.prompt_tokens:
            reported = True
            cached_sum += c
            prompt_sum += o.prompt_tokens
    if reported:
        r.cached_tokens, r.cache_hit_rate = cached_sum, cached_sum / prompt_sum
    elif server_cache:
        r.cache_hit_rate = cache_hit_share(server_cache)
        got = server_cache.get("cached", server_cache.get("prefill_cache"))
        r.cached_tokens = None if got is None else int(got)
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
    # "Queued > 5 % of C": of the C streams (closed loop), of what the client held (open loop).
    c_ref = offered if offered_rate is None else (client_inflight or 0.0)
    if queued:
        r.queued_share = sum(1 for q in queued if q > QUEUED_SHARE_DELTA * c_ref) / len(queued)
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
        r.accept_length_source = "server" if r.accept_length is not None else None
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

    r.achieved_concurrency = r.running_mean if r.running_mean is not None else client_inflight

    done_in = [o for o in outcomes if o.status == "ok" and o.t_end is not None and o.t_sent_wall is not None
               and window.t0 <= o.wall(o.t_end) < window.t1]
    e_wall = mean((o.t_end - o.t_sent) for o in done_in)
    # The streams that were not thinking between turns, on average over W (all C without turns).
    held = max(offered - idle_s / W, 0.0) if W > 0 and idle_s > 0 else float(offered)
    if offered_rate is None and W > 0 and done_in and e_wall and held > 0:
        r.littles_law_ratio = (len(done_in) / W) * e_wall / held
    r.per_user_tok_s = ratio(r.output_tok_s, r.achieved_concurrency)

    r.valid, r.invalid_reason = True, None
    reasons = []
    if r.ok == 0:
        reasons.append("no request succeeded")
    if offered_rate is not None:
        # Open loop: what arrived is the schedule's business, not the client's concurrency.
        r.achieved_rate = len(done_in) / (W * scale) if W > 0 else None
        if reasons:
            r.valid, r.invalid_reason = False, "; ".join(reasons)
        return r
    # Requests in prefill (and on the wire) are in neither gauge: SGLang counts the decode batch
    # as running and the waiting list as queued. By Little's law that stage holds
    # eps = C x (TTFT - queue time) / e2e requests, so the server should see about C - eps.
    both = [s.running_reqs + s.queued_reqs for s in up if s.running_reqs is not None and s.queued_reqs is not None]
    server_seen = mean(both)
    eps = 0.0
    if r.ttft_mean_s is not None and r.e2e_mean_s:
        eps = held * max(r.ttft_mean_s - (r.queue_time_mean_s or 0.0), 0.0) / r.e2e_mean_s
    # A sped-up simulator timed by its own stamps: the rest of each request's wall span (the wire,
    # both HTTP stacks, this client's loop), magnified by the speed, is held by neither gauge
    # either. Little's law again: C x (client span - server span) / client span.
    wire = [(o.e2e * scale - e2e, o.e2e * scale) for o, (_, e2e, how) in zip(ok_in, timed)
            if how == "server" and e2e is not None and o.e2e]
    if wire:
        eps += held * max(sum(w for w, _ in wire), 0.0) / sum(span for _, span in wire)
    expected = held - eps
    # One request of slack on top: a prefill report (SGLang writes the gauges after every prefill
    # batch) counts the running batch *before* its new sequences join, so with short requests and
    # frequent arrivals the gauge reads one low for a good part of the level (at C=3 that is 33%).
    # Who held the level back is a statement about steady state: it needs a window longer than
    # a request's lifetime (x1.5) and a few scrapes in it. A count-based level close to its
    # concurrency (16 requests at C=12) is mostly ramp-down; its short full-C window proves
    # nothing about the client (it was idle), so it says that it is short instead of blaming anyone.
    judged = e_wall is not None and W >= JUDGE_LIFETIMES * e_wall and len(both) >= 3
    if not judged and r.ok > 0:
        lifetimes = f", {W / e_wall:.1f} request lifetimes of {e_wall * scale:.2f} s" if e_wall else ""
        short_note = (f"short level: {offered} in flight together for {W * scale:.1f} s{lifetimes}, "
                      f"{len(both)} server samples; too short to tell who limited it")
        r.note = short_note
    if (judged and server_seen is not None and server_seen < SERVER_SEEN_MIN * expected - 1.0
            and (client_inflight is None or client_inflight >= 0.9 * held)):
        reasons.append(f"server reported {server_seen:.1f} running+queued (mean of {len(both)} samples) where "
                       f"{expected:.1f} were expected ({offered} offered, {eps:.1f} in prefill or on the wire) while the client "
                       f"held {client_inflight:.1f}: the client is the bottleneck")
    elif judged and client_inflight is not None and client_inflight < 0.9 * held and r.ok > 0:
        thinking = f" ({offered - held:.1f} thinking between turns)" if held < offered else ""
        reasons.append(f"client held only {client_inflight:.1f} of {offered} in flight{thinking}")
    # Counting completions in W is off by up to one per stream at W's edges, i.e. by C / N
    # relative: the tolerance grows by that much, so short levels do not fail on edge noise.
    long_enough = e_wall is not None and W >= 3 * e_wall
    tolerance = 0.1 + (offered / len(done_in) if done_in else 1.0)
    if r.littles_law_ratio is not None and long_enough and abs(r.littles_law_ratio - 1) > tolerance:
        reasons.append(f"Little's law ratio {r.littles_law_ratio:.2f} (expected ~1 in a closed loop)")
    if reasons:
        r.valid, r.invalid_reason = False, "; ".join(reasons)
    return r


# --------------------------------------------------------------------------------------------
# Open loop: does the backlog grow?

SATURATION_BLOCKS = 6  # block means of the backlog over the span judged
SATURATION_MIN_GROWTH = 3.0  # requests: a smaller rise is a wobble, whatever its slope
SATURATION_REL_GROWTH = 0.5  # and it rose by at least half of where it started


@dataclass
class BacklogTrend:
    """The backlog (requests arrived and not finished, waiting for a slot included) over a span."""

    t0: float  # wall clock
    t1: float
    means: list[float]  # time-averaged backlog of each block, in order
    slope: float  # requests per second of the arm's time (OLS over the block means)
    t_stat: Optional[float]  # slope / its standard error; None when the fit is exact or too short
    growing: bool
    detail: str


def backlog_trend(spans: Sequence[tuple[float, Optional[float]]], t0: float, t1: float, scale: float = 1.0,
                  blocks: int = SATURATION_BLOCKS) -> Optional[BacklogTrend]:
    """Whether the backlog grew through [t0, t1] (wall clock): `spans` are (arrival, end) wall
    stamps per request, end None while it is unfinished. The span is cut into `blocks` equal
    blocks; their time-averaged backlogs are fitted by least squares against the blocks' middles.
    Growing (over-saturation: requests arrive faster than they finish) when the slope is positive
    with t >= the one-sided 95 % Student quantile (blocks - 2 degrees of freedom; an exact fit
    counts), and the backlog rose from the first block to the last by at least
    max(SATURATION_MIN_GROWTH, SATURATION_REL_GROWTH x the first block's). None for an empty span."""
    span = t1 - t0
    if span <= 0 or blocks < 3:
        return None
    width = span / blocks
    busy = [0.0] * blocks
    for a, b in spans:
        end = t1 if b is None else min(b, t1)
        start = max(a, t0)
        if end <= start:
            continue
        first, last = int((start - t0) // width), min(int((end - t0) // width), blocks - 1)
        for j in range(first, last + 1):
            lo, hi = t0 + j * width, t0 + (j + 1) * width
            busy[j] += max(0.0, min(end, hi) - max(start, lo))
    means = [x / width for x in busy]
    xs = [(j + 0.5) * width * scale for j in range(blocks)]  # the arm's seconds
    mx, my = sum(xs) / blocks, sum(means) / blocks
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, means)) / sxx
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, means)]
    ssr = sum(e * e for e in resid)
    t_stat = slope / math.sqrt(ssr / (blocks - 2) / sxx) if ssr > 1e-12 else None
    significant = slope > 0 and (t_stat is None or t_stat >= t_upper_95(blocks - 2))
    rise = means[-1] - means[0]
    enough = rise >= max(SATURATION_MIN_GROWTH, SATURATION_REL_GROWTH * means[0])
    growing = significant and enough
    detail = (f"backlog {means[0]:.1f} -> {means[-1]:.1f} in flight over {span * scale:.1f} s "
              f"({slope:+.2f}/s" + ("" if t_stat is None else f", t={t_stat:.1f}") + ")")
    return BacklogTrend(t0, t1, means, slope, t_stat, growing, detail)
