"""A gateway in front of SGLang workers: SGLang Model Gateway (`smg`, the `sglang-router` package).

Read-only, GETs only, from the gateway (`GatewayFleet.poll`, once a tick):
- `/workers`: the registry. `{"workers": [{"url", "worker_type": regular|prefill|decode,
  "is_healthy", "load", "bootstrap_port"?, "metadata": {...}}, ...], "total": N, "stats": {...}}`;
  under `--dp-aware` one entry per rank, `URL@RANK` (grouped back into one worker here);
- `/readiness`: `{"status": "ready", "healthy_workers": H, "total_workers": N}` (200) or 503;
- `/get_loads`: the gateway's fan-out to every worker, `{"workers": [{"worker": URL, "load": N}]}`
  (N tokens, -1 when the gateway got no answer); newer gateways add `"details": {"loads": [...]}`,
  one entry per DP rank in /v1/loads' shape;
- `/engine_metrics`: every worker's /metrics merged, each series labelled `worker_addr`; it
  answers 500 when two workers' families carry different label sets (a DP worker's dp_rank
  beside a worker without DP ranks, prefill and decode series), and then the workers' figures
  come from specmon's own scrapes only (said in the fleet's reason);
- the gateway's own Prometheus metrics, on their own port (`--prometheus-port`, 29000 by
  default): `smg_router_requests_total` (routed requests, a counter: routed req/s),
  `smg_worker_requests_active{worker}`, `smg_worker_health{worker}`, `smg_worker_cb_state{worker}`
  (0 closed, 1 open, 2 half_open; -1 once a worker is removed), `smg_worker_selection_total{policy}`
  (the routing policy, once a request has been routed). The gateway does not say where they are:
  `--gateway-metrics URL`, else the default port on the gateway's host is tried and taken only
  when its workers are this gateway's workers; unknown, the fleet's reason says so.

The parse functions are pure (bytes or JSON in, plain values out, never an exception), so they can
be fuzzed; `detect_gateway` tells a gateway from a plain SGLang server (which has no /workers).
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit

# httpx (~0.16 s to import) is imported where it is used: the lean client (sources/http.py) does
# the plain-http scrapes, httpx only TLS, proxies and injected transports.
if TYPE_CHECKING:
    import httpx

from specmon import clock
from specmon.model import ArmSpec, FleetReading, FleetStatus, RankReading, Sample, WorkerStatus, kv_usage_of
from specmon.sources.prom import MetricsParseError, MetricsSnapshot, bare_name, plain_sample
from specmon.sources.serverinfo import json_body
from specmon.sources import http
from specmon.sources.sglang import (
    USED_METRICS, ArmCollector, is_loopback_url, lean_target, shared_ssl_context, with_ranks,
)

REGISTRY_PATH = "/workers"
READINESS_PATH = "/readiness"
LOADS_PATH = "/get_loads"
ENGINE_METRICS_PATH = "/engine_metrics"
DEFAULT_METRICS_PORT = 29000  # smg's --prometheus-port default
JSON_MAX_BYTES = 8 * 2**20
METRICS_MAX_BYTES = 32 * 2**20
ROLES = ("regular", "prefill", "decode")
CIRCUIT = {0: "closed", 1: "open", 2: "half_open"}
# smg 1.x re-exports each worker's load, per DP rank, as its load monitor last read it (labels
# worker, model, dp_rank): what stands in for a worker specmon cannot reach, from the one scrape
ENGINE_SERIES = {"smg_engine_running_requests": "running", "smg_engine_waiting_requests": "waiting",
                 "smg_engine_token_usage": "token_usage", "smg_engine_gen_throughput": "gen_tok_s"}
# smg 1.x's PD timing, histograms only a PD gateway sees (seconds): their _sum and _count
PD_SERIES = {"smg_pd_ttft_seconds": "ttft", "smg_pd_prefill_duration_seconds": "prefill",
             "smg_pd_decode_ttft_seconds": "decode_ttft", "smg_pd_kv_transfer_duration_seconds": "kv_transfer"}
_READ_SERIES = frozenset(("smg_router_requests_total", "smg_worker_requests_active", "smg_worker_health",
                          "smg_worker_cb_state", "smg_worker_selection_total", *ENGINE_SERIES,
                          *(n + "_sum" for n in PD_SERIES), *(n + "_count" for n in PD_SERIES)))
# what parse_gateway_metrics reads


# --------------------------------------------------------------------------------------------
# Pure parsing


@dataclass
class RegistryWorker:
    """One worker of the gateway's registry (DP ranks of one worker folded into one)."""

    url: str  # the worker's base URL (no @RANK)
    role: str  # regular | prefill | decode (or what the gateway says, lower case)
    healthy: Optional[bool]
    load: Optional[int]  # the gateway's own load figure for it
    bootstrap_port: Optional[int] = None
    dp_size: Optional[int] = None
    model: Optional[str] = None
    entries: list[str] = field(default_factory=list)  # the registry's URLs for it (URL@RANK under --dp-aware)


