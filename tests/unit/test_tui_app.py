"""Pilot tests of the Textual app: driven by a replay of recorded sim sessions, and live by
LiveSession against real `specmon sim` processes (1 and 3 arms). Asserts on the sequence of
app messages (message_hook) and on what the panes render."""

from __future__ import annotations

import csv
import shutil
import sys
from pathlib import Path

import pytest

from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.screens import ArmDetailScreen, HelpScreen, PromptScreen
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.ramp import LevelTable, LevelTableHeader, RampProgress
from specmon.tui.widgets.status_bar import StatusBar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.pilots import wait_for  # noqa: E402
from helpers.sim_gpu import text, wait_for
from helpers.tui_app import event_kinds

DATA = Path(__file__).resolve().parents[1] / "data"


def copy_session(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(DATA / name, dst)
    return dst


# ---------------------------------------------------------------------------------------------
# Replay of recorded sim sessions


async def test_replay_three_arms_messages_and_panes(tmp_path):
    folder = copy_session("session_sim_3arm", tmp_path)
    levels = list(csv.DictReader(open(folder / "levels.csv")))
    src = ReplaySource(folder, speed=1e6)
    app = SpecmonApp(src, "t")
    seen = []
    async with app.run_test(size=(160, 48), message_hook=seen.append) as pilot:
        await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, what="replay end")
        await pilot.pause()
        kinds = event_kinds(seen)
        # Ramp structure in order: each level starts before it finishes; the session ends last.
        starts = [i for i, k in enumerate(kinds) if k == "LevelStarted"]
        ends = [i for i, k in enumerate(kinds) if k == "LevelFinished"]
        assert len(starts) == len(ends) == len({r["level"] for r in levels}) == 4
        assert all(s < e for s, e in zip(starts, ends))
        assert all(e < s for e, s in zip(ends, starts[1:]))
        assert kinds.index("RampFinished") > ends[-1]
        assert kinds[-2:] == ["SessionEnded", "LiveStopped"]
        assert 1 <= kinds.count("SamplesTick") <= sum(1 for e in src.events if type(e).__name__ == "SamplesTick")
        assert kinds.count("ArmInfoUpdated") == 3

        panels = list(app.query(ArmPanel))
        assert [p.arm_name for p in panels] == ["fp8-mtp", "nvfp4-mtp", "fp8-nospec"]
        accept = {p.arm_name: p.part_text("accept") for p in panels}
        assert "no speculation" in accept["fp8-nospec"]
        assert "tok/step" in accept["fp8-mtp"] or "—" in accept["fp8-mtp"]
        assert "0 tok" not in accept["fp8-nospec"]
        kv = panels[0].part_text("kv")
        assert "/175K tok" in kv

        table = text(app.query_one(LevelTable))
        assert text(app.query_one(LevelTableHeader)).split()[:2] == ["arm", "C"]  # over the rows, not among them
        assert not table.splitlines()[0].startswith("arm")
        for r in levels:  # every recorded (arm, level) row is in the table with its numbers
            assert any(line.split()[1] == r["arm"] and line.split()[2] == r["offered_concurrency"]
                       for line in table.splitlines() if len(line.split()) > 3), r
        first = next(r for r in levels if r["arm"] == "fp8-mtp")
        assert f"{first['ok']}/{first['failed']}" in table
        assert "level 4/4" in text(app.query_one(RampProgress))


async def test_replay_keys(tmp_path):
    folder = copy_session("session_sim_1arm", tmp_path)
    src = ReplaySource(folder, speed=0.5)  # slow enough that the keys land mid-replay
    app = SpecmonApp(src, "t")
    seen = []
    async with app.run_test(size=(120, 40), message_hook=seen.append) as pilot:
        await wait_for(pilot, lambda: app.state.ticks >= 1, what="first tick")
        # m: a prompt; the label arrives as a Marker event
        await pilot.press("m")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*"warm", "enter")
        await wait_for(pilot, lambda: any(m.label == "warm" for m in app.state.markers), what="marker")
        assert "Marker" in event_kinds(seen)
        # s: an SVG screenshot in the session folder
        await pilot.press("s")
        assert list(folder.glob("screenshot-*.svg"))
        # p: display paused (collection continues), then resumed
        await pilot.press("p")
        assert app.display_paused and "DISPLAY PAUSED" in text(app.query_one(StatusBar))
        ticks = app.state.ticks
        await pilot.press("p")
        assert not app.display_paused
        # space: the replay pauses (as the ramp would), space again resumes
        await pilot.press("space")
        assert not src._resume.is_set() and app.ramp_paused
        await pilot.press("space")
        assert src._resume.is_set()
        # ?: help; escape closes it
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        # tab focuses the arm, d opens its detail view, escape goes back
        await pilot.press("tab")
        assert isinstance(app.focused, ArmPanel)
        await pilot.press("d")
        assert isinstance(app.screen, ArmDetailScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, ArmDetailScreen)
        # n: skip to the next level: the replay fast-forwards to the next LevelStarted
        before = event_kinds(seen).count("LevelStarted")
        await pilot.press("n")
        await wait_for(pilot, lambda: event_kinds(seen).count("LevelStarted") > before, timeout=10, what="skip")
        assert app.state.ticks >= ticks
        await pilot.press("q")
    assert app.return_value == "stopped"
    # A replay never writes into the recording (besides the screenshot asked for).
    assert "warm" not in (folder / "samples.csv").read_text()


