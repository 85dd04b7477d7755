"""The fleet table's observed-knee column ("running/knee +room", or "—" and why) and, where the
terminal is too short for every worker, the hint line that says how many rows are below. Driven
through the real app by a recorded fleet session replayed, at 80x24 and 160x48."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.pilots import wait_for
from specmon.model import (
    ArmSpec, FleetChanged, FleetStatus, ObservedKnee, ObservedKneesUpdated, Sample, SamplesTick, SessionEnded,
    SessionStarted, WorkerStatus,
)
from specmon.session.folder import SessionWriter
from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.fleet import FleetTable
from specmon.tui.widgets.status_bar import StatusBar

T0 = 1_800_000_000.0
N = 40  # workers: more than 24 lines hold


def spec(i: int) -> ArmSpec:
    return ArmSpec(name=f"w{i:02d}", url=f"http://127.0.0.1:{32000 + i}", fleet="gw", role="regular")


def running(i: int) -> int:
    return 2 if i == 0 else i % 20


def knee_of(i: int) -> ObservedKnee:
    """w00 only ever ran 2; w01 still rising at 8; w02 at its cap (2) with nothing queued; the
    rest: a knee of 16 (w10-w19 and w30-w39 at or past it, the rest below)."""
    if i == 0:
        return ObservedKnee(concurrency=None, limit=None, evidence_s=120.0, running_max=2,
                            reason="running never above 2 in 120 s; need traffic reaching ~8 running")
    if i == 1:
        return ObservedKnee(concurrency=None, limit=None, evidence_s=300.0, running_max=8,
                            reason="throughput still rising and no queueing up to 8 running in 300 s; "
                                   "need traffic reaching ~16 running")
    if i == 2:
        return ObservedKnee(concurrency=None, limit=None, evidence_s=300.0, running_max=2,
                            reason="running reached the request cap 2 with too little queueing seen in 300 s; "
                                   "need traffic past the cap (requests waiting)")
    return ObservedKnee(concurrency=16, limit="request_cap", evidence_s=600.0, reason="requests queue from 16 running",
                        confidence="high", running_max=19, running_now=running(i),
                        headroom=max(0, 16 - running(i)))


def write_fleet(out: Path) -> Path:
    w = SessionWriter(out)
    w(SessionStarted(mode="attach", arms=[], interval_s=1.0, ts=T0))
    specs = [spec(i) for i in range(N)]
    w(FleetChanged(fleet="gw", added=specs, removed=[], note=f"gw: {N} joined, 0 left", ts=T0 + 1))
    status = FleetStatus(name="gw", kind="gateway", url="http://127.0.0.1:30000", up=True, healthy=N, total=N,
                         workers=[WorkerStatus(url=s.url, arm=s.name) for s in specs])
    for k in range(2):
        ts = T0 + 1 + k
        w(SamplesTick(samples=[Sample(ts=ts, arm=s.name, up=True, running_reqs=running(i), queued_reqs=0,
                                      gen_tok_s=40.0 * running(i), worker=s.url, role="regular")
                               for i, s in enumerate(specs)], fleets=[status], ts=ts))
    w(ObservedKneesUpdated(knees={s.name: knee_of(i) for i, s in enumerate(specs)}, ts=T0 + 3))
    w(SessionEnded(reason="done", ts=T0 + 4))
    return out


def drawn(table: FleetTable) -> str:
    """The table's lines as drawn on screen."""
    return "\n".join(table.render_line(y).text for y in range(table.size.height))


def cells(table: FleetTable, row: int) -> dict[str, str]:
    return {str(c.key.value): str(v) for c, v in zip(table.ordered_columns, table.get_row_at(row))}


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_the_knee_column_and_the_rows_below(tmp_path, size):
    app = SpecmonApp(ReplaySource(write_fleet(tmp_path / "s"), speed=1e6), "t")
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, 20.0, "the replay to end")
        table = app.query_one(FleetTable)
        await wait_for(pilot, lambda: table.row_count == N and "knee" in table._shown, 5.0, "the knee column")
        await pilot.pause()
        rows = {cells(table, r)["worker"]: cells(table, r) for r in range(N)}
        assert rows["w05"]["knee"] == "5/16 +11"  # running 5 of a knee of 16: room for 11 more
        assert rows["w16"]["knee"] == "16/16 +0"
        assert rows["w00"]["knee"] == "— light" and rows["w01"]["knee"] == "— rising"
        assert rows["w02"]["knee"] == "— at cap"
        # sorted on the column: the least room first, the workers with no knee last
        table.sort_column = "knee"
        table.redraw()
        order = [cells(table, r)["worker"] for r in range(N)]
        assert cells(table, 0)["knee"].endswith(" +0") and sorted(order[-3:]) == ["w00", "w01", "w02"]
        table.sort_column = "worker"
        table.redraw()
        await pilot.pause()
        screen = drawn(table)
        shown = table.size.height - 1  # the header
        # neither 24 nor 48 lines hold 40 workers (the table takes at most 70 % of the height):
        # the table's last line says how many are below and how to get there
        below = N - (shown - 1)
        assert table.rows_below() == below > 0 and shown < (16 if size == (80, 24) else 34), shown
        assert screen.splitlines()[-1].strip() == f"{below} more workers below: ↓ PgDn ctrl+End"
        if size == (80, 24):
            # the cursor's row is never under the hint: scrolled clear of it as it moves down
            table.focus()
            table.move_cursor(row=0)
            for _ in range(shown - 1):
                await pilot.press("down")
            await pilot.pause()
            assert table.scroll_offset.y >= 1 and table.rows_below() == below - table.scroll_offset.y
            await pilot.press("ctrl+end")
            await pilot.pause()
            assert table.rows_below() == 0 and "more workers below" not in drawn(table)
            assert "w39" in drawn(table).splitlines()[-1]  # the last worker takes the hint's line
        # the knee column is on screen at both sizes (narrower columns give way first)
        assert "5/16 +11" in screen
