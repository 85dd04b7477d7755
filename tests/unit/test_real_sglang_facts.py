"""Fast tier: what the real SGLang 0.5.10.post1 showed (tests/real/test_real_sglang.py, measured on the
CPU engine), pinned as plain facts specmon's code must honour without starting a server."""

from __future__ import annotations

import pytest

from specmon.load.client import trusted_meta
from specmon.model import ArmInfo
from specmon.analysis.predict import admitted_at_once, predict_knee

# The final meta_info of a streamed /generate on the real server (--enable-metrics), for a request
# that waited ~10 s in the queue (6 running, 6 queued): the scheduler stamps never arrive.
REAL_FINAL_META = {
    "id": "a1", "finish_reason": {"type": "length", "length": 32}, "prompt_tokens": 1024,
    "weight_version": "default", "total_retractions": 0, "queue_time": 0.0, "prefill_waiting_latency": None,
    "prefill_launch_latency": None, "reasoning_tokens": 0, "completion_tokens": 32, "cached_tokens": 0,
    "cached_tokens_details": None, "dp_rank": None, "e2e_latency": 19.648816562999855,
    "request_received_ts": 1796037918.0, "api_server_dispatch_finish_ts": 1796037918.01,
    "response_sent_to_client_ts": 1796037937.6, "request_finished_ts": 1796037937.65,
    "inference_time": 4321.5, "decode_throughput": 21.3,
}


def test_queue_time_without_scheduler_stamps_is_unknown_not_zero():
    m = trusted_meta(REAL_FINAL_META)
    assert "queue_time" not in m and "prefill_waiting_latency" not in m
    assert m["e2e_latency"] == REAL_FINAL_META["e2e_latency"] and m["completion_tokens"] == 32
    # A server that does send its stamps keeps its queue time.
    stamped = dict(REAL_FINAL_META, forward_entry_time=1796037928.0, queue_time=9.9)
    assert trusted_meta(stamped)["queue_time"] == 9.9


def test_predicted_knee_is_what_sglang_admits():
    # 8,192-token pool, 1,024 in / 256 out, new_token_ratio 0.7: the real server ran 6 and queued the rest.
    assert admitted_at_once(8192, 1024, 256, 0.7) == 6
    info = ArmInfo(kv_capacity_tokens=8192, max_running_requests=2048)
    k = predict_knee(info, 1024, 256, new_token_ratio=0.7)
    assert k.concurrency == 6
    assert "new_token_ratio 0.70" in k.detail and "6.4" in k.detail and "(1024+256)" in k.detail
    # Without the gauge (no --enable-metrics) SGLang's starting ratio is assumed, and said so.
    k = predict_knee(info, 1024, 256)
    assert k.concurrency == 6 and "assumed" in k.detail
    # The request cap still wins when it is lower.
    assert predict_knee(ArmInfo(kv_capacity_tokens=8192, max_running_requests=4), 1024, 256, 0.7).concurrency == 4


@pytest.mark.parametrize("version, ignore_eos, n", [("0.5.23", True, 5), ("0.5.10.post1", True, 6), ("0.5.23", False, 6)])
def test_predicted_knee_keeps_the_whole_output_of_0523s_ignore_eos_requests(version, ignore_eos, n):
    # A 1,024-token pool and requests of 128 in / 48 out that ignore EOS (the ramp's): the real
    # 0.5.23 ran 5 (each running request keeps room for all of its output: 1,024 / 176 = 5.8);
    # 0.5.10 keeps new_token_ratio of it, and so does 0.5.23 for requests that may stop early
    # (128 + 48 for the newest, 128 + 48 x 0.7 for each before it: 6)
    info = ArmInfo(version=version, kv_capacity_tokens=1024, max_running_requests=320)
    k = predict_knee(info, 128, 48, new_token_ratio=0.7, ignore_eos=ignore_eos)
    assert k.concurrency == n and k.kv_admitted == n and k.bound_by == "KV pool"
    assert ("all of the output" in k.detail) == (n == 5), k.detail
    assert k.new_token_ratio == (1.0 if n == 5 else 0.7) and not k.ratio_assumed  # the ratio the figure used


@pytest.mark.parametrize("pool, isl, osl, ratio, n", [(175000, 8800, 1024, 0.7, 18), (20000, 1800, 200, 0.7, 10),
                                                      (175000, 8800, 1024, 1.0, 17), (1024, 128, 48, 1.0, 5),
                                                      (1000, 800, 201, 0.7, 0)])
def test_admission_bound_examples(pool, isl, osl, ratio, n):
    assert admitted_at_once(pool, isl, osl, ratio) == n


def test_oom_killed_scheduler_is_named():
    """The last lines of a real SGLang 0.5.10 started with --mem-fraction-static 1.5 (CPU engine)."""
    from specmon.sources.logparse import failure_cause

    tail = [
        "[2026-11-30 12:13:36] Load weight end. elapsed=0.05 s, type=LlamaForCausalLM, avail mem=21.78 GB, mem usage=0.01 GB.",
        "    raise EOFError",
        "EOFError",
        "    raise _scheduler_died_error(i, scheduler_procs[i])",
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), "
        "a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.",
    ]
    cause = failure_cause(tail)
    assert cause.startswith("scheduler killed (SIGKILL) during start-up: likely the OS OOM killer")
    assert "--mem-fraction-static" in cause
