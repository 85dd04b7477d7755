"""`specmon attach` end to end as a subprocess against real sims: headless output and CSVs,
the read-only proof from the sim's request log, bad input exit codes, the key never written."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

from helpers.simproc import REPO, free_port
from helpers.attach import attach


def test_missing_env_var_and_bad_url_exit_2(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NO_SUCH_KEY_VAR"}
    p = subprocess.run([sys.executable, "-m", "specmon", "attach", "http://127.0.0.1:1", "--api-key-env",
                        "NO_SUCH_KEY_VAR", "--headless", "--duration", "1", "--out", str(tmp_path / "a")],
                       cwd=str(REPO), capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 2 and "NO_SUCH_KEY_VAR" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = attach("localhost:30000/x", "--headless", "--duration", "1", "--out", str(tmp_path / "b"))
    assert p.returncode == 2 and "localhost:30000/x" in p.stderr
    p = attach("--name", "broken", "--headless", "--duration", "1", "--out", str(tmp_path / "c"))
    assert p.returncode == 2 and "NAME=URL" in p.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_no_server_ever_answers_exit_3(tmp_path):
    port = free_port()
    p = attach(f"http://127.0.0.1:{port}", "--headless", "--duration", "1.5", "--interval", "0.5",
               "--out", str(tmp_path / "s"))
    assert p.returncode == 3 and f"127.0.0.1:{port}" in p.stderr and "refused" in p.stderr
    assert "REFUSED" in p.stdout
    with open(tmp_path / "s" / "samples.csv", newline="") as f:
        assert {r["up"] for r in csv.DictReader(f)} == {"0"}
