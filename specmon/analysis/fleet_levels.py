"""A ramp through a gateway, worker by worker: what each worker behind it did on each level.

The ramp loads the gateway (its one arm is the fleet); the gateway spreads the requests over its
workers, which the client never sees. Each worker's row for a level (levels.csv, `worker` = its
URL) comes from that worker's own samples inside the level's window W (analysis/levels.py):
- running_mean, queued_mean: means of its running / queued requests;
- queued_share: share of its samples with queued > 5 % of its fair share of C (C / N, N = the
  workers with samples in W): a worker given a sixth of the load that queues a tenth of it queues;
- capped_share: share with running at its cap or its KV pool >= 95 %; kv_usage_max: the highest;
- output_tok_s: the mean of its gen tok/s samples (its own decode counter, per second of its time);
- ttft_p50/p90/p99_s, ttft_mean_s, queue_time_p50/mean_s: its TTFT and queue-time histograms
  over exactly W (their increase between the scrape when W opened and the newest one at its
  end), else the median (mean) of the samples' sliding-window figures;
- achieved_concurrency = running_mean; per_user_tok_s = output_tok_s / running_mean;
- valid as the fleet's own row is, and not without a sample in W.
The gateway's row keeps the client's figures (TTFT, tok/s as seen through the gateway); its
server figures (running, queued, KV) come from the fleet's sums (`fleet_samples`).

Across workers, per level: routing imbalance = max / mean of the workers' running_mean (1.0 is
even; a worker given twice its share reads 2.0 when the others share the rest), among workers of
one role (prefill, decode, regular; the most uneven role's figure). Over the ramp:
each worker's knees (analysis.knee on its own rows; its offered level is the fleet's C) and the
worker that saturated first: the lowest queueing or plateau knee, queueing first on a tie.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Optional, Sequence

from specmon.analysis.levels import KV_FULL, QUEUED_SHARE_DELTA
from specmon.analysis.stats import mean, percentile, ratio
from specmon.model import ArmInfo, FleetLevels, KneesSummary, LevelResult, Sample, offered_label
from specmon.sources.derive import histogram_delta, histogram_quantile
from specmon.sources.prom import Histogram, MetricsSnapshot

SATURATION_ORDER = ("queueing", "plateau")


def fleet_samples(by_worker: Mapping[str, Sequence[Sample]], arm: str) -> list[Sample]:
    """The fleet as one server, a Sample per tick: the sums of its workers' running and queued
    requests, KV tokens and gen tok/s. A tick counts (up) only when every worker sampled at it
    was up with running and queued known; a sum with an unknown part is unknown."""
    ticks: dict[float, list[Sample]] = defaultdict(list)
    for samples in by_worker.values():
        for s in samples:
            ticks[s.ts].append(s)
    out = []
    for ts in sorted(ticks):
        ss = ticks[ts]
        up = all(s.up and s.running_reqs is not None and s.queued_reqs is not None for s in ss)
        if not up:
            down = next(s for s in ss if not (s.up and s.running_reqs is not None and s.queued_reqs is not None))
            out.append(Sample(ts=ts, arm=arm, up=False, state="down" if not down.up else "error", source="fleet",
                              reason=f"worker {down.arm}: {down.reason or down.state}"))
            continue
        used, cap = _sum([s.kv_used_tokens for s in ss]), _sum([s.kv_capacity_tokens for s in ss])
        out.append(Sample(
            ts=ts, arm=arm, up=True, state="up", source="fleet",
            running_reqs=sum(s.running_reqs for s in ss), queued_reqs=sum(s.queued_reqs for s in ss),
            kv_used_tokens=used, kv_capacity_tokens=cap,
            kv_usage=used / cap if used is not None and cap else None,
            gen_tok_s=_sum([s.gen_tok_s for s in ss])))
    return out


def fleet_info(infos: Sequence[ArmInfo]) -> Optional[ArmInfo]:
    """The fleet as one server for the ramp: what its workers share (model, version, speculation,
    time scale) and the sums of their KV pools and request caps; None before any worker said.
    Workers that differ in a shared figure leave it unknown (time scale: the slowest)."""
    if not infos:
        return None

    def common(name: str):
        values = {getattr(i, name) for i in infos}
        return values.pop() if len(values) == 1 else None

    return ArmInfo(
        model=common("model"), served_model_name=common("served_model_name"), version=common("version"),
        speculative_algorithm=common("speculative_algorithm"), kv_cache_dtype=common("kv_cache_dtype"),
        kv_capacity_tokens=_sum([i.kv_capacity_tokens for i in infos]),
        max_running_requests=_sum([i.max_running_requests for i in infos]),
        enable_metrics=common("enable_metrics"), time_scale=min(i.time_scale or 1.0 for i in infos))


def _sum(values: Sequence[Optional[float]]):
    return sum(values) if values and all(v is not None for v in values) else None


def window_histogram(opened: Optional[MetricsSnapshot], newest: Optional[MetricsSnapshot],
                     name: str) -> Optional[Histogram]:
    """A histogram's increase between two scrapes of one server (the observations of one level's
    window); None when either is missing, they are the same scrape, or the server restarted."""
    if opened is None or newest is None or newest is opened:
        return None
    new = newest.histogram(name)
    if new is None:
        return None
    old = opened.histogram(name)
    return new if old is None else histogram_delta(new, old)


def worker_level(arm: str, url: str, level: int, offered: int, samples: Sequence[Sample], *,
                 share_of: int = 1, max_running: Optional[int] = None, fleet_row: Optional[LevelResult] = None,
                 ttft_hist: Optional[Histogram] = None, queue_hist: Optional[Histogram] = None) -> LevelResult:
    """One worker's row for one level, from its samples inside the level's window (module doc).
    `share_of`: how many workers shared the level's C; `fleet_row`: the gateway's row of this
    level (its duration, its validity); the histograms: the worker's over exactly the window."""
    r = LevelResult(arm=arm, level=level, offered_concurrency=offered, worker=url)
    if fleet_row is not None:
        r.duration_s = fleet_row.duration_s
        r.offered_rate = fleet_row.offered_rate
    up = [s for s in samples if s.up]
    running = [s.running_reqs for s in up if s.running_reqs is not None]
    queued = [s.queued_reqs for s in up if s.queued_reqs is not None]
    r.running_mean, r.queued_mean = mean(running), mean(queued)
    share = offered / max(share_of, 1)
    if queued:
        r.queued_share = sum(1 for q in queued if q > QUEUED_SHARE_DELTA * share) / len(queued)
    capped = [(max_running is not None and s.running_reqs is not None and s.running_reqs >= max_running)
              or (s.kv_usage is not None and s.kv_usage >= KV_FULL)
              for s in up if s.running_reqs is not None or s.kv_usage is not None]
    r.capped_share = sum(capped) / len(capped) if capped else None
    kvs = [s.kv_usage for s in up if s.kv_usage is not None]
    r.kv_usage_max = max(kvs) if kvs else None
    r.output_tok_s = mean(s.gen_tok_s for s in up)
    r.achieved_concurrency = r.running_mean
    r.per_user_tok_s = ratio(r.output_tok_s, r.running_mean) if r.running_mean else None
    r.accept_length = mean(s.accept_length for s in up if s.spec_enabled is not False)
    if r.accept_length is not None:
        r.accept_length_source = "server"
    if ttft_hist is not None and ttft_hist.count:
        r.ttft_p50_s, r.ttft_p90_s, r.ttft_p99_s = (histogram_quantile(q, ttft_hist.buckets) for q in (0.5, 0.9, 0.99))
        r.ttft_mean_s = ttft_hist.sum / ttft_hist.count if ttft_hist.sum is not None else None
    else:
        r.ttft_p50_s = percentile([s.ttft_p50_s for s in up], 50)
        r.ttft_p90_s = percentile([s.ttft_p90_s for s in up], 50)
        r.ttft_p99_s = percentile([s.ttft_p99_s for s in up], 50)
        r.ttft_mean_s = mean(s.ttft_mean_s for s in up)
    if queue_hist is not None and queue_hist.count:
        r.queue_time_p50_s = histogram_quantile(0.5, queue_hist.buckets)
        r.queue_time_mean_s = queue_hist.sum / queue_hist.count if queue_hist.sum is not None else None
    else:
        r.queue_time_p50_s = percentile([s.queue_time_p50_s for s in up], 50)
        r.queue_time_mean_s = mean(s.queue_time_mean_s for s in up)
    if r.ttft_mean_s and r.queue_time_mean_s is not None:
        r.queue_ttft_share = min(r.queue_time_mean_s / r.ttft_mean_s, 1.0)
    if not up:
        r.valid, r.invalid_reason = False, "no sample of this worker in the level's window"
    elif fleet_row is not None and not fleet_row.valid:
        r.valid, r.invalid_reason = False, f"the fleet's level is invalid ({fleet_row.invalid_reason})"
    return r


