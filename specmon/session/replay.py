"""Play a recorded session folder back as the Events the live session emitted.

`ReplaySource(dir, speed)` is a source.SessionSource like the LiveSession, so the TUI and the
headless printer play it unchanged (Dolphie's record/replay through the same panels).

A folder with an event log (events.jsonl, written since the event stream became the only data
path) replays exactly the events that were emitted, in their order: replay is the inverse of
recording. Older folders have only the CSVs and session.json; for them the events are rebuilt
from what was kept: level boundaries from the `level` column of samples.csv, progress from
requests.csv completions, knees from levels.csv's `knee` column and session.json, and each
LevelFinished's knees by the ramp's own function over the levels finished so far. Such a
rebuilt replay has no server log lines or host readings.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Optional

from specmon.analysis.knee import knees_summary
from specmon.errors import UsageError
from specmon.model import (
    ArmInfo, ArmInfoUpdated, ArmSpec, Event, GpuProcess, GpuReading, GpuSnapshot, KneeCalled, LevelFinished,
    LevelProgress, LevelResult, LevelStarted, Marker, RampFinished, Sample, SamplesTick,
    SessionEnded, SessionStarted,
)
from specmon.session import codec, segments
from specmon.session.folder import EVENTS_FILE, SessionMeta, read_meta
from specmon.session.source import Emit

EPS = 1e-4  # (older folders) orders a level's start just before its first tick and its end just after its last


# --------------------------------------------------------------------------------------------
# Reading the folder


def _from_row(cls: type, row: dict[str, Optional[str]], where: str) -> Any:
    try:
        return codec.from_row(cls, row)
    except codec.CellError as e:
        raise UsageError(f"{where}: {e}") from None


def read_event_log(path: Path) -> list[Event]:
    """events.jsonl back into events: its rotated segments first, oldest first, compressed or not
    (segments.py), then the open file. A torn last line (the process was killed mid-write) is
    dropped; any other bad line is one clear error naming the file and line. When retention
    deleted the first segments, the session's start and arms' server info come from what the
    oldest one left carries."""
    decoder = codec.EventLogDecoder(codec.event_types())  # format 1 (every tick in full) or 2 (changes)
    events: list[Event] = []
    first = True
    for seg, lines in segments.iter_lines(Path(path)):
        last = len(lines) - 1
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                e = decoder.decode(line)
                if e is not None:
                    events.append(e)
                elif first and decoder.carried and not any(isinstance(x, SessionStarted) for x in events):
                    events.extend(decoder.carried)
            except (codec.EventDecodeError, TypeError, KeyError, ValueError) as e:
                if i == last:
                    break  # no newline yet: the line was being written when the recording stopped
                raise UsageError(f"{seg}:{i + 1}: expected a specmon event ({e})") from None
            first = False
    return events


def _read_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    """A session CSV's rows, its rotated segments first (each has its own header)."""
    rows: list[dict[str, str]] = []
    for seg in segments.segment_paths(path):
        with segments.open_text(seg) as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise UsageError(f"{seg}: missing column(s) {', '.join(missing)}; expected a specmon session CSV")
            rows.extend(reader)
    return rows


def _arm_info(args: Optional[dict], time_scale: Optional[float]) -> Optional[ArmInfo]:
    if not args:
        return None
    known = {f.name for f in dataclasses.fields(ArmInfo)}
    info = ArmInfo(**{k: v for k, v in args.items() if k in known})
    if time_scale:
        info.time_scale = float(time_scale)
    return info


@dataclasses.dataclass
class RecordedSession:
    path: Path
    meta: SessionMeta
    arms: list[ArmSpec]
    samples: list[Sample]
    markers: list[Marker]
    levels: list[LevelResult]
    request_ends: dict[tuple[str, int], list[float]]  # (arm, level) -> sorted completion times
    gpus: dict[float, GpuSnapshot] = dataclasses.field(default_factory=dict)  # tick ts -> every GPU then


