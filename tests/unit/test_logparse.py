"""Log-line parsing against SGLang's real lines (its documented formats and logs captured from the real server)."""

from pathlib import Path

import pytest

from specmon.sources import logparse as lp

DATA = Path(__file__).resolve().parents[1] / "data"

EAGLE = ("[2025-11-30 09:15:43] Decode batch, #running-req: 48, #token: 55631, token usage: 0.09, accept len: 3.08, "
         "accept rate: 0.77, cuda graph: True, gen throughput (token/s): 6380.24, #queue-req: 16")
PLAIN = ("[2025-11-30 09:15:43] Decode batch, #running-req: 48, #token: 55631, token usage: 0.09, cuda graph: True, "
         "gen throughput (token/s): 6380.24, #queue-req: 16")


def test_decode_with_speculation():
    d = lp.parse_decode(EAGLE)
    assert (d.running, d.tokens, d.token_usage, d.accept_length, d.accept_rate, d.graph, d.gen_tok_s, d.queued) == (
        48, 55631, 0.09, 3.08, 0.77, True, 6380.24, 16)
    assert d.prefix == "" and d.ts_text == "2025-11-30 09:15:43"


def test_decode_without_speculation_has_no_accept_length():
    d = lp.parse_decode(PLAIN)
    assert d.accept_length is None and d.accept_rate is None and d.running == 48 and d.queued == 16


@pytest.mark.parametrize("line, prefix, tokens, usage, alen", [
    # TP prefix, SGLANG_LOG_MS, SGLANG_LOG_FORWARD_ITERS counter
    ("[2025-11-30 09:15:43.512 TP0] Decode batch [1200], #running-req: 3, #token: 900, token usage: 0.01, "
     "accept len: 2.67, accept rate: 0.56, cuda graph: True, gen throughput (token/s): 120.50, #queue-req: 0",
     "TP0", 900, 0.01, 2.67),
    # hybrid Mamba pool: full token usage is the KV figure
    ("[2025-11-30 09:15:43 TP0 EP0] Decode batch, #running-req: 16, #full token: 40000, full token usage: 0.21, "
     "mamba num: 16, mamba usage: 0.50, accept len: 1.90, accept rate: 0.30, cuda graph: True, "
     "gen throughput (token/s): 1686.10, #queue-req: 2", "TP0 EP0", 40000, 0.21, 1.90),
    # hybrid SWA pool and the MFU tail
    ("[2025-11-30 09:15:43] Decode batch, #running-req: 2, #full token: 10, full token usage: 0.30, #swa token: 5, "
     "swa token usage: 0.70, cuda graph: False, gen throughput (token/s): 10.00, #queue-req: 1, "
     "est. decode TFLOPS/s (per GPU): 1.0, est. read BW (GB/s per GPU): 2.0, est. write BW (GB/s per GPU): 3.0",
     "", 10, 0.30, None),
    # PD decode part before the graph field
    ("[2025-11-30 09:15:43] Decode batch, #running-req: 4, #token: 100, token usage: 0.02, pre-allocated usage: 0.10, "
     "#prealloc-req: 1, #transfer-req: 0, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 50.00, "
     "#queue-req: 3", "", 100, 0.02, None),
])
def test_decode_variants(line, prefix, tokens, usage, alen):
    d = lp.parse_decode(line)
    assert d is not None
    assert (d.prefix, d.tokens, d.token_usage, d.accept_length) == (prefix, tokens, usage, alen)


def test_prefill_lines():
    p = lp.parse_prefill("[2025-11-30 09:15:30] Prefill batch, #new-seq: 5, #new-token: 5115, #cached-token: 5, "
                         "token usage: 0.05, #running-req: 23, #queue-req: 0, cuda graph: False, "
                         "input throughput (token/s): 7087.92")
    assert (p.new_seqs, p.new_tokens, p.cached_tokens, p.token_usage, p.running, p.queued, p.input_tok_s) == (
        5, 5115, 5, 0.05, 23, 0, 7087.92)
    assert lp.parse_decode("[2025-11-30 09:15:30] Prefill batch, #new-seq: 1") is None
    assert lp.parse_prefill(EAGLE) is None


