"""A fleet read from a Prometheus server: its workers are the SGLang servers whose series Prometheus
holds, and every figure of every worker comes from a handful of PromQL queries over the whole
fleet per poll (never one query per worker). Read-only: every request is a GET of Prometheus's
HTTP API (/api/v1/query, /api/v1/query_range, /api/v1/targets, /api/v1/status/config).

Names: a series is `sglang:<name>` or `sglang_<name>`, depending on how Prometheus negotiated the
scrape (SGLang's prometheus_client writes the underscore form to an OpenMetrics client); every
query matches both with `{__name__=~"sglang[:_]<name>"}`.

Workers: one per (job, instance[, worker]) label set of `num_running_reqs` (a `worker` label, where
a relabelling rule adds one, names the arm; else a short form of the instance). A `dp_rank` label
gives one RankReading per data-parallel rank. Copies of one quantity written by other TP/PP/EP
ranks are left out (`tp_rank=~"0|"`: rank 0, or no such label), as in sources/prom.py.

The queries (FleetQueries; `SEL` is the user's selector, `RW` the rate window of max(5 s, 4 scrape
intervals), `PW` the latency window of max(30 s, 10 scrape intervals)):
- series: `max by (job, instance, worker, dp_rank, engine_type, __name__)` of the gauges
  (running, queued, KV used/capacity/usage, acceptance length and rate, gen_throughput, requests)
- age: `max by (...) (timestamp(num_running_reqs))`: the newest sample behind each worker, whose
  age at the query's evaluation time is Sample.stale_s (Prometheus's clock on both sides)
- up: `up{job=~"<the fleet's jobs>"}`: a target Prometheus cannot scrape is a worker that is down
- rates: generation tok/s (decode tokens counter, else generation_tokens_total) over RW; prefix
  cache hit rate from the token counters, mean TTFT, queue time and ITL (rate of _sum / _count) over PW
- latency: `histogram_quantile(q, sum by (le, job, instance, worker) (rate(<h>_bucket[PW])))` for
  TTFT p50/p90/p99 and queue time p50
Several figures travel in one query as `label_replace(EXPR, "specmon", "<figure>", "", "") or ...`.
Slower cadence: /api/v1/targets (scrape interval, scrape URL, last error) and a discovery of the
workers seen in the last 5 minutes (a worker whose target is down has no series now, only `up`).

Values: NaN and +-Inf are unknown (None, an empty cell, never 0), so an idle worker has no TTFT
percentile rather than a made-up one; a missing histogram is None too. A worker whose newest
sample is older than STALE_AFTER scrape intervals is "stale": up=False, its last figures kept but
never presented as live. Rates are per wall second (Prometheus knows nothing of a simulator's
--speed).

Prometheus down, slow or answering errors: the fleet is down (FleetStatus up=False, the query and
the error), its workers are kept, and the next try waits a back-off that doubles up to a bound.
The parsing functions are pure (no I/O) and never raise anything but PromQueryError/ValueError
on what a server sends; PrometheusFleet and PrometheusHistory do the HTTP.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable, Optional, Sequence
from urllib.parse import urlsplit

# httpx (~0.16 s to import) is imported when a Prometheus fleet is read, not at every start.
if TYPE_CHECKING:
    import httpx

import yaml

from specmon.model import ArmSpec, FleetReading, FleetStatus, RankReading, Sample, WorkerStatus, kv_usage_of
from specmon.sources.http import is_refused
from specmon.urls import is_loopback

SGLANG = "sglang[:_]"  # both exposition forms of SGLang's names
# Copies of one quantity written by other TP/PP/EP ranks: rank 0, or series without the label.
# Per-priority copies of the queue gauges carry priority="<n>"; the total has none.
RANK0 = 'tp_rank=~"0|",pp_rank=~"0|",moe_ep_rank=~"0|",attn_tp_rank=~"0|",priority=""'
GROUP = "job, instance, worker"
RANK_GROUP = "job, instance, worker, dp_rank, engine_type"
GAUGES = ("num_running_reqs", "num_queue_reqs", "num_used_tokens", "max_total_num_tokens", "token_usage",
          "spec_accept_length", "spec_accept_rate", "gen_throughput", "num_requests_total")
RATE_FIGURES = ("gen_tok_s", "cache_hit_rate", "ttft_mean_s", "queue_time_mean_s", "itl_mean_s")
LATENCY_FIGURES = {"ttft_p50_s": ("time_to_first_token_seconds", 0.5),
                   "ttft_p90_s": ("time_to_first_token_seconds", 0.9),
                   "ttft_p99_s": ("time_to_first_token_seconds", 0.99),
                   "queue_time_p50_s": ("queue_time_seconds", 0.5)}
STALE_AFTER = 2.0  # scrape intervals: a newer value was due by then
DISCOVER_LOOKBACK_S = 300  # workers seen this recently whose target Prometheus still has
DISCOVER_EVERY_S = 30.0
TARGETS_EVERY_S = 30.0
TARGETS_DOWN_EVERY_S = 5.0  # a worker is down: its target's last error, at most this often
MAX_BODY_BYTES = 64 * 2**20
MAX_RANGE_POINTS = 10_000  # Prometheus refuses more than 11,000 points per series in one query_range
MAX_HISTORY_STEPS = 200_000
# Without --step a history steps at the scrape interval, coarser when the window is long: at most
# AUTO_HISTORY_STEPS steps (a week at 5 minutes). What the operating curve needs sets this, not the
# scrape interval: a bin takes part in the knee from 1 % of the window's seconds (20 steps here),
# and a step coarser than the scrapes reads every scrape inside it (FleetQueries.averaged), so a
# finer step only makes more rows, queries and Prometheus work for the same curve (a week of 500
# workers at 1-minute scrapes would be 10,080 steps, 5 M worker rows: docs/observed-knee.md,
# "History at scale").
AUTO_HISTORY_STEPS = 2_016
# A history's query covers hundreds of workers over hours: the TTFT percentiles of 500 workers over
# 200 steps took Prometheus most of a minute on a busy 2-core machine (docs/observed-knee.md).
# Nothing live waits on it, so it may take longer than a live poll's answer ever may.
HISTORY_TIMEOUT_S = 300.0
KNEE_NOTE = "knees need 1 s resolution: a ramp against a fleet worker scrapes that worker directly too"
ROLES = {"unified": "regular", "prefill": "prefill", "decode": "decode"}

Labels = dict[str, str]
Point = tuple[Labels, float, Optional[float]]  # labels, evaluation time, value (None: NaN, +-Inf)
Key = tuple[str, str, str]  # job, instance, worker label ("" when absent)


class PromQueryError(ValueError):
    """A request to Prometheus that gave no usable answer: which one, and why.

    kind: refused | down | timeout | error (an HTTP or API error) | bad_query (Prometheus refused the
    PromQL: a bad selector) | bad_answer (not the JSON Prometheus's API sends)."""

    def __init__(self, message: str, kind: str = "error", query: Optional[str] = None, promql: Optional[str] = None):
        super().__init__(message)
        self.message, self.kind, self.query, self.promql = message, kind, query, promql

    def describe(self) -> str:
        if self.query is None:
            return self.message
        promql = self.promql or ""
        shown = promql if len(promql) <= 160 else promql[:157] + "..."
        return f"query {self.query} ({shown}): {self.message}"


# --------------------------------------------------------------------------------------------
# Pure parsing: text in, values out


def prom_float(v: Any) -> Optional[float]:
    """A value of Prometheus's JSON (a string like "12.5", "NaN", "+Inf"); None unless finite."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return None
    try:
        f = float(v)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_duration(text: Any) -> Optional[float]:
    """Seconds of a Prometheus duration ("15s", "1m30s", "500ms"); None for anything else."""
    if not isinstance(text, str):
        return None
    s = text.strip()
    if not s or len(s) > 64:
        return None
    total, pos = 0.0, 0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total if pos == len(s) and math.isfinite(total) and total > 0 else None


def promql_duration(seconds: float) -> str:
    """A window for PromQL: whole seconds ("30s"), milliseconds when shorter."""
    ms = max(1, int(math.ceil(seconds * 1000)))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def parse_time(text: str, now: Optional[float] = None) -> float:
    """--from/--to: RFC 3339 (2026-05-01T12:00:00Z), unix seconds, `now`, or relative to now
    (-1h, -90s, -1h30m, now-15m). ValueError saying what was expected."""
    now = time.time() if now is None else now
    s = (text or "").strip()
    expected = f"expected RFC 3339 (2026-05-01T12:00:00Z), unix seconds or a time before now like -1h, got {text!r}"
    if not s or len(s) > 64 or not s.isprintable():
        raise ValueError(expected)
    if s == "now":
        return now
    rel = s[3:] if s.startswith("now") else s
    if rel.startswith("-"):
        d = parse_duration(rel[1:].strip())
        if d is None:
            raise ValueError(expected)
        return now - d
    try:
        v = float(s)
    except ValueError:
        pass
    else:
        if not math.isfinite(v) or v < 0 or v > 1e11:
            raise ValueError(expected)
        return v
    try:
        dt = datetime.fromisoformat(s.replace("z", "Z"))
    except ValueError:
        raise ValueError(expected) from None
    if dt.tzinfo is None:
        raise ValueError(f"{text!r}: a time without a time zone is ambiguous; add Z or an offset like +02:00")
    try:
        return dt.astimezone(timezone.utc).timestamp()
    except (OverflowError, OSError, ValueError):
        raise ValueError(expected) from None


def selector_matchers(selector: Optional[str]) -> str:
    """The label matchers inside `{...}` ("" for none), checked enough to say what is wrong before
    Prometheus is asked (which checks the rest: it answers bad_data)."""
    s = (selector or "").strip()
    expected = f'expected label matchers in braces like {{job="sglang"}}, got {selector!r}'
    if not s:
        return ""
    if not (s.startswith("{") and s.endswith("}")) or not s.isprintable():
        raise ValueError(expected)
    inner = s[1:-1].strip()
    quote: Optional[str] = None
    escaped = False
    for c in inner:
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c in "{}":
            raise ValueError(expected)
    if quote:
        raise ValueError(f"{selector!r}: a quoted value is not closed")
    return inner.rstrip(",").strip()


def prometheus_base(url: str) -> str:
    """http(s)://host[:port][/prefix] without a trailing slash; ValueError otherwise."""
    text = (url or "").strip() if isinstance(url, str) else ""
    expected = f"expected Prometheus's URL like http://127.0.0.1:9090, got {url!r}"
    if not text or not text.isprintable() or any(c.isspace() for c in text):
        raise ValueError(expected)
    try:
        u = urlsplit(text)
        port = u.port
    except ValueError:
        raise ValueError(expected) from None
    if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or port == 0:
        raise ValueError(expected)
    return f"{u.scheme}://{u.netloc}{u.path.rstrip('/')}"


def api_data(body: bytes) -> Any:
    """The `data` of a Prometheus API answer; PromQueryError for an error answer or a body that is
    not one."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        raise PromQueryError("the answer is not JSON", "bad_answer") from None
    if not isinstance(obj, dict):
        raise PromQueryError("the answer is not a JSON object", "bad_answer")
    if obj.get("status") != "success":
        kind = "bad_query" if obj.get("errorType") == "bad_data" else "error"
        err = obj.get("error")
        raise PromQueryError(f"{obj.get('errorType') or 'error'}: {str(err)[:300]}" if err else
                             f"status {str(obj.get('status'))[:40]!r}", kind)
    return obj.get("data")


def _labels(metric: Any) -> Labels:
    if not isinstance(metric, dict):
        return {}
    return {str(k): v for k, v in metric.items() if isinstance(v, str)}


def _pair(v: Any) -> Optional[tuple[float, Optional[float]]]:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        return None
    ts = prom_float(v[0])
    return None if ts is None else (ts, prom_float(v[1]))


def parse_vector(data: Any) -> list[Point]:
    """An instant query's result ("vector"; a "scalar" reads as one unlabelled point)."""
    if not isinstance(data, dict):
        raise PromQueryError("no result in the answer", "bad_answer")
    rtype, result = data.get("resultType"), data.get("result")
    if rtype == "scalar":
        p = _pair(result)
        return [] if p is None else [({}, p[0], p[1])]
    if rtype != "vector" or not isinstance(result, list):
        raise PromQueryError(f"expected a vector result, got {str(rtype)[:40]!r}", "bad_answer")
    out: list[Point] = []
    for item in result:
        if not isinstance(item, dict):
            continue
        p = _pair(item.get("value"))
        if p is not None:
            out.append((_labels(item.get("metric")), p[0], p[1]))
    return out


def parse_matrix(data: Any) -> list[Point]:
    """A range query's result ("matrix"): every point of every series, as (labels, step time, value)."""
    if not isinstance(data, dict):
        raise PromQueryError("no result in the answer", "bad_answer")
    rtype, result = data.get("resultType"), data.get("result")
    if rtype != "matrix" or not isinstance(result, list):
        raise PromQueryError(f"expected a matrix result, got {str(rtype)[:40]!r}", "bad_answer")
    out: list[Point] = []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("values"), list):
            continue
        labels = _labels(item.get("metric"))
        for v in item["values"]:
            p = _pair(v)
            if p is not None:
                out.append((labels, p[0], p[1]))
    return out


