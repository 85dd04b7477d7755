"""Scrape one SGLang server ("arm"): /metrics first, /v1/loads when metrics are off.

Read-only: every request here is a GET. The API key (when the arm names an env var) is read
from the environment at request time and only ever placed in the Authorization header.

States a Sample can carry (Sample.state): up, refused (nothing listens), down (connection
lost or other transport error), timeout (no answer in time), unauthorized (401), error (the
server answered but not usefully, e.g. malformed /metrics). After a failure the arm is retried
with exponential backoff (one tick, doubling up to `retry_max_s`); the ticks in between still
produce a Sample (up=False) so the gap stays visible in samples.csv.

A scrape is bounded: each body is read streaming up to a cap (METRICS_MAX_BYTES for /metrics,
JSON_MAX_BYTES for the JSON endpoints) and the whole scrape, every request of it included, has
`deadline_s` (default: the per-read `timeout_s`) to finish. `scrape()` never raises: whatever
goes wrong becomes the state and reason of that arm's Sample.
"""

from __future__ import annotations

import asyncio
import math
import os
from typing import TYPE_CHECKING, Optional
from urllib.parse import urlsplit

# httpx (~0.16 s to import) only when a scrape needs it (sources/get.py).
if TYPE_CHECKING:
    import httpx

from specmon import clock
from specmon.model import ArmInfo, ArmSpec, RankReading, Sample, kv_usage_of
from specmon.urls import without_credentials
from specmon.sources.get import GetFailed, SourceGet
from specmon.sources.pace import pace_for
from specmon.sources import sglang_names as names
from specmon.sources.derive import ScrapeWindow
from specmon.sources.prom import MetricsSnapshot
from specmon.sources.serverinfo import (
    LoadsReading, arm_info_from_server_info, json_body, parse_loads, parse_loads_ranks,
)

DOWN_STATES = ("refused", "down", "timeout")

# Body caps. A real /metrics is tens of KiB (46 KiB on a busy server) and /server_info about as
# much; an endless or runaway body stops at the cap instead of growing the process.
METRICS_MAX_BYTES = 32 * 2**20
JSON_MAX_BYTES = 4 * 2**20
# The back-off doubles at most this many times: 2**30 ticks is past any retry_max_s, and the
# float product can never overflow however long a server stays away.
_MAX_DOUBLINGS = 30

# The series a Sample is made of (bare names; histograms by base name); the rest of /metrics
# is skipped before parsing. Keep in step with _sample_from_metrics and RESET_COUNTERS.
# Names per SGLang release come from sources/sglang_names.py.
USED_METRICS = names.used_metrics(
    "running", "queued", "kv_used", "kv_capacity", "token_usage", "gen_throughput", "accept_length",
    "accept_rate", "new_token_ratio", "requests_total", "prompt_tokens", "generation_tokens", "realtime_tokens",
    "http_requests", "ttft", "queue_time", "itl", "cached_tokens", "kv_evictable", "kv_available",
    "scheduler_idle", "retracted_reqs", "retractions_hist",
)
# bare names of the figures read below (one name in every supported release)
RUNNING, QUEUED, KV_USED, KV_CAP = (names.metric1(k) for k in ("running", "queued", "kv_used", "kv_capacity"))
TOKEN_USAGE, REALTIME, TTFT = names.metric1("token_usage"), names.metric1("realtime_tokens"), names.metric1("ttft")


class _Failure(Exception):
    def __init__(self, state: str, reason: str):
        super().__init__(reason)
        self.state = state
        self.reason = reason


class _TooLarge(Exception):
    """A 200 answer whose body went past its cap (the reason is the message)."""


def _describe(e: BaseException) -> str:
    """`Type: message` of an exception; of its first leaf for an exception group (anyio's
    connect wraps what it met in one)."""
    seen = 0
    while seen < 6:
        inner = getattr(e, "exceptions", None)
        if not isinstance(inner, (list, tuple)) or not inner:
            break
        e = inner[0]
        seen += 1
    return f"{type(e).__name__}: {str(e)[:160]}"


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n:,} bytes"


