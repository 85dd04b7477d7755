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
from specmon.tui.widgets.arm_panel import ArmPanel
from specmon.tui.widgets.fleet import FleetHeader, FleetTable
from specmon.tui.widgets.status_bar import StatusBar
from helpers.tui_fleet import T0, wait_end, worker, write_fleet
import pytest
from specmon.tui import textual_private









async def test_workers_join_and_leave_and_the_header_says_so(tmp_path):
    folder = write_fleet(tmp_path / "s", [2, 3, 2])
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_end(app, pilot)
        await pilot.pause()
        assert sorted(p.arm_name for p in app.query(ArmPanel)) == ["w0", "w1"]  # w2 joined, then left
        assert "(gw)" in str(app.query(ArmPanel).first().border_title)
        header = app.query_one(FleetHeader)
        assert header.display
        text = header.render().plain
        assert "gw (gateway) 2/2 workers healthy" in text and "12.5 req/s routed" in text and "cache_aware" in text
    # and the record keeps the worker that left: its rows, its arm, the notes
    rows = (folder / "samples.csv").read_text()
    assert "w2" in rows and "gw: 1 joined, 0 left" in rows and "gw: 0 joined, 1 left" in rows


def test_a_rank_at_its_request_cap_is_called_out_in_the_table():
    from specmon.model import ArmInfo
    from specmon.tui.state import ArmState
    from specmon.tui.widgets.fleet import row_cells, row_values

    arm = ArmState(name="w0", index=0, info=ArmInfo(model="m", max_running_requests=4))
    arm.last = Sample(ts=T0, arm="w0", up=True, running_reqs=5, ranks=[
        RankReading(dp_rank=0, running_reqs=1, kv_usage=0.1), RankReading(dp_rank=1, running_reqs=4, kv_usage=0.3)])
    cell = str(row_cells(row_values(arm, None))[11])
    assert cell == "⚠ 1.6x dp1 saturated (running 4 at its cap 4) while dp0 is not"
    arm.info = None  # the cap not known yet: only what the ranks' own figures say
    assert str(row_cells(row_values(arm, None))[11]) == "1.6x (2 ranks)"


async def test_the_fleet_table_follows_new_ticks_in_place(tmp_path):
    """Ticks after the first change the cells that changed and re-order the rows when the sort
    says so, without rebuilding the table: the worker under the cursor stays under it, and a
    cell that did not change is the same object the table held (its rendering is kept)."""
    folder = write_fleet(tmp_path / "s", [8])
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_end(app, pilot)
        await pilot.pause()
        table = app.query_one(FleetTable)
        table.sort_column, table.sort_reverse = "tok_s", True
        table.redraw()
        assert [str(table.get_row_at(i)[0]) for i in range(3)] == ["w7", "w6", "w5"]
        table.move_cursor(row=2)  # w5
        role_cell = table.get_row_at(2)[2]
        # w1 becomes the busiest worker; nothing else changes
        ts = T0 + 10
        old = app.state.arm("w1").last
        app.emit(SamplesTick(samples=[Sample(ts=ts, arm="w1", up=True, running_reqs=old.running_reqs, queued_reqs=0,
                                             kv_usage=old.kv_usage, gen_tok_s=5000.0, worker=old.worker,
                                             role="regular")], fleets=list(app.state.fleets), ts=ts))
        await pilot.pause()
        table.redraw()  # (the app already did on the tick; once more changes nothing)
        assert table.row_count == 8
        assert [str(table.get_row_at(i)[0]) for i in range(4)] == ["w1", "w7", "w6", "w5"]
        assert str(table.get_row_at(0)[6]) == "5000"
        assert table.selected_arm() == "w5"  # the cursor followed its worker to row 3
        assert table.get_row_at(3)[2] is role_cell  # unchanged: the object the table already held


