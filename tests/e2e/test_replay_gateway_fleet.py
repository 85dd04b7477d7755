"""tests/data/session_gateway_fleet, a real ramp through the real smg gateway (three workers, four
more joining at the third level; tests/snapshot_apps/record_gateway_fleet.py), replays: through
ReplaySource as it was recorded, headless, and in the app (the gateway's panels at first, the
fleet table of seven once they joined)."""

from __future__ import annotations

from pathlib import Path

from helpers.pilots import wait_replay_end
from specmon.model import FleetChanged, LevelFinished
from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.fleet import FleetHeader, FleetTable
from specmon.tui.widgets.status_bar import StatusBar

REPO = Path(__file__).resolve().parents[2]
FOLDER = REPO / "tests" / "data" / "session_gateway_fleet"


async def test_the_app_shows_the_gateways_panels_then_the_fleet_table():
    src = ReplaySource(FOLDER, speed=1e9)
    # stop it at the second level: three workers, each a panel titled with its gateway
    second = next(i for i, e in enumerate(src.events) if isinstance(e, LevelFinished) and e.level == 1)
    full = list(src.events)
    src.events = full[:second]
    app = SpecmonApp(src, title="replay")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_replay_end(pilot, timeout=8.0, every=0.02)
        panels = list(app.query(ArmPanel))
        assert len(panels) == 3 and not app.fleet_mode
        assert app.query_one(FleetHeader).display
        assert "3/3 workers healthy" in str(app.query_one(FleetHeader).render())
        assert app.state.arm_names() == [w.name for w in next(e for e in full if isinstance(e, FleetChanged)).added]
    src = ReplaySource(FOLDER, speed=1e9)
    app = SpecmonApp(src, title="replay")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_replay_end(pilot, timeout=8.0, every=0.02)
        assert app.fleet_mode and app.query_one(FleetTable).row_count == 7  # the gateway is no row of its own
        assert "7 arms" in str(app.query_one(StatusBar).render())
