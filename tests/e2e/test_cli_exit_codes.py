"""Exit codes say why a session ended: a signal is 128 + N (SIGTERM 143, Ctrl-C/SIGINT 130), a
--duration that ran out is 0. Headless attach against a simulator on 127.0.0.1."""

import signal
import subprocess
import sys
import time

import pytest

from helpers.simproc import REPO, start_sim


def _attach(url, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "specmon", "attach", url, "--headless", "--interval", "0.25",
                             "--out", str(out), *extra], cwd=str(REPO), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_rows(out, proc, timeout=30.0):
    t = time.monotonic() + timeout
    while time.monotonic() < t and proc.poll() is None:
        f = out / "samples.csv"
        if f.exists() and f.read_text().count("\n") >= 3:
            return
        time.sleep(0.2)
    raise AssertionError("attach never recorded a sample")


@pytest.mark.parametrize("sig, rc", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_is_not_exit_0(tmp_path, sig, rc):
    with start_sim("--profile", "fp8-mtp", "--enable-metrics") as sim:
        proc = _attach(sim.url, tmp_path / "s")
        try:
            _wait_for_rows(tmp_path / "s", proc)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == rc, err[-2000:]
    assert "Traceback" not in err
