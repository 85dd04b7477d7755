"""An arm panel's content rows are put together by ArmPanel.render_lines from the edges Textual
drew for one of its rows (border, padding), and their filtered form with them. Here a recorded
3-arm session is replayed tick by tick through the real app, and after each drawn tick the whole
screen as drawn is compared, segment by segment (text and style), with the same screen drawn
again by Textual's own rendering of every panel row."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.status_bar import StatusBar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.pilots import wait_for  # noqa: E402
import pytest
from specmon.tui import textual_private

DATA = Path(__file__).resolve().parents[1] / "data"


def screen_rows(app) -> list[list]:
    return [list(strip) for strip in app.screen._compositor.render_strips()]


def settled(app) -> bool:
    """Nothing asked for and not drawn yet: what the screen shows is what the app last drew.
    (Between a refresh asked for and the screen's next update, Textual's own rows would show
    newer lines than the screen does, whoever put the rows together.)"""
    screen = app.screen
    return not (screen._dirty_widgets or screen._layout_required or any(
        w._repaint_required or w._layout_required for w in screen.walk_children()))


def textual_rows(app) -> list[list]:
    """The screen with every panel row drawn by Textual (the panels' own rows forgotten)."""
    for panel in app.query(ArmPanel):
        panel._styles_cache.clear()
        panel._frame = None
    return screen_rows(app)


def first_difference(drawn: list[list], textual: list[list], compared: int) -> str:
    for y, (a, b) in enumerate(zip(drawn, textual)):
        if a != b:
            pairs = [(i, p, q) for i, (p, q) in enumerate(zip(a, b)) if p != q][:2]
            return f"after {compared} frames, row {y}: drawn {''.join(s.text for s in a)!r} / Textual's {''.join(s.text for s in b)!r}; first segments that differ: {pairs}"
    return f"after {compared} frames: {len(drawn)} rows against {len(textual)}"


@pytest.mark.skipif(not textual_private.FAST_ROWS, reason="checks the fast rows path, off under SPECMON_TEXTUAL_PUBLIC")
async def test_panel_rows_put_together_equal_textuals_own_tick_after_tick(tmp_path):
    folder = tmp_path / "s"
    shutil.copytree(DATA / "session_sim_3arm", folder)
    app = SpecmonApp(ReplaySource(folder, speed=4.0), "t")
    compared = 0
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_for(pilot, lambda: len(app.query(ArmPanel)) == 3, what="three panels")
        while app.query_one(StatusBar).stopped is None:
            await pilot.pause(0.05)
            if not settled(app):
                continue
            before = sum(p.rows_composed for p in app.query(ArmPanel))
            drawn = screen_rows(app)
            again = textual_rows(app)
            assert drawn == again, first_difference(drawn, again, compared)
            compared += 1
            screen_rows(app)  # Textual's rows are the panels' again: the next tick composes from them
            assert sum(p.rows_composed for p in app.query(ArmPanel)) == before
        composed = sum(p.rows_composed for p in app.query(ArmPanel))
    # the replay's ticks changed rows, and those rows were the ones put together here
    assert compared >= 3 and composed >= 30, (compared, composed)
