"""What the request-id tests share across tiers: a short session against the simulator and
its requests.csv rows."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from helpers.simproc import REPO, start_sim


SETTLE_S = 1.0


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rid")
    wire_log, out = tmp / "wire.jsonl", tmp / "session"
    with start_sim("--enable-metrics", "--profile", "nvfp4-mtp", "--startup-s", "1", "--wire-log", str(wire_log),
                   speed=1.0, timeout=60) as sim:
        p = subprocess.run(
            [sys.executable, "-m", "specmon", "ramp", sim.url, "--levels", "2,4", "--level-duration", "4",
             "--settle", str(SETTLE_S), "--input-len", "256", "--output-len", "24", "--interval", "0.5",
             "--headless", "--out", str(out)],
            cwd=str(REPO), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    wire = [json.loads(line) for line in wire_log.read_text().splitlines()]
    return _rows(out / "requests.csv"), _rows(out / "levels.csv"), wire