def routing_imbalance(rows: Sequence[LevelResult]) -> tuple[Optional[float], Optional[str]]:
    """(max / mean of the workers' running_mean, the worker at the max) for one level's worker
    rows; (None, None) with fewer than two workers or nothing running."""
    known = [(r.running_mean, r.arm) for r in rows if r.running_mean is not None]
    if len(known) < 2:
        return None, None
    m = sum(v for v, _ in known) / len(known)
    if m <= 0:
        return None, None
    top, who = max(known, key=lambda x: x[0])
    return top / m, who


def saturation(k: KneesSummary) -> Optional[tuple[float, str]]:
    """(offered level, definition) of a knees summary's lowest queueing or plateau knee."""
    found = [(v, d) for d, v in (("queueing", k.queueing), ("plateau", k.plateau)) if v is not None]
    if not found:
        return None
    return min(found, key=lambda x: (x[0], SATURATION_ORDER.index(x[1])))


def first_saturated(knees: Mapping[str, KneesSummary]) -> tuple[Optional[str], Optional[float], Optional[str], list[str]]:
    """(worker, its knee's level, the definition, every worker tied with it) of the worker whose
    knee came lowest; queueing before plateau on the same level, then the name."""
    calls = [(s[0], SATURATION_ORDER.index(s[1]), arm, s[1]) for arm, k in knees.items()
             for s in [saturation(k)] if s is not None]
    if not calls:
        return None, None, None, []
    at, _, arm, definition = min(calls)
    tied = sorted(a for v, _, a, _ in calls if v == at)
    return arm, at, definition, tied


