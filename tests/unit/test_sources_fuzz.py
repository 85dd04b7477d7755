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

import asyncio
import math
import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmon.model import ArmInfo, ArmSpec, Sample
from specmon.sources.prom import (
    MetricsParseError, MetricsSnapshot, _keep_lines, fast_series, filtered_series, slow_series,
)
from specmon.sources.serverinfo import json_body
from specmon.sources.sglang import USED_METRICS, ArmCollector
from helpers.sources_fuzz import report_cases  # noqa: F401  (autouse: importing it applies it here)
from helpers.sources_fuzz import (
    CASES,
    SAMPLE_TEXT,
    _plain,
    as_body,
    assert_sane_numbers,
    check_info,
    check_loads,
    fuzz,
    json_value,
    metric_line,
    mutated_sample,
)


@pytest.fixture(scope="module")
def col():
    c = ArmCollector(ArmSpec("fuzz", "http://127.0.0.1:9"))  # its client never sends a request here
    c.info = ArmInfo(model="m", speculative_algorithm="EAGLE", kv_capacity_tokens=1000, time_scale=2.0)
    yield c
    asyncio.run(c.aclose())


# --- checks -------------------------------------------------------------------------------

COUNT_FIELDS = ("running_reqs", "queued_reqs", "kv_used_tokens", "kv_capacity_tokens")


def assert_sane_sample(s: Sample) -> None:
    assert_sane_numbers(s)
    for name in COUNT_FIELDS:
        v = getattr(s, name)
        assert v is None or (isinstance(v, int) and v >= 0), (name, v)
    assert s.kv_usage is None or s.kv_usage >= 0
    assert s.accept_length is None or s.accept_length >= 1.0


def assert_sane_snapshot(snap: MetricsSnapshot) -> None:
    for name in snap.names():
        v = snap.value(name)
        assert v is None or math.isfinite(v), (name, v)
    for name in USED_METRICS:
        h = snap.histogram(name)
        if h is None:
            continue
        bounds = [b for b, _ in h.buckets]
        counts = [c for _, c in h.buckets]
        assert bounds == sorted(set(bounds)) and not any(math.isnan(b) for b in bounds)
        assert all(math.isfinite(c) and c >= 0 for c in counts) and counts == sorted(counts)
        assert h.sum is None or math.isfinite(h.sum)
        assert h.count is None or (math.isfinite(h.count) and h.count >= 0)


def read_after_clean(col: ArmCollector, body: bytes, kind: str, base: MetricsSnapshot) -> None:
    """Feed a body after a clean one, so the window deltas (rates, percentiles) run on it too."""
    CASES[kind] += 1
    col.window.clear()
    base.ts = time.time() - 5.0
    col.window.add(base)
    sample, problem = col.read_metrics(body, t0=time.time())
    assert (sample is None) != (problem is None)
    if sample is not None:
        assert_sane_sample(sample)
        assert_sane_snapshot(col.window.newest)
    else:
        assert isinstance(problem, str) and problem


def parse_direct(text: str) -> None:
    try:
        snap = MetricsSnapshot.parse(text, ts=0.0, only=USED_METRICS)
    except MetricsParseError:
        return
    assert_sane_snapshot(snap)


# --- /metrics text ------------------------------------------------------------------------
# Built mostly from sampled_from, which hypothesis draws cheaply; free text and floats come in
# at a lower rate.


other_line = st.sampled_from(["# TYPE sglang:num_running_reqs gauge", "# HELP x y", "#", "", "   ", "\r",
                              "# TYPE sglang:time_to_first_token_seconds histogram", "\x00", "\u2028"])

# A small body that reads well (a TTFT histogram, the decode counter, running requests): the
# drawn lines are also mixed into it, so odd lines meet good ones of the same series.
GOOD = "\n".join([
    'sglang:num_running_reqs{model_name="m",tp_rank="0"} 3.0',
    'sglang:realtime_tokens_total{mode="decode",model_name="m",tp_rank="0"} 120000.0',
    *(f'sglang:time_to_first_token_seconds_bucket{{le="{b}",model_name="m"}} {c}'
      for b, c in (("0.1", 140.0), ("0.2", 200.0), ("0.4", 240.0), ("+Inf", 410.0))),
    'sglang:time_to_first_token_seconds_sum{model_name="m"} 180.0',
    'sglang:time_to_first_token_seconds_count{model_name="m"} 410.0',
]) + "\n"
# Window bases: the clean scrape a fuzzed one follows (GOOD a little earlier, or SGLang's sample).
GOOD_BASE = MetricsSnapshot.parse(GOOD.replace(" 410.0", " 400.0").replace(" 120000.0", " 100000.0"), ts=0.0,
                                  only=USED_METRICS)
