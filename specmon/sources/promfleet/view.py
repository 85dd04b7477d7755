"""The fleet as the queries see it (FleetView): which workers there are and their stable arm names,
each worker's Sample from its figures (worker_sample), and the fleet's FleetStatus. Pure: the HTTP
is the caller's."""

from __future__ import annotations

import re
from typing import Optional
from urllib.parse import urlsplit

from specmon.model import ArmSpec, FleetReading, FleetStatus, RankReading, Sample, WorkerStatus, kv_usage_of
from specmon.sources.promfleet.parse import Point, TargetInfo
from specmon.sources.promfleet.queries import LATENCY_FIGURES, Key, WorkerFigures, read_results

STALE_AFTER = 2.0  # scrape intervals: a newer value was due by then
KNEE_NOTE = "knees need 1 s resolution: a ramp against a fleet worker scrapes that worker directly too"
ROLES = {"unified": "regular", "prefill": "prefill", "decode": "decode"}


def base_url(scrape_url: Optional[str], instance: str) -> str:
    """The worker's own base URL: the target's scrape URL without its path, else http://instance."""
    if scrape_url:
        try:
            u = urlsplit(scrape_url)
            if u.scheme in ("http", "https") and u.netloc:
                return f"{u.scheme}://{u.netloc.rsplit('@', 1)[-1]}"
        except ValueError:
            pass
    return f"http://{instance}"


def short_name(instance: str) -> str:
    """A short arm name for an instance: ':30001' on this machine, 'sglang-0:30000' for
    'sglang-0.sglang.ns.svc:30000', an address as it is."""
    host, sep, port = instance.rpartition(":")
    if not sep or not port.isdigit() or host.endswith(":"):
        host, port = instance, ""
    bare = host.strip("[]")
    if bare in ("127.0.0.1", "localhost", "::1") and port:
        return f":{port}"
    if not re.fullmatch(r"[0-9.]+|[0-9a-fA-F:]+", bare) and "." in bare:
        host = bare.split(".", 1)[0]
    return f"{host}:{port}" if port else host


def _count(v: Optional[float]) -> Optional[int]:
    """A gauge that counts (requests, tokens): None for a negative value or one no count can be."""
    if v is None or v < 0 or v > 2**63:
        return None
    return int(round(v))


def _nonneg(v: Optional[float]) -> Optional[float]:
    return v if v is not None and v >= 0 else None


def _share(v: Optional[float]) -> Optional[float]:
    return v if v is not None and 0 <= v <= 1 else None


def _total(values: list[Optional[int]]) -> Optional[int]:
    return sum(values) if values and all(v is not None for v in values) else None  # type: ignore[arg-type]