def fleet_levels(arm: str, fleet: str, worker_rows: Sequence[LevelResult],
                 worker_knees: Mapping[str, KneesSummary], fleet_knees: Optional[KneesSummary],
                 roles: Optional[Mapping[str, Optional[str]]] = None) -> FleetLevels:
    """The fleet's summary over the levels so far (session.json fleet_levels[arm]). `roles`:
    worker -> regular | prefill | decode; the imbalance compares workers of one role (a PD
    fleet's prefill workers hold few requests by design), the most uneven role's figure."""
    out = FleetLevels(arm=arm, fleet=fleet)
    for r in worker_rows:
        if r.arm not in out.workers:
            out.workers.append(r.arm)
    roles = roles or {}
    for lv in sorted({r.level for r in worker_rows}):
        at = [r for r in worker_rows if r.level == lv]
        found = [routing_imbalance([r for r in at if (roles.get(r.arm) or "") == role])
                 for role in sorted({roles.get(r.arm) or "" for r in at}, key=str)]
        found = [(x, who) for x, who in found if x is not None]
        x, who = max(found, key=lambda f: f[0]) if found else (None, None)
        out.imbalance[str(lv)] = None if x is None else round(x, 4)
        out.busiest[str(lv)] = who
    who, at, how, tied = first_saturated(worker_knees)
    out.first_saturated, out.first_saturated_at, out.first_saturated_by = who, at, how
    own = saturation(fleet_knees) if fleet_knees is not None else None
    out.fleet_knee = own[0] if own else None
    out.detail = saturation_sentence(out, tied, rates=any(r.offered_rate is not None for r in worker_rows))
    return out


def saturation_sentence(f: FleetLevels, tied: Sequence[str] = (), rates: bool = False) -> str:
    """'worker :30002 saturated first (queueing at the fleet's C=8); the fleet's knee C=16' (or 'no worker
    saturated yet'); rate levels read r=4/s."""
    def at(x: float) -> str:
        return offered_label(None, x) if rates else offered_label(x)

    if f.first_saturated is None:
        words = "no worker saturated yet"
    else:
        others = [a for a in tied if a != f.first_saturated]
        also = f" (so did {', '.join(others)})" if others else ""
        # a worker's rows carry the fleet's offered level, not its own share of it: said so, so
        # that one line never reads as one worker at the fleet's C
        words = (f"worker {f.first_saturated} saturated first ({f.first_saturated_by} at the fleet's "
                 f"{at(f.first_saturated_at)}){also}")
    if f.fleet_knee is not None:
        words += f"; the fleet's knee {at(f.fleet_knee)}"
    return words
