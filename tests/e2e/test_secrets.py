"""Secrets never written: an API key from the environment and a password in a URL appear in no
output file, log, screenshot, stdout or stderr of attach and ramp (the simulator with --api-key;
one arm up, one refused so that its reasons are written too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.simproc import REPO, free_port, start_sim
from helpers.secrets import every_text

KEY = "sk-test-do-not-write-9f3a"
PASSWORD = "hunter2-secret"


def run(args: list[str], tmp: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPECMON_TEST_KEY=KEY)
    return subprocess.run([sys.executable, "-m", "specmon", *args], cwd=str(REPO), env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_attach_and_ramp_write_no_key_and_no_url_password(tmp_path):
    dead = free_port()
    with start_sim("--profile", "fp8-mtp", "--enable-metrics", "--api-key", KEY, speed=50) as keyed, \
            start_sim("--profile", "fp8-mtp", "--enable-metrics", speed=50) as open_:
        # a server that wants the key; one behind a URL with a password; a refused one with a password
        up = open_.url.replace("http://", f"http://admin:{PASSWORD}@")
        down = f"http://admin:{PASSWORD}@127.0.0.1:{dead}"
        a = run(["attach", keyed.url, "--api-key-env", "SPECMON_TEST_KEY", "--headless", "--duration", "4",
                 "--interval", "0.5", "--out", str(tmp_path / "attach")], tmp_path)
        b = run(["attach", up, down, "--headless", "--duration", "4", "--interval", "0.5",
                 "--out", str(tmp_path / "attach-pw")], tmp_path)
        r = run(["ramp", keyed.url, "--api-key-env", "SPECMON_TEST_KEY", "--levels", "2", "--requests-per-level", "4",
                 "--input-len", "64", "--output-len", "8", "--settle", "0", "--headless",
                 "--out", str(tmp_path / "ramp")], tmp_path)
    for p in (a, b, r):
        assert p.returncode == 0, p.stderr[-2000:]
    # the sessions really ran: authenticated (up, not "unauthorized"), the refused arm's reasons
    # written, the ramp's requests answered
    attach = (tmp_path / "attach" / "samples.csv").read_text()
    assert ",1," in attach and "unauthorized" not in attach
    assert "connection refused at http://127.0.0.1:" in (tmp_path / "attach-pw" / "samples.csv").read_text()
    assert ",ok," in (tmp_path / "ramp" / "requests.csv").read_text()
    for name, text in (("attach folder", every_text(tmp_path / "attach")), ("ramp folder", every_text(tmp_path / "ramp")),
                       ("password folder", every_text(tmp_path / "attach-pw")),
                       ("attach stdout", a.stdout + a.stderr), ("password stdout", b.stdout + b.stderr),
                       ("ramp stdout", r.stdout + r.stderr)):
        assert KEY not in text, name
        assert PASSWORD not in text, name
