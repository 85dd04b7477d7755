"""The session folder: the one place that writes it and the one place that reads it back.

Written by `SessionWriter`, a consumer of the event stream like the front ends (it is called
with every event, in order, and nothing else writes the folder):

| file            | from which events                                                   |
|-----------------|---------------------------------------------------------------------|
| events.jsonl    | every event but RequestFinished (one JSON object a line, codec.py;  |
|                 | a tick as its changes from the tick before: format 2)               |
| samples.csv     | SamplesTick (a row per arm, + one per DP rank), Marker (empty `arm`)|
| gpus.csv        | SamplesTick.gpus (a row per GPU per tick; a simulated card's when it|
|                 | changes)                                                            |
| requests.csv    | RequestFinished                                                     |
| observed_requests.csv | ObservedRequestsRead (attach --request-metrics-dir; made on the first) |
| levels.csv      | LevelFinished.results; KneeCalled labels the knee's own row         |
| session.json    | SessionStarted, ArmInfoUpdated, FleetChanged, KneeCalled(predicted),|
|                 | RampStarted,                                                        |
|                 | LevelFinished (knees, fleets, load_client), Marker, SessionEnded    |

Rows are appended and flushed as they happen, each in one write: a row that cannot be written
whole (full disk) is cut back off, so a file never ends in a torn row. session.json is rewritten
atomically: at once for the session's start, the ramp, a level, a mark and the end; with the next
tick (or the close) for server info, fleet changes and predicted knees, which come in bursts.
A value that is not known is an empty cell (codec.py).

With rotation (attach --rotate, segments.py), events.jsonl, samples.csv and gpus.csv are closed
together after a tick into segment N (`samples.000001.csv`, then gzip-compressed off this thread)
and opened afresh under their plain names; --retain deletes the oldest closed segments.

`read_meta` reads session.json back as a typed `SessionMeta`; it accepts folders recorded
before the event log existed (missing keys keep their defaults).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import platform
import socket
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence
from urllib.parse import urlsplit, urlunsplit

from specmon import clock
from specmon import __version__
from specmon.errors import UsageError
from specmon.model import (
    GPU_COLUMNS, LEVEL_COLUMNS, OBSERVED_REQUEST_COLUMNS, REQUEST_COLUMNS, SAMPLE_COLUMNS, ArmInfoUpdated, ArmSpec, Event, FleetChanged,
    FleetLevels, GpuSnapshot,
    KneeCalled, KneesSummary, LevelFinished, LevelResult, LoadClientStats, Marker, ObservedKnee, ObservedKneesUpdated, ObservedRequest,
    ObservedRequestsRead, PredictedKnee,
    RampStarted,
    RequestFinished, SamplesTick,
    SessionEnded, SessionStarted,
)
from specmon.analysis.knee import label_knee
from specmon.session import codec
from specmon.session.segments import ROTATED_FILES, Rotation, SegmentKeeper, next_segment, segment_name
from specmon.urls import without_credentials

EVENTS_FILE = "events.jsonl"


def default_out_dir(base: str | Path = "specmon-sessions") -> Path:
    return Path(base) / datetime.now().strftime("%Y%m%d-%H%M%S")


def public_url(url: str) -> str:
    """The URL without user:password, so credentials embedded in a URL are never written."""
    try:
        u = urlsplit(url)
        if u.username is None and u.password is None:
            return url
        host = u.hostname or ""
        if u.port:
            host = f"{host}:{u.port}"
    except ValueError:
        return url.rsplit("@", 1)[-1] if "@" in url else url
    return urlunsplit((u.scheme, host, u.path, u.query, u.fragment))


def without_curves(e: ObservedKneesUpdated) -> ObservedKneesUpdated:
    # events.jsonl keeps each update's knees, not its curves (a 64-worker fleet's every 5 s would
    # be ~140 MB an hour); session.json keeps the newest curve of every arm.
    return dataclasses.replace(e, knees={a: dataclasses.replace(k, curve=[]) for a, k in e.knees.items()})


def _without_secrets(e: Event) -> Event:
    """The event as it may be written: a URL's user:password never reaches the folder."""
    if isinstance(e, SessionStarted):
        return dataclasses.replace(e, arms=[dataclasses.replace(a, url=public_url(a.url)) for a in e.arms])
    return e


