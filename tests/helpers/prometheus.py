"""A real Prometheus server (Debian's package) scraping loopback targets, for the tests that read
a fleet or specmon's exporter through it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Optional

import httpx

from helpers.simproc import free_port

PROMETHEUS = shutil.which("prometheus") or next(
    (p for p in ("/usr/bin/prometheus", "/usr/local/bin/prometheus") if os.access(p, os.X_OK)), None)


# A real Prometheus in its own process group


class Prometheus:
    def __init__(self, jobs: dict[str, list[str]], port: Optional[int] = None):
        self.dir = Path(tempfile.mkdtemp(prefix="specmon-prom-"))
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        lines = ["global:", "  scrape_interval: 1s", "  scrape_timeout: 1s", "scrape_configs:"]
        for job, targets in jobs.items():
            lines += [f"  - job_name: {job}", "    static_configs:",
                      "      - targets: [" + ", ".join(f"'{t}'" for t in targets) + "]"]
        (self.dir / "prometheus.yml").write_text("\n".join(lines) + "\n")
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 60.0) -> None:
        log = open(self.dir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("prometheus exited:\n" + (self.dir / "prometheus.log").read_text()[-3000:])
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1.0) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready after {timeout} s")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def wait_for(self, promql: str, ok, timeout: float = 30.0) -> list:
        deadline = time.monotonic() + timeout
        result: list = []
        while time.monotonic() < deadline:
            r = httpx.get(self.url + "/api/v1/query", params={"query": promql}, timeout=5)
            result = r.json()["data"]["result"]
            if ok(result):
                return result
            time.sleep(0.3)
        raise AssertionError(f"{promql}: still {result} after {timeout} s")

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
