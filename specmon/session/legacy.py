"""Folders recorded before the event log: their events rebuilt from the CSVs, once, as a converter.

A folder without events.jsonl has only its CSVs and session.json. `events_of` rebuilds the
events from what was kept: level boundaries from the `level` column of samples.csv, progress
from requests.csv completions, knees from levels.csv's `knee` column and session.json, and each
LevelFinished's knees by the ramp's own function over the levels finished so far. Such events
have no server log lines or host readings. Replay reads them in memory (the folder is never
written); `write_event_log` writes them as the folder's events.jsonl, after which the folder
replays like any other.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Optional

from specmon.analysis.knee import knees_summary
from specmon.model import (
    ArmInfoUpdated, Event, KneeCalled, LevelFinished, LevelProgress, LevelResult, LevelStarted, RampFinished, Sample,
    SamplesTick, SessionEnded, SessionStarted,
)
from specmon.session import codec
from specmon.session.folder import EVENTS_FILE
from specmon.session.recorded import RecordedSession, arm_info, load_session

EPS = 1e-4  # orders a level's start just before its first tick and its end just after its last


def events_of(folder: Path) -> list[Event]:
    """The events of an older folder, rebuilt from its CSVs and session.json."""
    return build_events(load_session(folder))


def write_event_log(folder: Path) -> Path:
    """Write an older folder's rebuilt events as its events.jsonl (ticks as their changes, as a
    live session writes them); refuses a folder that has one."""
    path = Path(folder) / EVENTS_FILE
    if path.exists():
        raise FileExistsError(f"{path}: the folder has an event log already")
    encoder = codec.EventLogEncoder()
    with open(path, "x", encoding="utf-8") as f:
        for e in events_of(folder):
            f.write(encoder.encode(e) + "\n")
    return path


def build_events(rec: RecordedSession) -> list[Event]:
    """The events of a folder recorded before the event log existed, rebuilt from its files."""
    meta = rec.meta
    first_ts = rec.samples[0].ts if rec.samples else float(meta.start_ts or 0.0)
    start = min(first_ts, float(meta.start_ts or first_ts)) - 10 * EPS
    # What the live session said first: its arms (with their URLs) and how it watched them.
    events: list[Event] = [SessionStarted(mode=meta.mode or "ramp", arms=list(rec.arms), interval_s=meta.interval_s,
                                          ts=start)]
    for spec in rec.arms:
        a = meta.arm(spec.name)
        info = arm_info(a.server_args, a.time_scale) if a is not None else None
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
