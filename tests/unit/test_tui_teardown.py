"""The app is torn down while the session's events are still arriving.

Textual's App._shutdown clears `is_running`, then removes the screens (and every widget on
them) while the app's message loop still handles what was posted before, and the live worker
(cancelled only at the very end) goes on emitting. run_test's exit tears down this way: a
recorded replay's last SessionEnded landing then failed the GPU-pane test with
`NoMatches 'StatusBar'` from on_session_ended -> redraw. Handlers and redraws must draw
nothing then, not raise."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from specmon.model import Event, LevelStarted, LogLine, SamplesTick, SessionEnded
from specmon.session.replay import ReplaySource
from specmon.tui import messages as msg
from specmon.tui.app import SpecmonApp

DATA = Path(__file__).resolve().parents[1] / "data"


async def wait_for(pilot, cond, timeout=20.0, what="condition"):
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def recorded(events: list[Event], kind: type) -> Event:
    return next(e for e in events if isinstance(e, kind))


@pytest.mark.parametrize("kinds", ["session_ended", "every_handler"])
async def test_events_that_arrive_while_the_app_is_torn_down(tmp_path, kinds):
    folder = tmp_path / "s"
    shutil.copytree(DATA / "session_sim_1arm", folder)
    src = ReplaySource(folder, speed=0.2)  # still running when the app closes
    app = SpecmonApp(src, "t")
    tick = recorded(src.events, SamplesTick)
    level = recorded(src.events, LevelStarted)
    events = [SessionEnded(reason="stopped")] if kinds == "session_ended" else \
        [tick, LogLine(arm=src.arms[0].name, line="bye"), level, SessionEnded(reason="stopped")]
    # Each message the app handles, and whether the app was still running then.
    handled: list[tuple[object, bool]] = []
    closing = asyncio.Event()

    async def session_ending() -> None:
        """The session's last events, emitted as the live worker emits them (a task on the app's
        loop), a burst every millisecond for as long as the teardown takes (bounded)."""
        await closing.wait()
        for _ in range(300):
            for event in events:
                app.emit(event)
            await asyncio.sleep(0.001)
        app.post_message(msg.LiveStopped("stopped"))

    async with app.run_test(size=(120, 40), message_hook=lambda m: handled.append((m, app.is_running))) as pilot:
        await wait_for(pilot, lambda: app.state.ticks >= 1, what="first tick")
        emitter = asyncio.create_task(session_ending())
        closing.set()
    # run_test re-raises what a handler raised during the teardown; reaching here means none did.
    await emitter
    # The race was really run: the app handled messages of each kind after it stopped running.
    late = {type(m) for m, running in handled if not running and isinstance(m, msg.EventMessage)}
    assert late >= {type(msg.message_for(e)) for e in events}, late
