"""The gateway's /get_loads: its fan-out to every worker for their loads (sglang-router 0.3.x's
token loads, with per-rank details on newer ones; smg 1.x's entries per worker and DP rank)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from specmon.model import RankReading, kv_usage_of
from specmon.sources.gateway.urls import base_url
from specmon.sources.gateway.values import _count, _int, _rate

LOADS_PATH = "/get_loads"


@dataclass
class WorkerLoad:
    """What the gateway's loads fan-out says of one worker."""

    load: Optional[int]  # tokens (running and queued) by the gateway's count; None: it got no answer
    ranks: list[RankReading] = field(default_factory=list)  # newer gateways: /v1/loads per rank
    gen_tok_s_gauge: Optional[float] = None


def _rank_of(r: dict, i: int) -> tuple[RankReading, Optional[float]]:
    """One /v1/loads-shaped entry (a DP rank): its reading and its generation tok/s gauge."""
    used, cap = _count(r.get("num_used_tokens")), _count(r.get("max_total_num_tokens"))
    k = _count(r.get("dp_rank"))
    return RankReading(
        dp_rank=k if k is not None else i, running_reqs=_count(r.get("num_running_reqs")),
        queued_reqs=_count(r.get("num_waiting_reqs")), kv_used_tokens=used, kv_capacity_tokens=cap or None,
        kv_usage=kv_usage_of(_rate(r.get("token_usage")), used, cap)), _rate(r.get("gen_throughput"))


def parse_loads(d: Any) -> dict[str, WorkerLoad]:
    """/get_loads: worker base URL -> its WorkerLoad (several entries of one worker: summed).
    sglang-router 0.3.x: `{"workers": [{"worker", "load", "details"?}]}`; smg 1.x: one entry per
    worker and DP rank, `{"loads": [{"worker", "worker_type", "dp_rank", "num_running_reqs", ...}]}`
    (no token load of its own: the ranks are the figures)."""
    out: dict[str, WorkerLoad] = {}
    if isinstance(d, dict) and isinstance(d.get("loads"), list) and not isinstance(d.get("workers"), list):
        gens: dict[str, list] = {}
        for i, e in enumerate(d["loads"][:100_000]):
            if not isinstance(e, dict) or not isinstance(e.get("worker"), str):
                continue
            url = base_url(e["worker"])
            if url is None:
                continue
            w = out.setdefault(url, WorkerLoad(load=None))
            rank, gen = _rank_of(e, len(w.ranks))
            w.ranks.append(rank)
            gens.setdefault(url, []).append(gen)
        for url, g in gens.items():
            out[url].gen_tok_s_gauge = sum(g) if all(x is not None for x in g) else None
        return out
    rows = d.get("workers") if isinstance(d, dict) else None
    if not isinstance(rows, list):
        return out
    for e in rows[:100_000]:
        if not isinstance(e, dict):
            continue
        url = base_url(e.get("worker")) if isinstance(e.get("worker"), str) else None
        if url is None:
            continue
        load = _int(e.get("load"))
        load = load if load is not None and load >= 0 else None
        ranks: list[RankReading] = []
        gen = None
        details = e.get("details")
        if isinstance(details, dict) and isinstance(details.get("loads"), list):
            gens = []
            for i, r in enumerate(details["loads"][:4096]):
                if not isinstance(r, dict):
                    continue
                rank, g = _rank_of(r, i)
                ranks.append(rank)
                gens.append(g)
            gen = sum(gens) if gens and all(g is not None for g in gens) else None
        prev = out.get(url)
        if prev is None:
            out[url] = WorkerLoad(load=load, ranks=ranks, gen_tok_s_gauge=gen)
        else:
            prev.load = None if prev.load is None or load is None else prev.load + load
            prev.ranks += ranks
    return out
