"""Fleets in the TUI: workers joining and leaving appear and disappear live, the gateway header,
and the fleet table (sort, drill-down) once there are more workers than panels fit. Driven
through the real app by a recorded event stream (the events a LiveSession with a fleet emits)."""

from __future__ import annotations

from pathlib import Path


from helpers.pilots import wait_for
from specmon.model import (
    ArmSpec, FleetChanged, FleetStatus, RankReading, Sample, SamplesTick, SessionEnded, SessionStarted, WorkerStatus,
)
from specmon.session.folder import SessionWriter
from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.screens import ArmDetailScreen
from specmon.tui.widgets.fleet import FleetTable
from specmon.tui.widgets.status_bar import StatusBar
from helpers.tui_fleet import T0, wait_end, worker, write_fleet









async def test_many_workers_get_the_fleet_table_sorted_and_drilled_into(tmp_path):
    folder = write_fleet(tmp_path / "s", [8])
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_end(app, pilot)
        await pilot.pause()
        table = app.query_one(FleetTable)
        assert table.display and not app.query_one("#arms").display
        assert table.row_count == 8
        first = [str(table.get_row_at(i)[0]) for i in range(8)]
        assert first == [f"w{i}" for i in range(8)]
        # the starving DP rank of w0 is called out in its row
        assert "dp0 starving" in str(table.get_row_at(0)[11])
        table.sort_column, table.sort_reverse = "tok_s", True
        table.redraw()
        assert str(table.get_row_at(0)[0]) == "w7"
        table.focus()
        table.move_cursor(row=0)
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ArmDetailScreen)
        assert app.screen.arm_name == "w7"
