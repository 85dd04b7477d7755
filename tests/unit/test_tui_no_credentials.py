"""A URL's user:password typed on the command line never reaches the TUI's screen."""

from __future__ import annotations

import sys
from pathlib import Path

from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.status_bar import StatusBar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.pilots import wait_for  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"


async def test_a_password_in_the_title_url_is_not_on_screen():
    title = "specmon attach http://admin:s3cr3tpw@127.0.0.1:30000 --prometheus https://u:s3cr3tpw@127.0.0.1:9090"
    app = SpecmonApp(ReplaySource(DATA / "session_sim_1arm", speed=1e6), title)
    async with app.run_test(size=(200, 50)) as pilot:
        await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, what="replay end")
        await pilot.pause()
        svg = app.export_screenshot()
    assert "s3cr3tpw" not in svg and "admin" not in svg
    assert "s3cr3tpw" not in app.title and "127.0.0.1:30000" in app.title