def _arm_meta(a: ArmSpec) -> "ArmMeta":
    return ArmMeta(name=a.name, url=public_url(a.url), launched=a.launched, api_key_env=a.api_key_env,
                   fleet=a.fleet, role=a.role)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


# --------------------------------------------------------------------------------------------
# session.json, typed


@dataclass
class ArmMeta:
    name: str
    url: str = ""
    launched: bool = False
    api_key_env: Optional[str] = None  # the variable's name; the key itself is never written
    version: Optional[str] = None
    time_scale: Optional[float] = None
    server_args: Optional[dict[str, Any]] = None
    fleet: Optional[str] = None  # discovered in this fleet (a gateway, a Prometheus server)
    role: Optional[str] = None


@dataclass
class SessionMeta:
    start_time: Optional[str] = None
    start_ts: Optional[float] = None
    end_time: Optional[str] = None
    end_ts: Optional[float] = None
    specmon_version: Optional[str] = None
    host: dict[str, Any] = field(default_factory=dict)
    mode: Optional[str] = None
    interval_s: Optional[float] = None
    arms: list[ArmMeta] = field(default_factory=list)
    ramp_plan: Optional[dict[str, Any]] = None
    time_scale: dict[str, float] = field(default_factory=dict)
    ramp_workload: Optional[dict[str, Any]] = None
    predicted_knees: dict[str, PredictedKnee] = field(default_factory=dict)
    # The knee of the traffic each arm (worker) served, specmon's or not (analysis/observed.py)
    observed_knees: dict[str, ObservedKnee] = field(default_factory=dict)
    knees: dict[str, KneesSummary] = field(default_factory=dict)
    # A ramp through a gateway: per gateway arm, its workers' routing imbalance per level and
    # which worker saturated first (model.FleetLevels)
    fleet_levels: dict[str, FleetLevels] = field(default_factory=dict)
    load_client: list[LoadClientStats] = field(default_factory=list)  # a ramp's levels, in order
    markers: list[dict[str, Any]] = field(default_factory=list)
    exit_reason: Optional[str] = None
    layout: Optional[dict[str, Any]] = None
    layout_file: Optional[str] = None
    logs_dir: Optional[str] = None
    gateway: Optional[dict[str, str]] = None  # launch mode: which smg binary ran the gateway, its version
    events_file: Optional[str] = None  # events.jsonl when this session stored its event log

    def arm(self, name: str) -> Optional[ArmMeta]:
        return next((a for a in self.arms if a.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return codec.to_plain(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str) -> "SessionMeta":
        """Tolerant of older folders: unknown keys are ignored, missing ones keep their defaults,
        and a key of the wrong shape is one clear error."""
        try:
            meta = codec.build(cls, {k: v for k, v in obj.items() if k in {f.name for f in dataclasses.fields(cls)}})
        except (TypeError, AttributeError, KeyError) as e:
            raise UsageError(f"{where}: unexpected shape ({e}); expected a specmon session.json")
        if not isinstance(meta.arms, list) or not all(isinstance(a, ArmMeta) for a in meta.arms):
            raise UsageError(f"{where}: 'arms': expected a list of arm objects")
        # {} stands for a level without figures (LoadClientStats.from_plain): not one to list
        meta.load_client = [s for s in meta.load_client or [] if s is not None]
        return meta


def read_observed_requests(folder: Path) -> list[ObservedRequest]:
    """observed_requests.csv back as typed records ([] for a session that read no export files);
    a row that is not one is a UsageError naming the file and line."""
    path = Path(folder) / "observed_requests.csv"
    if not path.exists():
        return []
    out: list[ObservedRequest] = []
    with open(path, newline="", encoding="utf-8") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            try:
                out.append(codec.from_row(ObservedRequest, row))
            except (codec.CellError, TypeError) as e:  # TypeError: a required cell (arm, ts_read) empty
                raise UsageError(f"{path}:{i}: {e}; expected a specmon observed_requests.csv row") from None
    return out


def read_meta(folder: Path) -> SessionMeta:
    path = Path(folder) / "session.json"
    if not Path(folder).is_dir():
        raise UsageError(f"{folder}: not a directory; expected a specmon session folder")
    if not path.exists():
        raise UsageError(f"{path}: missing; expected a specmon session folder (session.json, samples.csv)")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise UsageError(f"{path}: not valid JSON ({e})")
    if not isinstance(obj, dict):
        raise UsageError(f"{path}: expected a JSON object")
    # Older sessions wrote knees' `predicted` as bounds, not a PredictedKnee: keep only the new shape.
    for k in (obj.get("knees") or {}).values() if isinstance(obj.get("knees"), dict) else ():
        if isinstance(k, dict) and isinstance(k.get("predicted"), dict) and "concurrency" not in k["predicted"]:
            k["predicted"] = None
    return SessionMeta.from_json(obj, str(path))


# --------------------------------------------------------------------------------------------
# Appending rows


class RecordingError(Exception):
    """The folder cannot be written (full disk, permissions): the session stops cleanly."""


class _AppendFile:
    """A file of whole lines: each line goes out in one unbuffered write, and a failed or short
    write is cut back off, so the file never ends in a torn line."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "ab", buffering=0)
        # Where the file ends, kept here: a tell() before every line was a system call per
        # requests.csv row (1,000 a level at C=1000). Only this object appends to the file.
        self._end = self._f.tell()

    @property
    def empty(self) -> bool:
        return self._end == 0

    @property
    def size(self) -> int:
        return self._end

    def write_line(self, text: str) -> None:
        data = text.encode("utf-8")
        start = self._end
        try:
            n = self._f.write(data)
            if n != len(data):
                raise OSError(28, f"short write ({n} of {len(data)} bytes)")
            self._end = start + n
        except OSError as e:
            try:
                self._f.truncate(start)
            except OSError:
                pass
            raise RecordingError(f"{self.path}: cannot write ({e.strerror or e})") from None

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()


class MetaJson:
    """session.json's text, the very text json.dumps(meta, indent=2, default=str) writes, with
    each top-level key's value encoded again only when it differs from the one written before:
    a live session rewrites the file whenever one part changes (the observed knees, a level's
    figures), and the pure-Python indenting encoder made each write ~0.6 ms of the session's thread.
    A value is known by its repr (C, and unlike == it tells 1 from 1.0 and True)."""

    def __init__(self) -> None:
        self._parts: dict[str, tuple[str, str]] = {}  # key -> (its value's repr, its text)

    def dumps(self, meta: dict[str, Any]) -> str:
        if not meta:
            return "{}"
        lines = []
        for key, value in meta.items():
            seen, kept = repr(value), self._parts.get(key)
            if kept is not None and kept[0] == seen:
                text = kept[1]
            else:
                # one level deeper than json.dumps puts it: every line after the first indented
                # two more spaces (a JSON string never holds a raw line break)
                text = json.dumps(value, indent=2, default=str).replace("\n", "\n  ")
                self._parts[key] = (seen, text)
            lines.append(f"  {json.dumps(key)}: {text}")
        return "{\n" + ",\n".join(lines) + "\n}"


class _CsvFile:
    def __init__(self, path: Path, columns: Sequence[str]):
        self.columns = list(columns)
        self._file = _AppendFile(path)
        if self._file.empty:
            self._write(self.columns)

    def _write(self, cells: list[str]) -> None:
        buf = io.StringIO()
        csv.writer(buf).writerow(cells)
        self._file.write_line(buf.getvalue())

    def write(self, values: dict[str, Any]) -> None:
        self.write_rows((values,))

    def write_rows(self, rows: Iterable[dict[str, Any]]) -> None:
        """Rows in one write: a tick's rows land whole or not at all (a 64-worker fleet's tick
        was 64 system calls)."""
        buf = io.StringIO()
        out = csv.writer(buf)
        cell, columns = codec.cell, self.columns
        for values in rows:
            cells = [cell(values.get(c), c) for c in columns]
            # only a cell with an "@" can hold user:password@ (a 500-worker fleet writes 20k cells a tick)
            out.writerow([without_credentials(x) if "@" in x else x for x in cells])
        if buf.tell():
            self._file.write_line(buf.getvalue())

    @property
    def size(self) -> int:
        return self._file.size

    def close(self) -> None:
        self._file.close()


def check_writable(out_dir: Path) -> None:
    """Before any work starts: the folder can be created and written, or one clear line (exit 2)."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".specmon-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"--out {out_dir}: cannot write there ({e.strerror or e}); give a writable folder")