def _int(v: Any) -> Optional[int]:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, float):
        if not math.isfinite(v) or not v.is_integer():
            return None
        v = int(v)
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            return None
    if not isinstance(v, int) or abs(v) > 2**63:
        return None
    return v


def _count(v: Any) -> Optional[int]:
    i = _int(v)
    return i if i is not None and i >= 0 else None


def _rate(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) and f >= 0 else None


def _text(v: Any, most: int = 2048) -> Optional[str]:
    return v[:most] if isinstance(v, str) and v else None


# The registry, the loads and the metrics name the same workers on every poll: each URL is read
# once (pure functions of a string; a bounded cache, so a fleet whose URLs churn cannot grow it).
def base_url(url: str) -> Optional[str]:
    """`http://h:p` of a registry URL (`http://h:p/`, `http://h:p@3` under --dp-aware); None when
    it is not an http(s) URL with a host."""
    if not isinstance(url, str) or not url or len(url) > 2048 or not url.isprintable():
        return None
    return _base_url(url)


@functools.lru_cache(maxsize=8192)
def _base_url(url: str) -> Optional[str]:
    head, at, rank = url.rpartition("@")
    if at and rank.isdigit() and "://" in head:
        url = head
    try:
        u = urlsplit(url.strip())
        host, port = u.hostname, u.port
    except ValueError:
        return None
    if u.scheme not in ("http", "https") or not host or u.username or u.password:
        return None
    netloc = f"[{host}]" if ":" in host else host
    return f"{u.scheme}://{netloc}" + (f":{port}" if port else "")


@functools.lru_cache(maxsize=8192)
def worker_name(url: str) -> str:
    """The arm name of a worker: host:port of its URL."""
    u = urlsplit(url)
    host = u.hostname or url
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{u.port}" if u.port else host


def parse_registry(d: Any) -> Optional[list[RegistryWorker]]:
    """The workers of a /workers JSON value, None when it is not a gateway's registry (no
    `workers` list). Entries that are not a worker with an http(s) URL are skipped; the DP ranks
    of one worker (`URL@RANK`) are one RegistryWorker, healthy when all its ranks are."""
    if not isinstance(d, dict) or not isinstance(d.get("workers"), list):
        return None
    by_url: dict[str, RegistryWorker] = {}
    for e in d["workers"][:100_000]:
        if not isinstance(e, dict):
            continue
        raw = e.get("url")
        url = base_url(raw) if isinstance(raw, str) else None
        if url is None:
            continue
        role = e.get("worker_type")
        role = role.strip().lower() if isinstance(role, str) and role.strip() else "regular"
        role = role[:32] if role.isprintable() else "regular"
        healthy = e.get("is_healthy") if isinstance(e.get("is_healthy"), bool) else None
        # sglang-router 0.3.x keeps the worker's facts under "metadata", smg 1.x under "labels"
        meta = e.get("metadata") if isinstance(e.get("metadata"), dict) else (
            e.get("labels") if isinstance(e.get("labels"), dict) else {})
        w = by_url.get(url)
        if w is None:
            w = by_url[url] = RegistryWorker(
                url=url, role=role, healthy=healthy, load=_count(e.get("load")),
                bootstrap_port=_count(e.get("bootstrap_port")), dp_size=_count(meta.get("dp_size")),
                model=_text(e.get("model_id")) or _text(meta.get("served_model_name")))
        else:  # another DP rank of the same worker
            if w.healthy is not None:
                w.healthy = w.healthy and healthy if healthy is not None else None
            load = _count(e.get("load"))
            w.load = None if w.load is None or load is None else w.load + load
        w.entries.append(raw[:2048])
    return list(by_url.values())


@dataclass
class Readiness:
    ready: Optional[bool]
    healthy: Optional[int]
    total: Optional[int]
    reason: Optional[str] = None


def parse_readiness(status: Optional[int], d: Any) -> Readiness:
    """/readiness: 200 with healthy_workers/total_workers, or 503 (not ready, with a reason)."""
    if status is None:
        return Readiness(None, None, None, "no answer")
    body = d if isinstance(d, dict) else {}
    healthy, total = _count(body.get("healthy_workers")), _count(body.get("total_workers"))
    if status == 200:
        return Readiness(True, healthy, total)
    if status == 503:
        return Readiness(False, healthy, total, _text(body.get("reason"), 200) or "not ready")
    return Readiness(None, None, None, f"/readiness answered HTTP {status}")


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