def test_real_sglang_log_fixture():
    """A log captured from the real SGLang 0.5.10.post1 server (CPU engine, `cpu graph`)."""
    lines = (DATA / "sglang_real_startup.log").read_text().splitlines()
    decodes = [d for d in map(lp.parse_decode, lines) if d]
    prefills = [p for p in map(lp.parse_prefill, lines) if p]
    assert len(decodes) >= 5 and len(prefills) >= 2
    assert all(d.accept_length is None for d in decodes)  # no speculation on that server
    assert max(d.running for d in decodes) >= 2
    phases = [p[0] for p in map(lp.parse_phase, lines) if p]
    assert phases[:3] == [lp.PHASE_LOADING, lp.PHASE_LOADED, lp.PHASE_KV_POOL]
    assert phases[-1] == lp.PHASE_READY and lp.PHASE_HTTP_UP in phases
    state = lp.LogState()
    for line in lines:
        state.feed(line)
    assert state.kv_capacity_tokens == 8192
    s = state.sample("real", 1.0)
    assert s.source == "log" and s.running_reqs is not None and s.gen_tok_s is not None
    assert s.accept_length is None and s.spec_enabled is None
    assert lp.failure_cause(lines) is None


def test_kv_pool_phase_detail():
    phase = lp.parse_phase("[2025-11-30 09:15:02] KV Cache is allocated. #tokens: 617344, K size: 37.68 GB, V size: 37.68 GB")
    assert phase == (lp.PHASE_KV_POOL, "#tokens: 617344, K size: 37.68 GB, V size: 37.68 GB")
    assert lp.kv_pool_tokens("[x] max_total_num_tokens=175000, chunked_prefill_size=8192") == 175000


def test_log_state_speculative_sample():
    state = lp.LogState()
    state.feed("[2025-11-30 09:15:02] KV Cache is allocated. #tokens: 617344, K size: 1 GB, V size: 1 GB")
    state.feed(EAGLE)
    s = state.sample("a", 5.0)
    assert (s.running_reqs, s.queued_reqs, s.kv_used_tokens, s.kv_capacity_tokens, s.accept_length,
            s.spec_enabled) == (48, 16, 55631, 617344, 3.08, True)
    # a prefill after it: running grows by the new sequences, queue follows
    state.feed("[2025-11-30 09:15:44] Prefill batch, #new-seq: 4, #new-token: 400, #cached-token: 0, "
               "token usage: 0.10, #running-req: 44, #queue-req: 12, cuda graph: False, input throughput (token/s): 1.00")
    s = state.sample("a", 6.0)
    assert (s.running_reqs, s.queued_reqs, s.kv_usage) == (48, 12, 0.10)


def test_empty_state_is_all_unknown():
    s = lp.LogState().sample("a", 0.0)
    assert s.running_reqs is None and s.kv_usage is None and s.gen_tok_s is None


@pytest.mark.parametrize("lines, cause", [
    (["ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use"],
     "port 30000 already in use (SGLang could not bind 127.0.0.1:30000; another process holds it)"),
    (["OSError: [Errno 98] Address already in use"], "port in use"),
    (["[2025-11-30 09:15:02] ValueError: Spec v2 currently only supports topk = 1 for speculative decoding."],
     "speculative_eagle_topk must be unset (or 1) with SGLANG_ENABLE_SPEC_V2=1"),
    (["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"], "CUDA out of memory"),
    (["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: 0.3"],
     "not enough GPU memory left for the KV pool (raise --mem-fraction-static or use a smaller model)"),
    (["ValueError: Unknown quantization method: nvfp9. Must be one of ['fp8']."], "unsupported quantization: nvfp9"),
    (["OSError: /models/nope is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'"],
     "model path not found (not a local folder with config.json, nor a reachable Hugging Face id)"),
    (["Traceback (most recent call last):", "  File \"x.py\", line 1", "KeyError: 'foo'"], "KeyError: 'foo'"),
    (["nothing to see"], None),
])
def test_failure_causes(lines, cause):
    assert lp.failure_cause(lines) == cause


def test_failure_cause_from_real_argparse_error():
    lines = (DATA / "sglang_real_bad_kv_dtype.log").read_text().splitlines()
    cause = lp.failure_cause(lines)
    assert cause.startswith("bad flag: argument --kv-cache-dtype: invalid choice: 'fp9'")