@dataclass
class TargetInfo:
    scrape_url: Optional[str] = None
    interval_s: Optional[float] = None
    health: Optional[str] = None
    last_error: Optional[str] = None


def parse_targets(data: Any) -> dict[tuple[str, str], TargetInfo]:
    """/api/v1/targets: (job, instance) -> its scrape URL, interval, health and last error."""
    out: dict[tuple[str, str], TargetInfo] = {}
    active = data.get("activeTargets") if isinstance(data, dict) else None
    for t in active if isinstance(active, list) else ():
        if not isinstance(t, dict):
            continue
        labels = _labels(t.get("labels"))
        if "instance" not in labels:
            continue
        url = t.get("scrapeUrl")
        err = t.get("lastError")
        out[(labels.get("job", ""), labels["instance"])] = TargetInfo(
            scrape_url=url if isinstance(url, str) else None,
            interval_s=parse_duration(t.get("scrapeInterval")),
            health=t.get("health") if isinstance(t.get("health"), str) else None,
            last_error=err[:300] if isinstance(err, str) and err else None)
    return out


def parse_config_interval(data: Any) -> Optional[float]:
    """The global scrape_interval of /api/v1/status/config (its `yaml`); None when not found."""
    text = data.get("yaml") if isinstance(data, dict) else None
    if not isinstance(text, str) or len(text) > 4 * 2**20:
        return None
    try:
        config = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    glob = config.get("global") if isinstance(config, dict) else None
    return parse_duration(glob.get("scrape_interval")) if isinstance(glob, dict) else None


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