@pytest.mark.skipif(not textual_private.FAST_TABLE, reason="checks the fast table path, off under SPECMON_TEXTUAL_PUBLIC")
async def test_a_row_drawn_from_its_kept_cells_is_the_row_datatable_draws(tmp_path):
    """The table re-renders only the cells of a row that changed (every row's age moves every
    tick): after ticks that change some cells, and with the cursor moved, each line on screen is
    segment for segment (text, colours, the meta a click reports) what rendering it afresh gives."""
    import dataclasses

    folder = write_fleet(tmp_path / "s", [8])
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_end(app, pilot)
        await pilot.pause()
        table = app.query_one(FleetTable)
        table.focus()

        def lines():
            table._pseudo_class_state = table.get_pseudo_class_state()
            return [list(table.render_line(y)) for y in range(table.size.height)]

        for k in range(3):
            table.move_cursor(row=k + 1)
            await pilot.pause()
            lines()  # drawn with the cursor here; the tick below changes cells only
            ts = T0 + 20 + k
            samples = [dataclasses.replace(app.state.arm(n).last, ts=ts, stale_s=float((k + i) % 3) * 6 or None,
                                           queued_reqs=k if i % 2 else 0)
                       for i, n in enumerate(app.state.arm_names())]
            app.emit(SamplesTick(samples=samples, fleets=list(app.state.fleets), ts=ts))
            await pilot.pause()
            kept = lines()
            assert table._row_cells  # the rows were drawn from kept cells
            table._row_cells.clear()
            table._row_lines.clear()
            table._cell_lines.clear()
            table._by_look.clear()
            table._update_count += 1  # and DataTable's own caches of lines, rows and cells
            assert lines() == kept
            assert any("12 s" in "".join(s.text for s in line) for line in kept)


def test_the_age_shows_only_past_the_fleets_cycle():
    """A row within its fleet's cycle (a gateway's workers scraped in turn: ROTATION_S; a
    Prometheus fleet: its scrape interval) reads "—" in the age column; past it, its age."""
    from specmon.session import live
    from specmon.tui.state import ArmState
    from specmon.tui.widgets.fleet import AGE_SLACK_S, ROTATION_S, row_cells, row_values

    assert ROTATION_S == live.FLEET_SCRAPE_EVERY_S  # the table's cycle is the session's

    def age(stale, cycle=ROTATION_S):
        arm = ArmState(name="w0", index=0)
        arm.last = Sample(ts=T0, arm="w0", up=True, running_reqs=1, stale_s=stale)
        return str(row_cells(row_values(arm, None, cycle))[12])

    assert age(None) == "—"
    assert age(3.0) == "—" and age(ROTATION_S + AGE_SLACK_S) == "—"
    assert age(ROTATION_S + AGE_SLACK_S + 0.6) == "6 s" and age(42.2) == "42 s"
    assert age(12.0, cycle=15.0) == "—" and age(17.0, cycle=15.0) == "17 s"


@pytest.mark.skipif(not textual_private.FAST_TABLE, reason="checks the fast table path, off under SPECMON_TEXTUAL_PUBLIC")
async def test_a_fleet_scraped_in_turn_says_so_and_redraws_only_the_rows_that_changed(tmp_path):
    """Rows repeating an earlier scrape (an age within the cycle) draw as they did: a tick that
    changes some rows' figures and every row's age repaints those rows' lines only, and the
    header says the workers are scraped in turn (the cycle the age column leaves unsaid)."""
    import dataclasses

    from textual.geometry import Region

    folder = write_fleet(tmp_path / "s", [8])
    app = SpecmonApp(ReplaySource(folder, speed=1e6), "t")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_end(app, pilot)
        await pilot.pause()
        table = app.query_one(FleetTable)
        header = app.query_one(FleetHeader)
        assert "scraped in turn" not in header.render().plain  # every worker fresh: no cycle to say

        def screen():
            table._pseudo_class_state = table.get_pseudo_class_state()
            return ["".join(s.text for s in table.render_line(y)) for y in range(table.size.height)]

        repainted: list[Region] = []
        real_refresh = table.refresh

        def refresh(*regions, **kw):
            repainted.extend(regions if regions else [Region(0, 0, table.size.width, table.size.height)])
            return real_refresh(*regions, **kw)

        table.refresh = refresh
        for k in range(3):
            before = screen()
            repainted.clear()
            ts = T0 + 30 + k
            # w2 and w5 scraped this tick (new figures); the others repeat theirs, a second older
            samples = [dataclasses.replace(app.state.arm(n).last, ts=ts,
                                           stale_s=None if i in (2, 5) else float(k + 1),
                                           running_reqs=app.state.arm(n).last.running_reqs + (i in (2, 5)))
                       for i, n in enumerate(app.state.arm_names())]
            app.emit(SamplesTick(samples=samples, fleets=list(app.state.fleets), ts=ts))
            await pilot.pause()
            after = screen()
            changed = {y for y, (a, b) in enumerate(zip(before, after)) if a != b}
            rows = {y for r in repainted for y in range(r.y, r.y + r.height)}
            assert changed and changed <= rows, (changed, rows)
            assert rows <= {1 + 2, 1 + 5}, rows  # (the header line first) w2's and w5's lines only
            assert "scraped in turn, each every 4 s" in header.render().plain
        assert all("—" in line.split()[-1] for line in after[1:9])
