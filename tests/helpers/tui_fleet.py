"""What the fleet table's tests share across tiers: a recorded fleet session written and replayed."""

from __future__ import annotations

from pathlib import Path

from helpers.pilots import wait_for
from specmon.model import (
    ArmSpec, FleetChanged, FleetStatus, RankReading, Sample, SamplesTick, SessionEnded, SessionStarted, WorkerStatus,
)
from specmon.session.folder import SessionWriter
from specmon.tui.widgets.status_bar import StatusBar


T0 = 1_800_000_000.0


def worker(i: int) -> ArmSpec:
    return ArmSpec(name=f"w{i}", url=f"http://127.0.0.1:{31000 + i}", fleet="gw", role="regular")


def write_fleet(out: Path, sizes: list[int]) -> Path:
    """A gateway whose worker count follows `sizes`, one tick each; worker 0 has two DP ranks, one starving."""
    w = SessionWriter(out)
    w(SessionStarted(mode="attach", arms=[], interval_s=1.0, ts=T0))
    have: list[int] = []
    for k, n in enumerate(sizes):
        ts = T0 + 1 + k
        want = list(range(n))
        added = [worker(i) for i in want if i not in have]
        removed = [f"w{i}" for i in have if i not in want]
        if added or removed:
            w(FleetChanged(fleet="gw", added=added, removed=removed, note=f"gw: {len(added)} joined, {len(removed)} left",
                           ts=ts))
        have = want
        status = FleetStatus(name="gw", kind="gateway", url="http://127.0.0.1:30000", up=True, healthy=n, total=n,
                             routed_req_s=12.5, policy="cache_aware", source="workers",
                             workers=[WorkerStatus(url=worker(i).url, arm=f"w{i}", active_requests=3 * i) for i in want])
        samples = [Sample(ts=ts, arm=f"w{i}", up=True, running_reqs=i, queued_reqs=0, kv_usage=0.1 * i,
                          gen_tok_s=100.0 * i, worker=worker(i).url, role="regular",
                          ranks=[RankReading(dp_rank=0, running_reqs=0, kv_usage=0.0),
                                 RankReading(dp_rank=1, running_reqs=6, kv_usage=0.5)] if i == 0 else None)
                   for i in want]
        w(SamplesTick(samples=samples, fleets=[status], ts=ts))
    w(SessionEnded(reason="done", ts=T0 + len(sizes) + 1))
    return out


async def wait_end(app, pilot):
    await wait_for(pilot, lambda: app.query_one(StatusBar).stopped is not None, 20.0, "the replay to end")
