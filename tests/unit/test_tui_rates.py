"""The TUI on a recorded open-loop SLO search: rate levels read r=4/s (progress line, level table,
plot title), the over-saturated level is marked, and the knee banner gives the search's answer,
its bracket and the levels it took. The folder is written by the session writer from events as
the ramp emits them, and played back through the real app."""

from __future__ import annotations

from pathlib import Path

from helpers.pilots import wait_replay_end
from specmon.model import (
    ArmInfo, ArmInfoUpdated, ArmSpec, KneesSummary, LevelFinished, LevelProgress, LevelResult, LevelStarted,
    RampFinished, RampPlan, RampStarted, Sample, SamplesTick, SearchSummary, SessionEnded, SessionStarted, SloSummary,
)
from specmon.session.folder import SessionWriter
from specmon.session.replay import ReplaySource
from specmon.tui.app import SpecmonApp
from specmon.tui.widgets.knee_banner import KneeBanner
from specmon.tui.widgets.plot import LevelPlot
from specmon.tui.widgets.ramp import LevelTable, LevelTableHeader, RampProgress

T0 = 1_700_000_000.0
# rate, achieved, TTFT p50, judged, met, over-saturated
LEVELS = [(1.0, 0.98, 0.2, 60, 60, False), (2.0, 1.97, 0.3, 120, 119, False), (4.0, 2.9, 6.0, 90, 20, True)]


def write_search(out: Path) -> Path:
    w = SessionWriter(out)
    plan = RampPlan(rates=[1.0], search=True, slo_ttft_s=1.0, max_level=4.0, level_duration_s=60, settle_s=5)
    w(SessionStarted(mode="ramp", arms=[ArmSpec(name="a", url="http://127.0.0.1:1")], interval_s=1.0, ts=T0))
    w(ArmInfoUpdated(arm="a", info=ArmInfo(model="m", kv_capacity_tokens=100_000, max_running_requests=64), ts=T0))
    w(RampStarted(plan=plan, time_scale={"a": 1.0}, workload={}, ts=T0))
    ts, tried = T0, {}
    for i, (rate, done, ttft, n, met, flooded) in enumerate(LEVELS):
        w(LevelStarted(level=i, offered_concurrency=0, planned_s=60.0, levels_total=0, offered_rate=rate, ts=ts))
        for _ in range(3):
            ts += 1.0
            w(SamplesTick(samples=[Sample(ts=ts, arm="a", up=True, running_reqs=int(rate * 2), queued_reqs=0,
                                          level=i)], ts=ts))
            w(LevelProgress(level=i, elapsed_s=ts - T0, planned_s=60.0, done_requests={"a": n},
                            in_flight={"a": int(rate * 3)}, ts=ts))
        tried[f"{rate:g}"] = not flooded
        last = i == len(LEVELS) - 1
        search = SearchSummary(unit="rate", target=0.9, start=1.0, max_level=4.0, tried=dict(tried),
                               lo=2.0 if i >= 1 else 1.0, hi=4.0 if last else None, answer=2.0 if last else None,
                               done=last, levels_used=i + 1, reason="met at r=2/s, missed at r=4/s" if last else "")
        r = LevelResult(arm="a", level=i, offered_concurrency=0, offered_rate=rate, achieved_rate=done,
                        achieved_concurrency=rate * 2, duration_s=60.0, ok=n, failed=0, output_tok_s=rate * 100,
                        per_user_tok_s=50.0, ttft_p50_s=ttft, slo_n=n, slo_met=met, slo_attainment=met / n,
                        cache_hit_rate=0.5, valid=not flooded,
                        knee="over_saturation" if flooded else None,
                        note="backlog grew: backlog 5.0 -> 40.0 in flight over 30.0 s (+1.17/s, t=9.0)" if flooded else None)
        slo = SloSummary(slo_ttft_s=1.0, c_slo=2.0 if i >= 1 else 1.0, levels={f"{x:g}": {} for x, *_ in LEVELS[:i + 1]})
        w(LevelFinished(level=i, results=[r], ts=ts, knees={"a": KneesSummary(slo=slo, search=search)}))
    w(RampFinished(reason="done", ts=ts))
    w(SessionEnded(reason="done", ts=ts + 1.0))
    return out


async def test_rate_levels_and_the_search_in_the_tui(tmp_path):
    app = SpecmonApp(ReplaySource(write_search(tmp_path / "s"), speed=1e9), "t")
    async with app.run_test(size=(200, 44)) as pilot:
        await wait_replay_end(pilot, timeout=20.0)
        table = str(app.query_one(LevelTable).render()).splitlines()
        assert str(app.query_one(LevelTableHeader).render()).split()[:2] == ["arm", "rate"]
        rows = [line for line in table if line.lstrip().startswith(("▲", "●", "■", "◆", "◇", "a"))]
        assert [line.split()[2] for line in rows] == ["1/s", "2/s", "4/s"], table
        assert rows[-1].rstrip().endswith("◆ over_saturation")
        progress = str(app.query_one(RampProgress).render())
        assert "level 3/?" in progress and "r 4/s" in progress and "in flight 12" in progress
        banner = app.query_one(KneeBanner)
        assert banner.display
        await pilot.press("k")  # every knee, the search's with them
        await pilot.pause()
        line = str(banner.render())
        assert "search r=2/s [2/s, 4/s) 3 levels" in line, line
        assert "SLO met to r=2/s" in line
        plots = [str(p.render()).splitlines()[0] for p in app.query(LevelPlot)]
        assert any("vs rate" in p for p in plots), plots
