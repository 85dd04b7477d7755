"""`specmon launch` ending every way it can: no launched server process may outlive it.

Real processes throughout: `specmon launch --headless` (or the TUI, on a pseudo-terminal) in a
subprocess, two simulated arms (one a bash wrapper with a background grandchild in the server's
process group, like SGLang's scheduler and detokenizer), then a signal. Every pid of every
launched process group is collected before the signal (the group id is in each log's second
line) and must be gone after it; session.json says how the session ended.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from specmon.sources import logparse as lp



# ---- the real SGLang server: launcher, scheduler and detokenizer ------------------------------

from helpers import realsglang as rs  # noqa: E402
from helpers.launch import PID_LINE, alive, exit_reason, server_pids, wait_gone

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.real_sglang
@pytest.mark.skipif(rs.missing() is not None, reason=rs.missing() or "")
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGHUP, id="SIGHUP"), pytest.param(signal.SIGKILL, id="SIGKILL")])
def test_real_sglang_dies_with_specmon(tmp_path, sig):
    """layouts/real-sglang-cpu.yaml (ramp removed) under `specmon launch --headless`, then SIGHUP or
    kill -9 of specmon: SGLang's launcher, scheduler and detokenizer all go."""
    text = (REPO / "layouts" / "real-sglang-cpu.yaml").read_text().split("\nramp:")[0] + "\n"
    (tmp_path / "x.yaml").write_text(text)
    env = dict(os.environ, SPECMON_SGLANG_VENV=str(rs.SGLANG_VENV), SPECMON_REAL_SGLANG_DIR=str(rs.REAL_DIR))
    out_path = tmp_path / "out.txt"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "specmon", "launch", "x.yaml", "--headless", "--out", "s"],
                                cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    session = tmp_path / "s"
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            assert proc.poll() is None, out_path.read_text()[-3000:]
            log = session / "logs" / "tiny-cpu.log"
            if log.exists() and lp.READY_TEXT in log.read_text(errors="replace"):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("real SGLang never became ready: " + out_path.read_text()[-3000:])
        pids = server_pids(proc.pid, session)
        names = [psutil.Process(p).name() for p in pids]
        assert len(pids) >= 3, names  # launcher, scheduler, detokenizer (and the reaper)
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=60)
        left, took = wait_gone(pids, timeout=30)
        print(f"real SGLang, {sig.name}: every process gone {time.monotonic() - t0:.2f} s after the signal "
              f"({len(pids)} processes: {sorted(set(names))})")
        assert left == [], [psutil.Process(p).cmdline()[:3] for p in alive(left)]
        assert exit_reason(session) == ("hangup" if sig == signal.SIGHUP else None)
    finally:
        if proc.poll() is None:
            proc.kill()