def load_session(path: Path) -> RecordedSession:
    path = Path(path)
    meta = read_meta(path)

    samples: list[Sample] = []
    markers: list[Marker] = []
    rows = _read_csv(path / "samples.csv", ("ts", "arm"))
    for i, row in enumerate(rows, start=2):
        where = f"{path / 'samples.csv'}:{i}"
        if not (row.get("arm") or "").strip():
            if (row.get("marker") or "").strip():
                markers.append(Marker(label=row["marker"], ts=float(row["ts"])))
            continue
        if (row.get("dp_rank") or "").strip():
            continue  # a DP rank's row: its worker's own row is the sample
        samples.append(_from_row(Sample, row, where))

    levels = [_from_row(LevelResult, row, f"{path / 'levels.csv'}:{i}")
              for i, row in enumerate(_read_csv(path / "levels.csv", ("arm", "offered_concurrency")), start=2)]
    plan_levels = list((meta.ramp_plan or {}).get("levels") or [])
    for r in levels:  # older rows without a `level` cell: place them by their concurrency
        if r.level is None and r.offered_concurrency in plan_levels:
            r.level = plan_levels.index(r.offered_concurrency)

    # Client durations were recorded in the arm's time (x time_scale for a sped-up sim): back to wall.
    scales = {a.name: float(a.time_scale or 1.0) for a in meta.arms}
    ends: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in _read_csv(path / "requests.csv", ("arm", "level", "t_start")):
        if not (row.get("e2e_s") or "").strip():
            continue  # a request that never finished has no end
        try:
            # The wall end when recorded; older sessions only have e2e in the arm's time.
            t_end = (float(row["t_end"]) if (row.get("t_end") or "").strip()
                     else float(row["t_start"]) + float(row["e2e_s"]) / scales.get(row["arm"], 1.0))
            ends[(row["arm"], int(float(row["level"])))].append(t_end)
        except ValueError:
            continue  # a request that never finished has no end
    for v in ends.values():
        v.sort()

    arms = [ArmSpec(name=a.name, url=a.url or "", launched=a.launched) for a in meta.arms if a.name]
    for s in samples:  # arms that only appear in samples.csv
        if s.arm not in {a.name for a in arms}:
            arms.append(ArmSpec(name=s.arm, url=""))
    if not samples and not levels:
        raise UsageError(f"{path / 'samples.csv'}: no sample rows; nothing to replay")
    return RecordedSession(path, meta, arms, samples, markers, levels, dict(ends), _load_gpus(path / "gpus.csv"))


def _opt(row: dict[str, str], col: str, conv: Callable[[float], Any], where: str) -> Any:
    cell = (row.get(col) or "").strip()
    if not cell:
        return None  # refused by the driver, or unknown
    try:
        return conv(float(cell))
    except ValueError:
        raise UsageError(f"{where}: column {col!r}: expected a number, got {cell!r}")


def _load_gpus(path: Path) -> dict[float, GpuSnapshot]:
    """gpus.csv (absent in sessions recorded before it existed) back into one snapshot per tick."""
    if not segments.has_segments(path):
        return {}
    snaps: dict[float, GpuSnapshot] = {}
    for i, row in enumerate(_read_csv(path, ("ts", "gpu")), start=2):
        try:
            ts = float(row["ts"])
        except ValueError:
            raise UsageError(f"{path}:{i}: ts: expected a number, got {row['ts']!r}")
        if row.get("available") == "0":
            snaps[ts] = GpuSnapshot(ts=ts, available=False, reason=row.get("reason") or None)
            continue
        where = f"{path}:{i}"
        g = GpuReading(index=int(_opt(row, "gpu", int, where)), name=row.get("name") or None,
                       uuid=row.get("uuid") or None, mem_used_bytes=_opt(row, "mem_used_bytes", int, where),
                       mem_total_bytes=_opt(row, "mem_total_bytes", int, where),
                       util_pct=_opt(row, "util_pct", float, where), power_w=_opt(row, "power_w", float, where),
                       temp_c=_opt(row, "temp_c", float, where),
                       # a simulated arm's card (older folders: no such column, every row NVML's)
                       source=row.get("source") or "nvml", arm=row.get("arm") or None,
                       weights_bytes=_opt(row, "weights_bytes", int, where),
                       kv_pool_bytes=_opt(row, "kv_pool_bytes", int, where),
                       cuda_graph_bytes=_opt(row, "cuda_graph_bytes", int, where),
                       power_limit_w=_opt(row, "power_limit_w", float, where))
        procs = row.get("processes") or ""
        g.processes = None if not procs else [] if procs == "-" else [
            GpuProcess(pid=int(pid), name=None, used_bytes=int(used) if used else None)
            for pid, _, used in (x.partition(":") for x in procs.split(";"))]
        snaps.setdefault(ts, GpuSnapshot(ts=ts, available=True)).gpus.append(g)
    # A simulated card's row is written only when it changes: each tick gets its last one.
    last: dict[tuple, GpuReading] = {}
    for ts in sorted(snaps):
        snap = snaps[ts]
        here = {(g.arm, g.index) for g in snap.gpus if g.source == "simulated"}
        snap.gpus.extend(dataclasses.replace(g) for k, g in last.items() if k not in here)
        last.update({(g.arm, g.index): g for g in snap.gpus if g.source == "simulated"})
    return snaps


