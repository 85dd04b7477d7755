"""The operating curve from a server's own per-request lines, end to end (slow tier): a simulator
writing SGLang's export files (--export-metrics-to-file) is ramped by `specmon ramp` in one process
while `specmon attach --headless --request-metrics-dir DIR` watches from another. The curve's TTFT
and queue time come from those lines (each request placed at the running count the attach's own
samples showed when it arrived), the session and the headless line say so, the figures are the
ones the lines and samples give when placed again here, and the knee is the ramp's within a level."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from bisect import bisect_right
from pathlib import Path

from helpers.simproc import REPO, start_sim
from specmon.analysis.observed import bin_of
from specmon.session.folder import read_observed_requests

SPEED = 5.0
LEVELS = [2, 4, 8, 12, 16, 24]


def _specmon(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "specmon", *args], cwd=str(REPO), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_curve_takes_ttft_and_queue_time_from_the_request_lines(tmp_path):
    export = tmp_path / "export"
    with start_sim("--enable-metrics", "--profile", "fp8-nospec", "--max-total-tokens", "8000",
                   "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export), speed=SPEED) as sim:
        export.mkdir(exist_ok=True)
        att = _specmon("attach", sim.url, "--headless", "--interval", "0.5", "--duration", "600",
                       "--request-metrics-dir", str(export), "--out", str(tmp_path / "attach"))
        try:
            deadline = time.monotonic() + 60
            samples = tmp_path / "attach" / "samples.csv"
            while not (samples.exists() and len(samples.read_text().splitlines()) >= 2):  # attach is reading
                assert att.poll() is None and time.monotonic() < deadline, att.stdout.read() if att.poll() else "slow"
                time.sleep(0.2)
            ramp = subprocess.run([sys.executable, "-m", "specmon", "ramp", sim.url,
                                   "--levels", ",".join(map(str, LEVELS)), "--input-len", "512", "--output-len", "256",
                                   "--level-duration", "60", "--settle", "5", "--headless",
                                   "--out", str(tmp_path / "ramp")],
                                  cwd=str(REPO), capture_output=True, text=True, timeout=400)
            assert ramp.returncode == 0, ramp.stdout[-2000:] + ramp.stderr[-2000:]
            time.sleep(1.5)  # the last lines read
        finally:
            att.send_signal(signal.SIGINT)
            out, _ = att.communicate(timeout=60)
    assert att.returncode == 130, out[-2000:]
    meta = json.loads((tmp_path / "attach" / "session.json").read_text())
    (arm, k), = meta["observed_knees"].items()
    records = read_observed_requests(tmp_path / "attach")
    assert len(records) > 100

    # the session says where TTFT and queue time came from, and the headless line too
    assert k["latency_source"] == "requests", k
    assert 0.9 * len(records) <= k["latency_requests"] <= len(records), (k["latency_requests"], len(records))
    with_requests = [p for p in k["curve"] if p["requests"]]
    assert sum(p["requests"] for p in with_requests) == k["latency_requests"]
    lines = [ln for ln in out.splitlines() if ln.startswith(f"knee [observed] {arm}:")]
    assert lines and f"TTFT/queue from {k['latency_requests']} requests' own lines" in lines[-1], out[-3000:]

    # placed again here, from the attach's samples.csv and observed_requests.csv: each request at
    # the highest running count of the samples from the newest at or before its arrival (read time
    # less e2e latency, in wall seconds) to its admission (arrival + queue time); the bins' means
    # are the curve's (stamps are written to the millisecond, so a request arriving within a
    # millisecond of a sample may fall the other side: a few per cent)
    with open(tmp_path / "attach" / "samples.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["arm"] == arm and r["running_reqs"] and r["up"] in ("1", "True")]
    ts = [float(r["ts"]) for r in rows]
    running = [int(r["running_reqs"]) for r in rows]
    sums: dict[int, list[float]] = {}
    for r in records:
        arrival = r.ts_read - (r.e2e_s or 0.0) / SPEED
        i = bisect_right(ts, arrival) - 1
        if i < 0 or arrival - ts[i] > 10 or r.queue_s is None:
            continue
        j = bisect_right(ts, arrival + r.queue_s / SPEED)
        s = sums.setdefault(bin_of(max(running[i:max(j, i + 1)]))[0], [0, 0.0])
        s[0] += 1
        s[1] += r.queue_s
    agree = 0
    for p in with_requests:
        n, total = sums.get(p["running"], (0, 0.0))
        if n and abs(n - p["requests"]) <= max(1, 0.05 * n) and abs(total / n - p["queue_s"]) <= 0.05 * max(total / n, 0.01):
            agree += 1
    assert agree >= 0.8 * len(with_requests), (sums, with_requests)

    # requests that arrived at the knee or past it waited; those at light load did not
    ramp_meta = json.loads((tmp_path / "ramp" / "session.json").read_text())
    (rk,), = [list(ramp_meta["knees"].values())]
    knee = rk["queueing"] if rk["queueing"] is not None else rk["plateau"]
    light = [p for p in with_requests if p["running"] <= LEVELS[1]]
    heavy = [p for p in with_requests if p["running"] >= k["concurrency"]]
    assert light and heavy and max(p["queue_s"] for p in heavy) > 10 * max(p["queue_s"] for p in light), k["curve"]
    i = LEVELS.index(int(knee))
    lo, hi = (LEVELS[i - 1] if i else 0), (LEVELS[i + 1] if i + 1 < len(LEVELS) else 10**6)
    assert k["concurrency"] is not None and lo <= k["concurrency"] <= hi and k["limit"] == "kv_pool", (k, knee)