@dataclass
class GatewayMetrics:
    """The gateway's own Prometheus series that the fleet header shows."""

    routed_total: Optional[float] = None  # smg_router_requests_total summed over its labels
    active: dict[str, int] = field(default_factory=dict)  # worker base URL -> requests routed, not finished
    health: dict[str, bool] = field(default_factory=dict)
    circuit: dict[str, str] = field(default_factory=dict)
    policies: list[str] = field(default_factory=list)
    workers: set[str] = field(default_factory=set)  # workers with a live health series (whose metrics these are)
    is_gateway: bool = False  # any smg_ series at all
    # smg_engine_*: worker base URL -> DP rank -> {"running"|"waiting"|"token_usage"|"gen_tok_s": value}
    engine: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    # smg_pd_*: "ttft"|"prefill"|... -> (sum of seconds, count), summed over their label sets
    pd: dict[str, tuple[float, float]] = field(default_factory=dict)


def parse_gateway_metrics(text: str) -> GatewayMetrics:
    """The gateway's /metrics text; lines it cannot read are skipped (never an exception)."""
    m = GatewayMetrics()
    routed = []
    for line in text.splitlines()[:200_000]:
        if not line.startswith("smg_"):
            continue
        if m.is_gateway:
            # Most of smg's lines are series not read here (request-duration buckets, circuit
            # outcome counters: ~2/3 of a 64-worker gateway's): past the first readable smg_ line
            # (is_gateway) they are skipped by name, as the word-by-word reading names them,
            # before anything is parsed.
            head = line.split("{", 1)[0] if "{" in line else line.partition(" ")[0]
            if head.strip() not in _READ_SERIES:
                continue
        # the plain form (no escapes, no timestamp) read once per name{labels}; else word by word
        plain = plain_sample(line)
        name, labels, value = plain if plain is not None else _sample_line(line)
        if name is None:
            continue
        m.is_gateway = True
        if name == "smg_router_requests_total":
            if math.isfinite(value) and value >= 0:
                routed.append(value)
            continue
        if name == "smg_worker_selection_total":
            p = labels.get("policy")
            if p and p not in m.policies and len(m.policies) < 8:
                m.policies.append(p[:64])
            continue
        if name.startswith("smg_pd_"):
            base, _, part = name.rpartition("_")
            key = PD_SERIES.get(base)
            if key is not None and part in ("sum", "count") and math.isfinite(value) and value >= 0:
                total, n = m.pd.get(key, (0.0, 0.0))
                m.pd[key] = (total + value, n) if part == "sum" else (total, n + value)
            continue
        url = base_url(labels.get("worker", "")) if "worker" in labels else None
        if url is None or not math.isfinite(value):
            continue
        if name in ENGINE_SERIES:
            rank = _count(labels.get("dp_rank", "0") or "0")
            if rank is not None and value >= 0 and len(m.engine) < 100_000:
                m.engine.setdefault(url, {}).setdefault(rank, {})[ENGINE_SERIES[name]] = value
            continue
        if name == "smg_worker_requests_active":
            if value >= 0:
                m.active[url] = m.active.get(url, 0) + int(value)
        elif name == "smg_worker_health":
            if value >= 0:  # -1: removed from the gateway
                m.workers.add(url)
                m.health[url] = value > 0
        elif name == "smg_worker_cb_state":
            state = CIRCUIT.get(int(value)) if value >= 0 and value.is_integer() else None
            if state is not None:
                m.circuit[url] = state
    # The counter appears with the first routed request: readable metrics without it routed none yet.
    m.routed_total = sum(routed) if routed else (0.0 if m.is_gateway else None)
    return m


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


