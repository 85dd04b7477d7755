"""End to end (slow tier): a simulator writing SGLang's per-request export files, driven by
`specmon ramp --trace` in one process and watched by `specmon attach --request-metrics-dir` in
another: every request the trace sent is observed once, with its lengths; the diurnal pattern
sends exactly the requests its seeded schedule holds."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers.simproc import REPO, start_sim
from specmon.load.trace import load_trace


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _specmon(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "specmon", *args], cwd=str(REPO), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def test_trace_replayed_by_ramp_is_observed_by_attach(tmp_path):
    export = tmp_path / "export"
    trace = tmp_path / "trace.jsonl"
    reqs = [{"t": round(0.5 * k, 3), "input_len": 64 + 16 * (k % 5), "output_len": 8 + (k % 4) * 4,
             **({"prefix_group": f"g{k % 2}", "prefix_len": 32} if k % 3 == 0 else {})} for k in range(40)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    with start_sim("--enable-metrics", "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export),
                   speed=10) as sim:
        att = _specmon("attach", sim.url, "--headless", "--interval", "0.5", "--duration", "120",
                       "--request-metrics-dir", str(export), "--out", str(tmp_path / "attach"))
        try:
            deadline = time.monotonic() + 60
            samples = tmp_path / "attach" / "samples.csv"
            while not (samples.exists() and len(samples.read_text().splitlines()) >= 2):  # attach is reading
                assert att.poll() is None and time.monotonic() < deadline, att.stdout.read() if att.poll() else "slow"
                time.sleep(0.2)
            ramp = subprocess.run([sys.executable, "-m", "specmon", "ramp", sim.url, "--trace", str(trace),
                                   "--settle", "0", "--headless", "--out", str(tmp_path / "ramp")],
                                  cwd=str(REPO), capture_output=True, text=True, timeout=180)
            assert ramp.returncode == 0, ramp.stdout[-2000:] + ramp.stderr[-2000:]
            time.sleep(2.0)  # two ticks of attach after the last line was written
        finally:
            att.send_signal(signal.SIGINT)
            out, _ = att.communicate(timeout=60)
    assert att.returncode == 130, out[-2000:]  # ended by Ctrl-C (SIGINT), as a shell reports it
    sent = _rows(tmp_path / "ramp" / "requests.csv")
    seen = _rows(tmp_path / "attach" / "observed_requests.csv")
    assert len(sent) == len(reqs) and all(r["status"] == "ok" for r in sent)
    assert len(seen) == len(sent)  # every request the trace sent, observed once (the warm-up was before)
    assert len({r["rid"] for r in seen}) == len(seen)
    assert {r["rid"] for r in seen} == {r["rid"] for r in sent}  # the server's rid joins the two records
    assert Counter((int(r["prompt_tokens"]), int(r["output_tokens"])) for r in seen) == \
        Counter((r["input_len"], r["output_len"]) for r in reqs)
    assert all(float(r["ttft_s"]) > 0 and float(r["queue_s"]) >= 0 for r in seen)
    # the recorded arrivals: 19.5 s of trace at the simulator's x10 is ~1.95 wall seconds
    starts = sorted(float(r["t_start"]) for r in sent)
    assert 1.95 * 0.9 <= starts[-1] - starts[0] <= 1.95 + 3.0
    # the windows the attach printed add up to the same count
    observed = [ln for ln in out.splitlines() if ln.startswith("observed ")]
    assert observed and sum(int(ln.split(": ", 1)[1].split()[0]) for ln in observed) == len(reqs)
    levels = _rows(tmp_path / "ramp" / "levels.csv")
    # the rate the trace offers, per second of the arm's time (the simulator's, as --rates are)
    assert len(levels) == 1 and float(levels[0]["offered_rate"]) == pytest.approx(len(reqs) / 19.5, rel=1e-5)


def test_diurnal_pattern_sends_its_seeded_schedule(tmp_path):
    with start_sim("--enable-metrics", speed=20) as sim:
        ramp = subprocess.run([sys.executable, "-m", "specmon", "ramp", sim.url, "--trace", "diurnal:8:60",
                               "--input-len", "32", "--output-len", "4", "--seed", "7", "--headless",
                               "--out", str(tmp_path / "ramp")], cwd=str(REPO), capture_output=True, text=True,
                              timeout=180)
    assert ramp.returncode == 0, ramp.stdout[-2000:] + ramp.stderr[-2000:]
    expected = load_trace("diurnal:8:60", seed=7, input_len=32, output_len=4)
    sent = _rows(tmp_path / "ramp" / "requests.csv")
    assert len(sent) == len(expected.requests)
    assert {(int(r["prompt_tokens"]), int(r["output_tokens"])) for r in sent} == {(32, 4)}
    meta = json.loads((tmp_path / "ramp" / "session.json").read_text())
    assert json.dumps(meta).count("diurnal:8:60") >= 1


def test_mooncake_hash_blocks_reach_the_servers_prefix_cache(tmp_path):
    """Two requests whose first two 512-token blocks are the same ids: the server finds the
    second's 1,024 shared tokens in its radix cache; a request of other blocks finds none."""
    trace = tmp_path / "mooncake.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [10, 11, 12]}\n'
                     '{"timestamp": 2000, "input_length": 1600, "output_length": 4, "hash_ids": [10, 11, 13, 14]}\n'
                     '{"timestamp": 4000, "input_length": 600, "output_length": 4, "hash_ids": [20, 21]}\n')
    with start_sim("--enable-metrics", speed=20) as sim:
        ramp = subprocess.run([sys.executable, "-m", "specmon", "ramp", sim.url, "--trace", str(trace), "--settle", "0",
                               "--headless", "--out", str(tmp_path / "ramp")], cwd=str(REPO), capture_output=True,
                              text=True, timeout=180)
    assert ramp.returncode == 0, ramp.stdout[-2000:] + ramp.stderr[-2000:]
    rows = sorted(_rows(tmp_path / "ramp" / "requests.csv"), key=lambda r: float(r["t_scheduled"]))
    assert [int(r["prompt_tokens"]) for r in rows] == [1100, 1600, 600]
    cached = [int(r["cached_tokens"] or 0) for r in rows]
    assert cached[0] == 0 and cached[2] == 0
    assert 1024 - 16 <= cached[1] <= 1024  # the two shared blocks (the radix match stops short of a page)
