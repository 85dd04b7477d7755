"""A real `specmon attach --rotate` against simulated workers: segments closed by age and
compressed while it runs, replayed in order, and a kill -9 losing no tick."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from helpers.simproc import REPO, start_sim

from specmon.model import SamplesTick
from specmon.session import segments
from specmon.session.folder import EVENTS_FILE
from specmon.session.recorded import load_session
from specmon.session.replay import ReplaySource, read_event_log


def _attach(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "specmon", "attach", *args], cwd=str(REPO),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_attach_rotates_by_age_compresses_and_replays_every_tick_in_order(tmp_path):
    out = tmp_path / "s"
    with start_sim("--enable-metrics", speed=20.0) as sim:
        p = _attach("--name", f"a={sim.url}", "--name", f"b={sim.url}", "--no-discover", "--headless", "--interval", "0.2", "--duration", "7",
                    "--rotate", "2s", "--out", str(out))
        _, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    closed = segments.closed_segments(out, EVENTS_FILE)
    assert len(closed) >= 2, sorted(x.name for x in out.iterdir())
    assert all(x.name.endswith(".gz") for name in segments.ROTATED_FILES
               for x in segments.closed_segments(out, name).values())
    events = read_event_log(out / EVENTS_FILE)
    ticks = [e for e in events if isinstance(e, SamplesTick)]
    assert [t.ts for t in ticks] == sorted(t.ts for t in ticks) and len(ticks) >= 15
    # samples.csv's segments hold every tick's rows, in the same order
    rows = load_session(out).samples
    assert [(round(s.ts, 3), s.arm) for s in rows] == [(round(s.ts, 3), s.arm) for t in ticks for s in t.samples]
    assert ReplaySource(out, speed=1e9).events == events


def test_kill_9_after_rotations_loses_no_tick(tmp_path):
    out = tmp_path / "s"
    with start_sim("--enable-metrics", speed=20.0) as sim:
        p = _attach(sim.url, "--headless", "--interval", "0.2", "--rotate", "1s", "--out", str(out))
        deadline = time.monotonic() + 60
        while len(segments.closed_segments(out, EVENTS_FILE)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    assert len(segments.closed_segments(out, EVENTS_FILE)) >= 3
    events = read_event_log(out / EVENTS_FILE)
    ticks = [e for e in events if isinstance(e, SamplesTick)]
    rows = load_session(out).samples
    # every tick in the event log has its rows in samples.csv's segments, and the other way round
    # (at most the one tick being written when the kill came differs)
    assert abs(len(rows) - sum(len(t.samples) for t in ticks)) <= 1
    assert len(ticks) >= 10
