"""What the fuzz tests of the sources share across tiers: how many examples (SPECMON_FUZZ_SCALE),\nthe sanity checks on what a parser returns, and the Hypothesis strategies for /metrics text."""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from specmon.model import ArmInfo
from specmon.sources.serverinfo import arm_info_from_server_info, parse_loads
from specmon.sources.sglang import USED_METRICS


SCALE = float(os.environ.get("SPECMON_FUZZ_SCALE", "1"))


SAMPLE_TEXT = (Path(__file__).resolve().parents[1] / "data" / "sglang-metrics-sample.prom").read_text()


SAMPLE_LINES = SAMPLE_TEXT.splitlines()


CASES: collections.Counter = collections.Counter()


def fuzz(n: int):
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module", autouse=True)
def report_cases():
    yield
    print("\nfuzz cases:", dict(CASES), "total", sum(CASES.values()))


def assert_sane_numbers(obj) -> None:
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, float):
            assert math.isfinite(v), (f.name, v)
        if isinstance(v, int) and not isinstance(v, bool):
            assert abs(v) <= 2**63, (f.name, v)


ODD_NUMBERS = ["+Inf", "-Inf", "Inf", "NaN", "nan", "-1", "-0.0", "1e400", "-1e400", "1e308", "0x10", "1_0",
               "abc", "", " ", "0", "3.5", "47.0", "9" * 400, "1e-400", "Infinity", "+1", "\u22121"]


NAMES = sorted(USED_METRICS) + [n + s for n in ("time_to_first_token_seconds", "queue_time_seconds",
                                               "inter_token_latency_seconds") for s in ("_bucket", "_sum", "_count")]


LABEL_KEYS = ["le", "tp_rank", "pp_rank", "dp_rank", "model_name", "mode", "priority", "endpoint", "method", "",
              "0bad", "a-b"]


LABEL_VALUES = ["0", "1", "+Inf", "abc", "decode", "-Inf", "NaN", "0.1", "0.5", "/metrics", "GET", "", 'x\\"y',
                "\\n", "\u00e9", "{", "}", ","]


few_text = st.text(max_size=8)


number = st.sampled_from(ODD_NUMBERS) | st.floats().map(repr) | st.integers().map(str)


def _line(prefix, name, labels, braces, sep, value, tail) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    lab = f"{braces[0]}{inner}{braces[1]}" if labels or braces == ("{", "}") else ""
    return f"{prefix}{name}{lab}{sep}{value}{tail}"


metric_line = st.builds(
    _line,
    st.sampled_from(["sglang:", "sglang_", "", "sglang::", "SGLANG:"]),
    st.sampled_from(NAMES) | few_text,
    st.lists(st.tuples(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES) | few_text), max_size=3),
    st.sampled_from([("{", "}"), ("{", ""), ("", "}"), ("{", "}}"), ("{{", "}"), ("", "")]),
    st.sampled_from([" ", "  ", "\t", ""]),
    number,
    st.sampled_from(["", " 1700000000", " 1700000000000 x", "  # c", "\t"]),
)


@st.composite
def mutated_sample(draw) -> bytes:
    lines = list(SAMPLE_LINES)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["drop", "dup", "value", "label", "insert", "truncate", "byte", "le", "swap"]))
        if not lines:
            lines = [draw(metric_line)]
            continue
        i = draw(st.integers(0, len(lines) - 1))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "value":
            lines[i] = re.sub(r" \S+$", " " + draw(number), lines[i])
        elif op == "label":
            lines[i] = re.sub(r'="[^"]*"', '="' + draw(st.sampled_from(LABEL_VALUES)) + '"', lines[i], count=1)
        elif op == "le":
            lines[i] = re.sub(r'le="[^"]*"', 'le="' + draw(st.sampled_from(ODD_NUMBERS)) + '"', lines[i])
        elif op == "insert":
            j = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:j] + draw(few_text) + lines[i][j:]
        elif op == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
            if draw(st.booleans()):
                del lines[i + 1:]
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "byte":
            raw = bytearray(lines[i].encode())
            if raw:
                raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
            lines[i] = raw.decode("utf-8", errors="replace")
    return ("\n".join(lines) + "\n").encode()


ODD_JSON = [None, True, False, 0, 1, -1, 47, 2**63, 2**63 + 1, -(2**63) - 1, 10**30, 10**4000, 0.5, -0.5, 1e300,
            math.nan, math.inf, -math.inf, "", "0", "12", "1e400", "NaN", "abc", "EAGLE", "None", [], {}]


json_scalar = st.sampled_from(ODD_JSON) | st.integers() | st.floats() | few_text


json_value = st.recursive(json_scalar, lambda kids: st.lists(kids, max_size=4)
                          | st.dictionaries(st.sampled_from(["a", "loads", "0", ""]) | few_text, kids, max_size=4),
                          max_leaves=8)


def as_body(value) -> bytes:
    """How a server would send it (Python's json writes NaN/Infinity, which json_body accepts)."""
    return json.dumps(value).encode()


def check_info(value) -> None:
    CASES["server_info"] += 1
    info = arm_info_from_server_info(value)
    if not isinstance(value, dict):
        assert info is None
        return
    assert isinstance(info, ArmInfo)
    assert_sane_numbers(info)
    assert math.isfinite(info.time_scale) and info.time_scale > 0
    assert info.kv_capacity_tokens is None or info.kv_capacity_tokens >= 0
    assert info.max_running_requests is None or info.max_running_requests >= 0
    assert "sk-fuzz-key" not in repr(info) and "sk-fuzz-key" not in repr(info.server_args())


def check_loads(value) -> None:
    CASES["loads"] += 1
    r = parse_loads(value)
    if r is None:
        return
    assert_sane_numbers(r)
    for f in dataclasses.fields(r):
        v = getattr(r, f.name)
        assert v is None or v >= 0, (f.name, v)


def _plain(series):
    """A series dict with NaN made comparable."""
    return {k: [(lab, "nan" if v != v else v) for lab, v in rows] for k, rows in series.items()}
