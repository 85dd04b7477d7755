"""Write screenshots/observed-knee.svg: the real app replaying a recorded attach session (a
simulator at speed 5 capped at 12 running requests, loaded from another process by one ramp
to past the cap, 2-24 running, then by a long level at 8: the attach sent nothing), stopped at 8
running after the peak, the queueing gone: the knee, the limit and the room left on the Curve pane.

A recorded folder keeps its observed knees without their curves (events.jsonl), so each
ObservedKneesUpdated of the replay is computed again here by the same analysis the live
session ran (analysis/observed.py), fed the recorded samples before it with the arm's recorded
info and the session's interval: the Curve pane then shows what the live attach showed.

    .venv/bin/python tests/snapshot_apps/observed_knee_shot.py [FRACTION]
    .venv/bin/python tests/snapshot_apps/observed_knee_shot.py --record   # record the session again (~4 min)
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from specmon.analysis.observed import ObservedCurves
from specmon.model import ArmInfoUpdated, ObservedKneesUpdated, SamplesTick, SessionStarted
from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp

REPO = Path(__file__).resolve().parent.parent.parent
SESSION = "session_observed_knee"
FRACTION = 0.95  # of the recorded ticks: back at 8 running after the peak, the queueing gone


def with_curves(src: ReplaySource, fraction: float) -> None:
    """Cut the replay at `fraction` of its ticks (just after a knee update) and give its knee
    updates their curves, computed from the samples recorded before each."""
    ticks = [i for i, e in enumerate(src.events) if isinstance(e, SamplesTick)]
    cut = ticks[int(len(ticks) * fraction)]
    updates = [i for i, e in enumerate(src.events) if isinstance(e, ObservedKneesUpdated) and i > cut]
    end = updates[0] if updates else len(src.events) - 1
    curves, infos, interval = ObservedCurves(), {}, 1.0
    events = []
    for e in src.events[:end + 1]:
        if isinstance(e, SessionStarted) and e.interval_s:
            interval = e.interval_s
        elif isinstance(e, ArmInfoUpdated):
            infos[e.arm] = e.info
        elif isinstance(e, SamplesTick):
            for s in e.samples:
                curves.add(s, infos.get(s.arm), interval)
        elif isinstance(e, ObservedKneesUpdated):
            e = ObservedKneesUpdated(knees=curves.knees(), ts=e.ts)
        events.append(e)
    src.events = events


def record(out: Path) -> None:
    """Record tests/data/session_observed_knee again: the attach, watching the two ramps."""
    import shutil
    import signal
    import subprocess
    import tempfile
    import time

    sys.path.insert(0, str(REPO / "tests"))
    from helpers.simproc import start_sim

    tmp = Path(tempfile.mkdtemp())
    with start_sim("--enable-metrics", "--profile", "fp8-nospec", "--max-running-requests", "12", speed=5.0) as sim:
        att = subprocess.Popen([sys.executable, "-m", "specmon", "attach", sim.url, "--headless", "--interval", "0.5",
                                "--duration", "900", "--out", str(tmp / "attach")], cwd=str(REPO),
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        time.sleep(8)
        for i, (levels, duration) in enumerate([("2,4,8,12,16,24", "100"), ("8", "200")]):
            subprocess.run([sys.executable, "-m", "specmon", "ramp", sim.url, "--levels", levels, "--input-len", "512",
                            "--output-len", "256", "--level-duration", duration, "--settle", "5", "--headless",
                            "--out", str(tmp / f"ramp{i}")], cwd=str(REPO), check=True, capture_output=True)
        time.sleep(2)
        att.send_signal(signal.SIGINT)
        att.wait(60)
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(tmp / "attach", out)


async def shoot(fraction: float = FRACTION, size=(160, 48), keys: str = "d") -> Path:
    src = ReplaySource(REPO / "tests" / "data" / SESSION, speed=1e9)
    with_curves(src, fraction)
    src.out_dir = Path("tests/data") / SESSION
    app = SpecmonApp(src, title=f"replay {SESSION}")
    async with app.run_test(size=size) as pilot:
        for _ in range(200):
            if app.query_one("StatusBar").stopped is not None:
                break
            await pilot.pause(0.02)
        app.query_one("StatusBar").stopped = None  # a still of a running session
        app.query_one("StatusBar").refresh()
        for key in keys:  # d: the arm's detail view, its Curve pane the width of the screen
            await pilot.press(key)
            await pilot.pause(0.2)
        await pilot.pause(0.2)
        out = REPO / "screenshots"
        out.mkdir(exist_ok=True)
        return Path(app.save_screenshot(filename="observed-knee.svg", path=str(out)))


if __name__ == "__main__":
    if sys.argv[1:] == ["--record"]:
        record(REPO / "tests" / "data" / SESSION)
    else:
        print(asyncio.run(shoot(float(sys.argv[1]) if len(sys.argv) > 1 else FRACTION)))
