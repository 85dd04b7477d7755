"""What the exporter's tests share across tiers: `specmon` run as a subprocess, its /metrics
scraped and read back by series."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from prometheus_client.parser import text_string_to_metric_families

from specmon.exporter import Exporter


def value(exporter: Exporter, name: str, **labels) -> Optional[float]:
    return exporter.registry.get_sample_value(name, labels)


def specmon_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "specmon", *map(str, args)]


def get_text(url: str, timeout: float = 2.0) -> Optional[str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode()
    except (urllib.error.URLError, OSError, ConnectionError):
        return None


def scrape(url: str) -> Optional[dict[str, dict[tuple, float]]]:
    """specmon's /metrics over HTTP: sample name -> {labels: value}; None when nothing answered."""
    text = get_text(url)
    if text is None:
        return None
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def poll_metrics(proc: subprocess.Popen, url: str, period: float = 0.2) -> list[dict]:
    """Scrape `url` until `proc` exits; every answer, in order."""
    answers = []
    while proc.poll() is None:
        got = scrape(url)
        if got is not None:
            answers.append(got)
        time.sleep(period)
    return answers