def _escape_regex(text: str) -> str:
    """A literal for a PromQL regex inside a double-quoted string."""
    literal = re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)
    return literal.replace("\\", "\\\\").replace('"', '\\"')


# --------------------------------------------------------------------------------------------
# The queries


@dataclass(frozen=True)
class FleetQueries:
    """The PromQL of one poll, for a selector (its matchers) and the targets' scrape interval."""

    matchers: str = ""
    scrape_s: float = 1.0
    step_s: Optional[float] = None  # a history's step (None: a live poll)

    @property
    def averaged(self) -> bool:
        """A history step that spans several scrapes: each step stands for its whole interval
        (gauges averaged over it, counters' and histograms' increase over it), so no scrape between
        two steps goes unread and a running count is paired with the throughput of the same
        seconds."""
        return self.step_s is not None and self.step_s >= 2 * self.scrape_s

    @property
    def rate_window(self) -> str:
        live = max(5.0, 4 * self.scrape_s)
        return promql_duration(max(live, self.step_s) if self.averaged else live)  # type: ignore[type-var]

    @property
    def latency_window(self) -> str:
        if self.averaged:
            # the step's own requests: the live 10-scrape window would smear one step's queueing
            # over the next ones (and their running counts)
            return promql_duration(max(5.0, 4 * self.scrape_s, self.step_s))  # type: ignore[type-var]
        return promql_duration(max(30.0, 10 * self.scrape_s))

    def _series(self) -> str:
        if not self.averaged:
            return f"max by ({RANK_GROUP}, __name__) ({self.sel(GAUGES)})"
        # avg_over_time drops the metric name: each gauge is averaged on its own and named again
        # (the `specmon` label keeps `or` from matching one gauge's series against another's)
        w = promql_duration(self.step_s)  # type: ignore[arg-type]
        return " or ".join(
            f'label_replace(label_replace(max by ({RANK_GROUP}) (avg_over_time({self.sel(g)}[{w}])), '
            f'"__name__", "{g}", "", ""), "specmon", "{g}", "", "")' for g in GAUGES)

    def sel(self, names: str | Sequence[str], extra: str = "", ranks: bool = True) -> str:
        alts = names if isinstance(names, str) else "|".join(names)
        parts = [f'__name__=~"{SGLANG}({alts})"']
        parts += [p for p in (self.matchers, RANK0 if ranks else "", extra) if p]
        return "{" + ",".join(parts) + "}"

    def _rate(self, name: str, window: str, extra: str = "") -> str:
        return f"sum by ({GROUP}) (rate({self.sel(name, extra)}[{window}]))"

    def discover(self, lookback_s: float = DISCOVER_LOOKBACK_S) -> str:
        return (f"group by ({GROUP}) (last_over_time({self.sel('num_running_reqs', ranks=False)}"
                f"[{promql_duration(lookback_s)}]))")

    def up(self, jobs: Iterable[str]) -> Optional[str]:
        jobs = sorted(set(jobs))
        if not jobs:
            return None
        return f'max by (job, instance) (up{{job=~"{"|".join(_escape_regex(j) for j in jobs)}"}})'

    def poll(self, jobs: Iterable[str], split: bool = False) -> dict[str, str]:
        """The queries of one evaluation by name. split: each rate and latency figure a query of
        its own ("rates:<tag>", "latency:<tag>"), so that Prometheus evaluates them side by side
        (it runs one query on one core; a history's four percentiles were most of its time);
        a live poll asks them together, in fewer requests a tick."""
        rw, pw = self.rate_window, self.latency_window
        decode = self._rate("realtime_tokens_total", rw, 'mode="decode"')
        prefill = self._rate("realtime_tokens_total", pw, 'mode=~"prefill_cache|prefill_compute"')
        hit = self._rate("realtime_tokens_total", pw, 'mode="prefill_cache"')
        rates = {
            "gen_tok_s": f"{decode} or {self._rate('generation_tokens_total', rw)}",
            "cache_hit_rate": (f"({hit} or 0 * {prefill}) / {prefill} or "
                               f"{self._rate('cached_tokens_total', pw)} / {self._rate('prompt_tokens_total', pw)}"),
            "ttft_mean_s": (f"{self._rate('time_to_first_token_seconds_sum', pw)} / "
                            f"{self._rate('time_to_first_token_seconds_count', pw)}"),
            "queue_time_mean_s": (f"{self._rate('queue_time_seconds_sum', pw)} / "
                                  f"{self._rate('queue_time_seconds_count', pw)}"),
            "itl_mean_s": (f"{self._rate('inter_token_latency_seconds_sum', pw)} / "
                           f"{self._rate('inter_token_latency_seconds_count', pw)}"),
        }
        latency = {
            tag: f"histogram_quantile({q}, sum by (le, {GROUP}) (rate({self.sel(h + '_bucket')}[{pw}])))"
            for tag, (h, q) in LATENCY_FIGURES.items()
        }
        q = {
            "series": self._series(),
            "age": f"max by ({GROUP}) (timestamp({self.sel('num_running_reqs')}))",
        }
        for group, exprs in (("rates", rates), ("latency", latency)):
            if split:
                q.update({f"{group}:{tag}": _tagged({tag: e}) for tag, e in exprs.items()})
            else:
                q[group] = _tagged(exprs)
        up = self.up(jobs)
        if up is not None:
            q["up"] = up
        return q


