"""Trace files for `specmon ramp --trace`: each format read from a small file written here, bad
lines counted and skipped, bad files one line and exit 2, the diurnal pattern's shape, and the
prompts' exact lengths and shared prefixes."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from specmon.cli import build_parser
from specmon.commands.ramp import plan_and_trace
from specmon.errors import UsageError
from specmon.load.trace import MOONCAKE_BLOCK, diurnal_rate, load_trace, read_trace


def _lines(path, objs):
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return str(path)


def test_specmon_jsonl_keeps_t_and_sorts(tmp_path):
    f = _lines(tmp_path / "t.jsonl", [{"t": 2.5, "input_len": 30, "output_len": 3},
                                      {"t": 0.5, "input_len": 10, "output_len": 1, "prefix_group": "sys"},
                                      {"t": 1, "input_len": 20, "output_len": 2, "prefix_group": 7, "prefix_len": 5}])
    tr = read_trace(f)
    assert tr.kind == "jsonl" and not tr.skipped
    assert [(r.t, r.input_len, r.output_len) for r in tr.requests] == [(0.5, 10, 1), (1.0, 20, 2), (2.5, 30, 3)]
    assert tr.requests[0].prefix_group == "sys" and tr.requests[1].prefix_group == "7"
    assert tr.requests[1].prefix_len == 5


def test_jsonl_timestamps_are_rebased_to_the_first(tmp_path):
    f = _lines(tmp_path / "t.jsonl", [{"timestamp": 1700000010.0, "input_len": 4, "output_len": 1},
                                      {"timestamp": 1700000012.5, "input_len": 4, "output_len": 1}])
    assert [r.t for r in read_trace(f).requests] == [0.0, 2.5]


def test_mooncake_milliseconds_and_hash_blocks(tmp_path):
    f = _lines(tmp_path / "m.jsonl", [{"timestamp": 0, "input_length": 700, "output_length": 52, "hash_ids": [0, 1]},
                                      {"timestamp": 105, "input_length": 1100, "output_length": 26,
                                       "hash_ids": [0, 1, 2]}])
    tr = read_trace(f)
    assert tr.kind == "mooncake"
    assert [r.t for r in tr.requests] == [0.0, 0.105]
    a, b = tr.prompt(0).input_ids, tr.prompt(1).input_ids
    assert len(a) == 700 and len(b) == 1100
    assert a == b[:700]  # blocks 0 and 1 are the same tokens in both (and block 1 is cut at 700 in a)
    assert a[:MOONCAKE_BLOCK] != a[MOONCAKE_BLOCK:2 * MOONCAKE_BLOCK][:MOONCAKE_BLOCK]


def test_azure_csv(tmp_path):
    f = tmp_path / "azure.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,396,109\n"
                 "2023-11-16 18:15:51.1000000,0,10\n")
    tr = read_trace(str(f))
    assert tr.kind == "azure"
    assert [(r.input_len, r.output_len) for r in tr.requests] == [(374, 44), (396, 109)]
    assert tr.requests[1].t == pytest.approx(4.314579, abs=1e-5)
    assert len(tr.skipped) == 1 and tr.skipped[0].startswith(f"{f}:4: ContextTokens: 0 tokens")


def test_burstgpt_csv_any_column_order_gzip(tmp_path):
    text = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,1,2.0,ChatGPT,472,18,490,Conversation log\n"
            "45,1,3.1,GPT-4,1087,230,1317,Conversation log\n"
            "118,2,1.0,ChatGPT,417,0,417,Conversation log\n")
    f = tmp_path / "burst.csv.gz"
    f.write_bytes(gzip.compress(text.encode()))
    tr = read_trace(str(f))
    assert tr.kind == "burstgpt"
    assert [(r.t, r.input_len, r.output_len) for r in tr.requests] == [(0.0, 472, 18), (40.0, 1087, 230)]
    assert tr.skipped == [f"{f}:4: Response tokens: 0 tokens (a request with none cannot be replayed)"]


def test_bad_lines_are_counted_and_named(tmp_path):
    f = _lines(tmp_path / "t.jsonl", [{"t": 0, "input_len": 8, "output_len": 2}, "{not json",
                                      {"t": -1, "input_len": 8, "output_len": 2}, {"t": 1, "input_len": "x", "output_len": 2},
                                      {"t": 2, "input_len": 8, "output_len": 1.5}, [1, 2]])
    tr = read_trace(f)
    assert len(tr.requests) == 1
    assert [s.split(": ", 1)[0] for s in tr.skipped] == [f"{f}:{n}" for n in (2, 3, 4, 5, 6)]


@pytest.mark.parametrize("content, words", [
    ("", "not a trace this reads"),
    ("a,b,c\n1,2,3\n", "not a trace this reads"),
    ('{"t": 0}\n{"x": 1}\n', "t.jsonl:1: no usable request (2 bad lines; first: input_len"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "t.jsonl:2: no usable request"),
])
def test_a_file_without_a_usable_request_is_one_line_naming_it(tmp_path, content, words):
    f = tmp_path / "t.jsonl"
    f.write_text(content)
    with pytest.raises(UsageError) as e:
        read_trace(str(f))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_cli_bad_trace_exits_2_with_one_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text("{garbage\n")
    p = subprocess.run([sys.executable, "-m", "specmon", "ramp", "http://127.0.0.1:9", "--trace", str(f),
                        "--headless"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(f"specmon: error: --trace {f}:1: no usable request") and "Traceback" not in p.stderr


def test_prefix_group_shares_its_first_tokens_and_lengths_are_exact(tmp_path):
    f = _lines(tmp_path / "t.jsonl", [{"t": 0, "input_len": 100, "output_len": 1, "prefix_group": "g", "prefix_len": 40},
                                      {"t": 1, "input_len": 60, "output_len": 1, "prefix_group": "g", "prefix_len": 50},
                                      {"t": 2, "input_len": 100, "output_len": 1, "prefix_group": "h", "prefix_len": 40},
                                      {"t": 3, "input_len": 30, "output_len": 1}])
    tr = read_trace(f)
    p = [tr.prompt(i).input_ids for i in range(4)]
    assert [len(x) for x in p] == [100, 60, 100, 30]
    assert p[0][:40] == p[1][:40] and p[0][40] != p[1][40]  # shared up to the shorter prefix
    assert p[0][:40] != p[2][:40]  # another group
    assert tr.prompt(0).input_ids == p[0]  # the same on every arm and call


def test_speed_duration_and_count_cut_the_trace(tmp_path):
    f = _lines(tmp_path / "t.jsonl", [{"t": t, "input_len": 4, "output_len": 1} for t in range(10)])
    tr = load_trace(f, speed=2.0)
    assert tr.offset(9) == 4.5 and tr.mean_rate == pytest.approx(10 / 4.5)
    assert len(load_trace(f, speed=2.0, duration_s=2.0).requests) == 4  # t/2 < 2: t = 0..3
    assert len(load_trace(f, max_requests=3).requests) == 3


def test_diurnal_rises_to_its_peak_and_falls(tmp_path):
    tr = load_trace("diurnal:20:100", seed=3, input_len=64, output_len=8)
    assert tr.kind == "diurnal" and {(r.input_len, r.output_len) for r in tr.requests} == {(64, 8)}
    counts = [sum(1 for r in tr.requests if q * 25 <= r.t < (q + 1) * 25) for q in range(4)]
    expected = [sum(diurnal_rate(q * 25 + s + 0.5, 20, 100) for s in range(25)) for q in range(4)]
    # the middle half holds the peak: about 3x the requests of the outer quarters
    assert counts[1] + counts[2] > 2 * (counts[0] + counts[3])
    total = sum(expected)
    assert abs(len(tr.requests) - total) < 4 * total ** 0.5  # Poisson: within 4 sigma of the integral
    assert [r.t for r in load_trace("diurnal:20:100", seed=3, input_len=64, output_len=8).requests] == \
        [r.t for r in tr.requests]
    assert len(load_trace("diurnal:20:100", seed=3, duration_s=50).requests) == sum(counts[:2])


@pytest.mark.parametrize("spec", ["diurnal:x", "diurnal:0", "diurnal:1:0.5", "diurnal:1:2:3"])
def test_bad_diurnal_spec(spec):
    with pytest.raises(UsageError, match=r"--trace diurnal"):
        load_trace(spec)


def _plan(*args):
    return plan_and_trace(build_parser().parse_args(["ramp", "http://127.0.0.1:1", *args]))


def test_plan_takes_the_trace_mean_rate_and_refuses_what_conflicts(tmp_path):
    f = _lines(tmp_path / "t.jsonl", [{"t": t, "input_len": 4, "output_len": 1} for t in (0, 1, 2, 4)])
    plan, tr = _plan("--trace", f, "--trace-speed", "2")
    assert plan.trace == f and plan.trace_speed == 2.0 and plan.rates == [2.0] and plan.level_duration_s is None
    for flags, words in ((["--rates", "1"], "--rates: not with --trace"),
                         (["--levels", "2"], "--levels: not with trace"),
                         (["--turns", "2"], "--turns: not with trace"),
                         (["--dataset", f], "--dataset: not with trace")):
        with pytest.raises(UsageError, match=words):
            _plan("--trace", f, *flags)
    with pytest.raises(UsageError, match="--trace-speed: only with --trace"):
        _plan("--levels", "2", "--trace-speed", "2")
