"""tests/data/session_gateway_fleet, a real ramp through the real smg gateway (three workers, four
more joining at the third level; tests/snapshot_apps/record_gateway_fleet.py), replays: through
ReplaySource as it was recorded, headless, and in the app (the gateway's panels at first, the
fleet table of seven once they joined)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from specmon.model import FleetChanged, LevelFinished, SamplesTick, SessionStarted
from specmon.session.replay import ReplaySource

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "tests" / "data" / "session_gateway_fleet"


def test_the_recording_replays_as_it_was_recorded():
    src = ReplaySource(FOLDER)
    assert isinstance(src.events[0], SessionStarted) and src.events[0].mode == "ramp"
    joins = [e for e in src.events if isinstance(e, FleetChanged)]
    assert [len(e.added) for e in joins] == [3, 4]
    finished = [e for e in src.events if isinstance(e, LevelFinished)]
    assert [e.level for e in finished] == [0, 1, 2, 3, 4]
    gateway = finished[0].fleets and next(iter(finished[0].fleets))
    assert [len([r for r in e.results if r.worker]) for e in finished] == [3, 3, 7, 7, 7]
    assert all([r.arm for r in e.results if r.worker is None] == [gateway] for e in finished)
    with open(FOLDER / "levels.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["arm"], r["level"], r["worker"]) for r in rows] == [
        (r.arm, str(r.level), r.worker or "") for e in finished for r in e.results]
    meta = json.loads((FOLDER / "session.json").read_text())
    f = meta["fleet_levels"][gateway]
    assert f["first_saturated"] == "127.0.0.1:46537" and f["first_saturated_by"] == "queueing"  # w-small
    dp = [s for e in src.events if isinstance(e, SamplesTick) for s in e.samples if s.arm == "127.0.0.1:46067"]
    assert dp and all(s.ranks is None or len(s.ranks) == 2 for s in dp) and any(s.ranks for s in dp)


def test_it_replays_headless():
    p = subprocess.run([sys.executable, "-m", "specmon", "replay", str(FOLDER), "--headless", "--speed", "1000"],
                       capture_output=True, text=True, cwd=str(REPO), timeout=120)
    assert p.returncode == 0, p.stderr
    assert "worker 127.0.0.1:46537 saturated first (queueing at C=48)" in p.stdout
    assert "routing imbalance by level: C=6 " in p.stdout
