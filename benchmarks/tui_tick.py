"""What one TUI tick costs, for A/B-ing a drawing change: a recorded 3-arm session replayed
through the real app (SpecmonApp, Textual's pilot, no terminal) and its CPU per tick.

    .venv/bin/python benchmarks/tui_tick.py [--session DIR] [--runs 5] [--speed 10] [--size 160x48]
                                            [--record 70] [--profile]

Without --session it first records one: three `specmon sim` arms (ui_cost.py's profiles, each
kept busy by 3 closed-loop streams so every tick brings new figures) attached headless for
--record seconds. Each run replays that folder at --speed recorded seconds a wall second, and
takes this process's CPU (user + system) from the 5th tick to the last: the app's handling of
every event, the panels' lines, Textual's compositor, all but the terminal. --profile runs
cProfile over one more replay and prints specmon's own functions by cumulative time.

Why beside ui_cost.py: ui_cost measures the real process in a real terminal over 60 s at 1 Hz
(the figure of record), where a change worth 5% of a tick is inside the spread of its runs.
Here the same recorded ticks are drawn every run: runs still spread (10-16 ms a tick on this
machine), so alternate the two builds and compare medians. Measured 2026-12-02 (the shared
2-core machine, a 67-tick recording, --speed 10, before this script existed in this form):
12.3 ms a tick with tui/chart.py's spark_rows at 42 us a call against 13.1 ms with it at 82 us
(the means of three alternating pairs of two runs each).

SPECMON_TEXTUAL_PUBLIC (specmon/tui/textual_private.py) measures specmon's reaches into Textual's
internals: =1 runs Textual's public API only, a list of parts turns off just those. Measured
2026-12-05 on the shared 2-core machine (load ~6-8), a 45 s recording, one run per setting,
settings alternated, two rounds (ms of CPU a tick): all fast 8.15/8.70; public only 15.27/15.78;
public styles 12.07/15.09; public rows 9.13/8.80; public repaint 8.45/9.80; public lines
8.78/8.96; public text 8.42/7.84. Three more rounds of the small ones (none, text, rows, lines,
repaint): medians of all five runs 8.49, 8.44, 9.59, 8.96, 9.50: the lines and text fast paths
were dropped (within the spread), the other three kept.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from ui_cost import PROFILES_3, SPECMON, keep_busy, sims  # noqa: E402

FROM_TICK = 5  # the ticks before it (start-up, first layout) are not counted


def record(seconds: float, out: Path) -> None:
    stop = threading.Event()
    with ExitStack() as stack:
        stack.callback(stop.set)
        urls = sims(stack, PROFILES_3, 1.0)
        keep_busy(urls, stop, 3)
        time.sleep(2.0)
        cmd = [*SPECMON, "attach", *urls, "--interval", "1", "--headless", "--duration", f"{seconds:g}",
               "--out", str(out)]
        subprocess.run(cmd, cwd=str(REPO), check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)


async def replay(folder: Path, speed: float, size: tuple[int, int],
                 prof: cProfile.Profile | None = None) -> tuple[float, int]:
    """(CPU ms per tick from FROM_TICK on, the ticks counted) for one replay of the folder."""
    from specmon.session.replay import ReplaySource
    from specmon.tui.app import SpecmonApp

    ticks = [0]
    start = [0.0]
    stopped = asyncio.Event()

    class Counted(SpecmonApp):
        # Textual calls every class's handler in turn: SpecmonApp.on_tick still draws the tick
        async def on_tick(self, m) -> None:
            ticks[0] += 1
            if ticks[0] == FROM_TICK:
                start[0] = time.process_time()
                if prof is not None:
                    prof.enable()

        def on_live_stopped(self, m) -> None:  # the replay played its last event
            stopped.set()

    app = Counted(ReplaySource(folder, speed=speed), "tui_tick")
    async with app.run_test(size=size):
        await stopped.wait()
        end = time.process_time()
        if prof is not None:
            prof.disable()
    counted = ticks[0] - FROM_TICK + 1  # the clock starts before tick FROM_TICK is drawn
    if counted < 10:
        raise SystemExit(f"{folder}: only {ticks[0]} ticks replayed; record longer (--record)")
    return (end - start[0]) / counted * 1000, counted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--session", type=Path, help="a recorded session folder (default: record one)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--speed", type=float, default=10.0, help="recorded seconds replayed a wall second")
    ap.add_argument("--size", default="160x48")
    ap.add_argument("--record", type=float, default=70.0, help="seconds to record when no --session")
    ap.add_argument("--profile", action="store_true", help="also cProfile one replay")
    a = ap.parse_args()
    try:
        size = tuple(int(x) for x in a.size.lower().split("x"))
        assert len(size) == 2
    except (ValueError, AssertionError):
        print(f"--size: expected COLSxROWS (e.g. 160x48), got {a.size!r}", file=sys.stderr)
        return 2
    if a.runs < 1:
        print(f"--runs: expected a count >= 1, got {a.runs}", file=sys.stderr)
        return 2
    folder = a.session
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="specmon-tui-tick-")) / "rec-3arm"
        print(f"recording {a.record:g} s of 3 busy simulated arms into {folder}", flush=True)
        record(a.record, folder)
    elif not (folder / "session.json").exists():
        print(f"--session: {folder} is not a session folder (no session.json)", file=sys.stderr)
        return 2
    got = []
    for k in range(a.runs):
        ms, n = asyncio.run(replay(folder, a.speed, size))
        got.append(ms)
        print(f"run {k + 1}: {ms:.2f} ms of CPU a tick over {n} ticks", flush=True)
    print(f"median {statistics.median(got):.2f} ms a tick (min {min(got):.2f}, max {max(got):.2f}), "
          f"{a.size} at --speed {a.speed:g}")
    if a.profile:
        prof = cProfile.Profile()
        asyncio.run(replay(folder, a.speed, size, prof))
        pstats.Stats(prof).sort_stats("cumulative").print_stats("specmon", 30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