# --------------------------------------------------------------------------------------------
# Rebuilding the event stream


def build_events(rec: RecordedSession) -> list[Event]:
    """The events of a folder recorded before the event log existed, rebuilt from its files."""
    meta = rec.meta
    first_ts = rec.samples[0].ts if rec.samples else float(meta.start_ts or 0.0)
    start = min(first_ts, float(meta.start_ts or first_ts)) - 10 * EPS
    events: list[Event] = []

    for spec in rec.arms:
        a = meta.arm(spec.name)
        info = _arm_info(a.server_args, a.time_scale) if a is not None else None
        if info is not None:
            events.append(ArmInfoUpdated(arm=spec.name, info=info, ts=start))
    for name, pk in meta.predicted_knees.items():
        events.append(KneeCalled(arm=name, definition="predicted", concurrency=pk.concurrency,
                                 detail=pk.detail or "", predicted=pk, ts=start))

    # Ticks: the recorder writes one row per arm per tick, in order; a tick ends where an arm repeats.
    ticks: list[list[Sample]] = []
    for s in rec.samples:
        if not ticks or any(x.arm == s.arm for x in ticks[-1]):
            ticks.append([])
        ticks[-1].append(s)

    plan = meta.ramp_plan or {}
    # The ramp reports level time in the arms' time (the sim's --speed), as LevelProgress did live.
    scale = max([float(a.time_scale or 1.0) for a in meta.arms] or [1.0])
    planned_s = plan.get("level_duration_s")
    levels_total = len(plan.get("levels") or plan.get("rates") or []) or None
    results_by_level: dict[int, list[LevelResult]] = defaultdict(list)
    for r in rec.levels:
        if r.level is not None:
            results_by_level[r.level].append(r)
    if levels_total is None and results_by_level:
        levels_total = max(results_by_level) + 1

    recorded_knees = meta.knees
    finished: dict[str, list[LevelResult]] = defaultdict(list)

    def summary(arm: str) -> dict:
        return knees_summary(finished[arm], meta.predicted_knees.get(arm),
                             slo_ttft_s=plan.get("slo_ttft_s"), slo_tpot_s=plan.get("slo_tpot_s"),
                             min_attainment=plan.get("attainment") or 0.9)

    def finish(level: int, ts: float) -> None:
        results = results_by_level.pop(level, [])
        for r in results:
            finished[r.arm].append(r)
        knees = {r.arm: summary(r.arm) for r in results}
        events.append(LevelFinished(level=level, results=results, knees=knees, ts=ts))
        for r in results:
            # session.json has every definition confirmed at this level with its knee (the level
            # that still paid, not the confirming one); levels.csv labels only the first.
            k = recorded_knees.get(r.arm)
            calls = [] if k is None else [
                (d, getattr(k, d), getattr(k, f"{d}_detail")) for d in ("plateau", "queueing")
                if getattr(k, f"{d}_confirmed_at_level") == level]
            if not calls and r.knee:  # older sessions: only the label
                calls = [(r.knee, r.offered_concurrency, f"confirmed at level {level + 1}")]
            for definition, concurrency, detail in calls:
                resolved = None
                if definition == "plateau":  # recorded since plateau_resolved existed, else recomputed
                    resolved = (k.plateau_resolved if k is not None and k.plateau_resolved is not None
                                else knees[r.arm].plateau_resolved)
                events.append(KneeCalled(arm=r.arm, definition=definition, concurrency=concurrency,
                                         detail=detail or "", resolved=resolved, ts=ts))

    current: Optional[int] = None
    level_t0 = 0.0
    for tick in ticks:
        ts = tick[0].ts
        level = next((s.level for s in tick if s.level is not None), None)
        if level != current:
            if current is not None:
                finish(current, ts - 2 * EPS)
            if level is not None:
                offered = next((s.offered_concurrency for s in tick if s.offered_concurrency is not None), 0)
                events.append(LevelStarted(level=level, offered_concurrency=offered, planned_s=planned_s,
                                           levels_total=levels_total or level + 1, ts=ts - EPS))
                level_t0 = ts
            current = level
        events.append(SamplesTick(samples=tick, gpus=rec.gpus.get(ts), ts=ts))
        if current is not None:
            done = {a.name: _count_le(rec.request_ends.get((a.name, current), []), ts) for a in rec.arms}
            elapsed = (ts - level_t0) * scale
            eta = None
            if planned_s:
                eta = (max(planned_s - elapsed, 0.0) + planned_s * max((levels_total or 0) - current - 1, 0)) / scale
            events.append(LevelProgress(level=current, elapsed_s=elapsed, planned_s=planned_s,
                                        done_requests=done, eta_s=eta, ts=ts + EPS / 2))
    last_ts = ticks[-1][0].ts if ticks else start
    if current is not None:
        finish(current, last_ts + EPS)
    for level in sorted(results_by_level):  # results with no samples of their own
        finish(level, last_ts + EPS)
    if rec.levels:
        events.append(RampFinished(reason="done", ts=last_ts + 2 * EPS))
    events.extend(rec.markers)
    end_ts = max(float(meta.end_ts or last_ts), last_ts) + 3 * EPS
    events.append(SessionEnded(reason=meta.exit_reason or "recording ended", ts=end_ts))
    events.sort(key=lambda e: e.ts)  # stable: same-ts events keep their construction order
    return events