# --------------------------------------------------------------------------------------------
# The writer: one consumer of the event stream


class SessionWriter:
    """Called with every event of a session, in order; writes the folder (table above)."""

    def __init__(self, out_dir: Path, rotation: Optional[Rotation] = None):
        try:
            self._start(out_dir, rotation)
        except (RecordingError, OSError) as e:  # a disk already full: one line, before any work
            words = str(e) if isinstance(e, RecordingError) else f"cannot write ({e.strerror or e})"
            raise UsageError(f"--out {out_dir}: {words}; free some space or give another folder") from None

    def _start(self, out_dir: Path, rotation: Optional[Rotation]) -> None:
        self.out_dir = Path(out_dir)
        check_writable(self.out_dir)
        # attach --rotate/--retain (segments.py): the growing files closed into segments
        self._rotation = rotation
        self._keeper = SegmentKeeper(self.out_dir, rotation, self._keeper_failed) if rotation else None
        self._segment_start = clock.wall()
        self._carry: dict[Any, Event] = {}  # what a rotated segment's first line carries
        self._lock = threading.RLock()  # the supervisor's log readers emit from their threads
        self._samples = _CsvFile(self.out_dir / "samples.csv", SAMPLE_COLUMNS)
        self._requests = _CsvFile(self.out_dir / "requests.csv", REQUEST_COLUMNS)
        self._levels = _CsvFile(self.out_dir / "levels.csv", LEVEL_COLUMNS)
        self._gpus = _CsvFile(self.out_dir / "gpus.csv", GPU_COLUMNS)
        self._observed: Optional[_CsvFile] = None
        self._events = _AppendFile(self.out_dir / EVENTS_FILE)
        self._sim_cards: dict[tuple, dict[str, Any]] = {}  # a simulated card's last row written (gpus.csv)
        self._meta_json = MetaJson()
        self._log = codec.EventLogEncoder()  # ticks as their changes (the samples are in samples.csv too)
        self._level_rows: list[LevelResult] = []  # levels.csv, kept to label a knee's row later
        now = clock.wall()
        self.meta = SessionMeta(
            start_time=_iso(now), start_ts=now, specmon_version=__version__,
            host={"hostname": socket.gethostname(), "platform": platform.platform(),
                  "python": platform.python_version()},
            events_file=EVENTS_FILE)
        self.closed = False
        self.error: Optional[str] = None  # set when a write failed: the session stops on it
        # What comes in bursts (every arm's server info at start, a fleet's workers joining,
        # predicted knees) is written with the next tick: a 64-worker fleet's first second
        # rewrote its 86 KB session.json 128 times (indent=2 takes json's pure-Python encoder).
        # The events themselves are in events.jsonl at once.
        self._meta_due = False
        self._handlers: dict[type, Callable[[Any], None]] = {
            SessionStarted: self._on_started, ArmInfoUpdated: self._on_info, SamplesTick: self._on_tick,
            KneeCalled: self._on_knee, RampStarted: self._on_ramp, RequestFinished: self._on_request,
            FleetChanged: self._on_fleet, ObservedRequestsRead: self._on_observed,
            LevelFinished: self._on_level, Marker: self._on_marker, SessionEnded: self._on_ended,
            ObservedKneesUpdated: self._on_observed_knees,
        }
        self._write_meta()

    def __call__(self, e: Event) -> None:
        with self._lock:
            if self.error is not None:
                return
            try:
                if self.closed:
                    if isinstance(e, Marker):  # the operator's marks are kept even after the end
                        self._late_marker(e)
                    return
                if not isinstance(e, (RequestFinished, ObservedRequestsRead)):  # their CSVs are their record
                    logged = without_curves(e) if isinstance(e, ObservedKneesUpdated) else e
                    self._events.write_line(without_credentials(self._log.encode(_without_secrets(logged))) + "\n")
                handler = self._handlers.get(type(e))
                if handler is not None:
                    handler(e)
            except RecordingError as err:
                self.error = str(err)
            except OSError as err:
                self.error = f"{self.out_dir}: cannot write ({err.strerror or err})"

    # ---- handlers ----------------------------------------------------------------------------
    def _on_started(self, e: SessionStarted) -> None:
        self._carry["start"] = e
        self.meta.mode, self.meta.interval_s = e.mode, e.interval_s
        self.meta.start_ts, self.meta.start_time = e.ts, _iso(e.ts)
        self.meta.arms = [_arm_meta(a) for a in e.arms]
        if e.launch is not None:
            self.meta.layout, self.meta.layout_file, self.meta.logs_dir = (
                e.launch.layout, e.launch.layout_file, e.launch.logs_dir)
            self.meta.gateway = e.launch.gateway
        self._write_meta()

    def _on_info(self, e: ArmInfoUpdated) -> None:
        self._carry[("info", e.arm)] = e
        arm = self.meta.arm(e.arm)
        if arm is None:
            arm = ArmMeta(name=e.arm)
            self.meta.arms.append(arm)
        arm.version, arm.time_scale, arm.server_args = e.info.version, e.info.time_scale, e.info.server_args()
        self._meta_due = True

    def _on_tick(self, e: SamplesTick) -> None:
        rows: list[dict[str, Any]] = []
        for s in e.samples:
            rows.append(vars(s))
            for rank in s.ranks or ():  # a row per DP rank under the worker's own row
                rows.append({"ts": s.ts, "arm": s.arm, "up": s.up, "state": s.state, "source": s.source,
                             "worker": s.worker, "role": s.role, **vars(rank)})
        self._samples.write_rows(rows)
        if e.gpus is not None:
            self._write_gpus(e.gpus, e.ts)
        if self._meta_due:
            self._write_meta()
        if self._rotation is not None and self._rotation_due():
            self._rotate()

    def _rotation_due(self) -> bool:
        r = self._rotation
        assert r is not None
        if r.every_s is not None and clock.wall() - self._segment_start >= r.every_s:
            return True
        return r.max_bytes is not None and (
            self._events.size + self._samples.size + self._gpus.size >= r.max_bytes)

    def _rotate(self) -> None:
        """Closes events.jsonl, samples.csv and gpus.csv into segment N together (after a whole
        tick) and opens them afresh: each new one starts with what a reader needs to begin there
        (a CSV header; the log's format line with the session's start and arms' info, then a full
        tick; every simulated card's row again)."""
        assert self._keeper is not None
        n = next_segment(self.out_dir)
        for f in (self._events, self._samples, self._gpus):
            f.close()
        for name in ROTATED_FILES:
            src = self.out_dir / name
            if src.exists():
                os.replace(src, self.out_dir / segment_name(name, n))
        self._samples = _CsvFile(self.out_dir / "samples.csv", SAMPLE_COLUMNS)
        self._gpus = _CsvFile(self.out_dir / "gpus.csv", GPU_COLUMNS)
        self._events = _AppendFile(self.out_dir / EVENTS_FILE)
        self._sim_cards.clear()
        self._log = codec.EventLogEncoder()
        carry = [json.loads(codec.encode_event(_without_secrets(e))) for e in self._carry.values()]
        self._events.write_line(without_credentials(self._log.header(segment=n + 1, carry=carry)) + "\n")
        self._segment_start = clock.wall()
        self._keeper.closed(n)

    def _keeper_failed(self, words: str) -> None:
        # from the keeper's thread, without the lock: close() may hold it while waiting on the keeper
        if self.error is None:
            self.error = words

    def _write_gpus(self, snap: GpuSnapshot, ts: float) -> None:
        """Every GPU of this tick (stamped with the tick's ts, so replay pairs them with its
        samples); a host without NVML gets one row saying why, then the simulated arms' cards
        (source "simulated", their arm named)."""
        if not snap.available:
            self._gpus.write({"ts": ts, "available": False, "reason": snap.reason, "source": "nvml"})
        for g in snap.gpus:
            row = vars(g).copy()
            row["gpu"] = g.index
            # Empty cell: the driver refused the list; "-": it listed no process.
            row["processes"] = None if g.processes is None else ";".join(
                f"{p.pid}:{'' if p.used_bytes is None else p.used_bytes}" for p in g.processes) or "-"
            row.update(ts=ts, available=True)
            if g.source == "simulated":
                # A simulated card (one per simulated worker) repeats ~200 B a tick while idle: its
                # row is written when its reading changes (events.jsonl keeps every tick's).
                key, same = (g.arm, g.index), {k: v for k, v in row.items() if k != "ts"}
                if self._sim_cards.get(key) == same:
                    continue
                self._sim_cards[key] = same
            self._gpus.write(row)

    def _on_knee(self, e: KneeCalled) -> None:
        if e.definition == "predicted" and e.predicted is not None:
            self.meta.predicted_knees[e.arm] = e.predicted
            self._meta_due = True
        elif e.knee_level is not None:
            # The knee's own row was written levels ago: label it there and rewrite the (small)
            # file whole, atomically, so a reader sees either the old file or the new one.
            labelled = label_knee(self._level_rows, e.arm, e.knee_level, e.definition)
            if labelled is not None:
                i = next(i for i, r in enumerate(self._level_rows) if r.arm == e.arm and r.level == e.knee_level)
                self._level_rows[i] = labelled
                self._rewrite_levels()

    def _rewrite_levels(self) -> None:
        path = self.out_dir / "levels.csv"
        tmp = path.with_suffix(".csv.tmp")
        self._levels.close()
        try:
            if tmp.exists():
                tmp.unlink()
            rewritten = _CsvFile(tmp, LEVEL_COLUMNS)
            for r in self._level_rows:
                rewritten.write(vars(r))
            rewritten.close()
            os.replace(tmp, path)
        finally:
            self._levels = _CsvFile(path, LEVEL_COLUMNS)

    def _on_ramp(self, e: RampStarted) -> None:
        self.meta.ramp_plan = codec.to_plain(e.plan)
        self.meta.time_scale = dict(e.time_scale)
        self.meta.ramp_workload = e.workload
        self._write_meta()

    def _on_request(self, e: RequestFinished) -> None:
        self._requests.write(vars(e.record))

    def _on_observed(self, e: ObservedRequestsRead) -> None:
        if self._observed is None:  # only a session that reads export files has this file
            self._observed = _CsvFile(self.out_dir / "observed_requests.csv", OBSERVED_REQUEST_COLUMNS)
        self._observed.write_rows(vars(r) for r in e.records)

    def _on_observed_knees(self, e: ObservedKneesUpdated) -> None:
        # with the next tick (they come every few seconds): a killed session keeps the newest
        self.meta.observed_knees.update(e.knees)
        self._meta_due = True

    def _on_level(self, e: LevelFinished) -> None:
        for r in e.results:
            self._levels.write(vars(r))
            self._level_rows.append(r)
        self.meta.knees.update(e.knees)
        self.meta.fleet_levels.update(e.fleets)
        if e.load_client is not None:
            self.meta.load_client.append(e.load_client)
        self._write_meta()

    def _on_fleet(self, e: FleetChanged) -> None:
        """Workers that joined get their arm entry; a row in samples.csv says who came and went."""
        known = {a.name for a in self.meta.arms}
        self.meta.arms += [_arm_meta(a) for a in e.added if a.name not in known]
        self._samples.write({"ts": e.ts, "marker": e.note})
        self._meta_due = True

    def _on_marker(self, e: Marker) -> None:
        self._samples.write({"ts": e.ts, "marker": e.label})
        self.meta.markers.append({"ts": e.ts, "label": e.label})
        self._write_meta()

    def _late_marker(self, e: Marker) -> None:
        late = _CsvFile(self.out_dir / "samples.csv", SAMPLE_COLUMNS)
        late.write({"ts": e.ts, "marker": e.label})
        late.close()
        events = _AppendFile(self.out_dir / EVENTS_FILE)
        events.write_line(codec.encode_event(e) + "\n")
        events.close()
        self.meta.markers.append({"ts": e.ts, "label": e.label})
        self._write_meta()

    def _on_ended(self, e: SessionEnded) -> None:
        self.meta.end_time, self.meta.end_ts, self.meta.exit_reason = _iso(e.ts), e.ts, e.reason
        self._write_meta()
        self.close()

    # ---- files -------------------------------------------------------------------------------
    def _write_meta(self) -> None:
        self._meta_due = False
        path = self.out_dir / "session.json"
        tmp = path.with_suffix(".json.tmp")
        try:
            tmp.write_text(without_credentials(self._meta_json.dumps(self.meta.to_json())) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as e:
            try:
                tmp.unlink()
            except OSError:
                pass
            raise RecordingError(f"{path}: cannot write ({e.strerror or e})") from None

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            if self._meta_due and self.error is None:
                try:
                    self._write_meta()
                except RecordingError as err:
                    self.error = str(err)
            for f in (self._samples, self._requests, self._levels, self._gpus, self._events, self._observed):
                if f is not None:
                    f.close()
            self.closed = True
        if self._keeper is not None:  # the last closed segment compressed before the folder is done
            self._keeper.wait(timeout=120)