def _int(v: Optional[float]) -> Optional[int]:
    """A gauge that counts things (requests, tokens); None for NaN, +-Inf, a negative value or one
    past 2**63, which no count can be (an empty cell, never a crash or a made-up number)."""
    if v is None or not math.isfinite(v) or v < 0 or v > 2**63:
        return None
    return int(round(v))


def _nonneg(v: Optional[float]) -> Optional[float]:
    """A gauge that cannot be negative (usage, throughput, acceptance rate); else None."""
    return v if v is not None and math.isfinite(v) and v >= 0 else None


def ranks_from_metrics(snap: MetricsSnapshot) -> list[RankReading]:
    """One RankReading per data-parallel rank of a /metrics scrape: SGLang labels each DP rank's
    scheduler series with dp_rank (a server without DP ranks has no such label: [])."""
    seen: set[int] = set()
    for lab, _ in snap.series(RUNNING) + snap.series(TOKEN_USAGE):
        try:
            seen.add(int(lab["dp_rank"]))
        except (KeyError, ValueError):
            continue
    out = []
    for k in sorted(r for r in seen if 0 <= r < 4096):
        rank = str(k)
        used = _int(snap.value(KV_USED, dp_rank=rank))
        cap = _int(snap.value(KV_CAP, dp_rank=rank))
        out.append(RankReading(dp_rank=k, running_reqs=_int(snap.value(RUNNING, dp_rank=rank)),
                               queued_reqs=_int(snap.value(QUEUED, dp_rank=rank)),
                               kv_used_tokens=used, kv_capacity_tokens=cap,
                               kv_usage=kv_usage_of(_nonneg(snap.value(TOKEN_USAGE, dp_rank=rank)), used, cap)))
    return out


def _sum_known(values: list) -> Optional[int]:
    return sum(values) if values and all(v is not None for v in values) else None


def with_ranks(s: Sample, ranks: list[RankReading]) -> Sample:
    """The worker's figures over all its DP ranks (sums, KV usage of the summed pool), the ranks
    kept one by one in s.ranks: a summed gauge never hides a rank, and rank 0 never stands for
    the worker. Fewer than one rank: s as it is."""
    if not ranks:
        return s
    s.ranks = ranks
    s.running_reqs = _sum_known([r.running_reqs for r in ranks])
    s.queued_reqs = _sum_known([r.queued_reqs for r in ranks])
    s.kv_used_tokens = _sum_known([r.kv_used_tokens for r in ranks])
    s.kv_capacity_tokens = _sum_known([r.kv_capacity_tokens for r in ranks]) or s.kv_capacity_tokens
    usages = [r.kv_usage for r in ranks]
    mean_usage = sum(usages) / len(usages) if all(u is not None for u in usages) else None
    s.kv_usage = kv_usage_of(None, s.kv_used_tokens, s.kv_capacity_tokens) if s.kv_used_tokens is not None \
        else mean_usage
    return s


