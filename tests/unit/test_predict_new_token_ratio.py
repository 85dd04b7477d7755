"""The ratio the predicted knee assumes when no new_token_ratio gauge was read: SGLang's starting
ratio for the server's release times the schedule_conservativeness its /server_info reports. The
recorded servers of both releases are the check: their idle gauge is that starting ratio."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from specmon.analysis.predict import predict_knee, starting_new_token_ratio
from specmon.model import ArmInfo
from specmon.sources import sglang_names as names
from specmon.sources.prom import MetricsSnapshot
from specmon.sources.serverinfo import arm_info_from_server_info

VERSIONS = Path(__file__).resolve().parents[2] / "tests" / "data" / "sglang-versions"


def server_info(release: str) -> dict:
    return json.loads((VERSIONS / release / "server_info.json").read_text())


@pytest.mark.parametrize("release", ["0.5.10", "0.5.23"])
def test_starting_ratio_is_what_the_idle_server_exports(release):
    info = arm_info_from_server_info(server_info(release))
    assert info.schedule_conservativeness == 1.0
    assert names.release_of(info.version) == release
    idle = MetricsSnapshot.parse((VERSIONS / release / "metrics_idle.prom").read_text(), ts=0.0)
    gauge = idle.value(names.metric1("new_token_ratio"))
    ratio, how = starting_new_token_ratio(info)
    assert gauge is not None and ratio == pytest.approx(gauge)
    assert f"SGLang {release}" in how


def test_dp_attention_conservativeness_is_read_from_the_scheduler_and_admits_more():
    d = server_info("0.5.23")
    d = copy.deepcopy(d)
    # DP attention: SGLang scales the scheduler's copy by 0.3; the top level keeps the flag
    d["internal_states"][0]["schedule_conservativeness"] = 0.3
    info = arm_info_from_server_info(d)
    assert info.schedule_conservativeness == 0.3
    k = predict_knee(info, 1024, 256)
    assert k.ratio_assumed and k.new_token_ratio == pytest.approx(0.21)
    # 8,192 / (1,024 + 256 x 0.21) = 7.6 -> 7, where the default conservativeness gives 6
    assert k.kv_admitted == 7 and "schedule_conservativeness 0.3" in k.detail
    plain = predict_knee(arm_info_from_server_info(server_info("0.5.23")), 1024, 256)
    assert plain.kv_admitted == 6 and plain.new_token_ratio == pytest.approx(0.7)


def test_a_high_conservativeness_caps_the_ratio_at_one_and_an_unknown_one_is_the_default():
    k = predict_knee(ArmInfo(kv_capacity_tokens=8192, schedule_conservativeness=2.0, version="0.5.10.post1"), 1024, 256)
    assert k.new_token_ratio == 1.0 and k.kv_admitted == 6  # 8192 / 1280 = 6.4
    k = predict_knee(ArmInfo(kv_capacity_tokens=8192), 1024, 256)
    assert k.new_token_ratio == pytest.approx(0.7) and "(default)" in k.detail


def test_a_read_gauge_wins_over_the_assumption():
    info = ArmInfo(kv_capacity_tokens=8192, schedule_conservativeness=0.3, version="0.5.23")
    k = predict_knee(info, 1024, 256, new_token_ratio=0.5)
    assert not k.ratio_assumed and k.new_token_ratio == 0.5 and "assumed" not in k.detail


@pytest.mark.parametrize("version, release", [
    ("0.5.10.post1", "0.5.10"), ("0.5.10", "0.5.10"), ("0.5.20", "0.5.10"), ("0.5.23", "0.5.23"),
    ("0.5.24rc1", "0.5.23"), ("0.6.0", "0.5.23"), ("0.4.9", "0.5.10"), (None, "0.5.23"), ("main", "0.5.23"),
])
def test_release_of(version, release):
    assert names.release_of(version) == release