def _sample_line(line: str) -> tuple[Optional[str], dict[str, str], float]:
    """(name, labels, value) of one exposition line, or (None, {}, nan)."""
    try:
        if "{" in line:
            name, rest = line.split("{", 1)
            body, _, tail = rest.rpartition("}")
            labels = {}
            for part in _split_labels(body):
                k, _, v = part.partition("=")
                v = v.strip()
                if len(v) >= 2 and v[0] == v[-1] == '"':
                    labels[k.strip()] = v[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        else:
            name, _, tail = line.partition(" ")
            labels = {}
        value = float(tail.split()[0])
    except (ValueError, IndexError):
        return None, {}, math.nan
    return name.strip(), labels, value


def _split_labels(body: str) -> list[str]:
    parts, cur, quoted, esc = [], [], False, False
    for c in body[:8192]:
        if esc:
            cur.append(c)
            esc = False
        elif c == "\\":
            cur.append(c)
            esc = True
        elif c == '"':
            quoted = not quoted
            cur.append(c)
        elif c == "," and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if cur:
        parts.append("".join(cur))
    return [p for p in parts if "=" in p]


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


def is_sglang_metrics(text: str) -> bool:
    """Does a /metrics body carry SGLang's scheduler series?"""
    for line in text.splitlines()[:50_000]:
        if line and line[0] != "#" and bare_name(line.split("{", 1)[0].split(" ", 1)[0]) == "num_running_reqs":
            return True
    return False


# --------------------------------------------------------------------------------------------
# HTTP


def _client(url: str, timeout_s: float, transport: Optional[httpx.AsyncBaseTransport] = None) -> httpx.AsyncClient:
    import httpx

    # As the workers' collector: a proxy from the environment is never used for a loopback address.
    if is_loopback_url(url):
        return httpx.AsyncClient(timeout=timeout_s, transport=transport, follow_redirects=False, trust_env=False,
                                 verify=shared_ssl_context())
    return httpx.AsyncClient(timeout=timeout_s, transport=transport, follow_redirects=False,
                             verify=shared_ssl_context())


async def _get(client: httpx.AsyncClient, url: str, headers: dict, max_bytes: int) -> tuple[Optional[int], bytes, str]:
    """GET url: (status, body, problem). status None when nothing answered; the body is read
    (streaming, up to max_bytes) for 200 and 503 answers only."""
    import httpx

    try:
        async with client.stream("GET", url, headers=headers) as r:
            if r.status_code not in (200, 503):
                return r.status_code, b"", ""
            body = bytearray()
            async for chunk in r.aiter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    return None, b"", f"{urlsplit(url).path} body over {max_bytes // 2**20} MiB"
            return r.status_code, bytes(body), ""
    except httpx.ConnectError as e:
        return None, b"", "connection refused" if http.is_refused(e) else f"cannot connect ({str(e)[:120] or type(e).__name__})"
    except httpx.TimeoutException:
        return None, b"", "no answer in time"
    except (httpx.HTTPError, OSError) as e:
        return None, b"", f"{type(e).__name__}: {str(e)[:120]}"


class _Http:
    """The GETs of one gateway source: the lean client (sources/http.py) for a plain-http address
    (one kept-alive connection or a few per host and port: the gateway, its metrics port), httpx
    for the rest (TLS, proxies, credentials, an injected transport). The same answers and
    problems either way."""

    def __init__(self, url: str, timeout_s: float, transport: Optional[httpx.AsyncBaseTransport] = None):
        self.url = url
        self.timeout_s = timeout_s
        self.transport = transport
        self.client: Optional[httpx.AsyncClient] = None  # made when a URL needs httpx (slow to import)
        self._lean: dict[tuple[str, int], http.LeanClient] = {}
        self._targets: dict[str, Optional[tuple[str, int, str]]] = {}  # url -> lean_target(url), asked once

    async def get(self, url: str, headers: dict, max_bytes: int) -> tuple[Optional[int], bytes, str]:
        try:
            target = self._targets[url]
        except KeyError:
            target = self._targets[url] = lean_target(url) if self.transport is None else None
        if target is None:
            if self.client is None:
                self.client = _client(self.url, self.timeout_s, self.transport)
            return await _get(self.client, url, headers, max_bytes)
        host, port, path = target
        c = self._lean.get((host, port))
        if c is None:
            c = self._lean[(host, port)] = http.LeanClient(host, port, self.timeout_s)
        try:
            status, body = await c.get(path or "/", headers, max_bytes, read_body=lambda st: st in (200, 503))
        except http.TooLarge:
            return None, b"", f"{urlsplit(url).path} body over {max_bytes // 2**20} MiB"
        except http.Refused:
            return None, b"", "connection refused"
        except (http.Unresolved, http.ConnectFailed) as e:
            return None, b"", f"cannot connect ({str(e)[:120] or type(e).__name__})"
        except http.ReadTimeout:
            return None, b"", "no answer in time"
        except http.HttpError as e:
            return None, b"", f"{type(e).__name__}: {str(e)[:120]}"
        return status, body, ""

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        for c in self._lean.values():
            await c.aclose()


def _json(body: bytes) -> Any:
    try:
        return json_body(body)
    except ValueError:
        return None


@dataclass
class Probe:
    kind: str  # "gateway" | "server" | "neither" | "unreachable"
    reason: str = ""


async def probe(url: str, *, api_key: Optional[str] = None, admin_key: Optional[str] = None, timeout_s: float = 3.0,
                transport: Optional[httpx.AsyncBaseTransport] = None) -> Probe:
    """What answers at url, by GETs only: a gateway (its /workers is a registry), an SGLang server
    (/server_info is a JSON object, /v1/loads lists loads or /metrics has SGLang's series),
    neither (it answers, but as neither), or nothing answers (unreachable: left to the session
    to retry). A server that answers 5xx or wants a key is taken as a server."""
    base = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    c = _Http(base, timeout_s, transport)
    try:
        key = admin_key or api_key
        status, body, problem = await c.get(base + REGISTRY_PATH, {"Authorization": f"Bearer {key}"} if key else {},
                                            JSON_MAX_BYTES)
        if status is None:
            return Probe("unreachable", problem)
        if status == 200 and parse_registry(_json(body)) is not None:
            return Probe("gateway")
        if status in (401, 403):
            # smg 1.x: /workers wants the admin key, its /readiness (open) says it is a gateway
            r_status, r_body, _ = await c.get(base + READINESS_PATH, {}, JSON_MAX_BYTES)
            r = _json(r_body) if r_status in (200, 503) else None
            if isinstance(r, dict) and "total_workers" in r:
                return Probe("gateway", f"{REGISTRY_PATH} answered HTTP {status}: it wants the admin key"
                                        + (" (the one given is not taken)" if admin_key else ""))
        seen = [f"{REGISTRY_PATH} {status}"]
        for path in ("/server_info", "/get_server_info", "/v1/loads", "/metrics"):
            status, body, problem = await c.get(base + path, headers, METRICS_MAX_BYTES)
            if status is None:
                seen.append(f"{path} {problem}")
                continue
            if status in (401, 403) or status >= 500:
                return Probe("server", f"{path} answered HTTP {status}")
            if status != 200:
                seen.append(f"{path} {status}")
                continue
            if path == "/metrics":
                if is_sglang_metrics(body.decode("utf-8", errors="replace")):
                    return Probe("server")
            else:
                d = _json(body)
                if path == "/v1/loads" and isinstance(d, dict) and isinstance(d.get("loads"), list):
                    return Probe("server")
                if path != "/v1/loads" and isinstance(d, dict) and ("model_path" in d or "internal_states" in d):
                    return Probe("server")
            seen.append(f"{path} 200 but not SGLang's")
        return Probe("neither", "; ".join(seen))
    finally:
        await c.aclose()


async def detect_gateway(url: str, **kw) -> bool:
    """True when url is a gateway (its GET /workers answers a worker registry)."""
    return (await probe(url, **kw)).kind == "gateway"


# --------------------------------------------------------------------------------------------
# The fleet source


class GatewayFleet:
    """A FleetSource (session/source.py) for one gateway: its workers become arms (scraped
    directly: scrape_workers=True) and, for a worker specmon cannot reach, the gateway's own
    figures stand in (FleetReading.samples). poll() never raises."""

    kind = "gateway"

    def __init__(self, url: str, *, name: Optional[str] = None, metrics_url: Optional[str] = None,
                 api_key_env: Optional[str] = None, admin_key_env: Optional[str] = None, timeout_s: float = 3.0, engine_metrics_every_s: float = 10.0,
                 discover_metrics: bool = True, transport: Optional[httpx.AsyncBaseTransport] = None,
                 names: Optional[dict[str, str]] = None):
        self.url = url.rstrip("/")
        # worker URL -> the arm name it already goes by (a launched layout's own names)
        self.names = {k.rstrip("/"): v for k, v in (names or {}).items()}
        self.name = name or f"gateway {worker_name(self.url)}"
        self.api_key_env = api_key_env
        # the variable holding the admin key smg 1.x asks on its worker routes (/workers, /get_loads);
        # read at each request, never kept or written
        self.admin_key_env = admin_key_env
        self.timeout_s = timeout_s
        self.metrics_url = metrics_url.rstrip("/") if metrics_url else None
        if self.metrics_url and not urlsplit(self.metrics_url).path:
            self.metrics_url += "/metrics"
        self._metrics_given = metrics_url is not None
        self._discover = discover_metrics and not self._metrics_given
        self._discover_due = 0.0
        self.engine_metrics_every_s = engine_metrics_every_s
        # The worker URLs whose figures the session needs from the gateway because it cannot reach
        # them itself (LiveSession sets it before each poll); None: every worker's (no session says).
        # /engine_metrics is asked for, and read, only for those: every worker's /metrics merged is
        # the costliest thing the gateway serves, and parsing it (64 workers: about 3 MB) would
        # hold the load generator's thread back in a ramp through the gateway.
        self.needs_figures: Optional[set[str]] = None
        self._engine_due = 0.0
        self._engine_problem: Optional[str] = None
        self._engine: dict[str, tuple[float, Sample]] = {}  # worker URL -> (when, its Sample from /engine_metrics)
        self._collectors: dict[str, ArmCollector] = {}  # windows for /engine_metrics rates and percentiles
        self._routed_prev: Optional[tuple[float, float]] = None
        self._engine_covered: set[str] = set()  # workers the last metrics scrape had smg_engine_* series of
        self._pd_prev: dict[str, tuple[float, float]] = {}  # smg_pd_* (sum, count) at the last poll
        self._pd_mean: dict[str, Optional[float]] = {}  # their mean over the last window with requests
        self._registry_read: Optional[tuple[bytes, list[RegistryWorker]]] = None  # the last /workers body, read
        self._http = _Http(self.url, timeout_s, transport)
        self._transport = transport
        self.polls = 0

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.admin_key_env) if self.admin_key_env else None
        key = key or (os.environ.get(self.api_key_env) if self.api_key_env else None)
        return {"Authorization": f"Bearer {key}"} if key and key.isascii() else {}

    async def aclose(self) -> None:
        await self._http.aclose()
        for c in self._collectors.values():
            await c.aclose()

    async def poll(self) -> FleetReading:
        try:
            return await self._poll()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # never raises: a bug or a case not foreseen is this fleet's reason
            return FleetReading(status=FleetStatus(name=self.name, kind="gateway", url=self.url, up=False,
                                                   reason=f"poll failed: {type(e).__name__}: {str(e)[:200]}"))

    async def _poll(self) -> FleetReading:
        now = clock.wall()
        self.polls += 1
        h = self._headers()
        get = lambda path, most=JSON_MAX_BYTES: self._http.get(self.url + path, h, most)  # noqa: E731
        reg_status, reg_body, reg_problem = await get(REGISTRY_PATH)
        if reg_status == 200 and self._registry_read is not None and reg_body == self._registry_read[0]:
            # The registry reads as it did (a fleet's membership and health rarely move): the
            # workers read from it then (nothing changes a RegistryWorker once parsed; 64
            # workers: ~0.6 ms of JSON and parsing a tick otherwise).
            registry = self._registry_read[1]
        else:
            registry = parse_registry(_json(reg_body)) if reg_status == 200 else None
            self._registry_read = (reg_body, registry) if registry is not None else None
        if registry is None:
            why = reg_problem or (f"HTTP {reg_status}" if reg_status != 200 else "not a worker registry")
            if reg_status in (401, 403):
                why += (" (the gateway wants its admin key: --gateway-key-env VAR)" if not self.admin_key_env
                        else f" (the key in ${self.admin_key_env} is not one it takes)")
            return FleetReading(status=FleetStatus(name=self.name, kind="gateway", url=self.url, up=False,
                                                   reason=f"{REGISTRY_PATH}: {why}", source="workers"),
                                scrape_workers=True)
        jobs = {"ready": get(READINESS_PATH), "loads": get(LOADS_PATH)}
        if self.metrics_url is None and self._discover and now >= self._discover_due:
            jobs["discover"] = self._discover_metrics(registry)
        if self.metrics_url is not None:
            jobs["metrics"] = self._http.get(self.metrics_url, h, METRICS_MAX_BYTES)
        wanted = self.needs_figures
        # smg 1.x re-exports every worker's load per DP rank on its metrics port (smg_engine_*),
        # scraped on every poll anyway: when those cover every worker the session needs, the
        # gateway's merge of all the workers' /metrics (the costliest thing it serves) is not asked
        covered = wanted is not None and bool(wanted) and wanted <= self._engine_covered
        if now >= self._engine_due and registry and (wanted is None or wanted) and not covered:
            jobs["engine"] = get(ENGINE_METRICS_PATH, METRICS_MAX_BYTES)
            self._engine_due = now + self.engine_metrics_every_s
        done = dict(zip(jobs, await asyncio.gather(*jobs.values())))
        reasons: list[str] = []

        ready = parse_readiness(done["ready"][0], _json(done["ready"][1]))
        if ready.ready is False:
            reasons.append(f"not ready: {ready.reason}")
        elif ready.ready is None:
            reasons.append(f"{READINESS_PATH}: {done['ready'][2] or ready.reason}")

        loads_status, loads_body, loads_problem = done["loads"]
        loads = parse_loads(_json(loads_body)) if loads_status == 200 else {}
        if loads_status != 200:
            reasons.append(f"{LOADS_PATH}: {loads_problem or f'HTTP {loads_status}'}")

        gm: Optional[GatewayMetrics] = None
        if "discover" in done and done["discover"] is not None:
            gm = done["discover"]
        elif "metrics" in done:
            m_status, m_body, m_problem = done["metrics"]
            if m_status == 200:
                gm = parse_gateway_metrics(m_body.decode("utf-8", errors="replace"))
                if not gm.is_gateway:
                    reasons.append(f"{self.metrics_url} has no smg_ series")
                    gm = None
            else:
                reasons.append(f"gateway metrics {self.metrics_url}: {m_problem or f'HTTP {m_status}'}")
        if gm is None and self.metrics_url is None:
            reasons.append("gateway metrics: port unknown (pass --gateway-metrics URL): routed req/s, "
                           "requests per worker and circuit states not known")

        # a worker the gateway marks unhealthy keeps its last smg_engine_* values: not a reading
        self._engine_covered = {u for u in gm.engine if gm.health.get(u) is not False} if gm is not None else set()
        if "engine" in done:
            await self._read_engine_metrics(done["engine"], registry, now, wanted)
        elif wanted is not None and (not wanted or covered):
            self._engine_problem = None  # not asked for: every worker answers specmon itself, or smg_engine_* cover them
            if covered:
                self._engine.clear()  # no counters over the load from here on, rather than ones that age out
        if self._engine_problem:
            reasons.append(self._engine_problem)

        routed = None
        if gm is not None and gm.routed_total is not None:
            if self._routed_prev is not None and gm.routed_total >= self._routed_prev[1] and now > self._routed_prev[0]:
                routed = (gm.routed_total - self._routed_prev[1]) / (now - self._routed_prev[0])
            self._routed_prev = (now, gm.routed_total)

        pd_s = self._pd_window(gm.pd) if gm is not None and gm.pd else {}

        specs, statuses, samples = [], [], {}
        taken: set[str] = set()
        for w in registry:
            name = self.names.get(w.url) or worker_name(w.url)
            if name in taken:
                name = f"{name} ({w.role})"
            taken.add(name)
            specs.append(ArmSpec(name=name, url=w.url, api_key_env=self.api_key_env, fleet=self.name, role=w.role))
            statuses.append(WorkerStatus(
                url=w.url, arm=name, role=w.role,
                healthy=w.healthy if w.healthy is not None else (gm.health.get(w.url) if gm else None),
                # the gauge appears with the worker's first routed request: a live worker without it has none
                active_requests=(gm.active.get(w.url, 0 if w.url in gm.workers else None)) if gm else None,
                circuit=gm.circuit.get(w.url) if gm else None))
            fresh = gm is not None and w.healthy is not False and gm.health.get(w.url) is not False
            s = self._worker_sample(name, w, loads.get(w.url), now, gm.engine.get(w.url) if fresh else None)
            if s is not None:
                samples[name] = s
        healthy = ready.healthy
        total = ready.total
        if healthy is None or total is None:
            known = [w.healthy for w in registry]
            healthy = sum(1 for x in known if x) if all(x is not None for x in known) else None
            total = len(registry)
        status = FleetStatus(
            name=self.name, kind="gateway", url=self.url, up=True, reason="; ".join(reasons) or None,
            workers=statuses, healthy=healthy, total=total, routed_req_s=routed,
            policy=", ".join(gm.policies) if gm and gm.policies else None, source="workers",
            pd_ttft_s=pd_s.get("ttft"), pd_prefill_s=pd_s.get("prefill"))
        for gone in set(self._collectors) - {w.url for w in registry}:
            await self._collectors.pop(gone).aclose()
            self._engine.pop(gone, None)
        return FleetReading(status=status, workers=specs, samples=samples, scrape_workers=True)

    def _pd_window(self, pd: dict[str, tuple[float, float]]) -> dict[str, Optional[float]]:
        """Each smg_pd_* histogram's mean over the polls since the last: (Δsum / Δcount); a window
        without requests keeps the last mean shown (a PD gateway between bursts)."""
        for key, (total, n) in pd.items():
            prev = self._pd_prev.get(key)
            if prev is not None and n > prev[1] and total >= prev[0]:
                self._pd_mean[key] = (total - prev[0]) / (n - prev[1])
            elif prev is None or n < prev[1]:  # first sight, or the gateway restarted
                self._pd_mean.setdefault(key, total / n if n > 0 else None)
            self._pd_prev[key] = (total, n)
        return self._pd_mean

    def _worker_sample(self, name: str, w: RegistryWorker, load: Optional[WorkerLoad], now: float,
                       engine: Optional[dict[int, dict[str, float]]] = None) -> Optional[Sample]:
        """The gateway's reading of one worker, for a tick when specmon cannot reach it itself:
        smg 1.x's smg_engine_* series from this poll's scrape of its metrics port (per DP rank; token
        counts from /get_loads where it answered), else its share of /engine_metrics (newest within
        two periods), else the loads fan-out alone."""
        eng = self._engine.get(w.url)
        fresh = eng is not None and now - eng[0] <= 2 * self.engine_metrics_every_s + self.timeout_s
        if fresh and not engine:
            s = eng[1]
            out = Sample(**{**s.__dict__, "ts": now, "arm": name})
            out.stale_s = round(now - eng[0], 3)
            out.reason = "from the gateway's /engine_metrics"
            return out
        if engine and fresh:
            # both: /engine_metrics was asked because the session wants the worker's counters and
            # histograms (smg_engine_* have none); this poll's smg_engine_* give the load as it is now
            live = _engine_load_sample(name, w, load, engine, now)
            return overlay_load(Sample(**{**eng[1].__dict__, "ts": now, "arm": name}), live, round(now - eng[0], 3))
        if engine:
            return _engine_load_sample(name, w, load, engine, now)
        if load is None:
            if w.healthy is False:  # smg 1.x lists no load for a worker it cannot reach
                return Sample(ts=now, arm=name, up=False, state="down", source="gateway", worker=w.url, role=w.role,
                              reason="the gateway marks it unhealthy and has no load of it")
            return None
        if load.load is None and not load.ranks:
            return Sample(ts=now, arm=name, up=False, state="down", source="gateway", worker=w.url, role=w.role,
                          reason="the gateway got no load from it either (/get_loads load -1)")
        s = Sample(ts=now, arm=name, up=True, state="up", source="gateway", worker=w.url, role=w.role,
                   gen_tok_s_gauge=load.gen_tok_s_gauge)
        if load.ranks:
            if len(load.ranks) > 1 or w.dp_size and w.dp_size > 1:
                with_ranks(s, load.ranks)
            else:
                r = load.ranks[0]
                s.running_reqs, s.queued_reqs = r.running_reqs, r.queued_reqs
                s.kv_used_tokens, s.kv_capacity_tokens, s.kv_usage = r.kv_used_tokens, r.kv_capacity_tokens, r.kv_usage
            s.reason = "from the gateway's /get_loads"
        else:
            s.reason = f"the gateway's /get_loads gives only its load: {load.load:,} tokens (running and queued)"
        return s

    async def _read_engine_metrics(self, answer: tuple, registry: list[RegistryWorker], now: float,
                                   only: Optional[set[str]] = None) -> None:
        status, body, problem = answer
        if status != 200:
            words = problem or f"HTTP {status}"
            self._engine_problem = (f"the gateway's {ENGINE_METRICS_PATH} answered {words}: worker figures come "
                                    "from specmon's own scrape of each worker")
            self._engine.clear()
            return
        try:
            # every worker's series at once: parsed in a thread (about 1 s for 12 workers on 2 cores),
            # so the session's ticks go on meanwhile
            per = await asyncio.to_thread(split_engine_metrics, body.decode("utf-8", errors="replace"), only)
        except (MetricsParseError, ValueError) as e:
            self._engine_problem = (f"the gateway's {ENGINE_METRICS_PATH} could not be read ({e}): worker figures "
                                    "come from specmon's own scrape of each worker")
            self._engine.clear()
            return
        self._engine_problem = None
        roles = {w.url: w for w in registry}
        for url, snap in per.items():
            w = roles.get(url)
            if w is None:
                continue
            c = self._collectors.get(url)
            if c is None:
                c = self._collectors[url] = ArmCollector(ArmSpec(name=worker_name(url), url=url),
                                                         transport=self._transport)
            s = c.read_snapshot(snap, now)
            if s is not None:
                s.source, s.worker, s.role = "gateway", url, w.role
                self._engine[url] = (now, s)

    async def _discover_metrics(self, registry: list[RegistryWorker]) -> Optional[GatewayMetrics]:
        """The gateway does not say where its metrics are: try its host at smg's default port,
        and keep that only when the series there name this gateway's workers."""
        self._discover_due = clock.wall() + 60.0
        u = urlsplit(self.url)
        host = u.hostname or ""
        candidate = f"http://{'[' + host + ']' if ':' in host else host}:{DEFAULT_METRICS_PORT}/metrics"
        if u.port == DEFAULT_METRICS_PORT:
            return None
        status, body, _ = await self._http.get(candidate, self._headers(), METRICS_MAX_BYTES)
        if status != 200:
            return None
        gm = parse_gateway_metrics(body.decode("utf-8", errors="replace"))
        mine = {w.url for w in registry}
        if not gm.is_gateway or not (gm.workers & mine) or not gm.workers <= mine:
            return None  # another gateway's metrics (or none): not these
        self.metrics_url = candidate
        return gm