def _tagged(exprs: dict[str, str]) -> str:
    return " or ".join(f'label_replace(({e}), "specmon", "{tag}", "", "")' for tag, e in exprs.items())


# --------------------------------------------------------------------------------------------
# One evaluation's results -> the fleet's reading


def bare(name: str) -> str:
    for p in ("sglang:", "sglang_"):
        if name.startswith(p):
            return name[len(p):]
    return name


def key_of(labels: Labels) -> Key:
    return labels.get("job", ""), labels.get("instance", ""), labels.get("worker", "")


@dataclass
class WorkerFigures:
    """What one evaluation of the queries says about one worker."""

    ranks: dict[Optional[str], dict[str, Optional[float]]] = field(default_factory=dict)  # dp_rank -> gauges
    engine_type: Optional[str] = None
    age_s: Optional[float] = None  # the newest sample's age at evaluation time
    figures: dict[str, Optional[float]] = field(default_factory=dict)  # rates and latencies by tag

    @property
    def has_series(self) -> bool:
        return bool(self.ranks) or self.age_s is not None


def read_results(results: dict[str, list[Point]]) -> tuple[dict[Key, WorkerFigures], dict[tuple[str, str], float]]:
    """Each worker's figures, and `up` by (job, instance), from one evaluation of the queries."""
    workers: dict[Key, WorkerFigures] = {}

    def fig(labels: Labels) -> Optional[WorkerFigures]:
        k = key_of(labels)
        if not k[1]:
            return None  # no instance label: not a scraped target's series
        return workers.setdefault(k, WorkerFigures())

    for labels, _, v in results.get("series", ()):
        w = fig(labels)
        if w is None:
            continue
        name = bare(labels.get("__name__", ""))
        if name not in GAUGES:
            continue
        rank = w.ranks.setdefault(labels.get("dp_rank"), {})
        if rank.get(name) is None:
            rank[name] = v
        if labels.get("engine_type"):
            w.engine_type = labels["engine_type"]
    for labels, ts, v in results.get("age", ()):
        w = fig(labels)
        if w is not None and v is not None:
            age = max(0.0, ts - v)
            w.age_s = age if w.age_s is None else min(w.age_s, age)
    for q, points in results.items():
        if q.partition(":")[0] not in ("rates", "latency"):  # one query a group, or a figure (split)
            continue
        for labels, _, v in points:
            tag = labels.get("specmon")
            if tag in RATE_FIGURES or tag in LATENCY_FIGURES:
                w = fig(labels)
                if w is not None and w.figures.get(tag) is None:
                    w.figures[tag] = v
    up: dict[tuple[str, str], float] = {}
    for labels, _, v in results.get("up", ()):
        if "instance" in labels and v is not None:
            up[(labels.get("job", ""), labels["instance"])] = v
    return workers, up


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


