"""What Prometheus's HTTP API sends, read into values: its JSON answers (api_data, vectors,
matrices, targets, the configuration's scrape interval), its numbers and durations, and the times
of --from/--to. Pure (no I/O): nothing but PromQueryError or ValueError on what a server sends."""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Optional

import yaml

Labels = dict[str, str]
Point = tuple[Labels, float, Optional[float]]  # labels, evaluation time, value (None: NaN, +-Inf)


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
