"""RampDriver end to end against real `specmon sim` processes (sped up, small levels)."""

import json
import time

import pytest

from helpers.simproc import start_sim
from helpers.records import max_overlap, rows
from specmon.model import LevelFinished, LevelStarted, LoadClientStats, RampFinished, RampPlan
from specmon.session import codec
from specmon.session.folder import read_meta
from helpers.ramps import run_ramp


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
    # the ramp's typed figures are what the level event carried and session.json holds, key for key
    carried = [e.load_client for e in events if isinstance(e, LevelFinished)]
    assert carried == ramp.client_stats and all(type(s) is LoadClientStats for s in carried)
    assert session["load_client"] == [codec.to_plain(s) for s in carried]
    assert list(session["load_client"][0])[:8] == ["level", "offered_concurrency", "reader", "tokens", "client_cpu_s",
                                                   "cpu_ms_per_1k_tokens", "connect_s", "connections_opened_ahead"]
    assert read_meta(tmp_path).load_client == carried


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
