"""Play a recorded session folder back as the Events the live session emitted.

`ReplaySource(dir, speed)` has the LiveSession's `run(emit, stop)` shape, so the TUI and the
headless printer play it unchanged (Dolphie's record/replay through the same panels). What the
recorder did not keep is rebuilt from what it did: level boundaries from the `level` column of
samples.csv, progress from requests.csv completions, knees from levels.csv's `knee` column and
session.json's `predicted_knees`, and each LevelFinished's knees summary by the ramp's own
function (analysis.knee.knees_summary) over the levels.csv rows finished so far, with the SLOs
of session.json's ramp_plan (session.json keeps only the last level's summary). Host GPU snapshots and server log lines are not recorded, so
a replay has neither.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Optional

from specmon.analysis.knee import knees_summary
from specmon.errors import UsageError
from specmon.model import (
    ArmInfo, ArmInfoUpdated, ArmSpec, Event, GpuProcess, GpuReading, GpuSnapshot, KneeCalled, LevelFinished, LevelProgress, LevelResult,
    LevelStarted, Marker, RampFinished, Sample, SamplesTick, SessionEnded,
)

Emit = Callable[[Event], None]
EPS = 1e-4  # orders a level's start just before its first tick and its end just after its last


# --------------------------------------------------------------------------------------------
# Reading the folder


def _parser(annotation: str) -> Callable[[str], Any]:
    """A cell parser from the dataclass field's annotation (a string under `from __future__`)."""
    if "bool" in annotation:
        return lambda v: v.strip().lower() in ("1", "true", "yes")
    if "int" in annotation:
        return lambda v: int(float(v))
    if "float" in annotation:
        return float
    return str


def _from_row(cls: type, row: dict[str, str], where: str) -> Any:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in row or row[f.name] is None:
            continue
        cell = row[f.name].strip()
        if cell == "":
            continue  # unknown stays unknown (the field's default, None for every measurement)
        try:
            kwargs[f.name] = _parser(str(f.type))(cell)
        except ValueError:
            raise UsageError(f"{where}: column {f.name!r}: expected a {f.type} value, got {cell!r}")
    return cls(**kwargs)


def _read_csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise UsageError(f"{path}: missing column(s) {', '.join(missing)}; expected a specmon session CSV")
        return list(reader)


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
    meta: dict
    arms: list[ArmSpec]
    samples: list[Sample]
    markers: list[Marker]
    levels: list[LevelResult]
    request_ends: dict[tuple[str, int], list[float]]  # (arm, level) -> sorted completion times
    gpus: dict[float, GpuSnapshot] = dataclasses.field(default_factory=dict)  # tick ts -> every GPU then


def load_session(path: Path) -> RecordedSession:
    path = Path(path)
    meta_path = path / "session.json"
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory; expected a specmon session folder")
    if not meta_path.exists():
        raise UsageError(f"{meta_path}: missing; expected a specmon session folder (session.json, samples.csv)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"{meta_path}: not valid JSON ({e})")
    if not isinstance(meta, dict):
        raise UsageError(f"{meta_path}: expected a JSON object")

    samples: list[Sample] = []
    markers: list[Marker] = []
    rows = _read_csv(path / "samples.csv", ("ts", "arm"))
    for i, row in enumerate(rows, start=2):
        where = f"{path / 'samples.csv'}:{i}"
        if not (row.get("arm") or "").strip():
            if (row.get("marker") or "").strip():
                markers.append(Marker(label=row["marker"], ts=float(row["ts"])))
            continue
        samples.append(_from_row(Sample, row, where))

    levels = [_from_row(LevelResult, row, f"{path / 'levels.csv'}:{i}")
              for i, row in enumerate(_read_csv(path / "levels.csv", ("arm", "offered_concurrency")), start=2)]
    plan_levels = list((meta.get("ramp_plan") or {}).get("levels") or [])
    for r in levels:  # older rows without a `level` cell: place them by their concurrency
        if r.level is None and r.offered_concurrency in plan_levels:
            r.level = plan_levels.index(r.offered_concurrency)

    # Client durations were recorded in the arm's time (x time_scale for a sped-up sim): back to wall.
    scales = {a.get("name"): float(a.get("time_scale") or 1.0)
              for a in meta.get("arms") or [] if isinstance(a, dict)}
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

    arms = []
    for a in meta.get("arms") or []:
        if isinstance(a, dict) and a.get("name"):
            arms.append(ArmSpec(name=a["name"], url=a.get("url") or "", launched=bool(a.get("launched"))))
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
    if not path.exists():
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
                       temp_c=_opt(row, "temp_c", float, where))
        procs = row.get("processes") or ""
        g.processes = None if not procs else [] if procs == "-" else [
            GpuProcess(pid=int(pid), name=None, used_bytes=int(used) if used else None)
            for pid, _, used in (x.partition(":") for x in procs.split(";"))]
        snaps.setdefault(ts, GpuSnapshot(ts=ts, available=True)).gpus.append(g)
    return snaps


