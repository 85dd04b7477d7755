"""A week of Prometheus history, end to end (slow tier): the benchmark's generator
(benchmarks/observed_history.py) writes a week of SGLang series for a few workers, each with a
known knee (its KV pool full at K running, requests queueing past it a third of every day), into
a real TSDB with Debian's promtool; Debian's prometheus serves it on 127.0.0.1; `specmon replay
--prometheus URL --from -7d-ish --to ...` without --step steps at the curve's resolution (5 min,
2,017 steps, not the 10,080 scrapes) and finds each worker's knee and limit."""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]  # the repository root


pytestmark = pytest.mark.skipif(shutil.which("promtool") is None or shutil.which("prometheus") is None,
                                reason="Debian's prometheus package (promtool, prometheus) is not installed")


def _bench():
    spec = importlib.util.spec_from_file_location("observed_history", REPO / "benchmarks" / "observed_history.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_a_week_of_history_gives_each_workers_knee(tmp_path: Path):
    bench = _bench()
    workers, scrape = 3, 60.0
    end = float(int(time.time() // scrape * scrape))
    start = end - 7 * 86400
    series, samples, _ = bench.build_tsdb(tmp_path / "tsdb", workers, start, end, scrape, tmp_path)
    assert samples == series * 10_081  # every scrape of the week
    (tmp_path / "prometheus.yml").write_text("global:\n  scrape_interval: 60s\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    prom = bench.start_group(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                              f"--storage.tsdb.path={tmp_path / 'tsdb'}", "--storage.tsdb.retention.time=30d",
                              f"--web.listen-address=127.0.0.1:{port}"], tmp_path / "prometheus.log")
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and prom.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            time.sleep(0.3)
        out = tmp_path / "history"
        p = subprocess.run([sys.executable, "-m", "specmon", "replay", "--prometheus", url, "--from", f"{start:.0f}",
                            "--to", f"{end:.0f}", "--headless", "--out", str(out)],
                           cwd=str(REPO), capture_output=True, text=True, timeout=300)
    finally:
        bench.stop_group(prom)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"{workers} worker(s), 2017 steps of 300 s" in p.stderr, p.stderr
    knees = json.loads((out / "session.json").read_text())["observed_knees"]
    for w in range(workers):
        k, want = knees[f"10.0.{w}.1:30000"], bench.knee_of(w)
        assert k["limit"] == "kv_pool" and k["latency_source"] == "histograms", k["reason"]
        # averaged steps put a step that queued part of its 5 minutes a count or two below K
        assert want - max(1, 0.1 * want) <= k["concurrency"] <= want, (w, k["concurrency"], want, k["reason"])