def test_real_bind_error_after_loading_weights():
    """SGLang 0.5.10.post1 (CPU engine, serve.sh) started on a port a test socket held (bound, never
    accepting): it loads the model, then uvicorn cannot bind at 08:36:40; the process lives on, its
    warm-up thread polling /model_info, until it SIGKILLs itself at 08:48:42 (exit -9, 12 minutes)."""
    lines = (DATA / "sglang_real_bind_in_use.log").read_text().splitlines()
    assert "Initialization failed. warmup error" in lines[48] and lines[-1].startswith("requests.exceptions.ConnectTimeout")
    hits = [(i, lp.bind_error(line)) for i, line in enumerate(lines) if lp.bind_error(line)]
    assert [h for _, h in hits] == [("127.0.0.1", 39113)]
    phases = [p[0] for p in map(lp.parse_phase, lines[:hits[0][0]]) if p]
    assert lp.PHASE_KV_POOL in phases  # after the weights and the KV pool
    assert lp.failure_cause(lines) == "port 39113 already in use (SGLang could not bind 127.0.0.1:39113; another process holds it)"
    assert lp.bind_error("[2026-12-01 08:34:11] INFO:     Waiting for application shutdown.") is None


def test_real_speculative_assert():
    """SGLang 0.5.10.post1 with --speculative-algorithm EAGLE --speculative-eagle-topk 4 (no
    --speculative-num-steps): a bare AssertionError in server_args.py's speculative handling."""
    lines = (DATA / "sglang_real_spec_assert.log").read_text().splitlines()
    assert lines[-1] == "AssertionError"
    cause = lp.failure_cause(lines)
    assert cause.startswith("SGLang rejected the speculative-decoding arguments: "
                            "and self.speculative_num_draft_tokens is None (server_args.py line 3056); ")
    assert "--speculative-num-steps" in cause


@pytest.mark.parametrize("lines, cause", [
    # an assert with a message, in SGLang's speculative handling: the message
    (['  File "/v/sglang/srt/server_args.py", line 2979, in _handle_speculative_decoding',
      "    assert not MoeRunnerBackend(",
      "AssertionError: Currently speculative MoE runner backend doesn't support flashinfer_trtllm"],
     "SGLang rejected the speculative-decoding arguments: Currently speculative MoE runner backend doesn't "
     "support flashinfer_trtllm (server_args.py line 2979)"),
    # Python 3.10 prints the statement's first line only: the place is all there is
    (['  File "/v/sglang/srt/server_args.py", line 3054, in _handle_speculative_decoding',
      "    assert (", "AssertionError"],
     "SGLang rejected the speculative-decoding arguments: assert failed (server_args.py line 3054)"),
    # a bare assert elsewhere: the failing source line and the place
    (["Traceback (most recent call last):", '  File "/v/sglang/srt/server_args.py", line 6081, in check_server_args',
      "    assert self.base_gpu_id >= 0", "           ^^^^^^^^^^^^^^^^^^^^^", "AssertionError"],
     "AssertionError: assert self.base_gpu_id >= 0 (server_args.py line 6081, in check_server_args)"),
])
def test_assertion_causes(lines, cause):
    assert lp.failure_cause(lines) == cause


def test_an_earlier_assert_does_not_hide_the_last_exception():
    lines = ['  File "/v/sglang/srt/server_args.py", line 3054, in _handle_speculative_decoding', "    assert (",
             "AssertionError", "later:", "RuntimeError: the one that ended it"]
    assert lp.failure_cause(lines) == "RuntimeError: the one that ended it"


def test_speculative_assert_of_0_5_23_is_named():
    """SGLang 0.5.23 asserts in arg_groups/speculative_hook.py (`cfg.`), not server_args.py (`self.`):
    the last lines of the real server started with --speculative-algorithm EAGLE
    --speculative-eagle-topk 4 and no --speculative-num-steps."""
    lines = (DATA / "sglang_real_spec_assert_0523.log").read_text().splitlines()
    cause = lp.failure_cause(lines)
    assert cause.startswith("SGLang rejected the speculative-decoding arguments: and cfg.speculative_num_draft_tokens "
                            "is None (speculative_hook.py line ")
    assert "need --speculative-num-steps" in cause