# --------------------------------------------------------------------------------------------
# HTTP


class _Api:
    """GETs of Prometheus's HTTP API, bounded in time and size; every failure a PromQueryError."""

    def __init__(self, base: str, timeout_s: float, transport: Optional[httpx.AsyncBaseTransport] = None):
        self.base, self.timeout_s = base, timeout_s
        self.requests = 0
        import httpx

        if is_loopback(base):  # a proxy from the environment cannot reach this machine's loopback
            self.client = httpx.AsyncClient(timeout=timeout_s, transport=transport, trust_env=False,
                                            follow_redirects=False)
        else:
            self.client = httpx.AsyncClient(timeout=timeout_s, transport=transport, follow_redirects=False)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def get(self, path: str, params: Optional[dict[str, str]] = None) -> Any:
        self.requests += 1
        url = self.base + path
        try:
            return await asyncio.wait_for(self._get(url, params), self.timeout_s)
        except asyncio.TimeoutError:
            raise PromQueryError(f"no complete answer within {self.timeout_s:g} s", "timeout") from None

    async def _get(self, url: str, params: Optional[dict[str, str]]) -> Any:
        import httpx

        try:
            async with self.client.stream("GET", url, params=params) as r:
                body = bytearray()
                async for chunk in r.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise PromQueryError(f"answer over {MAX_BODY_BYTES // 2**20} MiB", "bad_answer")
                status = r.status_code
        except httpx.ConnectError as e:
            if is_refused(e):
                raise PromQueryError(f"connection refused at {self.base}", "refused") from None
            raise PromQueryError(f"cannot connect to {self.base}: {str(e)[:160] or type(e).__name__}", "down") from None
        except httpx.TimeoutException:
            raise PromQueryError(f"no answer within {self.timeout_s:g} s", "timeout") from None
        except httpx.HTTPError as e:
            raise PromQueryError(f"{type(e).__name__}: {str(e)[:160]}", "down") from None
        if status != 200:
            try:
                api_data(bytes(body))
            except PromQueryError as e:
                if e.kind != "bad_answer":
                    raise PromQueryError(f"HTTP {status}, {e.message}", e.kind) from None
            raise PromQueryError(f"HTTP {status}", "error")
        return api_data(bytes(body))


