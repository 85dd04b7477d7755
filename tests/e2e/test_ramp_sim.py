"""RampDriver end to end against real `specmon sim` processes (sped up, small levels)."""

import json
import time

import pytest

from helpers.simproc import start_sim
from helpers.records import rows
from specmon.model import KneeCalled, LevelStarted, RampPlan
from helpers.ramps import run_ramp


def test_skip_ends_a_level_and_cancels_in_flight(tmp_path):
    plan = RampPlan(levels=[3, 3], input_len=64, output_len=2000, level_duration_s=10_000, settle_s=0)

    def control(e, ramp, loop):
        if isinstance(e, LevelStarted):
            loop.call_later(1.5, ramp.skip_level)

    t = time.monotonic()
    with start_sim("--profile", "fp8-mtp", speed=5) as sim:
        ramp, events, reason = run_ramp(sim.url, plan, tmp_path, control=control)
    assert reason == "ramp done" and time.monotonic() - t < 40
    reqs = rows(tmp_path / "requests.csv")
    assert len([r for r in reqs if r["status"] == "cancelled"]) == 6  # 3 streams x 2 levels cut short
    lv = rows(tmp_path / "levels.csv")
    assert [x["failed"] for x in lv] == ["0", "0"]  # cancelled is not failed


def test_knee_found_near_the_kv_prediction(tmp_path):
    # A small pinned pool: 20,000 tokens / (1800 + 200) = 10 requests fit at full length.
    plan = RampPlan(levels=[3, 6, 9, 16, 24], input_len=1800, output_len=200, level_duration_s=60, settle_s=15)
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", "--max-total-tokens", "20000", speed=10) as sim:
        ramp, events, reason = run_ramp(sim.url, plan, tmp_path, interval=0.25)
    assert reason == "ramp done"
    knees = {e.definition: e for e in events if isinstance(e, KneeCalled)}
    assert knees["predicted"].concurrency == pytest.approx(10.0)
    assert "queueing" in knees
    assert knees["queueing"].concurrency in (9, 16)  # within one level of the KV bound (10)
    levels = rows(tmp_path / "levels.csv")
    labelled = [lv for lv in levels if lv["knee"]]
    assert labelled and all(lv["knee"] in ("plateau", "queueing") for lv in labelled)
    assert all(lv["valid"] in ("1", "True", "true") for lv in levels), [lv["invalid_reason"] for lv in levels]
    session = json.loads((tmp_path / "session.json").read_text())
    assert session["knees"]["sim"]["queueing"] == knees["queueing"].concurrency
    # Each knee is marked on its own level's row, its confirmation on the confirming level's row.
    k = session["knees"]["sim"]
    for definition in ("plateau", "queueing"):
        if k[definition] is None:
            continue
        own = [lv for lv in levels if definition in lv["knee"].split(";")]
        assert [float(lv["offered_concurrency"]) for lv in own] == [k[definition]], (definition, levels)
        confirming = [int(lv["level"]) for lv in levels if definition in lv["knee_confirmed"].split(";")]
        assert confirming == [k[f"{definition}_confirmed_at_level"]]
        assert int(own[0]["level"]) < confirming[0]
    # past the knee the TTFT is mostly queue, and says so
    last = levels[-1]
    assert float(last["queue_ttft_share"]) > 0.5 and "queue" in last["ttft_note"]
