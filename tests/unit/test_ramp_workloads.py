"""The ramp's workload shapes and level kinds against real `specmon sim` processes: shared
prefixes (the hit rate SGLang reports, the TTFT it buys), multi-turn conversations, open-loop
rate levels with an over-saturated one cut short, and the SLO search against a full ramp."""


import pytest

from helpers.simproc import start_sim
from helpers.records import rows
from specmon.model import RampPlan
from helpers.ramps import run_ramp


def test_multi_turn_conversations_resend_their_history(tmp_path):
    plan = RampPlan(levels=[4], input_len=1000, output_len=32, level_duration_s=40, settle_s=5, turns=3,
                    think_time_s=2.0, shared_prefix_len=500)
    with start_sim("--enable-metrics", "--profile", "fp8-nospec", speed=20) as sim:
        ramp, events, reason = run_ramp(sim.url, plan, tmp_path)
    assert reason == "ramp done"
    reqs = [r for r in rows(tmp_path / "requests.csv") if r["status"] == "ok"]
    assert {r["turn"] for r in reqs} == {"1", "2", "3"}
    for r in reqs:
        turn = int(r["turn"])
        # history + the reply (32 tokens) + a new 500-token message per turn: exact
        assert int(r["prompt_tokens"]) == 1000 + (turn - 1) * (32 + 500)
        if turn > 1:
            # the server's own reply was resent: all of the history is in its cache but the
            # reply's last token (SGLang caches what it computed, the last token it only sampled)
            assert int(r["cached_tokens"]) == int(r["prompt_tokens"]) - 500 - 1
    lv = rows(tmp_path / "levels.csv")[0]
    # the 2 s of thinking between turns is not the client holding the level back
    assert lv["valid"] == "1", lv["invalid_reason"]
    assert float(lv["littles_law_ratio"]) == pytest.approx(1.0, abs=0.2)
