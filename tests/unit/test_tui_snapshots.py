"""Snapshot tests: the real app replaying recorded sim sessions, 1, 2 (the demo) and 3 arms, 80x24
(an arm a line from two arms) and 160x48 (the arm panels), and the ramp view (r) at 80x24.

Baselines live in tests/unit/__snapshots__/ (update with `pytest tests/unit/test_tui_snapshots.py
--snapshot-update` after checking the new SVGs by eye).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.pilots import wait_replay_end

APP = Path(__file__).resolve().parents[1] / "snapshot_apps" / "replay_app.py"


async def _replayed(pilot) -> None:
    await wait_replay_end(pilot, timeout=8.0, every=0.02)


@pytest.mark.parametrize("session", ["session_sim_1arm", "session_demo_2arm", "session_sim_3arm"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_replay_snapshot(snap_compare, monkeypatch, session, size):
    monkeypatch.setenv("SPECMON_SNAPSHOT_SESSION", session)
    assert snap_compare(str(APP), terminal_size=size, run_before=_replayed)


async def _replayed_then_r(pilot) -> None:
    await _replayed(pilot)
    await pilot.press("r")
    await pilot.pause()


def test_ramp_view_snapshot_at_80x24(snap_compare, monkeypatch):
    monkeypatch.setenv("SPECMON_SNAPSHOT_SESSION", "session_demo_2arm")
    assert snap_compare(str(APP), terminal_size=(80, 24), run_before=_replayed_then_r)


def _then(*keys: str):
    async def run(pilot) -> None:
        await _replayed(pilot)
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.2)
        await pilot.pause()
    return run


# Every view at both sizes, the newest level in view: the detail view (d), the servers' logs (l),
# the ramp in place of the arms (r), the help (?), every knee (k); the fleet table of seven workers.
@pytest.mark.parametrize("keys", ["d", "l", "r", "question_mark", "k"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_view_snapshot(snap_compare, monkeypatch, keys, size):
    monkeypatch.setenv("SPECMON_SNAPSHOT_SESSION", "session_demo_2arm")
    assert snap_compare(str(APP), terminal_size=size, run_before=_then(keys))


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
def test_fleet_table_snapshot(snap_compare, monkeypatch, size):
    monkeypatch.setenv("SPECMON_SNAPSHOT_SESSION", "session_gateway_fleet")
    assert snap_compare(str(APP), terminal_size=size, run_before=_replayed)
