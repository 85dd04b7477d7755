"""A worker's figures as the gateway has them, standing in for a worker specmon cannot reach:
smg 1.x's smg_engine_* series (the load per DP rank), the gateway's /engine_metrics (every
worker's /metrics merged, split back per worker), and the two laid over each other."""

from __future__ import annotations

from typing import Optional

from specmon import clock
from specmon.model import RankReading, Sample, kv_usage_of
from specmon.sources.gateway.loads import WorkerLoad
from specmon.sources.gateway.registry import RegistryWorker
from specmon.sources.gateway.urls import base_url
from specmon.sources.gateway.values import _count, _rate
from specmon.sources.prom import MetricsSnapshot
from specmon.sources.sglang import USED_METRICS, with_ranks

ENGINE_METRICS_PATH = "/engine_metrics"


def engine_sample(name: str, w: RegistryWorker, engine: dict[int, dict[str, float]], now: float) -> Sample:
    """A worker's Sample from smg 1.x's smg_engine_* series (one scrape of the gateway's metrics
    port): running and waiting requests and KV usage per DP rank, generation tok/s summed. No
    token counts: the gateway re-exports the usage ratio only."""
    ranks = [RankReading(dp_rank=k, running_reqs=_count(v.get("running")), queued_reqs=_count(v.get("waiting")),
                         kv_usage=kv_usage_of(_rate(v.get("token_usage")), None, None))
             for k, v in sorted(engine.items())]
    gens = [_rate(v.get("gen_tok_s")) for v in engine.values()]
    s = Sample(ts=now, arm=name, up=True, state="up", source="gateway", worker=w.url, role=w.role,
               gen_tok_s_gauge=sum(gens) if gens and all(g is not None for g in gens) else None)
    if len(ranks) > 1 or (w.dp_size or 1) > 1:
        with_ranks(s, ranks)
    else:
        r = ranks[0]
        s.running_reqs, s.queued_reqs, s.kv_usage = r.running_reqs, r.queued_reqs, r.kv_usage
    s.reason = "from the gateway's smg_engine_* series"
    return s


def _engine_load_sample(name: str, w: RegistryWorker, load: Optional[WorkerLoad],
                        engine: dict[int, dict[str, float]], now: float) -> Sample:
    """engine_sample, with the token counts /get_loads (smg 1.x, with the admin key) adds where
    it answered: the smg_engine_* series carry the usage ratio only."""
    s = engine_sample(name, w, engine, now)
    by_rank = {r.dp_rank: r for r in load.ranks} if load is not None else {}
    for r in s.ranks or []:
        got = by_rank.get(r.dp_rank)
        if got is not None:
            r.kv_used_tokens, r.kv_capacity_tokens = got.kv_used_tokens, got.kv_capacity_tokens
    if not s.ranks and 0 in by_rank:
        s.kv_used_tokens, s.kv_capacity_tokens = by_rank[0].kv_used_tokens, by_rank[0].kv_capacity_tokens
    elif s.ranks and by_rank:
        with_ranks(s, s.ranks)
    return s


def overlay_load(counters: Sample, live: Optional[Sample], counters_age_s: float) -> Sample:
    """A worker's Sample from the gateway's /engine_metrics (counters, histograms, up to a period
    old) with this poll's load over it (running, queued, KV, gen tok/s per DP rank, from
    smg_engine_* and /get_loads). KV tokens follow the newer usage where the pool size is known."""
    out = counters
    if live is not None:
        for f in ("running_reqs", "queued_reqs", "kv_usage", "gen_tok_s_gauge"):
            v = getattr(live, f)
            if v is not None:
                setattr(out, f, v)
        if live.ranks:
            old = {r.dp_rank: r for r in out.ranks or []}
            for r in live.ranks:
                was = old.get(r.dp_rank)
                if r.kv_capacity_tokens is None and was is not None:
                    r.kv_capacity_tokens = was.kv_capacity_tokens
                if r.kv_used_tokens is None and r.kv_usage is not None and r.kv_capacity_tokens:
                    r.kv_used_tokens = round(r.kv_usage * r.kv_capacity_tokens)
            with_ranks(out, live.ranks)
        elif live.kv_used_tokens is not None:
            out.kv_used_tokens, out.kv_capacity_tokens = live.kv_used_tokens, live.kv_capacity_tokens or out.kv_capacity_tokens
        elif live.kv_usage is not None and out.kv_capacity_tokens:
            out.kv_used_tokens = round(live.kv_usage * out.kv_capacity_tokens)
    out.stale_s = counters_age_s
    out.reason = "load from the gateway's smg_engine_* series, counters from its /engine_metrics"
    return out


def split_engine_metrics(text: str, only: Optional[set[str]] = None) -> dict[str, MetricsSnapshot]:
    """The gateway's /engine_metrics (every worker's /metrics, each series labelled worker_addr)
    as one MetricsSnapshot per worker base URL, the worker_addr label taken off; `only`: just
    these workers' (their lines are picked by worker_addr before anything is parsed). Raises
    MetricsParseError (a ValueError) when the text cannot be read or is past the parser's bounds."""
    if only is not None:
        marks = tuple(f'worker_addr="{u.rstrip("/")}{end}' for u in only for end in ('"', "/"))
        text = "\n".join(line for line in text.splitlines()
                         if line.startswith("#") or any(m in line for m in marks)) + "\n"
    snap = MetricsSnapshot.parse(text, ts=clock.wall(), only=USED_METRICS)
    per: dict[str, dict[str, list]] = {}
    for name in snap.names():
        for lab, v in snap.series(name):
            url = base_url(lab.get("worker_addr", ""))
            if url is None:
                continue
            rest = {k: x for k, x in lab.items() if k != "worker_addr"}
            per.setdefault(url, {}).setdefault(name, []).append((rest, v))
    return {url: MetricsSnapshot(series, snap.ts) for url, series in per.items() if only is None or url in only}
