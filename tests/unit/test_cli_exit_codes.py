"""Exit codes say why a session ended: a signal is 128 + N (SIGTERM 143, Ctrl-C/SIGINT 130), a
--duration that ran out is 0. Headless attach against a simulator on 127.0.0.1."""

import sys


from specmon.wiring import exit_code


def test_exit_code_of_each_reason():
    assert exit_code("terminated") == 143 and exit_code("interrupted") == 130 and exit_code("hangup") == 129
    assert exit_code("duration reached") == 0 and exit_code("ramp done") == 0 and exit_code("quit") == 0


async def test_ctrl_c_in_the_tui_exits_as_headless_ctrl_c_and_q_exits_0():
    """The TUI's ctrl+c (a key, not a signal; twice while a ramp runs) ends a running session as
    Ctrl-C does headless: 130; q: 0."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers.pilots import wait_for
    from specmon.session.replay import ReplaySource
    from specmon.tui.app import SpecmonApp

    data = Path(__file__).resolve().parents[1] / "data" / "session_sim_1arm"
    for keys, rc in ((("ctrl+c", "ctrl+c"), 130), (("q",), 0)):
        app = SpecmonApp(ReplaySource(data, speed=1.0), "t")  # at its own pace: still running
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.state.ramp_started, what="the ramp to start")
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            await wait_for(pilot, lambda: not app.is_running, timeout=15, what="the app to quit")
        assert exit_code(app.return_value) == rc, (keys, app.return_value)