class ArmCollector:
    def __init__(
        self,
        spec: ArmSpec,
        *,
        timeout_s: float = 5.0,
        window_s: float = 30.0,
        rate_window_s: float = 5.0,
        retry_min_s: float = 1.0,
        retry_max_s: float = 8.0,
        info_refresh_s: float = 60.0,
        info_retry_s: float = 10.0,
        deadline_s: Optional[float] = None,
        metrics_max_bytes: int = METRICS_MAX_BYTES,
        json_max_bytes: int = JSON_MAX_BYTES,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ):
        self.spec = spec
        self.base = spec.url.rstrip("/")
        self.shown = without_credentials(self.base)  # the URL as reasons say it: never a password
        self._pace = pace_for(self.base)  # the per-server ceiling on GETs a second (pace.py)
        self.timeout_s = timeout_s
        self.deadline_s = timeout_s if deadline_s is None else deadline_s
        self.metrics_max_bytes = metrics_max_bytes
        self.json_max_bytes = json_max_bytes
        self.window = ScrapeWindow(window_s, rate_window_s)
        self.retry_min_s = retry_min_s
        self.retry_max_s = retry_max_s
        self.info_refresh_s = info_refresh_s
        self.info_retry_s = info_retry_s
        self.info: Optional[ArmInfo] = None
        self.info_version = 0  # bumped whenever `info` changes
        self.mode: Optional[str] = None  # "metrics" | "loads" once known
        self.ever_up = False
        self.last_state: Optional[str] = None
        self.last_reason: Optional[str] = None
        self.last_new_token_ratio: Optional[float] = None
        self._failures = 0
        self._retry_at = 0.0
        self._info_due = 0.0
        self._metrics_probe_due = 0.0
        self._info_problem: Optional[str] = None
        self.scrape_started: Optional[float] = None  # wall time the running scrape began, None between scrapes
        # A proxy from the environment is never used for a loopback server (SourceGet says why).
        self._http = SourceGet(self.base, timeout_s, transport)

    def peer_closed(self) -> bool:
        """Whether the server closed a connection kept for the next scrape: it may have exited
        (its kernel closes them at once), or it closes idle ones. Known for the lean client only."""
        return self._http.peer_closed()

    async def aclose(self) -> None:
        await self._http.aclose()

    # ---------------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        if self.spec.api_key_env:
            key = os.environ.get(self.spec.api_key_env)
            if key:
                if not key.isascii():
                    raise _Failure("error", f"the key in ${self.spec.api_key_env} has non-ASCII characters")
                return {"Authorization": f"Bearer {key}"}
        return {}

    async def _get(self, path: str, max_bytes: int) -> tuple[int, bytes]:
        """GET `path`: (status, body). The body is read only for a 200, streaming, and _TooLarge
        stops it past `max_bytes` (counted after any Content-Encoding is undone)."""
        async with self._pace.slot():
            return await self._get_now(path, max_bytes)

    async def _get_now(self, path: str, max_bytes: int) -> tuple[int, bytes]:
        try:
            return await self._http.get(self.base + path, self._headers(), max_bytes)
        except GetFailed as f:
            raise self._failure(f, path, max_bytes) from None

    def _failure(self, f: GetFailed, path: str, max_bytes: int) -> Exception:
        """A failed GET as this arm's state and reason."""
        if f.kind == "too_large":
            return _TooLarge(f"{path} body over {_mib(max_bytes)}")
        if f.kind == "refused":
            return _Failure("refused", f"connection refused at {self.shown}")
        if f.kind == "unresolved":
            return _Failure("down", f"cannot resolve the name {urlsplit(self.base).hostname!r} ({f.words})")
        if f.kind == "down":
            return _Failure("down", f"cannot connect to {self.shown}: {f.words}")
        if f.kind == "timeout":
            return _Failure("timeout", f"no answer from {self.shown}{path} within {self.timeout_s:g} s")
        if f.kind == "undecodable":
            return _Failure("error", f"{self.shown}{path}: undecodable body ({f.words[:80]})")
        if f.kind == "setup":
            return _Failure("error", f.words)
        return _Failure("down", f"{self.shown}{path}: {f.said}")

    # ---------------------------------------------------------------------------------------
    async def refresh_info(self) -> Optional[str]:
        """GET /server_info (or its old name). Returns a problem to report, or None."""
        try:
            status, body = await self._get("/server_info", self.json_max_bytes)
            if status == 404:
                status, body = await self._get("/get_server_info", self.json_max_bytes)
        except _TooLarge as e:
            return str(e)
        if status == 401:
            return "unauthorized"
        if status != 200:
            return f"/server_info answered HTTP {status}"
        try:
            info = arm_info_from_server_info(json_body(body))
        except ValueError:
            return "/server_info is not JSON"
        if info is None:
            return "/server_info is not a JSON object"
        if info != self.info:
            self.info = info
            self.info_version += 1
        return None

    async def scrape(self) -> Sample:
        """One reading of this arm. Never raises (cancellation aside): the Sample says what went wrong."""
        t0 = clock.wall()
        if t0 < self._retry_at:
            return self._down_sample(t0, self.last_state or "down", self.last_reason,
                                     retry_in=self._retry_at - t0)
        self.scrape_started = t0
        try:
            try:
                # httpx's timeout bounds each read, not a body that trickles in: the deadline does.
                sample = await asyncio.wait_for(self._scrape_up(t0), self.deadline_s)
            except asyncio.TimeoutError:
                raise _Failure("timeout", f"no complete answer from {self.shown} within {self.deadline_s:g} s")
            except _Failure:
                raise
            except Exception as e:  # a bug or a case not foreseen: this arm's error, never the session's
                raise _Failure("error", f"scrape failed: {_describe(e)}")
        except _Failure as f:
            self._failures += 1
            doublings = min(self._failures - 1, _MAX_DOUBLINGS)
            delay = min(self.retry_max_s, self.retry_min_s * 2.0 ** doublings)
            self._retry_at = clock.wall() + delay
            self.last_state, self.last_reason = f.state, f.reason
            # A server that comes back may be a new process with other settings.
            self._info_due = 0.0
            self._metrics_probe_due = 0.0
            return self._down_sample(t0, f.state, f.reason, retry_in=delay, scrape_s=clock.wall() - t0)
        finally:
            self.scrape_started = None
        self._failures = 0
        self._retry_at = 0.0
        # to the 0.1 ms (all a scrape time tells): 17 digits of float noise a worker a tick added up on disk
        sample.scrape_s = round(clock.wall() - t0, 4)
        self.last_state, self.last_reason = sample.state, sample.reason
        return sample

    def _down_sample(self, ts: float, state: str, reason: Optional[str], retry_in: float,
                     scrape_s: Optional[float] = None) -> Sample:
        words = reason or state
        retry = f"retrying in {retry_in:.0f} s" if retry_in >= 1.5 else "retrying"
        return Sample(ts=ts, arm=self.spec.name, up=False, state=state,
                      reason=f"{words}; {retry}", scrape_s=scrape_s,
                      spec_enabled=self.info.speculative if self.info else None,
                      kv_capacity_tokens=self.info.kv_capacity_tokens if self.info else None)

    def _auth_hint(self) -> str:
        if self.spec.api_key_env:
            return f"the key in ${self.spec.api_key_env} was refused"
        return "the server wants an API key: pass --api-key-env VAR"

    async def _scrape_up(self, t0: float) -> Sample:
        problems: list[str] = []
        if t0 >= self._info_due:
            problem = await self.refresh_info()
            # Retry a missing /server_info every info_retry_s (10 s); refresh a good one now and then.
            self._info_due = t0 + (self.info_refresh_s if problem is None else self.info_retry_s)
            self._info_problem = problem
        # Said on every tick until /server_info answers, not only on the tick that asked.
        unauthorized = self._info_problem == "unauthorized"
        if unauthorized:
            problems.append(f"/server_info answered 401 ({self._auth_hint()})")
        elif self._info_problem:
            problems.append(self._info_problem)

        sample: Optional[Sample] = None
        if self.mode != "loads" or t0 >= self._metrics_probe_due:
            sample, problem = await self._from_metrics(t0)
            if problem:
                problems.append(problem)
        if sample is None:
            sample, problem, loads_401 = await self._from_loads(t0)
            unauthorized = unauthorized or loads_401
            if problem:
                problems.append(problem)
        if sample is None:
            # The server answers but gave us no live value this tick.
            state = "unauthorized" if unauthorized else "error"
            return Sample(ts=t0, arm=self.spec.name, up=False, state=state, reason="; ".join(problems),
                          spec_enabled=self.info.speculative if self.info else None,
                          kv_capacity_tokens=self.info.kv_capacity_tokens if self.info else None)
        self.ever_up = True
        if unauthorized:
            sample.state = "unauthorized"
        if problems:
            sample.reason = "; ".join(problems)
        return sample

    async def _from_metrics(self, t0: float) -> tuple[Optional[Sample], Optional[str]]:
        try:
            status, body = await self._get("/metrics", self.metrics_max_bytes)
        except _TooLarge as e:
            return None, str(e)
        if status == 404:
            # Metrics are off (no --enable-metrics): use /v1/loads, look again in a minute.
            self.mode = "loads"
            self._metrics_probe_due = t0 + 60.0
            return None, None
        if status != 200:
            return None, f"/metrics answered HTTP {status}"
        return self.read_metrics(body, t0)

    def read_metrics(self, body: bytes, t0: float) -> tuple[Optional[Sample], Optional[str]]:
        """A Sample from one /metrics body (it joins the window), or None and the problem."""
        try:
            snap = MetricsSnapshot.parse(body.decode("utf-8", errors="replace"), ts=clock.wall(), only=USED_METRICS)
        except ValueError as e:  # MetricsParseError: bad lines, or more than the parser is given
            return None, f"malformed /metrics ({e})"
        if not snap.has(RUNNING) and not snap.has(TTFT + "_bucket"):
            return None, "/metrics has no SGLang series"
        self.mode = "metrics"
        return self._sample_from_metrics(snap, t0), None

    def read_snapshot(self, snap: MetricsSnapshot, t0: float) -> Optional[Sample]:
        """A Sample from an already parsed scrape of this server (e.g. its part of a gateway's
        /engine_metrics); it joins this collector's window. None without SGLang series."""
        if not snap.has(RUNNING) and not snap.has(TTFT + "_bucket"):
            return None
        return self._sample_from_metrics(snap, t0)

    def _sample_from_metrics(self, snap: MetricsSnapshot, t0: float) -> Sample:
        info = self.info
        restarted = self.window.add(snap)
        if restarted:
            self._info_due = 0.0  # a restarted server may run with other settings
        w = self.window
        scale = info.time_scale if info else 1.0
        m = names.metric1
        used = _int(snap.value(KV_USED))
        cap = _int(snap.value(KV_CAP))
        if cap is None and info:
            cap = info.kv_capacity_tokens
        # KV usage: SGLang's own token_usage gauge (num_used_tokens / pool, or the max over
        # pools for hybrid SWA/Mamba models); used/capacity only when the gauge is missing.
        usage = kv_usage_of(_nonneg(snap.value(TOKEN_USAGE)), used, cap)
        # Output tok/s: emitted tokens per (simulated) second from the per-step decode counter;
        # generation_tokens_total (added at request finish, so it lags) only if that is absent.
        gen = w.rate(REALTIME, scale, mode="decode")
        if gen is None and not snap.has(REALTIME):
            gen = w.rate(m("generation_tokens"), scale)
        spec_enabled = info.speculative if info else None
        accept_len = accept_rate = None
        if spec_enabled is not False:
            g = snap.value(m("accept_length"))
            # The gauge is 0.0 when speculation is off or before the first decode window;
            # a real acceptance length is >= 1 (bonus token included).
            if g is not None and g >= 1.0:
                accept_len = g
                accept_rate = _nonneg(snap.value(m("accept_rate")))
        self.last_new_token_ratio = snap.value(m("new_token_ratio"))
        # Prefix-cache hits over the rate window: the scheduler's prefill tokens by mode (each
        # prefill batch), else the tokenizer's cached / prompt tokens (each finished request).
        hit = w.rate_since_born(REALTIME, scale, mode="prefill_cache")
        compute = w.rate(REALTIME, scale, mode="prefill_compute")
        if hit is None and compute is not None and snap.value(REALTIME, mode="prefill_cache") is None:
            hit = 0.0  # SGLang creates the prefill_cache series at its first hit: there was none yet
        if hit is not None and compute is not None and hit + compute > 0:
            cache_hit_rate = hit / (hit + compute)
        else:
            cached, prompt = w.rate_since_born(m("cached_tokens"), scale), w.rate(m("prompt_tokens"), scale)
            cache_hit_rate = min(cached / prompt, 1.0) if cached is not None and prompt else None
        # Scheduler busy share: idle seconds per second over the rate window (the counter is in
        # the server's own seconds, as the window's rates are per the server's second).
        idle = w.rate(m("scheduler_idle"), scale)
        busy = None if idle is None else min(max(1.0 - idle, 0.0), 1.0)
        # Retractions of finished requests per second: 0.5.10's per-request histogram (its sum).
        retr_rate = None
        hist = names.metric("retractions_hist")
        if hist:
            retr_rate = _nonneg(w.rate(hist[0] + "_sum", scale))
        return with_ranks(Sample(
            ts=t0, arm=self.spec.name, up=True, state="up", source="metrics",
            running_reqs=_int(snap.value(RUNNING)),
            queued_reqs=_int(snap.value(QUEUED)),
            kv_used_tokens=used, kv_capacity_tokens=cap, kv_usage=usage,
            gen_tok_s=gen, gen_tok_s_gauge=_nonneg(snap.value(m("gen_throughput"))),
            accept_length=accept_len, accept_rate=accept_rate, spec_enabled=spec_enabled,
            ttft_p50_s=w.quantile(TTFT, 0.5),
            ttft_p90_s=w.quantile(TTFT, 0.9),
            ttft_p99_s=w.quantile(TTFT, 0.99),
            ttft_mean_s=w.mean(TTFT),
            queue_time_p50_s=w.quantile(m("queue_time"), 0.5),
            queue_time_mean_s=w.mean(m("queue_time")),
            itl_mean_s=w.mean(m("itl")),
            requests_finished_total=_nonneg(snap.value(m("requests_total"))),
            server_restarted=restarted, cache_hit_rate=cache_hit_rate,
            kv_evictable_tokens=_int(snap.value(m("kv_evictable"))),
            kv_available_tokens=_int(snap.value(m("kv_available"))),
            scheduler_busy_share=busy,
            retracted_reqs=_int(snap.value(m("retracted_reqs"))),
            retractions_per_s=retr_rate,
        ), ranks_from_metrics(snap))

    async def _from_loads(self, t0: float) -> tuple[Optional[Sample], Optional[str], bool]:
        try:
            status, body = await self._get("/v1/loads", self.json_max_bytes)
        except _TooLarge as e:
            return None, str(e), False
        if status == 401:
            return None, f"/v1/loads answered 401 ({self._auth_hint()})", True
        if status != 200:
            # /v1/loads can answer 500 (docs/field-notes.md, SGLang notes 3.3): survive it.
            return None, f"/v1/loads answered HTTP {status}", False
        try:
            value = json_body(body)
        except ValueError:
            value = None
        loads: Optional[LoadsReading] = parse_loads(value)
        ranks = parse_loads_ranks(value)
        if loads is None:
            return None, "/v1/loads has no load entry", False
        info = self.info
        spec_enabled = info.speculative if info else None
        accept_len = loads.accept_length if spec_enabled is not False and (loads.accept_length or 0) >= 1 else None
        usage = kv_usage_of(loads.token_usage, loads.used_tokens, loads.capacity_tokens)
        # Without --enable-metrics SGLang leaves gen_throughput at 0: that 0 is not a measurement.
        gen_gauge = loads.gen_throughput if info and info.enable_metrics else None
        return with_ranks(Sample(
            ts=t0, arm=self.spec.name, up=True, state="up", source="loads",
            running_reqs=loads.running, queued_reqs=loads.waiting,
            kv_used_tokens=loads.used_tokens,
            kv_capacity_tokens=loads.capacity_tokens or (info.kv_capacity_tokens if info else None),
            kv_usage=usage, gen_tok_s=None, gen_tok_s_gauge=gen_gauge,
            # /v1/loads gives the lifetime mean since start, not a window (docs/field-notes.md, SGLang notes 1.7).
            accept_length=accept_len,
            accept_rate=loads.accept_rate if accept_len is not None else None,
            spec_enabled=spec_enabled,
        ), ranks), None, False
