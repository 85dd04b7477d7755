"""Hypothesis fuzzing of the parsers the collector runs on what a server sends.

Contracts under test (documented in the modules):
- MetricsSnapshot.parse raises MetricsParseError (a ValueError) and nothing else; what it
  returns reads as finite numbers or None, and its histograms are real histograms;
- ArmCollector.read_metrics (a /metrics body, any bytes) never raises: a Sample or a problem;
- json_body raises ValueError and nothing else;
- arm_info_from_server_info and parse_loads take any JSON value without raising.
A Sample, ArmInfo or LoadsReading built from odd input holds None where a number makes no
sense, never NaN, an infinity or a negative count.

Hypothesis draws are the slow part here, so each drawn example is fed to the parsers in a few
shapes (as drawn, with other line ends, in the underscore name form, nested under each key
SGLang uses...): every shape is one case. `pytest -s` prints the cases run per test.
SPECMON_FUZZ_SCALE=10 multiplies every example count (a deeper run than the fast tier's).
"""

from __future__ import annotations


from hypothesis import given
from hypothesis import strategies as st

from specmon.sources.prom import MetricsParseError, fast_series, slow_series
from specmon.sources.serverinfo import json_body
from helpers.sources_fuzz import report_cases  # noqa: F401  (autouse: importing it applies it here)
from helpers.sources_fuzz import (
    CASES,
    _plain,
    as_body,
    check_info,
    check_loads,
    fuzz,
    json_value,
    metric_line,
    mutated_sample,
)


# --- checks -------------------------------------------------------------------------------


# --- /metrics text ------------------------------------------------------------------------
# Built mostly from sampled_from, which hypothesis draws cheaply; free text and floats come in
# at a lower rate.


# --- JSON ---------------------------------------------------------------------------------


INFO_KEYS = ["model_path", "served_model_name", "version", "tp_size", "speculative_algorithm", "speculative_num_steps",
             "speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_draft_model_path",
             "kv_cache_dtype", "quantization", "mem_fraction_static", "max_total_tokens", "max_total_num_tokens",
             "max_running_requests", "chunked_prefill_size", "context_length", "enable_metrics",
             "decode_log_interval", "sim_speed", "internal_states"]
STATE_KEYS = ["effective_max_running_requests_per_dp", "memory_usage", "avg_spec_accept_length"]
MEM_KEYS = ["weight", "kvcache", "graph", "token_capacity"]
LOAD_KEYS = ["num_running_reqs", "num_waiting_reqs", "num_used_tokens", "max_total_num_tokens", "token_usage",
             "gen_throughput", "max_running_requests", "speculative"]
GOOD_INFO = {"model_path": "m", "speculative_algorithm": "EAGLE", "max_total_num_tokens": 1000,
             "api_key": "sk-fuzz-key",
             "internal_states": [{"effective_max_running_requests_per_dp": 48,
                                  "memory_usage": {"weight": 1.0, "kvcache": 2.0, "token_capacity": 1000}}]}
GOOD_LOAD = {"num_running_reqs": 1, "num_waiting_reqs": 0, "num_used_tokens": 10, "max_total_num_tokens": 1000,
             "token_usage": 0.01, "gen_throughput": 5.0, "speculative": {"accept_length": 2.0, "accept_rate": 0.5}}


def server_info_shapes(v) -> list:
    """v where a /server_info value could be: the whole body, each field, the nested states."""
    shapes = [v, {"internal_states": [v]}, {"internal_states": [{"memory_usage": v}]}]
    shapes += [{**GOOD_INFO, k: v} for k in INFO_KEYS]
    shapes += [{**GOOD_INFO, "internal_states": [{**GOOD_INFO["internal_states"][0], k: v}]} for k in STATE_KEYS]
    shapes += [{"internal_states": [{"memory_usage": {**GOOD_INFO["internal_states"][0]["memory_usage"], k: v}}]}
               for k in MEM_KEYS]
    shapes.append(dict.fromkeys(INFO_KEYS, v))
    return shapes


def loads_shapes(v) -> list:
    shapes = [v, {"loads": v}, {"loads": [v]}, {"loads": [v, GOOD_LOAD]}]
    shapes += [{"loads": [{**GOOD_LOAD, k: v}]} for k in LOAD_KEYS]
    shapes += [{"loads": [{**GOOD_LOAD, "speculative": {"accept_length": 2.0, k: v}}]}
               for k in ("accept_length", "accept_rate")]
    shapes.append({"loads": [dict.fromkeys(LOAD_KEYS, v)]})
    return shapes


@fuzz(300)
@given(json_value)
def test_fuzz_server_info(v):
    for shape in server_info_shapes(v):
        check_info(shape)
        check_info(json_body(as_body(shape)))  # as sent on the wire: NaN/Infinity literals, big ints


@fuzz(300)
@given(json_value)
def test_fuzz_loads(v):
    for shape in loads_shapes(v):
        check_loads(shape)
        check_loads(json_body(as_body(shape)))


@fuzz(300)
@given(st.lists(metric_line, max_size=8), mutated_sample())
def test_fuzz_the_fast_path_reads_what_the_parser_reads_or_hands_it_over(lines, body):
    for drawn in ("\n".join(lines), body.decode("utf-8", errors="replace")):
        # the parser's input as MetricsSnapshot.parse hands it over: sample lines, no comments
        text = "\n".join(ln for ln in drawn.splitlines() if ln and ln[0] != "#") + "\n"
        fast = fast_series(text)
        try:
            slow = slow_series(text)
        except MetricsParseError:
            assert fast is None, text  # never a reading where the parser says the body is bad
            CASES["fast path: parser refused"] += 1
            continue
        if fast is None:
            CASES["fast path: handed over"] += 1
        else:
            assert _plain(fast) == _plain(slow), text
            CASES["fast path: same reading"] += 1
