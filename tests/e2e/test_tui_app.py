"""Pilot tests of the Textual app: driven by a replay of recorded sim sessions, and live by
LiveSession against real `specmon sim` processes (1 and 3 arms). Asserts on the sequence of
app messages (message_hook) and on what the panes render."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


from specmon.model import ArmSpec, RampPlan
from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.status_bar import StatusBar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.pilots import wait_for  # noqa: E402
from helpers.simproc import start_sim  # noqa: E402
from helpers.tui_app import event_kinds


# ---------------------------------------------------------------------------------------------
# Live: LiveSession against real sim processes


async def test_live_one_arm_with_ramp(tmp_path):
    from specmon.session.ramp import RampDriver
    from specmon.session.live import LiveSession

    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=20, timeout=90) as sim:
        arms = [ArmSpec(name="fp8-mtp", url=sim.url)]
        plan = RampPlan(levels=[2, 4], input_len=512, output_len=64, level_duration_s=20.0, settle_s=2.0)
        live = LiveSession(arms, interval=0.3, out_dir=tmp_path / "s", isl=512, osl=64,
                           ramp=RampDriver(arms, plan), mode="ramp")
        app = SpecmonApp(live, "live")
        seen = []
        async with app.run_test(size=(160, 48), message_hook=seen.append) as pilot:
            await wait_for(pilot, lambda: app.state.arm("fp8-mtp").last is not None
                           and app.state.arm("fp8-mtp").last.up, timeout=30, what="arm up")
            await pilot.press("m")
            await pilot.press("enter")  # the default label
            await wait_for(pilot, lambda: app.state.markers, what="marker")
            await wait_for(pilot, lambda: "LevelFinished" in event_kinds(seen), timeout=60, what="a level")
            panel = app.query_one(ArmPanel)
            assert "EAGLE" in panel.part_text("header")
            # a scrape may time out on a busy machine (at a load of 15 on 2 cores every 0.3 s scrape
            # did for over 20 s): some tick shows the pool
            await wait_for(pilot, lambda: "/175K tok" in panel.part_text("kv"), timeout=90, what="KV pane")
            # The accept pane: the gauge labelled as SGLang's last decode window while scrapes carry
            # it (the session's last tick may be a timed-out scrape on a busy machine, so not at its
            # end), and under it the newest level's exact figures from its requests' own counts, as
            # levels.csv has them.
            await wait_for(pilot, lambda: "last decode window" in panel.part_text("accept"), timeout=90,
                           what="accept gauge")
            await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, timeout=90, what="ramp end")
            newest = app.state.arm("fp8-mtp").levels[-1]
            accept = panel.part_text("accept")
            assert f"{newest.label} exact · {newest.accept_length:.2f} tok/step · rate {newest.accept_rate * 100:.0f}%" \
                in accept, accept
            assert newest.accept_hist.split(";")[0] in accept
            # The ramp sent its knees with every level (D3: the power knee is always computed).
            assert app.state.arm("fp8-mtp").knees_summary is not None and app.state.arm("fp8-mtp").knees_summary.power.concurrency in (2, 4, None)
            # A mark on the finished session is still recorded (the recording is closed by now).
            await pilot.press("m")
            await pilot.press("enter")
            await wait_for(pilot, lambda: len([m for m in app.state.markers if m.label.startswith("mark ")]) == 2,
                           what="second marker")
            await pilot.press("q")
        kinds = event_kinds(seen)
        assert kinds.index("LevelStarted") < kinds.index("LevelFinished") < kinds.index("RampFinished")
        assert kinds.index("RampFinished") < kinds.index("SessionEnded") < kinds.index("LiveStopped")
        assert "Marker" in kinds
        rows = list(csv.DictReader(open(tmp_path / "s" / "samples.csv")))
        marks = [(r["arm"], r["marker"]) for r in rows if r["marker"]]
        # mark 1 is the operator's first mark whatever the session noted before it (the ramp marks a
        # simulator that falls behind its speed: on a busy CPU those notes came first and the default
        # label was 'mark 2' or 'mark 3'); mark 2 came after the recording closed.
        assert ("", "mark 1") in marks and ("", "mark 2") in marks, (marks, [(m.label, m.ts) for m in app.state.markers])
        doc = json.loads((tmp_path / "s" / "session.json").read_text())
        assert [m["label"] for m in doc["markers"] if m["label"].startswith("mark ")] == ["mark 1", "mark 2"]
        assert doc["exit_reason"]
        # And the same folder plays back through the same app.
        replay = ReplaySource(tmp_path / "s", speed=1e6)
        assert sum(type(e).__name__ == "LevelFinished" for e in replay.events) == 2


async def test_live_three_arms_attach(tmp_path):
    from specmon.session.live import LiveSession

    profiles = ["fp8-mtp", "nvfp4-mtp", "fp8-nospec"]
    with start_sim("--enable-metrics", "--profile", profiles[0], speed=20, timeout=90) as a, \
         start_sim("--enable-metrics", "--profile", profiles[1], speed=20, timeout=90) as b, \
         start_sim("--enable-metrics", "--profile", profiles[2], speed=20, timeout=90) as c:
        arms = [ArmSpec(name=p, url=s.url) for p, s in zip(profiles, (a, b, c))]
        live = LiveSession(arms, interval=0.3, out_dir=tmp_path / "s", mode="attach")
        app = SpecmonApp(live, "live")
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(pilot, lambda: all(app.state.arm(p).info is not None for p in profiles)
                           and app.state.ticks >= 2, timeout=30, what="three arms answering")
            await pilot.pause(0.2)
            panels = {p.arm_name: p for p in app.query(ArmPanel)}
            assert list(panels) == profiles
            # side by side at 160 columns
            assert len({p.region.y for p in panels.values()}) == 1
            assert "no speculation" in panels["fp8-nospec"].part_text("accept")
            assert "no speculation" not in panels["fp8-mtp"].part_text("accept")
            assert "cap 56" in panels["nvfp4-mtp"].part_text("header")
            assert app.focused is panels["fp8-mtp"]  # the first arm has focus from the start
            await pilot.press("tab")
            assert app.focused is panels["nvfp4-mtp"]
            await pilot.press("tab", "tab")
            assert app.focused is panels["fp8-mtp"]  # wraps around
            await pilot.press("shift+tab")
            assert app.focused is panels["fp8-nospec"]
            await pilot.press("q")
        assert app.return_value  # LiveSession's exit reason