async def _gather_queries(api: _Api, path: str, queries: dict[str, str], params: dict[str, str],
                          parse) -> dict[str, list[Point]]:
    """Every query at once; the first failure (in the queries' order) is raised, naming its query."""
    names = list(queries)
    answers = await asyncio.gather(*(api.get(path, {"query": queries[n], **params}) for n in names),
                                   return_exceptions=True)
    out: dict[str, list[Point]] = {}
    for n, a in zip(names, answers):
        if isinstance(a, BaseException):
            if isinstance(a, PromQueryError):
                raise PromQueryError(a.message, a.kind, n, queries[n])
            if isinstance(a, asyncio.CancelledError):
                raise a
            raise PromQueryError(f"{type(a).__name__}: {str(a)[:160]}", "error", n, queries[n])
        try:
            out[n] = parse(a)
        except PromQueryError as e:
            raise PromQueryError(e.message, e.kind, n, queries[n]) from None
    return out


class PrometheusFleet:
    """A FleetSource (session/source.py) over Prometheus's HTTP API. `interval_s` is how often
    specmon polls (its tick); back-off after failures starts there.

    A poll never waits long for Prometheus: the queries run in a task of their own, and a poll
    whose answer is not back within half a tick reads the last answer again, its ages grown by
    the time since it was asked (so a slow Prometheus shows as figures growing old, then stale,
    never as a stalled tick). Prometheus's figures move once a scrape interval, so within half of
    one since the last answer nothing is asked either. An answer later than `timeout_s` (default
    the longer of 5 s and 3 ticks) is a failure: the fleet is down."""

    def __init__(self, url: str, selector: Optional[str] = "{}", interval_s: float = 1.0, *,
                 name: str = "prometheus", timeout_s: Optional[float] = None,
                 transport: Optional[httpx.AsyncBaseTransport] = None):
        self.url = prometheus_base(url)
        self.selector = selector or "{}"
        self.matchers = selector_matchers(selector)
        self.name = name
        self.interval_s = interval_s
        self.timeout_s = timeout_s or max(5.0, 3 * interval_s)
        self.answer_within_s = 0.5 * interval_s
        self.retry_max_s = max(8 * interval_s, 2.0)
        self.view = FleetView(name, self.url, self.matchers)
        self._transport = transport
        self._api: Optional[_Api] = None
        self._failures = 0
        self._retry_at = 0.0
        self._error: Optional[PromQueryError] = None
        self._targets_at = -math.inf
        self._discover_at = -math.inf
        self._task: Optional[asyncio.Task] = None  # the queries in flight
        # The last answer, read: each worker's figures, `up`, the answer's time, when it was asked.
        self._last: Optional[tuple[dict[Key, WorkerFigures], dict[tuple[str, str], float], float, float]] = None
        self.queries = 0  # requests of the last answer (the benchmark reads these)
        self.poll_s: Optional[float] = None  # how long that answer took

    def _client(self) -> _Api:
        if self._api is None:  # made in the loop that polls
            self._api = _Api(self.url, self.timeout_s, self._transport)
        return self._api

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._api is not None:
            await self._api.aclose()
            self._api = None

    async def _ask(self) -> tuple[dict[Key, WorkerFigures], dict[tuple[str, str], float], float, float]:
        """Every query of one poll (and, when due, the targets and the look-back discovery)."""
        api = self._client()
        before = api.requests
        t0 = time.monotonic()
        try:
            await self._refresh(api, t0)
            queries = FleetQueries(self.matchers, self.view.scrape_interval_s() or self.interval_s).poll(self.view.jobs)
            if "up" not in queries:  # nothing matched so far: look back for workers again next time
                self._discover_at = -math.inf
            results = await _gather_queries(api, "/api/v1/query", queries, {"timeout": f"{self.timeout_s:g}s"},
                                            parse_vector)
        finally:
            self.queries = api.requests - before
            self.poll_s = time.monotonic() - t0
        ts = max((p[1] for pts in results.values() for p in pts), default=time.time())
        workers, up = read_results(results)
        return workers, up, ts, t0

    def _reading(self, workers: dict[Key, WorkerFigures], up: dict[tuple[str, str], float], ts: float,
                 poll_s: Optional[float]) -> FleetReading:
        reading = self.view.read_figures(workers, up, ts, poll_s=poll_s)
        if (any(s.state == "down" for s in reading.samples.values())
                and time.monotonic() - self._targets_at >= TARGETS_DOWN_EVERY_S):
            self._targets_at = -math.inf  # the next answer reads the targets' last errors
        return reading

    def _aged(self) -> FleetReading:
        """The last answer read again, every age grown by the time since it was asked."""
        assert self._last is not None
        workers, up, ts, at = self._last
        dt = time.monotonic() - at
        aged = {k: replace(w, age_s=None if w.age_s is None else w.age_s + dt) for k, w in workers.items()}
        return self._reading(aged, up, ts + dt, None)

    async def read(self) -> FleetReading:
        """One fresh reading; PromQueryError when Prometheus gave no usable answer (no back-off)."""
        self._last = await self._ask()
        return self._reading(*self._last[:3], self.poll_s)

    async def _refresh(self, api: _Api, now: float) -> None:
        """The slow cadence: targets (intervals, URLs, errors) and the look-back discovery."""
        if now - self._targets_at >= TARGETS_EVERY_S:
            self.view.targets = parse_targets(await _one(api, "/api/v1/targets", "targets", {"state": "active"}))
            self._targets_at = now
            if not any(t.interval_s for t in self.view.targets.values()) and self.view.config_interval_s is None:
                self.view.config_interval_s = parse_config_interval(
                    await _one(api, "/api/v1/status/config", "config"))
        if now - self._discover_at >= DISCOVER_EVERY_S:
            q = FleetQueries(self.matchers).discover()
            found = await _gather_queries(api, "/api/v1/query", {"discover": q}, {}, parse_vector)
            self.view.discovered = {key_of(lab) for lab, _, _ in found["discover"] if lab.get("instance")}
            self._discover_at = now

    def _fresh_enough(self, now: float) -> bool:
        every = self.view.scrape_interval_s() or 0.0
        return (self._last is not None and now - self._last[3] < every / 2
                and now - self._targets_at < TARGETS_EVERY_S)

    async def poll(self) -> FleetReading:
        """Never raises: Prometheus down, slow or erring is a FleetStatus with up=False and why."""
        now = time.monotonic()
        if self._error is not None and now < self._retry_at:
            return self._down(self._error, self._retry_at - now)
        if self._task is None and not self._fresh_enough(now):
            self._task = asyncio.create_task(self._ask())
        if self._task is not None:
            # The first answer is waited for whole; later ones for half a tick, else the last again.
            await asyncio.wait({self._task}, timeout=None if self._last is None else self.answer_within_s)
            if self._task.done():
                task, self._task = self._task, None
                try:
                    answer = task.result()
                except PromQueryError as e:
                    return self._failed(e)
                except asyncio.CancelledError:
                    return self._failed(PromQueryError("the queries were cancelled", "error"))
                except Exception as e:  # a case not foreseen: the fleet's state, never the session's end
                    return self._failed(PromQueryError(f"{type(e).__name__}: {str(e)[:160]}", "error"))
                self._failures, self._retry_at, self._error = 0, 0.0, None
                self._last = answer
                return self._reading(*answer[:3], self.poll_s)
        return self._aged()

    def _failed(self, e: PromQueryError) -> FleetReading:
        self._failures += 1
        delay = min(self.retry_max_s, self.interval_s * 2.0 ** min(self._failures - 1, 30))
        self._retry_at = time.monotonic() + delay
        self._error = e
        self._targets_at = -math.inf  # after a failure: targets and discovery again, it may be a new server
        self._discover_at = -math.inf
        self._last = None
        return self._down(e, delay)

    def _down(self, e: PromQueryError, retry_in: float) -> FleetReading:
        retry = f"retrying in {retry_in:.0f} s" if retry_in >= 1.5 else "retrying"
        state = e.kind if e.kind in ("refused", "timeout") else "down"
        return self.view.down(f"at {self.url}: {e.describe()}; {retry}", time.time(), state=state)