def test_replay_bad_folder(tmp_path):
    from specmon.errors import UsageError

    with pytest.raises(UsageError, match="session.json"):
        ReplaySource(tmp_path)
    (tmp_path / "session.json").write_text("{not json")
    with pytest.raises(UsageError, match="not valid JSON"):
        ReplaySource(tmp_path)


# ---------------------------------------------------------------------------------------------
# Live: LiveSession against real sim processes


async def test_replay_shows_d3_knees_and_a_plateau_within_the_noise(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "snapshot_apps"))
    import make_session

    from specmon.tui.widgets.knee_banner import KneeBanner

    folder = make_session.write_knees(tmp_path / "k")
    app = SpecmonApp(ReplaySource(folder, speed=1e9), "t")  # end_ts is the real close time
    async with app.run_test(size=(200, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, what="replay end")
        await pilot.pause()
        banner = app.query_one(KneeBanner)
        assert banner.display
        assert "plateau knee C=10 (within the noise)  k: every knee" in text(banner)  # the headline
        await pilot.press("k")
        await pilot.pause()
        line = text(banner)
        assert "plateau C=10 (within the noise)" in line
        assert "power C=10 ·" in line  # confirmed: no '?'
        assert "SLO met to C=20 (TTFT≤2 s, TPOT≤30 ms)" in line and "goodput C=20?" in line
        table = text(app.query_one(LevelTable)).splitlines()
        assert table[-2].endswith("◆ plateau*")
        assert table[-1].startswith("* plateau within the noise")


@pytest.mark.parametrize("width", [160, 130])
async def test_three_arm_headers_are_not_cut(tmp_path, width):
    # 160 columns: each header's two lines fit; 130: each line's items flow onto another line
    # between items (never cut mid-figure with an ellipsis).
    folder = copy_session("session_sim_3arm", tmp_path)
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(width, 48)) as pilot:
        await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, what="replay end")
        await pilot.pause()
        panels = list(app.query(ArmPanel))
        assert len({p.region.y for p in panels}) == 1  # side by side
        for p in panels:
            header = p.part_text("header")
            lines = header.splitlines()
            assert "…" not in header, lines
            assert max(len(x) for x in lines) <= p.size.width
            assert "sim ×20" in header and any("knee≈" in x for x in lines[1:]), lines
            assert len(lines) == (2 if width == 160 else 4), lines
            assert p.size.height == len(p.render().plain.splitlines())  # as tall as the lines it draws


async def test_default_mark_label_counts_only_the_operators_marks(tmp_path):
    # The replayed folder has a recorded marker ("after level 2"); the operator's first mark is still mark 1.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "snapshot_apps"))
    import make_session

    folder = make_session.write(tmp_path / "s", n_arms=1, levels=(4, 8), level_s=3)
    app = SpecmonApp(ReplaySource(folder, speed=1e9), "t")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, what="replay end")
        assert [m.label for m in app.state.markers] == ["after level 2"]
        await pilot.press("m")
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(app.state.markers) == 2, what="marker")
        assert app.state.markers[-1].label == "mark 1"


# ---------------------------------------------------------------------------------------------
# The layout's `panes:` decides what shows


async def test_the_layouts_panes_are_the_panes_shown(tmp_path):
    from specmon.tui.widgets.arm_panel import ArmPanel
    from specmon.tui.widgets.gpu_strip import GpuStrip
    from snapshot_apps import make_session

    folder = make_session.write(tmp_path / "s", n_arms=2, levels=(4, 8), level_s=2, legacy=False)
    # the same session as a layout with `panes: [kv, ttft, levels]` would have recorded it
    log = folder / "events.jsonl"
    lines = log.read_text().splitlines()
    lines[0] = lines[0].replace('"panes":null', '"panes":["kv","ttft","levels"]')
    log.write_text("\n".join(lines) + "\n")
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, what="replay end")
        await pilot.pause()
        panel = app.query(ArmPanel).first()
        assert panel.parts() == ["header", "kv", "ttft"]
        assert "KV" in panel.part_text("kv") and "TTFT" in panel.part_text("ttft") and panel.part_text("gpu") == ""
        assert app.query_one(GpuStrip).display is False
    # without the key everything shows
    lines[0] = lines[0].replace('"panes":["kv","ttft","levels"]', '"panes":null')
    log.write_text("\n".join(lines) + "\n")
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, what="replay end")
        await pilot.pause()
        panel = app.query(ArmPanel).first()
        assert panel.parts() == ["header", "gpu", "kv", "accept", "queue", "throughput", "ttft"]
