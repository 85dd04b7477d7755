"""The operator's first hour in the TUI: the detail view's log follows new lines, ctrl+c quits
(asking first while a ramp runs), a flat history is a low line, marks that do not collide, and
the title says specmon once. Driven by replays of recorded sim sessions and events emitted
through the app's own entry point (SpecmonApp.emit), as a live session emits them."""

from __future__ import annotations

import sys
from pathlib import Path

from specmon.model import LogLine
from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.chart import ARM_GLYPHS, QUEUE_MARK, spark_rows
from specmon.tui.screens import ArmDetailScreen
from specmon.tui.widgets.log_pane import LogPane
from specmon.tui.widgets.status_bar import StatusBar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.pilots import screen_text, wait_for, wait_replay_end  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"


def _app(name: str = "session_sim_1arm", title: str = "t") -> SpecmonApp:
    return SpecmonApp(ReplaySource(DATA / name, speed=1e9), title)


async def test_detail_log_follows_new_lines():
    app = _app()
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_replay_end(pilot)
        arm = app.state.arm_names()[0]
        for i in range(60):  # a server's first lines, before the detail view opens
            app.emit(LogLine(arm=arm, line=f"startup line {i}"))
        await pilot.pause()
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, ArmDetailScreen), what="detail view")
        await pilot.pause()
        pane = app.screen.query_one(LogPane)
        for batch in range(3):  # then more arrive, a tick's worth at a time
            for i in range(15):
                app.emit(LogLine(arm=arm, line=f"later {batch}.{i}"))
            await pilot.pause()
            await pilot.pause()
            assert pane.max_scroll_y > 0
            assert pane.scroll_offset.y == pane.max_scroll_y, (batch, pane.scroll_offset.y, pane.max_scroll_y)
        shown = [pane.lines[y] for y in range(pane.scroll_offset.y, len(pane.lines))]
        assert shown[-1] == "later 2.14"
        # scrolled up, it stays put while lines arrive; back at the end it follows again
        pane.scroll_to(y=0, animate=False, immediate=True)
        app.emit(LogLine(arm=arm, line="while reading"))
        await pilot.pause()
        await pilot.pause()
        assert pane.scroll_offset.y == 0
        pane.scroll_end(animate=False, immediate=True)
        await pilot.pause()
        app.emit(LogLine(arm=arm, line="after reading"))
        await pilot.pause()
        await pilot.pause()
        assert pane.scroll_offset.y == pane.max_scroll_y
        assert pane.lines[-1] == "after reading"


async def test_ctrl_c_quits_when_no_ramp_runs():
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_replay_end(pilot)
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: not app.is_running, timeout=10, what="the app to quit")
    assert app.return_value == app.exit_reason or app.return_value is not None


async def test_ctrl_c_asks_first_while_a_ramp_runs():
    # A 15 s recording played at its own pace, held paused once its ramp started: a ramp started
    # and not finished, the session running.
    src = ReplaySource(DATA / "session_sim_1arm", speed=1.0)
    app = SpecmonApp(src, "t")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.state.ramp_started, what="the ramp to start")
        src.pause_ramp()
        await pilot.pause()
        assert app.ramp_running()
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.is_running, "one ctrl+c during a ramp only asks"
        assert any("ctrl+c again" in str(n.message) for n in app._notifications)
        src.resume_ramp()
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: not app.is_running, timeout=15, what="the second ctrl+c to quit")