async def _one(api: _Api, path: str, name: str, params: Optional[dict[str, str]] = None) -> Any:
    try:
        return await api.get(path, params)
    except PromQueryError as e:
        raise PromQueryError(e.message, e.kind, name, path) from None


async def first_reading(url: str, selector: Optional[str], interval_s: float,
                        timeout_s: Optional[float] = None) -> FleetReading:
    """One reading with a fleet of its own (closed after): PromQueryError when Prometheus cannot
    answer (kind bad_query: it refused the selector)."""
    fleet = PrometheusFleet(url, selector, interval_s, timeout_s=timeout_s or 15.0)
    try:
        return await fleet.read()
    finally:
        await fleet.aclose()


# --------------------------------------------------------------------------------------------
# History: the same queries over a past window (/api/v1/query_range)


class PrometheusHistory:
    """A past window of a fleet, step by step: `readings()` yields (step time, FleetReading), the
    same readings a live poll at that time would have made (FleetView.read on each step's points)."""

    def __init__(self, url: str, selector: Optional[str], start: float, end: float,
                 step_s: Optional[float] = None, *, name: str = "prometheus", timeout_s: float = HISTORY_TIMEOUT_S):
        self.url = prometheus_base(url)
        self.selector = selector or "{}"
        self.matchers = selector_matchers(selector)
        if not end > start:
            raise ValueError(f"--from must be before --to (got {_iso(start)} .. {_iso(end)})")
        if step_s is not None and not (math.isfinite(step_s) and step_s > 0):
            raise ValueError(f"--step: expected a positive number of seconds, got {step_s}")
        self.start, self.end, self.step_s = start, end, step_s
        self.name, self.timeout_s = name, timeout_s
        self.view = FleetView(name, self.url, self.matchers)
        self.queries = 0  # requests made to Prometheus so far
        self._api: Optional[_Api] = None

    @property
    def steps(self) -> int:
        return int(math.floor((self.end - self.start) / (self.step_s or 1.0) + 1e-9)) + 1

    async def prepare(self, transport: Optional[httpx.AsyncBaseTransport] = None) -> int:
        """Scrape interval (the default step), the bound on steps and the workers of the window;
        returns how many workers were seen. PromQueryError, ValueError (too many steps)."""
        if self._api is None:
            self._api = _Api(self.url, self.timeout_s, transport)
        api = self._api
        self.view.targets = parse_targets(await _one(api, "/api/v1/targets", "targets", {"state": "active"}))
        if not any(t.interval_s for t in self.view.targets.values()):
            self.view.config_interval_s = parse_config_interval(await _one(api, "/api/v1/status/config", "config"))
        if self.step_s is None:
            self.step_s = max(self.view.scrape_interval_s() or 15.0,
                              math.ceil((self.end - self.start) / AUTO_HISTORY_STEPS))
        if self.steps > MAX_HISTORY_STEPS:
            raise ValueError(f"--from/--to/--step: {self.steps:,} steps of {self.step_s:g} s; at most "
                             f"{MAX_HISTORY_STEPS:,}: give a larger --step or a shorter window")
        window = max(self.end - self.start, 1.0) + DISCOVER_LOOKBACK_S
        q = FleetQueries(self.matchers).discover(window)
        found = await _gather_queries(api, "/api/v1/query", {"discover": q}, {"time": f"{self.end:.3f}"}, parse_vector)
        self.view.discovered = {key_of(lab) for lab, _, _ in found["discover"] if lab.get("instance")}
        self.queries = api.requests
        return len(self.view.discovered)

    async def readings(self) -> AsyncIterator[tuple[float, FleetReading]]:
        """Each step's reading, in order (after prepare)."""
        if self._api is None:
            await self.prepare()
        api = self._api
        assert api is not None
        n = len(self.view.discovered)
        step = float(self.step_s or 1.0)
        # Points per query bounded: Prometheus's own per-series limit, and the answer's size.
        per_chunk = max(10, min(MAX_RANGE_POINTS, 100_000 // max(1, n)))
        queries = FleetQueries(self.matchers, self.view.scrape_interval_s() or step, step).poll(self.view.jobs,
                                                                                                 split=True)

        def ask(i: int) -> asyncio.Task:
            j = min(self.steps, i + per_chunk)
            t0, t1 = self.start + i * step, self.start + (j - 1) * step
            params = {"start": f"{t0:.3f}", "end": f"{t1:.3f}", "step": f"{step:g}", "timeout": f"{self.timeout_s:g}s"}
            return asyncio.ensure_future(_gather_queries(api, "/api/v1/query_range", queries, params, parse_matrix))

        # The next chunk is asked for before this one's readings are made: Prometheus evaluates it
        # while specmon reads and records (each about half of the wall time, one after the other)
        i, pending = 0, ask(0)
        try:
            while i < self.steps:
                j = min(self.steps, i + per_chunk)
                results = await pending
                self.queries = api.requests
                pending = ask(j) if j < self.steps else None
                await asyncio.sleep(0)  # its requests on their way before the readings take the loop
                by_step: dict[int, dict[str, list[Point]]] = {}
                for qname, points in results.items():
                    for labels, ts, v in points:
                        k = int(round((ts - self.start) / step))
                        if i <= k < j:
                            by_step.setdefault(k, {}).setdefault(qname, []).append((labels, ts, v))
                for k in range(i, j):
                    ts = self.start + k * step
                    yield ts, self.view.read(by_step.get(k, {}), ts)
                i = j
        finally:
            # left early (or failed): the chunk asked ahead is cancelled, and its outcome taken
            # even when it had already failed (an exception never retrieved is logged at exit)
            if pending is not None:
                pending.cancel()
                with suppress(asyncio.CancelledError, PromQueryError):
                    await pending

    async def aclose(self) -> None:
        if self._api is not None:
            await self._api.aclose()
            self._api = None


def _iso(ts: float) -> str:
    try:
        return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()
    except (OverflowError, OSError, ValueError):
        return str(ts)
