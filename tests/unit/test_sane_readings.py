"""Impossible readings are never written or shown: a share outside 0-1, a GPU utilization of
5,500 %, an acceptance length of 1e+308 (any source, checked once per tick: sources/sanity.py).
A real attach against a misbehaving server on 127.0.0.1; the cells read back from the folder."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

from helpers.badserver import SERVER_INFO, BadServer
from helpers.simproc import REPO

METRICS = "\n".join([
    'sglang:num_running_reqs{model_name="m",tp_rank="0"} 3',
    'sglang:token_usage{model_name="m",tp_rank="0"} 0.25',
    'sglang:spec_accept_length{model_name="m",tp_rank="0"} 1e308',
    'sglang:spec_accept_rate{model_name="m",tp_rank="0"} 55',
]) + "\n"
CARD = {"simulated": True, "gpus": [{"index": 0, "name": "sim", "utilization_pct": 5500.0, "power_w": 300.0,
                                     "temperature_c": 40.0, "memory_used_bytes": 1, "memory_total_bytes": 2}]}


def test_impossible_shares_utilization_and_accept_length_are_empty_cells(tmp_path):
    out = tmp_path / "s"
    with BadServer() as srv:
        srv.metrics_text = METRICS
        # a speculative server that says it is the simulator, so its card is read too
        srv.server_info = {**SERVER_INFO, "speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
                           "sim_profile": "bad"}
        srv.faults["/specmon/simulated_gpu"] = "body:" + json.dumps(CARD)
        p = subprocess.run([sys.executable, "-m", "specmon", "attach", srv.url, "--no-discover", "--headless",
                            "--interval", "0.5", "--duration", "3", "--out", str(out)],
                           cwd=str(REPO), capture_output=True, text=True, timeout=90)
        asked = list(srv.requests)
    assert p.returncode == 0, p.stderr
    assert any("/specmon/simulated_gpu" in r for r in asked), asked
    with open(out / "samples.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["arm"]]
    up = [r for r in rows if r["up"] in ("1", "True", "true")]
    assert up, rows
    for r in up:
        assert r["running_reqs"] == "3" and float(r["kv_usage"]) == 0.25  # the sane figures are kept
        assert r["accept_length"] == "" and r["accept_rate"] == "", r
    with open(out / "gpus.csv", newline="") as f:
        cards = [r for r in csv.DictReader(f) if r.get("source") == "simulated"]
    assert cards and all(r["util_pct"] == "" and float(r["power_w"]) == 300.0 for r in cards), cards
    # no value anywhere in the event log is one of the impossible readings (as numbers: a wall
    # stamp such as 1796550000.48 holds the digits 5500)
    logged = [v for line in (out / "events.jsonl").read_text().splitlines() for v in _numbers(json.loads(line))]
    assert logged and 5500.0 not in logged and 1e308 not in logged


def _numbers(v):
    """Every number in a JSON value, however deep."""
    if isinstance(v, dict):
        for x in v.values():
            yield from _numbers(x)
    elif isinstance(v, list):
        for x in v:
            yield from _numbers(x)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        yield float(v)