async def test_help_names_every_way_out():
    app = _app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_replay_end(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        svg = app.export_screenshot()
        assert "ctrl+q" in svg and "ctrl+c" in svg
        box = app.screen.query_one("#help-box")
        # taller than 24 rows: the box says it scrolls, on its border (always in view)
        assert box.max_scroll_y > 0 and "scroll" in str(box.border_subtitle)


def test_flat_history_is_a_low_line():
    assert spark_rows([0.8] * 10, 10) == ["▁" * 10]
    assert spark_rows([0.8] * 10, 10, lo=0.0) == ["▁" * 10]
    rows = spark_rows([2.0] * 4, 4, height=3)
    assert rows[-1] == "▁" * 4 and rows[0] == rows[1] == " " * 4
    assert spark_rows([0.0] * 5, 5) == [" " * 5]  # nothing at all
    assert spark_rows([1.0, 2.0], 2) == ["▄█"]  # a changing one keeps its scale


def test_queue_mark_is_no_arm_glyph():
    assert QUEUE_MARK not in ARM_GLYPHS


async def test_title_says_specmon_once():
    app = _app(title="specmon demo")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_replay_end(pilot)
        line = str(app.query_one(StatusBar).render())
        assert "specmon demo" in line and "specmon specmon" not in line


# ---------------------------------------------------------------------------------------------
# Every view at 80x24 and 160x48: the newest level in view, a word for what is hidden

import csv  # noqa: E402
import re  # noqa: E402

import pytest  # noqa: E402


def _newest(name: str) -> tuple[int, list[str]]:
    rows = list(csv.DictReader(open(DATA / name / "levels.csv")))
    last = max(int(r["level"]) for r in rows)
    return last, [r for r in rows if int(r["level"]) == last]


def _shows_level(screen: str, rows) -> bool:
    return all(re.search(rf"{re.escape(r['arm'])}\s+{r['offered_concurrency']}\s", screen) for r in rows)


# Each recording at one size, and the two longest level tables (the demo's, the fleet's: eight
# rows a level) at both: the views that cut or scroll the table are each met at each size.
@pytest.mark.parametrize("name, size", [("session_sim_1arm", (160, 48)), ("session_sim_3arm", (80, 24)),
                                        ("session_demo_2arm", (80, 24)), ("session_demo_2arm", (160, 48)),
                                        ("session_gateway_fleet", (80, 24)), ("session_gateway_fleet", (160, 48))])
async def test_the_newest_level_is_in_every_view(name, size):
    last, rows = _newest(name)
    app = _app(name)
    async with app.run_test(size=size) as pilot:
        await wait_replay_end(pilot, timeout=12.0, every=0.02)
        await pilot.pause(0.1)
        # r again (from the arms, where the table is cut to its tail) at 80x24, where it raced
        for view in ("arms", "r", "r again") if size == (80, 24) else ("arms", "r"):
            if view == "r again":  # back to the arms (the table cut to its tail) and into r again
                await pilot.press("r", "r")
                view = "r"
            elif view == "r":
                await pilot.press("r")
            if view == "r":
                await pilot.pause(0.2)
                await pilot.pause()
            screen = screen_text(app)
            if name == "session_gateway_fleet" and size == (80, 24) and view == "arms":
                # eight rows a level under the fleet table: the newest level's first rows
                assert any(_shows_level(screen, [r]) for r in rows), screen
            else:
                assert _shows_level(screen, rows), (view, screen)
            if view == "r":  # the whole table scrolls, to its end: its column names stay over it
                assert re.search(r"│ arm\s+C\s", screen), screen
            if last > 0 and view == "arms" and not _shows_level(screen, _newest_rows(name, 0)):
                # an earlier level is hidden: the table says how many, and which key shows them
                assert re.search(r"↑ \d+ earlier levels? · r: every level", screen), screen
        if size == (160, 48) or name != "session_gateway_fleet":
            await pilot.press("r")
            await pilot.pause(0.1)
            await pilot.press("d")  # the detail view's level table: its newest level in view too
            await wait_for(pilot, lambda: isinstance(app.screen, ArmDetailScreen), what="detail view")
            await pilot.pause(0.2)
            arm = app.screen.arm_name
            screen = screen_text(app)
            assert all(re.search(rf"{arm_glyph_of(app, arm)}\s+{r['offered_concurrency']}\s", screen) for r in rows if r["arm"] == arm), screen


async def test_r_keeps_the_newest_level_in_view_until_scrolled_up():
    """r's whole table follows new levels; scrolled up, it stays put; back at its end, it follows."""
    from specmon.model import LevelFinished, LevelResult, LevelStarted
    from specmon.tui.widgets.ramp import LevelScroll

    app = _app("session_sim_3arm")  # 4 levels of 3 arms: more than r's box holds at 80x24
    last, rows = _newest("session_sim_3arm")
    arms = [r["arm"] for r in rows]

    def level(n: int, c: int) -> None:
        app.emit(LevelStarted(level=n, offered_concurrency=c, planned_s=60.0, levels_total=0))
        app.emit(LevelFinished(level=n, results=[LevelResult(arm=a, level=n, offered_concurrency=c, ok=9,
                                                             output_tok_s=500.0) for a in arms]))

    async with app.run_test(size=(80, 24)) as pilot:
        await wait_replay_end(pilot, timeout=12.0, every=0.02)
        scroll = app.query_one(LevelScroll)

        def shows(c: int) -> bool:
            return bool(re.search(rf"{arms[0]}\s+{c}\s", screen_text(app)))

        def at_end_showing(c: int) -> bool:
            return scroll.max_scroll_y > 0 and scroll.scroll_y == scroll.max_scroll_y and shows(c)

        await pilot.press("r")
        await wait_for(pilot, lambda: at_end_showing(int(rows[0]["offered_concurrency"])), what="r at the end")
        level(last + 1, 50)
        await wait_for(pilot, lambda: at_end_showing(50), what="the new level in view")
        await pilot.press("home")  # the operator reads the first levels
        await wait_for(pilot, lambda: scroll.scroll_y == 0, what="the table's top")
        grown = scroll.max_scroll_y
        level(last + 2, 60)
        await wait_for(pilot, lambda: scroll.max_scroll_y > grown, what="the level's rows laid out")
        await pilot.pause(0.3)
        assert scroll.scroll_y == 0 and not shows(60)  # left where the operator put it
        await pilot.press("end")
        level(last + 3, 70)
        await wait_for(pilot, lambda: at_end_showing(70), what="following again from the end")


def _newest_rows(name: str, level: int):
    return [r for r in csv.DictReader(open(DATA / name / "levels.csv")) if int(r["level"]) == level]


def arm_glyph_of(app, arm: str) -> str:
    return re.escape(ARM_GLYPHS[app.state.arm(arm).index % len(ARM_GLYPHS)])


# ---------------------------------------------------------------------------------------------
# One headline knee per arm; k shows every knee; a fleet's worker says its C is the fleet's


async def test_one_headline_knee_per_arm_and_k_for_the_rest():
    app = _app("session_gateway_fleet")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_replay_end(pilot, timeout=12.0, every=0.02)
        await pilot.pause(0.1)
        from specmon.tui.widgets.knee_banner import KneeBanner
        banner = app.query_one(KneeBanner)
        with app.state.lock:
            news = [a for a in app.state.arms.values() if a.knee_news]
            heads = {a.name: a.knees_summary.headline for a in news if a.knees_summary is not None}
        lines = banner.render().plain.splitlines()
        assert len(lines) == len(news) and news  # one line an arm, whatever it knows
        for line in lines:
            assert "k: every knee" in line and "power" not in line and "predicted" not in line
        for name, h in heads.items():
            if h is not None:  # the worker's knee is at the gateway's offered C: said so
                assert f"{h.definition} knee fleet C={h.concurrency:g}" in banner.render().plain
        await pilot.press("k")
        await pilot.pause()
        every = banner.render().plain
        assert "power fleet C=" in every and "k: every knee" not in every
        assert "C=" in every and " C=" not in every.replace("fleet C=", "").replace("C≈", "")
        await pilot.press("k")
        await pilot.pause()
        assert banner.render().plain.splitlines() == lines


def test_a_pane_value_keeps_its_figures_whole():
    from rich.text import Text

    from specmon.tui.widgets.base import whole_parts
    v = Text("██▏  21.7% · 38.0K/175K tok")
    assert whole_parts(v, 40).plain == v.plain
    assert whole_parts(v, 20).plain == "██▏  21.7%"
    assert whole_parts(Text("19.6K/175K"), 6).plain == "19.6K…"


def test_log_lines_drop_the_date_of_their_stamp():
    from specmon.tui.widgets.log_pane import shown
    assert shown("[2026-12-05 11:46:14] Decode batch, #running-req: 1") == "11:46:14 Decode batch, #running-req: 1"
    assert shown("[2026-12-05 11:46:14 TP0] Prefill batch") == "11:46:14 TP0 Prefill batch"
    assert shown("----- specmon: pid 1") == "----- specmon: pid 1"  # no stamp: as written