def _count_le(sorted_vals: list[float], x: float) -> int:
    import bisect

    return bisect.bisect_right(sorted_vals, x)


# --------------------------------------------------------------------------------------------
# Playing it


class ReplaySource:
    """A recorded session with the LiveSession's `run(emit, stop)`; space pauses, n skips a level."""

    def __init__(self, session_dir: Path | str, speed: float = 1.0) -> None:
        if speed <= 0:
            raise UsageError(f"--speed: expected a positive number, got {speed}")
        folder = Path(session_dir)
        log = folder / EVENTS_FILE
        if segments.has_segments(log) and (folder / "session.json").exists():
            self.events = read_event_log(log)
            started = next((e for e in self.events if isinstance(e, SessionStarted)), None)
            self.arms: list[ArmSpec] = list(started.arms) if started is not None else []
        else:
            session = load_session(folder)
            self.events = build_events(session)
            self.arms = session.arms
        if not self.events:
            raise UsageError(f"{folder}: no events recorded; nothing to replay")
        self.speed = speed
        self.out_dir: Optional[Path] = folder
        self.mode_label = f"replay ×{speed:g}"
        self.stop_reason: Optional[str] = None
        self._emit: Emit = lambda e: None
        self._resume = asyncio.Event()
        self._resume.set()
        self._skip = False
        self._now = self.events[0].ts if self.events else 0.0  # recorded time of the last event played

    def mark(self, label: str) -> None:
        """Shown, not written: a replay never modifies the recording. Stamped with the recording's clock."""
        self._emit(Marker(label=label, ts=self._now))

    def pause_ramp(self) -> bool:
        self._resume.clear()
        return True

    def resume_ramp(self) -> bool:
        self._resume.set()
        return True

    def skip_level(self) -> bool:
        self._skip = True
        self._resume.set()
        return True

    async def run(self, emit: Emit, stop: asyncio.Event) -> str:
        self._emit = emit
        loop = asyncio.get_running_loop()
        if not self.events:
            return "empty recording"
        t0 = self.events[0].ts
        offset = 0.0  # recorded seconds skipped by pauses and level skips
        start = loop.time()
        for i, ev in enumerate(self.events):
            if self._skip and not isinstance(ev, LevelStarted):
                self._now = ev.ts
                emit(ev)  # fast-forward to the next level's start
                continue
            if self._skip:
                self._skip = False
                offset = (ev.ts - t0) - (loop.time() - start) * self.speed
            delay = ((ev.ts - t0) - offset) / self.speed - (loop.time() - start)
            if delay > 0 and await _wait(stop, delay):
                return "stopped"
            if not self._resume.is_set():
                paused_at = loop.time()
                waiter = asyncio.ensure_future(self._resume.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
                if stop.is_set():
                    return "stopped"
                offset -= (loop.time() - paused_at) * self.speed
                if self._skip:
                    if not isinstance(ev, LevelStarted):
                        emit(ev)
                        continue
                    self._skip = False
                    offset = (ev.ts - t0) - (loop.time() - start) * self.speed
            if stop.is_set():
                return "stopped"
            self._now = ev.ts
            emit(ev)
        return "replay finished"


async def _wait(stop: asyncio.Event, delay: float) -> bool:
    """Sleep `delay` seconds unless `stop` is set first; True when stopped."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=delay)
        return True
    except asyncio.TimeoutError:
        return False