def worker_sample(arm: str, instance: str, w: Optional[WorkerFigures], up: Optional[float], ts: float,
                  interval_s: Optional[float], last_error: Optional[str] = None,
                  spec_seen: bool = False) -> Sample:
    """One worker's Sample from its figures (None: Prometheus has no series of it now) and its
    target's `up`. Pure: every unknown is None, every NaN or infinite value was None already."""
    s = Sample(ts=ts, arm=arm, up=False, state="up", source="prometheus", worker=instance)
    if up is not None and up < 1:
        s.state = "down"
        s.reason = f"Prometheus cannot scrape it ({last_error or 'up == 0'})"
        return s
    if w is None or not w.has_series:
        s.state = "error"
        s.reason = "Prometheus has no SGLang series of it matching the selector now"
        return s
    s.role = ROLES.get(w.engine_type or "")
    s.stale_s = w.age_s
    worker_level = w.ranks.get(None, {})
    rank_ids = [r for r in w.ranks if r is not None]

    def rank_reading(gauges: dict[str, Optional[float]], dp: int) -> RankReading:
        used, cap = _count(gauges.get("num_used_tokens")), _count(gauges.get("max_total_num_tokens"))
        return RankReading(dp_rank=dp, running_reqs=_count(gauges.get("num_running_reqs")),
                           queued_reqs=_count(gauges.get("num_queue_reqs")), kv_used_tokens=used,
                           kv_capacity_tokens=cap, kv_usage=kv_usage_of(_nonneg(gauges.get("token_usage")), used, cap))

    def gauge(name: str) -> list[Optional[float]]:
        if not rank_ids:
            return [worker_level.get(name)]
        return [w.ranks[r].get(name) for r in rank_ids]

    if rank_ids:
        readings = [rank_reading(w.ranks[r], int(r)) for r in rank_ids if r.isdigit()]
        s.ranks = sorted(readings, key=lambda r: r.dp_rank) or None
    running = [_count(v) for v in gauge("num_running_reqs")]
    queued = [_count(v) for v in gauge("num_queue_reqs")]
    used = [_count(v) for v in gauge("num_used_tokens")]
    cap = [_count(v) for v in gauge("max_total_num_tokens")]
    usage = [_nonneg(v) for v in gauge("token_usage")]
    s.running_reqs, s.queued_reqs = _total(running), _total(queued)
    s.kv_used_tokens, s.kv_capacity_tokens = _total(used), _total(cap)
    # One rank: SGLang's own usage gauge first (kv_usage_of); several: the pooled used / capacity,
    # else the fullest rank.
    s.kv_usage = kv_usage_of(usage[0] if len(usage) == 1 else None, s.kv_used_tokens, s.kv_capacity_tokens)
    if s.kv_usage is None and any(u is not None for u in usage):
        s.kv_usage = max(u for u in usage if u is not None)
    gen_gauges = [_nonneg(v) for v in gauge("gen_throughput")]
    s.gen_tok_s_gauge = sum(gen_gauges) if gen_gauges and all(g is not None for g in gen_gauges) else None  # type: ignore[misc]
    # The acceptance gauge is 0 when speculation is off or before the first decode window; a real
    # acceptance length is >= 1 (the bonus token).
    accepts = [v for v in gauge("spec_accept_length") if v is not None and v >= 1]
    if accepts:
        s.accept_length = sum(accepts) / len(accepts)
        rates = [v for v in gauge("spec_accept_rate") if _share(v) is not None]
        s.accept_rate = sum(rates) / len(rates) if rates else None  # type: ignore[arg-type]
    s.spec_enabled = True if (accepts or spec_seen) else None
    finished = worker_level.get("num_requests_total")
    if finished is None and rank_ids:
        parts = [w.ranks[r].get("num_requests_total") for r in rank_ids]
        finished = sum(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
    s.requests_finished_total = _nonneg(finished)
    f = w.figures
    s.gen_tok_s = _nonneg(f.get("gen_tok_s"))
    s.cache_hit_rate = _share(f.get("cache_hit_rate"))
    for name in ("ttft_mean_s", "queue_time_mean_s", "itl_mean_s", *LATENCY_FIGURES):
        setattr(s, name, _nonneg(f.get(name)))
    if w.age_s is not None and interval_s and w.age_s > STALE_AFTER * interval_s:
        s.state = "stale"
        s.reason = (f"newest value {w.age_s:.1f} s old, Prometheus scrapes it every {interval_s:g} s: "
                    "not live")
        return s
    s.up = True
    return s


class FleetView:
    """The fleet as the queries see it, poll after poll: which workers there are (stable arm
    names), their Samples and the fleet's FleetStatus. Pure: the HTTP is the caller's."""

    def __init__(self, name: str, url: str, matchers: str = ""):
        self.name, self.url, self.matchers = name, url, matchers
        self.known: dict[Key, ArmSpec] = {}  # in the order they joined
        self.targets: dict[tuple[str, str], TargetInfo] = {}
        self.config_interval_s: Optional[float] = None
        self.discovered: set[Key] = set()  # seen in the look-back: kept while their target is up or down
        self._spec_seen: set[Key] = set()
        self._taken: dict[str, Key] = {}

    @property
    def jobs(self) -> set[str]:
        return {k[0] for k in self.known} | {k[0] for k in self.discovered}

    def interval_of(self, key: Key) -> Optional[float]:
        t = self.targets.get((key[0], key[1]))
        return (t.interval_s if t is not None and t.interval_s else None) or self.config_interval_s

    def scrape_interval_s(self) -> Optional[float]:
        """The fleet's scrape interval: the longest of its targets' (the freshest any figure can be)."""
        known = [i for i in (self.interval_of(k) for k in self.known) if i]
        if known:
            return max(known)
        intervals = [t.interval_s for t in self.targets.values() if t.interval_s]
        return max(intervals) if intervals else self.config_interval_s

    def _arm_name(self, key: Key) -> str:
        job, instance, worker = key
        for name in (worker or short_name(instance), instance, f"{job}/{instance}"):
            if name and self._taken.get(name, key) == key:
                self._taken[name] = key
                return name
        base, i = instance or job or "worker", 2
        while f"{base}#{i}" in self._taken:
            i += 1
        self._taken[f"{base}#{i}"] = key
        return f"{base}#{i}"

    def read(self, results: dict[str, list[Point]], ts: float, poll_s: Optional[float] = None,
             reason: Optional[str] = None) -> FleetReading:
        workers, up = read_results(results)
        return self.read_figures(workers, up, ts, poll_s, reason)

    def read_figures(self, workers: dict[Key, WorkerFigures], up: dict[tuple[str, str], float], ts: float,
                     poll_s: Optional[float] = None, reason: Optional[str] = None) -> FleetReading:
        """The reading from figures already read (read_results): the workers now, their Samples."""
        present = list(self.known)
        present = [k for k in present if k in workers or (k[0], k[1]) in up]
        for k in sorted(set(workers) | {k for k in self.discovered if (k[0], k[1]) in up}):
            if k not in self.known:
                present.append(k)
        now_known: dict[Key, ArmSpec] = {}
        for k in present:
            spec = self.known.get(k)
            if spec is None:
                t = self.targets.get((k[0], k[1]))
                w = workers.get(k)
                spec = ArmSpec(name=self._arm_name(k), url=base_url(t.scrape_url if t else None, k[1]),
                               fleet=self.name, role=ROLES.get((w.engine_type if w else None) or ""))
            now_known[k] = spec
        self.known = now_known
        samples: dict[str, Sample] = {}
        statuses: list[WorkerStatus] = []
        for k, spec in now_known.items():
            w = workers.get(k)
            t = self.targets.get((k[0], k[1]))
            s = worker_sample(spec.name, k[1], w, up.get((k[0], k[1])), ts, self.interval_of(k),
                              last_error=t.last_error if t else None, spec_seen=k in self._spec_seen)
            if s.spec_enabled:
                self._spec_seen.add(k)
            s.scrape_s = poll_s
            samples[spec.name] = s
            statuses.append(WorkerStatus(url=spec.url, arm=spec.name, role=s.role or spec.role,
                                         healthy=s.up, reachable=None))
        healthy = sum(1 for s in samples.values() if s.up)
        if reason is None:
            reason = KNEE_NOTE if now_known else "the selector matches no SGLang series"
        status = FleetStatus(name=self.name, kind="prometheus", url=self.url, up=True, reason=reason,
                             workers=statuses, healthy=healthy, total=len(statuses), source="prometheus",
                             scrape_interval_s=self.scrape_interval_s())
        return FleetReading(status=status, workers=list(now_known.values()), samples=samples, scrape_workers=False)

    def down(self, reason: str, ts: float, state: str = "down") -> FleetReading:
        """Prometheus gave no usable answer: the fleet is down and says why, its workers are kept
        (each a Sample saying so)."""
        samples = {spec.name: Sample(ts=ts, arm=spec.name, up=False, state=state, source="prometheus",
                                     worker=k[1], reason=f"no reading: Prometheus {reason}")
                   for k, spec in self.known.items()}
        status = FleetStatus(name=self.name, kind="prometheus", url=self.url, up=False, reason=reason,
                             workers=[WorkerStatus(url=s.url, arm=s.name, role=s.role) for s in self.known.values()],
                             total=len(self.known), source="prometheus", scrape_interval_s=self.scrape_interval_s())
        return FleetReading(status=status, workers=list(self.known.values()), samples=samples, scrape_workers=False)