SAMPLE_BASE = MetricsSnapshot.parse(SAMPLE_TEXT, ts=0.0, only=USED_METRICS)


@fuzz(250)
@given(st.lists(metric_line | other_line, max_size=8))
def test_fuzz_metrics_lines(col, lines):
    text = "\n".join(lines) + "\n"
    parse_direct(text)
    shapes = [text, "\r\n".join(lines) + "\r\n", "\r".join(lines), text.replace("sglang:", "sglang_"),
              GOOD + text, text + GOOD, text + text]
    for body in shapes:
        read_after_clean(col, body.encode(), "metrics lines", GOOD_BASE)


@fuzz(150)
@given(mutated_sample())
def test_fuzz_mutated_sglang_sample(col, body):
    read_after_clean(col, body, "mutated sample", SAMPLE_BASE)
    read_after_clean(col, re.sub(rb"(?m)^sglang:", b"sglang_", body), "mutated sample", SAMPLE_BASE)


@fuzz(300)
@given(st.binary(max_size=2000) | st.text(max_size=300).map(str.encode))
def test_fuzz_metrics_arbitrary_bytes(col, body):
    read_after_clean(col, body, "metrics bytes", GOOD_BASE)
    read_after_clean(col, GOOD.encode() + body, "metrics bytes", GOOD_BASE)


def test_parse_error_is_the_only_exception_and_a_value_error():
    assert issubclass(MetricsParseError, ValueError)
    with pytest.raises(MetricsParseError):
        MetricsSnapshot.parse('sglang:num_running_reqs{tp_rank="0" 1\n', ts=0.0, only=USED_METRICS)
    with pytest.raises(MetricsParseError):  # more lines than the parser is given
        MetricsSnapshot.parse("sglang:num_running_reqs 1\n" * 10_001, ts=0.0, only=USED_METRICS)


# --- JSON ---------------------------------------------------------------------------------


@fuzz(400)
@given(st.binary(max_size=300) | st.builds(lambda v, cut: as_body(v)[:cut], json_value, st.integers(0, 200))
       | st.sampled_from([b"[" * 100_000, b"{\"a\":" * 50_000, b"1" * 5000, b"\xff\xfe[\x00]\x00", b"NaN"]))
def test_fuzz_json_body(body):
    CASES["json bytes"] += 1
    try:
        value = json_body(body)
    except ValueError:
        return
    check_info(value)
    check_loads(value)


def test_the_fast_path_reads_sglangs_own_body_as_the_parser_does():
    kept = _keep_lines(SAMPLE_TEXT, USED_METRICS)
    fast = fast_series(kept)
    assert fast is not None and _plain(fast) == _plain(slow_series(kept))  # SGLang's lines are all plain


def _long_way(text: str):
    """What MetricsSnapshot.parse read before filtered_series: _keep_lines, then the fast path or
    the parser ("error" when either refuses the body)."""
    try:
        kept = _keep_lines(text, USED_METRICS)
        fast = fast_series(kept)
        return fast if fast is not None else slow_series(kept)
    except MetricsParseError:
        return "error"


def test_the_filtered_path_reads_sglangs_own_body_as_the_long_way():
    got = filtered_series(SAMPLE_TEXT, USED_METRICS)
    assert got is not None and _plain(got) == _plain(_long_way(SAMPLE_TEXT))
    underscore = re.sub(r"(?m)^sglang:", "sglang_", SAMPLE_TEXT)
    assert _plain(filtered_series(underscore, USED_METRICS)) == _plain(_long_way(underscore)) == _plain(got)


@fuzz(300)
@given(st.lists(metric_line | other_line, max_size=8), mutated_sample())
def test_fuzz_the_filtered_path_reads_what_the_long_way_reads_or_hands_it_over(lines, body):
    drawn_lines = "\n".join(lines)
    for drawn in (drawn_lines, GOOD + drawn_lines, drawn_lines + "\n" + GOOD, body.decode("utf-8", errors="replace")):
        got = filtered_series(drawn, USED_METRICS)
        long = _long_way(drawn)
        if got is not None:
            assert long != "error" and _plain(got) == _plain(long), drawn
            CASES["filtered path: same reading"] += 1
            continue
        # handed over: only for what the fast path would hand over too, or for odd line breaks
        kept_plain = long != "error" and fast_series(_keep_lines(drawn, USED_METRICS)) is not None
        assert not kept_plain or any(c in drawn for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), drawn
        CASES["filtered path: handed over"] += 1
        # and then MetricsSnapshot.parse gives the long way's answer
        try:
            snap = MetricsSnapshot.parse(drawn, ts=0.0, only=USED_METRICS)
        except MetricsParseError:
            assert long == "error"
        else:
            assert _plain(snap._series) == _plain(long)
