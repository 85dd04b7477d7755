"""A past window of a Prometheus fleet made into a session folder (`specmon replay --prometheus`).

The readings of PrometheusHistory (sources/promfleet/history.py) (one per step, the same FleetView.read a
live poll makes) become the events a live session of that window would have emitted:
SessionStarted (mode "history"), a Marker naming where the window came from, FleetChanged when
workers appear or leave, a SamplesTick per step (a Sample per worker, the fleet's status), and
SessionEnded. They go through SessionWriter, the one writer of a session folder, so the folder is
read back (ReplaySource, the TUI, samples.csv's columns) like any other. A history has no ramp:
levels.csv stays empty and `specmon report` says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from specmon.analysis.observed import ObservedCurves
from specmon.model import ArmSpec, FleetChanged, Marker, ObservedKneesUpdated, SamplesTick, SessionEnded, SessionStarted
from specmon.session.folder import RecordingError, SessionWriter, public_url
from specmon.sources.promfleet import PrometheusHistory


@dataclass
class HistorySummary:
    out_dir: Path
    steps: int
    workers: int  # workers seen over the window
    rows: int  # worker rows written to samples.csv
    queries: int  # requests made to Prometheus


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


async def record_history(history: PrometheusHistory, out_dir: Path) -> HistorySummary:
    """Write the window into `out_dir`; `history` is prepared (its workers found) by the caller.
    PromQueryError, ValueError and RecordingError pass up."""
    writer = SessionWriter(out_dir)
    arms: dict[str, ArmSpec] = {}
    seen: set[str] = set()
    steps = rows = 0
    curves = ObservedCurves()  # each worker's operating curve over the window, as a live session's
    try:
        writer(SessionStarted(mode="history", arms=[], interval_s=history.step_s, ts=history.start))
        writer(Marker(label=(f"history from Prometheus {public_url(history.url)} {history.selector}: "
                             f"{_iso(history.start)} to {_iso(history.end)}, step {history.step_s:g} s"),
                      ts=history.start))
        async for ts, reading in history.readings():
            now = {w.name: w for w in reading.workers}
            added = [w for name, w in now.items() if name not in arms]
            removed = [name for name in arms if name not in now]
            if added or removed:
                words = []
                if added:
                    words.append(f"{len(added)} joined ({', '.join(w.name for w in added)})")
                if removed:
                    words.append(f"{len(removed)} left ({', '.join(removed)})")
                writer(FleetChanged(fleet=history.name, added=added, removed=removed,
                                    note=f"{history.name}: " + "; ".join(words), ts=ts))
            arms = now
            seen.update(now)
            samples = [reading.samples[name] for name in now if name in reading.samples]
            writer(SamplesTick(samples=samples, fleets=[reading.status], ts=ts))
            for s in samples:
                curves.add(s, interval_s=history.step_s)
            steps += 1
            rows += len(samples)
            if writer.error is not None:
                raise RecordingError(writer.error)
        if curves.curves:
            writer(ObservedKneesUpdated(knees=curves.knees(), ts=history.end))
        writer(SessionEnded(reason=f"history of {_iso(history.start)} to {_iso(history.end)} rebuilt from Prometheus",
                            ts=history.end))
    finally:
        writer.close()
    if writer.error is not None:
        raise RecordingError(writer.error)
    return HistorySummary(out_dir=Path(out_dir), steps=steps, workers=len(seen), rows=rows,
                          queries=history.queries)


def no_workers_line(history: PrometheusHistory) -> str:
    """What to say when the window has no worker (exit 2)."""
    return (f"--selector {history.selector}: no SGLang series at {public_url(history.url)} between "
            f"{_iso(history.start)} and {_iso(history.end)} (looked for sglang:num_running_reqs "
            f"and sglang_num_running_reqs)")