# --------------------------------------------------------------------------------------------
# Rebuilding the event stream


def build_events(rec: RecordedSession) -> list[Event]:
    meta = rec.meta
    first_ts = rec.samples[0].ts if rec.samples else float(meta.get("start_ts") or 0.0)
    start = min(first_ts, float(meta.get("start_ts") or first_ts)) - 10 * EPS
    events: list[Event] = []

    arm_meta = {a.get("name"): a for a in meta.get("arms") or [] if isinstance(a, dict)}
    for spec in rec.arms:
        info = _arm_info((arm_meta.get(spec.name) or {}).get("server_args"),
                         (arm_meta.get(spec.name) or {}).get("time_scale"))
        if info is not None:
            events.append(ArmInfoUpdated(arm=spec.name, info=info, ts=start))
    for name, k in (meta.get("predicted_knees") or {}).items():
        if isinstance(k, dict):
            events.append(KneeCalled(arm=name, definition="predicted", concurrency=k.get("concurrency"),
                                     detail=k.get("detail") or "", ts=start))

    # Ticks: the recorder writes one row per arm per tick, in order; a tick ends where an arm repeats.
    ticks: list[list[Sample]] = []
    for s in rec.samples:
        if not ticks or any(x.arm == s.arm for x in ticks[-1]):
            ticks.append([])
        ticks[-1].append(s)

    plan = meta.get("ramp_plan") or {}
    # The ramp reports level time in the arms' time (the sim's --speed), as LevelProgress did live.
    scale = max([float(a.get("time_scale") or 1.0) for a in arm_meta.values()] or [1.0])
    planned_s = plan.get("level_duration_s")
    levels_total = len(plan.get("levels") or []) or None
    results_by_level: dict[int, list[LevelResult]] = defaultdict(list)
    for r in rec.levels:
        if r.level is not None:
            results_by_level[r.level].append(r)
    if levels_total is None and results_by_level:
        levels_total = max(results_by_level) + 1

    recorded_knees = meta.get("knees") or {}
    finished: dict[str, list[LevelResult]] = defaultdict(list)

    def summary(arm: str) -> dict:
        args = (arm_meta.get(arm) or {}).get("server_args") or {}
        return knees_summary(finished[arm], args.get("kv_capacity_tokens"), plan.get("input_len") or 0,
                             plan.get("output_len") or 0, args.get("max_running_requests"),
                             slo_ttft_s=plan.get("slo_ttft_s"), slo_tpot_s=plan.get("slo_tpot_s"))

    def finish(level: int, ts: float) -> None:
        results = results_by_level.pop(level, [])
        for r in results:
            finished[r.arm].append(r)
        knees = {r.arm: summary(r.arm) for r in results}
        events.append(LevelFinished(level=level, results=results, knees=knees, ts=ts))
        for r in results:
            # session.json has every definition confirmed at this level with its knee (the level
            # that still paid, not the confirming one); levels.csv labels only the first.
            k = recorded_knees.get(r.arm) or {}
            calls = [(d, k.get(d), k.get(f"{d}_detail")) for d in ("plateau", "queueing")
                     if k.get(f"{d}_confirmed_at_level") == level]
            if not calls and r.knee:  # older sessions: only the label
                calls = [(r.knee, r.offered_concurrency, f"confirmed at level {level + 1}")]
            for definition, concurrency, detail in calls:
                resolved = None
                if definition == "plateau":  # recorded since plateau_resolved existed, else recomputed
                    resolved = k["plateau_resolved"] if "plateau_resolved" in k else knees[r.arm].get("plateau_resolved")
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
    end_ts = max(float(meta.get("end_ts") or last_ts), last_ts) + 3 * EPS
    events.append(SessionEnded(reason=meta.get("exit_reason") or "recording ended", ts=end_ts))
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
        self.session = load_session(Path(session_dir))
        self.events = build_events(self.session)
        self.speed = speed
        self.arms = self.session.arms
        self.out_dir = self.session.path
        self.mode_label = f"replay ×{speed:g}"
        self._emit: Emit = lambda e: None
        self._resume = asyncio.Event()
        self._resume.set()
        self._skip = False
        self._now = self.events[0].ts if self.events else 0.0  # recorded time of the last event played

    def mark(self, label: str) -> None:
        """Shown, not written: a replay never modifies the recording. Stamped with the recording's clock."""
        self._emit(Marker(label=label, ts=self._now))

    def pause_ramp(self) -> None:
        self._resume.clear()

    def resume_ramp(self) -> None:
        self._resume.set()

    def skip_level(self) -> None:
        self._skip = True
        self._resume.set()

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
