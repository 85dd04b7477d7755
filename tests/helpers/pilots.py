"""Waiting on a Textual app under the pilot: a condition, or a replay's end."""

from __future__ import annotations

import io

from rich.console import Console


async def wait_for(pilot, cond, timeout: float = 20.0, what: str = "condition", every: float = 0.05) -> None:
    """Pause the pilot until cond() holds; AssertionError after about `timeout` seconds of pauses."""
    for _ in range(int(timeout / every)):
        if cond():
            return
        await pilot.pause(every)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_replay_end(pilot, timeout: float = 20.0, every: float = 0.05) -> None:
    """Until the status bar says the replay stopped, then one more pause for the last redraw."""
    await wait_for(pilot, lambda: pilot.app.query_one("StatusBar").stopped is not None, timeout,
                   "the replay to finish", every)
    await pilot.pause()


def screen_text(app) -> str:
    """The screen as plain text, one line per terminal row (what a screenshot shows)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True, record=True,
                      legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()
