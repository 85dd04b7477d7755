"""RampDriver end to end against real `specmon sim` processes (sped up, small levels)."""

import asyncio
import json
import time

import pytest

from simproc import start_sim
from records import max_overlap, rows
from specmon.session.ramp import RampDriver
from specmon.model import (
    ArmSpec, KneeCalled, LevelFinished, LevelStarted, RampFinished, RampPlan,
)
from specmon.session.live import LiveSession


def run_ramp(url, plan, out, interval=0.5, control=None):
    arm = ArmSpec(name="sim", url=url)
    ramp = RampDriver([arm], plan)
    live = LiveSession([arm], interval=interval, out_dir=out, ramp=ramp, isl=plan.input_len, osl=plan.output_len)
    events = []

    async def main():
        def emit(e):
            events.append(e)
            if control:
                control(e, ramp, asyncio.get_running_loop())
        return await live.run(emit, asyncio.Event())

    reason = asyncio.run(main())
    return ramp, events, reason


def test_short_ramp_records_exact_lengths_and_holds_c_in_flight(tmp_path):
    plan = RampPlan(levels=[2, 4], input_len=512, output_len=32, level_duration_s=None, requests_per_level=8,
                    settle_s=0.0)
    with start_sim("--enable-metrics", "--profile", "fp8-mtp", speed=50) as sim:
        ramp, events, reason = run_ramp(sim.url, plan, tmp_path)
    assert reason == "ramp done"
    kinds = [(type(e).__name__, getattr(e, "level", None)) for e in events
             if isinstance(e, (LevelStarted, LevelFinished, RampFinished))]
    assert kinds == [("LevelStarted", 0), ("LevelFinished", 0), ("LevelStarted", 1), ("LevelFinished", 1),
                     ("RampFinished", None)]
    reqs = rows(tmp_path / "requests.csv")
    assert len(reqs) == 16
    assert {r["status"] for r in reqs} == {"ok"}
    assert {int(r["prompt_tokens"]) for r in reqs} == {512}     # realised, from meta_info
    assert {int(r["output_tokens"]) for r in reqs} == {32}      # ignore_eos + max_new_tokens
    for r in reqs:
        # EAGLE on the fp8-mtp profile: several tokens per verify step, counted from meta_info
        assert 1.0 < float(r["accept_length"]) <= 4.0
        assert int(r["spec_verify_ct"]) < 32
        assert float(r["ttft_s"]) > 0 and float(r["e2e_s"]) > float(r["ttft_s"])
        assert int(r["chunks"]) < 32  # multi-token chunks, yet output_tokens is 32
    # closed loop: exactly C in flight at the peak of each level, never more (wall-clock spans)
    assert {r["timing"] for r in reqs} == {"server"}  # a sped-up sim is timed by its own stamps
    for level, c in ((0, 2), (1, 4)):
        spans = [(float(r["t_start"]), float(r["t_end"])) for r in reqs if int(r["level"]) == level]
        assert max_overlap(spans) == c
    levels = rows(tmp_path / "levels.csv")
    assert [(lv["offered_concurrency"], lv["ok"], lv["failed"]) for lv in levels] == [("2", "8", "0"), ("4", "8", "0")]
    assert all(float(lv["output_tok_s"]) > 0 for lv in levels)
    session = json.loads((tmp_path / "session.json").read_text())
    assert session["time_scale"] == {"sim": 50.0}
    # One predicted knee: the one the live session called is the one the knees summary carries.
    assert session["knees"]["sim"]["predicted"]["kv_full_length"] == pytest.approx(175000 / 544, abs=0.01)
    assert session["knees"]["sim"]["predicted"] == session["predicted_knees"]["sim"]
    assert session["load_client"][-1]["tokens"] == 8 * 32


def test_errors_are_recorded_not_fatal(tmp_path):
    plan = RampPlan(levels=[4], input_len=64, output_len=8, level_duration_s=None, requests_per_level=12, settle_s=0)
    with start_sim("--profile", "fp8-mtp", "--fault-503-above", "2", speed=50) as sim:
        ramp, events, reason = run_ramp(sim.url, plan, tmp_path)
    assert reason == "ramp done"
    reqs = rows(tmp_path / "requests.csv")
    failed = [r for r in reqs if r["status"] != "ok"]
    assert failed and all("503" in r["error"] for r in failed)
    assert all(r["ttft_s"] == "" for r in failed)  # unknown, not 0
    lv = rows(tmp_path / "levels.csv")[0]
    assert int(lv["failed"]) == len(failed) and int(lv["ok"]) == len(reqs) - len(failed)


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


def test_dataset_prompts_flush_between_levels_and_pause(tmp_path):
    data = tmp_path / "speed.jsonl"
    data.write_text("\n".join([
        json.dumps({"category": "low_entropy", "turns": ["def add(a, b):\n    return a + b\n" * 20]}),
        json.dumps({"category": "high_entropy", "turns": ["Write a sonnet about queues."]}),
        "{broken",
    ]) + "\n")
    log = tmp_path / "requests.log"
    plan = RampPlan(levels=[2, 2], output_len=8, level_duration_s=None, requests_per_level=4, settle_s=0,
                    dataset=str(data), category="low_entropy", flush_cache=True)
    paused_at = {}

    def control(e, ramp, loop):
        if isinstance(e, LevelStarted) and e.level == 1:
            ramp.pause()
            paused_at["t"] = time.monotonic()
            loop.call_later(1.0, ramp.resume)

    with start_sim("--profile", "fp8-mtp", "--request-log", str(log), speed=50) as sim:
        ramp, events, reason = run_ramp(sim.url, plan, tmp_path / "s", control=control)
    assert reason == "ramp done"
    reqs = rows(tmp_path / "s" / "requests.csv")
    assert len(reqs) == 8 and {r["status"] for r in reqs} == {"ok"}
    # text prompts: the realised length comes from the server, one prompt for every request
    assert len({r["prompt_tokens"] for r in reqs}) == 1 and int(reqs[0]["prompt_tokens"]) > 50
    # level 1 was paused for a second before it sent anything
    level1 = [float(r["t_start"]) for r in reqs if r["level"] == "1"]
    assert min(level1) - min(float(r["t_start"]) for r in reqs if r["level"] == "0") > 1.0
    lv = rows(tmp_path / "s" / "levels.csv")
    # Only the paused level is marked paused. (Level 0 may still be flagged for its own reasons:
    # 8-token requests last ~10 ms of wall time at x50, so on a busy box the client's own gaps
    # between requests are a real share of them and "client held only ..." is a fair call.)
    assert "paused" not in (lv[0]["invalid_reason"] or ""), lv[0]["invalid_reason"]
    # the paused level ran again from the resume, said in its note (a pause is not a measurement)
    assert "paused" not in (lv[1]["invalid_reason"] or "") and "re-run from the resume" in lv[1]["note"], lv[1]
    assert log.read_text().count("POST /flush_cache") == 2  # before each level, not after the last
