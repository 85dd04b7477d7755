"""specmon as a Prometheus exporter (specmon/exporter.py, `--metrics-port`).

- unit: events fed to an Exporter, its own registry read back through generate_latest: names,
  labels, values, histogram buckets, and unknown values (None, NaN) never exported as 0;
- the command line: bad ports and hosts, a port in use (one line, exit 2, nothing started);
- end to end: `specmon ramp`, `attach` and `demo` headless against the simulator, /metrics
  scraped over HTTP while they run;
- a real Prometheus server (Debian's `prometheus`) scraping specmon during a ramp, queried
  through its HTTP API.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.simproc import REPO, free_port, start_sim
from specmon.exporter import Exporter
from helpers.exporter import get_text, listening, poll_metrics, scrape, specmon_cmd, value

# --------------------------------------------------------------------------------------------
# helpers












# --------------------------------------------------------------------------------------------
# end to end against the simulator




def only(d: dict) -> float:
    assert len(d) == 1, d
    return next(iter(d.values()))


def test_ramp_headless_serves_metrics_during_the_ramp(tmp_path):
    out = tmp_path / "s"
    mport = free_port()
    with start_sim("--profile", "nvfp4-mtp", "--enable-metrics", speed=50) as sim:
        proc = subprocess.Popen(specmon_cmd("ramp", "--name", f"nv={sim.url}", "--levels", "2,4",
                                            "--level-duration", "100", "--settle", "0", "--interval", "0.25",
                                            "--input-len", "256", "--output-len", "32", "--headless",
                                            "--out", out, "--metrics-port", mport),
                                cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            answers = poll_metrics(proc, f"http://127.0.0.1:{mport}/metrics")
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    assert f"Prometheus metrics at http://127.0.0.1:{mport}/metrics" in stderr
    assert len(answers) >= 5, len(answers)
    offered = [only(a["specmon_offered_concurrency"]) for a in answers if "specmon_offered_concurrency" in a]
    assert set(offered) == {2.0, 4.0} and offered == sorted(offered), offered
    levels = [only(a["specmon_ramp_level"]) for a in answers if "specmon_ramp_level" in a]
    assert set(levels) == {0.0, 1.0}
    last = answers[-1]
    assert {dict(k)["arm"] for k in last["specmon_arm_up"]} == {"nv"}
    assert max(only(a["specmon_arm_up"]) for a in answers if "specmon_arm_up" in a) == 1.0
    assert 0 < only(last["specmon_scrape_seconds"]) < 5
    predicted = {dict(k)["arm"]: v for k, v in last["specmon_knee_concurrency"].items()
                 if dict(k)["definition"] == "predicted"}
    assert predicted["nv"] > 0  # the predicted knee, from /server_info before any load
    # the server gauges, re-exported with the arm label (nvfp4-mtp speculates: accept length known)
    seen = {name for a in answers for name in a}
    for name in ("specmon_server_running_requests", "specmon_server_queued_requests",
                 "specmon_server_kv_usage_ratio", "specmon_server_gen_tokens_per_second",
                 "specmon_server_accept_length"):
        assert name in seen, name
    assert max(only(a["specmon_server_accept_length"]) for a in answers if "specmon_server_accept_length" in a) > 1
    # request histograms and counts per level agree with requests.csv (the last scrape may miss the
    # final requests, never count more)
    rows = list(csv.DictReader(open(out / "requests.csv")))
    for level in ("0", "1"):
        want = sum(1 for r in rows if r["level"] == level and r["status"] == "ok")
        counts = [a.get("specmon_requests_total", {}).get((("arm", "nv"), ("level", level), ("status", "ok")))
                  for a in answers]
        got = max(c for c in counts if c is not None)
        assert 0 < got <= want, (level, got, want)
        ttft = max(a.get("specmon_ttft_seconds_count", {}).get((("arm", "nv"), ("level", level)), 0) for a in answers)
        assert 0 < ttft <= want
    assert not listening(mport)  # stopped with the session


# --------------------------------------------------------------------------------------------
# a real Prometheus server scraping specmon

PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK)
                                             else None)


@contextlib.contextmanager
def running_prometheus(tmp_path: Path, target_port: int):
    """Prometheus on a free 127.0.0.1 port, scraping 127.0.0.1:target_port every second; its base
    URL. Killed with its process group at the end."""
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: specmon\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{web_port}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(tmp_path),
                            start_new_session=True)
    log.close()
    base = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + 60
        while get_text(base + "/-/ready", timeout=1) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("prometheus did not become ready:\n"
                                   + (tmp_path / "prometheus.log").read_text(errors="replace")[-3000:])
            time.sleep(0.2)
        yield base
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def prom_api(base: str, path: str, **params) -> dict:
    text = get_text(f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=5)
    assert text is not None, path
    answer = json.loads(text)
    assert answer["status"] == "success", answer
    return answer["data"]


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed "
                    "(Debian: apt-get install -y prometheus)")
def test_real_prometheus_scrapes_the_ramp(tmp_path):
    mport = free_port()
    out = tmp_path / "s"
    with running_prometheus(tmp_path, mport) as prom, \
            start_sim("--profile", "nvfp4-mtp", "--enable-metrics", speed=50) as sim:
        t0 = time.time()
        proc = subprocess.Popen(specmon_cmd("ramp", "--name", f"nv={sim.url}", "--levels", "2,4,8",
                                            "--level-duration", "250", "--settle", "0", "--interval", "0.5",
                                            "--input-len", "256", "--output-len", "32", "--headless",
                                            "--out", out, "--metrics-port", mport),
                                cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # the ramp's series appear in Prometheus while it runs
            live = []
            while proc.poll() is None and not live:
                live = prom_api(prom, "query", query="specmon_offered_concurrency")["result"]
                time.sleep(0.5)
            assert live, "specmon_offered_concurrency never appeared in Prometheus during the ramp"
            assert live[0]["metric"]["arm"] == "nv" and live[0]["metric"]["job"] == "specmon"
            assert float(live[0]["value"][1]) in (2.0, 4.0, 8.0)
            up = prom_api(prom, "query", query='up{job="specmon"}')["result"]
            assert float(up[0]["value"][1]) == 1.0
            _, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, stderr[-2000:]
        t1 = time.time()
        # every level as Prometheus recorded it, in order
        matrix = prom_api(prom, "query_range", query="specmon_offered_concurrency", start=f"{t0:.3f}",
                          end=f"{t1:.3f}", step="0.5")["result"]
        assert len(matrix) == 1 and matrix[0]["metric"]["arm"] == "nv"
        values = [float(v) for _, v in matrix[0]["values"]]
        assert set(values) == {2.0, 4.0, 8.0} and values == sorted(values), values
        ok = prom_api(prom, "query", query='max_over_time(specmon_requests_total{status="ok"}[5m])')["result"]
        by_level = {r["metric"]["level"]: float(r["value"][1]) for r in ok}
        assert set(by_level) == {"0", "1", "2"} and all(v > 0 for v in by_level.values()), by_level
        knee = prom_api(prom, "query", query='max_over_time(specmon_knee_concurrency{definition="predicted"}[5m])')
        assert float(knee["result"][0]["value"][1]) > 8
        p50 = prom_api(prom, "query", query='histogram_quantile(0.5, max_over_time('
                                            'specmon_ttft_seconds_bucket{level="2"}[5m]))')["result"]
        assert 0 < float(p50[0]["value"][1]) < 10
        accept = prom_api(prom, "query", query="max_over_time(specmon_server_accept_length[5m])")["result"]
        assert float(accept[0]["value"][1]) > 1
        # what Prometheus showed, for the record (pytest -s prints it)
        print("prometheus offered_concurrency over the ramp:", sorted(set(values)),
              "ok requests by level:", by_level, "predicted knee:", knee["result"][0]["value"][1],
              "TTFT p50 at level 2 (s):", p50[0]["value"][1], "accept length max:", accept[0]["value"][1])
        assert math.isfinite(float(p50[0]["value"][1]))


def test_demo_exports_both_arms(tmp_path):
    mport = free_port()
    proc = subprocess.Popen(specmon_cmd("demo", "--headless", "--levels", "2,3", "--level-duration", "20",
                                        "--speed", "40", "--out", tmp_path / "s", "--metrics-port", mport),
                            cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        answers = poll_metrics(proc, f"http://127.0.0.1:{mport}/metrics", period=0.3)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    arms = {dict(k)["arm"] for a in answers for k in a.get("specmon_offered_concurrency", {})}
    assert arms == {"fp8-mtp", "nvfp4-mtp"}
    ok = {dict(k)["arm"] for a in answers for k in a.get("specmon_requests_total", {})}
    assert ok == {"fp8-mtp", "nvfp4-mtp"}
    predicted = {dict(k)["arm"] for a in answers for k in a.get("specmon_knee_concurrency", {})
                 if dict(k)["definition"] == "predicted"}
    assert predicted == {"fp8-mtp", "nvfp4-mtp"}
    assert not listening(mport)


def test_attach_exports_scrape_health_and_no_ramp_series(tmp_path):
    mport = free_port()
    with start_sim("--profile", "fp8-mtp", "--enable-metrics", speed=50) as sim:
        proc = subprocess.Popen(specmon_cmd("attach", "--name", f"watch={sim.url}", "--interval", "0.25",
                                            "--duration", "3", "--headless", "--out", tmp_path / "s",
                                            "--metrics-port", mport),
                                cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            answers = poll_metrics(proc, f"http://127.0.0.1:{mport}/metrics")
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    ups = [a["specmon_arm_up"] for a in answers if "specmon_arm_up" in a]
    assert ups and ups[-1] == {(("arm", "watch"),): 1.0}
    # no ramp: no offered concurrency, no level, no requests (unknown, not 0)
    for a in answers:
        assert "specmon_offered_concurrency" not in a and "specmon_ramp_level" not in a
        assert "specmon_requests_total" not in a
    assert any("specmon_server_kv_usage_ratio" in a for a in answers)
