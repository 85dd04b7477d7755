"""The simulator against SGLang's own tools: bench_serving as a client, the real server's /metrics
and /server_info as the reference, and the calibration tolerances of field-facts A."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from simproc import REPO, free_port, start_sim
from test_sim_server import families, load

VENV = Path(os.environ.get("SPECMON_SGLANG_VENV", "/work/sglvenv"))
SGL_PY = VENV / "bin" / "python"
TOKENIZER = Path("/work/shared/real-sglang/tiny-llama")
SERVE = Path("/work/shared/real-sglang/serve.sh")


@pytest.mark.bench_client
@pytest.mark.skipif(not SGL_PY.exists() or not TOKENIZER.exists(), reason="SGLang venv / tokenizer absent")
def test_bench_serving_runs_unchanged(tmp_path):
    speed = 20.0
    out = tmp_path / "bench.jsonl"
    with start_sim("--enable-metrics", speed=speed) as sim:
        p = subprocess.run([str(SGL_PY), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", sim.url,
                            "--dataset-name", "random-ids", "--random-input-len", "256", "--random-output-len", "64",
                            "--random-range-ratio", "1", "--num-prompts", "32", "--max-concurrency", "8",
                            "--tokenizer", str(TOKENIZER), "--disable-tqdm", "--output-file", str(out)],
                           capture_output=True, text=True, timeout=240, cwd=tmp_path)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        metrics = httpx.get(sim.url + "/metrics").text
    res = json.loads(out.read_text().splitlines()[-1].replace("Infinity", "1e999"))
    assert res["completed"] == 32 and res["total_output_tokens"] == 32 * 64
    assert 2.3 <= res["accept_length"] <= 3.0            # /server_info avg_spec_accept_length, mtp 2.67
    # Ground truth: the server's own TTFT histogram (simulated seconds) vs client wall time x speed.
    s = float(re.search(r"sglang:time_to_first_token_seconds_sum\{[^}]*\} (\S+)", metrics).group(1))
    n = float(re.search(r"sglang:time_to_first_token_seconds_count\{[^}]*\} (\S+)", metrics).group(1))
    server_ttft = s / n
    client_ttft = res["mean_ttft_ms"] / 1000 * speed
    assert client_ttft >= server_ttft * 0.7 and client_ttft <= server_ttft * 3 + 0.5, (client_ttft, server_ttft)
    # Output throughput in simulated tok/s: 8 streams of a ~27B FP8 model on one RTX PRO 6000 with MTP.
    sim_tput = res["output_throughput"] / speed
    assert 100 < sim_tput < 2000, sim_tput


def _start_real(port: int, log: Path) -> subprocess.Popen:
    fh = open(log, "wb")
    return subprocess.Popen(["bash", str(SERVE), str(VENV), str(port)], stdout=fh, stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.mark.real_sglang
@pytest.mark.skipif(not SGL_PY.exists() or not SERVE.exists(), reason="SGLang venv absent")
def test_metrics_and_server_info_match_real_sglang(tmp_path):
    port = free_port()
    proc = _start_real(port, tmp_path / "real.log")
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "real.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        body = {"input_ids": list(range(1, 40)), "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}}
        for _ in range(2):
            httpx.post(url + "/generate", json=body, timeout=120)
        real_metrics = httpx.get(url + "/metrics").text
        real_info = httpx.get(url + "/server_info").json()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    with start_sim("--enable-metrics", "--decode-log-interval", "5", speed=100) as sim:
        load(sim.url, 3, stream=False)    # as sent to the real server: no ITL family on either
        sim_metrics = httpx.get(sim.url + "/metrics").text
        sim_info = httpx.get(sim.url + "/server_info").json()
    real_f, sim_f = families(real_metrics), families(sim_metrics)
    assert set(real_f) == set(sim_f), (set(real_f) ^ set(sim_f))
    for name, (t, keys) in real_f.items():
        assert sim_f[name][0] == t, name
        assert {frozenset(k) for k in sim_f[name][1]} >= {frozenset(k) for k in keys} or name.endswith(
            ("cuda_graph_passes", "http_requests", "http_responses", "http_requests_active")), name
    missing = set(real_info) - set(sim_info)
    assert not missing, missing
    missing_internal = set(real_info["internal_states"][0]) - set(sim_info["internal_states"][0])
    assert not missing_internal - {"avg_spec_accept_length"}, missing_internal


@pytest.mark.timeout(600)
def test_calibration_tolerances():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import sim_calibration as cal

    res = asyncio.run(cal.calibrate(speed=100.0, window=600.0, ttft_speed=30.0))
    bad = cal.check(res["figures"])
    assert not bad, (bad, res["figures"])
