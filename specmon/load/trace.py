"""A trace to replay: when each request arrives and how long it is (`specmon ramp URL --trace FILE`).

The trace is one open-loop level of the ramp: each request goes out at its recorded arrival
(seconds of the arm's time from the level's start, divided by --trace-speed), with its recorded
prompt and output length, whatever is in flight (session/ramp/open_loop.py sends it; levels.csv gets one
row per arm whose offered_rate is the trace's mean arrival rate). Formats (docs/workloads.md):

- specmon JSONL, one object per line: `t` (arrival, seconds from the start) or `timestamp`
  (seconds; the first line's is the start), `input_len`, `output_len`, optional `prefix_group`
  (requests of one group share their first `prefix_len` tokens: the line's own, else
  --shared-prefix-len, else half the prompt) and optional `hash_ids` (as Mooncake's);
- Mooncake / Kimi JSONL: `timestamp` (milliseconds), `input_length`, `output_length`,
  `hash_ids` (one id per 512-token block: equal ids at the same place are the same tokens);
- Azure LLM inference CSV: `TIMESTAMP` (a date and time), `ContextTokens`, `GeneratedTokens`;
- BurstGPT CSV: `Timestamp` (seconds), `Request tokens`, `Response tokens` (other columns ignored);
- `diurnal[:PEAK_RPS[:PERIOD_S]]`: no file, a day compressed into PERIOD_S (default 600) whose
  rate rises from a tenth of the peak (default 2 req/s) to the peak at half the period and back,
  Poisson arrivals (seeded), lengths from --input-len / --output-len.

Files may be gzip-compressed. A bad line (not JSON, a missing or non-numeric field, a length
of 0 or past the plan's bound) is counted and skipped with a warning naming file and line, as a
dataset's are; a file with no usable line, or of no format above, is a UsageError (exit 2)
naming the file (and the first bad line).

Prompts are input_ids built from the seed, so every length is exact by construction: a block
of hash ids or a prefix group is the same seeded ids wherever it appears (the server's prefix
cache sees the sharing the trace recorded), the rest of a prompt is its own.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import random
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

from specmon.bounds import MAX_TOKENS
from specmon.errors import UsageError
from specmon.load.workload import DEFAULT_ID_LIMIT, Prompt, _draw_ids

MOONCAKE_BLOCK = 512  # tokens per hash id in Mooncake's traces (their paper's KV block)
DIURNAL_PEAK_RPS = 2.0
DIURNAL_PERIOD_S = 600.0
DIURNAL_FLOOR = 0.1  # the trough, as a share of the peak
MAX_TRACE_REQUESTS = 5_000_000  # ~100 bytes each in memory; a longer trace: cut it first
WARNINGS_SHOWN = 5


@dataclass(frozen=True, slots=True)
class TraceRequest:
    t: float  # arrival: seconds from the trace's start (before --trace-speed)
    input_len: int
    output_len: int
    prefix_group: Optional[str] = None
    prefix_len: Optional[int] = None
    hash_ids: tuple[int, ...] = ()


@dataclass
class Trace:
    source: str  # the file, or the diurnal spec as given
    kind: str  # jsonl | mooncake | azure | burstgpt | diurnal
    requests: list[TraceRequest]
    skipped: list[str] = field(default_factory=list)
    speed: float = 1.0
    seed: int = 42
    id_limit: int = DEFAULT_ID_LIMIT
    shared_prefix_len: Optional[int] = None  # the default prefix_len of a line's prefix_group

    # ---- the schedule -----------------------------------------------------------------------
    def offset(self, i: int) -> float:
        """Request i's arrival, seconds of the arm's time from the level's start."""
        return self.requests[i].t / self.speed

    @property
    def span_s(self) -> float:
        return self.offset(len(self.requests) - 1) if self.requests else 0.0

    @property
    def mean_rate(self) -> float:
        """Requests per second of the arm's time over the trace (its offered rate); a trace whose
        requests all arrive at once is taken as arriving over one second."""
        return len(self.requests) / max(self.span_s, 1.0)

    def describe(self) -> dict[str, Any]:
        n = len(self.requests)
        out: dict[str, Any] = {"kind": "trace", "format": self.kind, "source": self.source, "requests": n,
                               "skipped_lines": len(self.skipped), "span_s": round(self.span_s, 3),
                               "mean_rate": round(self.mean_rate, 6), "speed": self.speed, "seed": self.seed}
        if n:
            out["mean_input_len"] = round(sum(r.input_len for r in self.requests) / n, 1)
            out["mean_output_len"] = round(sum(r.output_len for r in self.requests) / n, 1)
        return out

    # ---- prompts ----------------------------------------------------------------------------
    def prompt(self, i: int) -> Prompt:
        """Request i's prompt: input_len ids, its shared part (hash blocks or prefix group) first."""
        r = self.requests[i]
        ids: list[int] = []
        if r.hash_ids:
            for h in r.hash_ids:
                if len(ids) >= r.input_len:
                    break
                ids.extend(_block(self.seed, h, self.id_limit))
            del ids[r.input_len:]
        elif r.prefix_group is not None:
            n = r.prefix_len if r.prefix_len is not None else (self.shared_prefix_len or r.input_len // 2)
            ids = _group_prefix(self.seed, r.prefix_group, min(n, r.input_len), self.id_limit)
        own = r.input_len - len(ids)
        if own > 0:
            ids = ids + _draw_ids(random.Random(f"specmon-trace/{self.seed}/{i}"), own, self.id_limit)
        return Prompt(input_ids=ids)


@lru_cache(maxsize=2048)  # 2,048 blocks of 512 ids: 8 MiB of references at most
def _block(seed: int, h: int, id_limit: int) -> list[int]:
    return _draw_ids(random.Random(f"specmon-block/{seed}/{h}"), MOONCAKE_BLOCK, id_limit)


def _group_prefix(seed: int, group: str, n: int, id_limit: int) -> list[int]:
    # The same generator for every length: the first k ids of a group are the same whatever n is
    # (ids are drawn in order), so two requests of a group share min(n1, n2) tokens.
    return _draw_ids(random.Random(f"specmon-trace-prefix/{seed}/{group}"), n, id_limit)


# --------------------------------------------------------------------------------------------
# Reading


class _Bad(ValueError):
    """One line's problem (its words go into the skipped list)."""


def _count(v: Any, name: str, *, zero_ok: bool = False) -> int:
    if isinstance(v, bool) or v is None or v == "":
        raise _Bad(f"{name}: expected a token count, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise _Bad(f"{name}: expected a token count, got {v!r}") from None
    if not math.isfinite(f) or not f.is_integer():
        raise _Bad(f"{name}: expected a whole token count, got {v!r}")
    n = int(f)
    if n < (0 if zero_ok else 1):
        raise _Bad(f"{name}: {n} tokens (a request with none cannot be replayed)")
    if n > MAX_TOKENS:
        raise _Bad(f"{name}: {n:,} tokens, more than {MAX_TOKENS:,}")
    return n


def _seconds(v: Any, name: str) -> float:
    if isinstance(v, bool) or v is None or v == "":
        raise _Bad(f"{name}: expected a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise _Bad(f"{name}: expected a number, got {v!r}") from None
    if not math.isfinite(f):
        raise _Bad(f"{name}: expected a finite number, got {v!r}")
    return f


def _azure_time(v: str) -> float:
    """`2023-11-16 18:15:46.6805900` (100 ns digits) -> seconds (only differences are used)."""
    text = (v or "").strip()
    head, dot, frac = text.partition(".")
    tz = ""
    for sep in ("+", "Z"):  # a zone after the fraction: keep it out of the digits
        if sep in frac:
            frac, _, rest = frac.partition(sep)
            tz = sep + rest
    try:
        when = datetime.fromisoformat(head + (("." + (frac + "000000")[:6]) if dot else "") + tz)
    except ValueError:
        raise _Bad(f"TIMESTAMP: expected a date and time like 2023-11-16 18:15:46.68, got {v!r}") from None
    return when.timestamp()


def _from_json(obj: Any) -> tuple[str, TraceRequest, bool]:
    """(format, request, relative): relative means its time is `t`, not a timestamp to rebase."""
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object, got {type(obj).__name__}")
    hashes: tuple[int, ...] = ()
    raw = obj.get("hash_ids")
    if raw is not None:
        if not isinstance(raw, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in raw):
            raise _Bad("hash_ids: expected a list of integers")
        hashes = tuple(raw)
    if "input_length" in obj or "output_length" in obj:  # Mooncake: milliseconds
        if "timestamp" not in obj:
            raise _Bad("timestamp: missing (Mooncake lines carry milliseconds)")
        return "mooncake", TraceRequest(_seconds(obj["timestamp"], "timestamp") / 1000.0,
                                        _count(obj.get("input_length"), "input_length"),
                                        _count(obj.get("output_length"), "output_length"), hash_ids=hashes), False
    if "t" in obj:
        t, relative = _seconds(obj["t"], "t"), True
        if t < 0:
            raise _Bad(f"t: expected seconds from the start (>= 0), got {obj['t']!r}")
    elif "timestamp" in obj:
        t, relative = _seconds(obj["timestamp"], "timestamp"), False
    else:
        raise _Bad("expected t (seconds from the start) or timestamp, and input_len, output_len")
    group = obj.get("prefix_group")
    if group is not None and (isinstance(group, bool) or not isinstance(group, (str, int))):
        raise _Bad(f"prefix_group: expected a string or integer id, got {group!r}")
    plen = obj.get("prefix_len")
    return "jsonl", TraceRequest(t, _count(obj.get("input_len"), "input_len"), _count(obj.get("output_len"), "output_len"),
                                 prefix_group=None if group is None else str(group),
                                 prefix_len=None if plen is None else _count(plen, "prefix_len"), hash_ids=hashes), relative


_CSV_KINDS = {  # format -> (time column, input column, output column)
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}


def _read_text(path: str) -> str:
    p = Path(path)
    try:
        found = p.is_file()
    except (OSError, ValueError) as e:
        raise UsageError(f"--trace {path}: cannot use this path ({e})") from None
    if not found:
        raise UsageError(f"--trace {path}: file not found (or diurnal[:PEAK_RPS[:PERIOD_S]])")
    try:
        data = p.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        return data.decode("utf-8-sig")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as e:
        raise UsageError(f"--trace {path}: cannot read as UTF-8 text ({e})") from None


def _rebase(kind: str, rows: list[tuple[TraceRequest, bool]]) -> list[TraceRequest]:
    """Sorted by arrival; timestamps (not `t`) shifted so the first arrival is 0."""
    stamps = [r.t for r, rel in rows if not rel]
    first = min(stamps) if stamps else 0.0
    out = [r if rel else TraceRequest(r.t - first, r.input_len, r.output_len, r.prefix_group, r.prefix_len,
                                      r.hash_ids) for r, rel in rows]
    out.sort(key=lambda r: r.t)  # stable: requests of one instant keep the file's order
    return out


def read_trace(path: str) -> Trace:
    """A trace file, any format above (bad lines in .skipped); UsageError when nothing is usable."""
    text = _read_text(path)
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    skipped: list[str] = []
    rows: list[tuple[TraceRequest, bool]] = []
    kinds: set[str] = set()
    if first.lstrip().startswith("{"):
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError, ValueError) as e:
                skipped.append(f"{path}:{lineno}: not valid JSON ({getattr(e, 'msg', e)})")
                continue
            try:
                kind, req, rel = _from_json(obj)
            except _Bad as e:
                skipped.append(f"{path}:{lineno}: {e}")
                continue
            kinds.add(kind)
            rows.append((req, rel))
            if len(rows) > MAX_TRACE_REQUESTS:
                raise UsageError(f"--trace {path}: more than {MAX_TRACE_REQUESTS:,} requests (cut the file first)")
        kind = "mooncake" if kinds == {"mooncake"} else "jsonl"
        expected = ("JSONL of {\"t\", \"input_len\", \"output_len\"} or Mooncake's "
                    "{\"timestamp\", \"input_length\", \"output_length\"}")
    else:
        reader = csv.reader(io.StringIO(text))
        header = [h.strip() for h in next(reader, [])]
        kind = next((k for k, cols in _CSV_KINDS.items() if all(c in header for c in cols)), "")
        if not kind:
            raise UsageError(f"--trace {path}: not a trace this reads (line 1: expected JSONL, an Azure CSV "
                             "header TIMESTAMP,ContextTokens,GeneratedTokens or a BurstGPT one with Timestamp, "
                             "Request tokens, Response tokens)")
        ti, ii, oi = (header.index(c) for c in _CSV_KINDS[kind])
        expected = "CSV rows of " + ", ".join(_CSV_KINDS[kind])
        for lineno, row in enumerate(reader, start=2):
            if not row or not any(c.strip() for c in row):
                continue
            try:
                if len(row) <= max(ti, ii, oi):
                    raise _Bad(f"{len(row)} columns, expected {len(header)}")
                t = _azure_time(row[ti]) if kind == "azure" else _seconds(row[ti].strip(), _CSV_KINDS[kind][0])
                req = TraceRequest(t, _count(row[ii].strip(), _CSV_KINDS[kind][1]),
                                   _count(row[oi].strip(), _CSV_KINDS[kind][2]))
            except _Bad as e:
                skipped.append(f"{path}:{lineno}: {e}")
                continue
            rows.append((req, False))
            if len(rows) > MAX_TRACE_REQUESTS:
                raise UsageError(f"--trace {path}: more than {MAX_TRACE_REQUESTS:,} requests (cut the file first)")
    if not rows:
        # skipped[0] is "PATH:LINE: why": the location is the path and the number after it
        first_bad = skipped[0][len(path) + 1:] if skipped else ""
        line_no, _, reason = first_bad.partition(": ")
        why = f"; first: {reason}" if skipped else ""
        where = f"{path}:{line_no}" if skipped else path
        raise UsageError(f"--trace {where}: no usable request ({len(skipped)} bad lines{why}; expected {expected})")
    return Trace(source=path, kind=kind, requests=_rebase(kind, rows), skipped=skipped)


# --------------------------------------------------------------------------------------------
# The built-in diurnal pattern


def is_diurnal(spec: str) -> bool:
    return spec == "diurnal" or spec.startswith("diurnal:")


def diurnal_rate(t: float, peak: float, period: float) -> float:
    """Requests per second at t: DIURNAL_FLOOR x peak at 0 and period, the peak at period / 2."""
    return peak * (DIURNAL_FLOOR + (1 - DIURNAL_FLOOR) * (1 - math.cos(2 * math.pi * t / period)) / 2)


def diurnal_trace(spec: str, *, input_len: int, output_len: int, seed: int, duration_s: Optional[float] = None,
                  max_requests: Optional[int] = None) -> Trace:
    """`diurnal[:PEAK_RPS[:PERIOD_S]]`: seeded Poisson arrivals (thinning at the peak rate) over
    one period, or duration_s; every request of the plan's lengths."""
    parts = spec.split(":")[1:]
    if len(parts) > 2:
        raise UsageError(f"--trace {spec}: expected diurnal[:PEAK_RPS[:PERIOD_S]]")
    try:
        peak = float(parts[0]) if parts and parts[0] else DIURNAL_PEAK_RPS
        period = float(parts[1]) if len(parts) > 1 and parts[1] else DIURNAL_PERIOD_S
    except ValueError:
        raise UsageError(f"--trace {spec}: expected diurnal[:PEAK_RPS[:PERIOD_S]] with numbers") from None
    if not (math.isfinite(peak) and 0 < peak <= 100_000):
        raise UsageError(f"--trace {spec}: peak rate expected in (0, 100000] req/s, got {parts[0]}")
    if not (math.isfinite(period) and 1 <= period <= 30 * 86400):
        raise UsageError(f"--trace {spec}: period expected 1 s to 30 days, got {parts[1]}")
    horizon = duration_s if duration_s is not None else period
    if peak * horizon > MAX_TRACE_REQUESTS:
        raise UsageError(f"--trace {spec}: about {peak * horizon:,.0f} requests at the peak rate over "
                         f"{horizon:g} s, more than {MAX_TRACE_REQUESTS:,}")
    rng = random.Random(f"specmon-diurnal/{seed}")
    out: list[TraceRequest] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= horizon or (max_requests and len(out) >= max_requests):
            break
        if rng.random() * peak <= diurnal_rate(t, peak, period):
            out.append(TraceRequest(t, input_len, output_len))
    if not out:
        raise UsageError(f"--trace {spec}: no request arrives in {horizon:g} s at this rate")
    return Trace(source=spec, kind="diurnal", requests=out, seed=seed)


def load_trace(spec: str, *, speed: float = 1.0, seed: int = 42, input_len: int = 1024, output_len: int = 256,
               shared_prefix_len: Optional[int] = None, duration_s: Optional[float] = None,
               max_requests: Optional[int] = None) -> Trace:
    """The trace --trace names (a file or the diurnal pattern), cut to duration_s (the arm's
    seconds after --trace-speed) and max_requests when given."""
    if is_diurnal(spec):
        tr = diurnal_trace(spec, input_len=input_len, output_len=output_len, seed=seed,
                           duration_s=duration_s * speed if duration_s is not None else None,
                           max_requests=max_requests)
    else:
        tr = read_trace(spec)
        tr.seed, tr.shared_prefix_len = seed, shared_prefix_len
    tr.speed = speed
    if duration_s is not None:
        tr.requests = [r for r in tr.requests if r.t / speed < duration_s]
    if max_requests:
        del tr.requests[max_requests:]
    if not tr.requests:
        raise UsageError(f"--trace {spec}: no request arrives within --level-duration {duration_s:g} s")
    return tr


def trace_from_plan(plan: Any) -> Trace:
    return load_trace(plan.trace, speed=plan.trace_speed, seed=plan.seed, input_len=plan.input_len,
                      output_len=plan.output_len, shared_prefix_len=plan.shared_prefix_len,
                      duration_s=plan.level_duration_s, max_requests=plan.requests_per_level)


def warn_skipped(tr: Trace, emit_line) -> None:
    """The first few bad lines, then how many (stderr lines, as a dataset's)."""
    for w in tr.skipped[:WARNINGS_SHOWN]:
        emit_line(f"specmon: warning: skipped {w}")
    if tr.skipped:
        emit_line(f"specmon: warning: {len(tr.skipped)} bad line(s) skipped in {tr.source}")
