"""Exit codes say why a session ended, read from its end events: a signal is 128 + N (SIGTERM
143, Ctrl-C/SIGINT 130), a --duration that ran out or a ramp that ran its course is 0; a full
folder is 1; after a ramp, 401/403 is 2 and a server gone or serving nothing is 3."""

import sys

import pytest

from specmon.errors import ServerError, UsageError
from specmon.model import END_CAUSES, ArmSpec, NoAnswer, RampFinished, SessionEnded
from specmon.wiring import SessionOutcome, signal_exit

ARMS = [ArmSpec(name="a", url="http://127.0.0.1:1"), ArmSpec(name="b", url="http://127.0.0.1:2")]


def outcome_of(*events) -> SessionOutcome:
    outcome = SessionOutcome()
    for e in events:
        outcome(e)
    return outcome


def test_exit_code_of_each_way_a_session_ends():
    codes = {cause: outcome_of(SessionEnded(reason=f"words for {cause}", cause=cause)).exit_code()
             for cause in END_CAUSES if cause not in ("recording failed", "error")}  # error: its exception's
    assert codes == {"terminated": 143, "interrupted": 130, "hangup": 129, "duration": 0, "ramp ended": 0,
                     "stopped": 0, "cancelled": 0}
    with pytest.raises(SystemExit) as e:
        outcome_of(SessionEnded(reason="recording failed: disk full", cause="recording failed")).exit_code()
    assert e.value.code == 1
    # A replay's own end: only a signal changes its exit code.
    assert signal_exit("terminated") == 143 and signal_exit("quit") == 0 and signal_exit(None) == 0


def test_an_answer_is_required_from_the_end_events():
    one_silent = SessionEnded(reason="stopped", never_answered=[NoAnswer("a", "http://127.0.0.1:1", "refused")])
    outcome_of(one_silent).require_an_answer(ARMS)  # the other arm answered
    all_silent = SessionEnded(reason="stopped", never_answered=[NoAnswer("a", "http://127.0.0.1:1", "refused"),
                                                                NoAnswer("b", "http://127.0.0.1:2", "timeout")])
    with pytest.raises(ServerError, match=r"no server answered: a \(http://127.0.0.1:1\): refused; b "):
        outcome_of(all_silent).require_an_answer(ARMS)
    # 401/403 is bad input and goes first, even when no server answered a scrape either.
    denied = RampFinished(reason="stopped: every server refused the credentials", denied={"a": "answered 401"})
    with pytest.raises(UsageError, match="a: answered 401"):
        outcome_of(denied, all_silent).require_an_answer(ARMS)
    with pytest.raises(ServerError, match="still gone when the ramp ended"):
        outcome_of(RampFinished(reason="done", gone={"b": "stopped answering"}), one_silent).require_an_answer(ARMS)
    with pytest.raises(ServerError, match="no request of the ramp succeeded"):
        outcome_of(RampFinished(reason="done", never_succeeded="no request of the ramp succeeded: a: 8 failed"),
                   one_silent).require_an_answer(ARMS)
    outcome_of(RampFinished(reason="done"), SessionEnded(reason="ramp done", cause="ramp ended")).require_an_answer(ARMS)


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
        assert signal_exit(app.return_value) == rc, (keys, app.return_value)
