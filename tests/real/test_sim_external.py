"""The simulator against SGLang's own tools: bench_serving as a client, the real server's /metrics
and /server_info as the reference, and the calibration tolerances of docs/field-notes.md A."""

from __future__ import annotations

import json
import re
import subprocess

import httpx
import pytest

from helpers import realsglang as rs
from helpers.serverprobe import probe
from helpers.simproc import start_sim
from helpers.simclient import families, load

SGL_PY = rs.SGLANG_PYTHON
TOKENIZER = rs.TINY_MODEL


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


def _differences(real: dict, sim: dict) -> list[str]:
    """What a client sees differently (keys, shapes, codes; never timing values)."""
    out = []
    for key in ("stream_status", "stream_content_type", "stream_last", "stream_top_keys", "stream_first_meta_keys",
                "stream_final_meta_keys", "stream_output_ids_cumulative", "plain_status", "plain_top_keys",
                "health", "health_generate", "error_malformed", "error_no_input", "error_bad_param", "error_404"):
        r, s = real[key], sim[key]
        if isinstance(r, list) and key.endswith("_keys"):
            r, s = sorted(r), sorted(s)  # order within meta_info is not something a client reads
        if r != s:
            out.append(f"{key}: real {r!r} != sim {s!r}")
    if set(real["plain_meta_keys"]) != set(sim["plain_meta_keys"]):
        out.append(f"plain_meta_keys: {set(real['plain_meta_keys']) ^ set(sim['plain_meta_keys'])}")
    return out


@pytest.mark.real_sglang
@pytest.mark.skipif(rs.missing() is not None, reason=rs.missing() or "")
@pytest.mark.timeout(900)
def test_sim_matches_real_sglang(tmp_path):
    """The simulator against a real SGLang (0.5.23 or 0.5.10.post1, whichever the venv holds; the
    simulator speaks the same release; no speculation on either): /metrics families and label keys, /server_info and internal_states keys,
    /v1/loads shape, /generate stream and non-stream meta_info keys, /health codes, error shapes."""
    with rs.start_real(tmp_path / "real.log", "--decode-log-interval", "5") as real:
        body = {"input_ids": list(range(1, 40)), "sampling_params": {"max_new_tokens": 16, "ignore_eos": True}}
        for _ in range(2):
            httpx.post(real.url + "/generate", json=body, timeout=120)
        real_p = probe(real.url)
        version = httpx.get(real.url + "/server_info", timeout=30).json()["version"]
    with rs.start_real(tmp_path / "real-nometrics.log", metrics=False) as plain:
        real_plain = probe(plain.url)
    with start_sim("--profile", "fp8-nospec", "--enable-metrics", "--decode-log-interval", "5",
                   "--sglang-version", version, speed=100) as sim:
        load(sim.url, 3, stream=False)    # as sent to the real server: no ITL family on either
        sim_p = probe(sim.url)
    with start_sim("--profile", "fp8-nospec", "--sglang-version", version, speed=100) as sim:
        sim_plain = probe(sim.url)

    problems = _differences(real_p, sim_p) + [f"no metrics: {d}" for d in _differences(real_plain, sim_plain)]
    real_f, sim_f = families(real_p["metrics_text"]), families(sim_p["metrics_text"])
    if set(real_f) != set(sim_f):
        problems.append(f"/metrics families: {set(real_f) ^ set(sim_f)}")
    for name, (t, keys) in real_f.items():
        if name not in sim_f:
            continue
        if sim_f[name][0] != t:
            problems.append(f"{name}: type {sim_f[name][0]} != {t}")
        if not ({frozenset(k) for k in sim_f[name][1]} >= {frozenset(k) for k in keys} or name.endswith(
                ("cuda_graph_passes", "http_requests", "http_responses", "http_requests_active"))):
            problems.append(f"{name}: label keys {keys} not in {sim_f[name][1]}")
    missing = set(real_p["server_info_keys"]) - set(sim_p["server_info_keys"])
    if missing:
        problems.append(f"/server_info keys missing in the sim: {missing}")
    missing = set(real_p["internal_state_keys"]) - set(sim_p["internal_state_keys"])
    if missing:
        problems.append(f"internal_states keys missing in the sim: {missing}")
    # /v1/loads: same shape without --enable-metrics, and answered with it too: 0.5.23 handles
    # FastAPI's nested routers, and setup.sh pins 0.5.10.post1 to a FastAPI before them (with
    # 0.137+ its HTTP-metrics middleware answered 500 there, which specmon survives: it reads
    # /metrics then and only falls back to /v1/loads when that is 404).
    assert real_p["loads_status"] == 200, real_p["loads_status"]
    assert real_plain["loads_status"] == 200 and real_plain["metrics_status"] == 404
    # The CPU engine captures no graphs: its graph_gb is the int 0, a GPU's a float.
    real_plain["loads_shape"]["loads"][0]["memory"]["graph_gb"] = "float"
    # 0.5.23 names the accelerator: None on the CPU, the card's name on a GPU (as the simulator's).
    if "accelerator" in real_plain["loads_shape"]:
        real_plain["loads_shape"]["accelerator"] = "str"
    if real_plain["loads_shape"] != sim_plain["loads_shape"]:
        problems.append(f"/v1/loads shape: real {real_plain['loads_shape']} != sim {sim_plain['loads_shape']}")
    print("\n".join(problems))
    assert not problems, problems
