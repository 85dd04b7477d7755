"""--duration is kept even while a scrape hangs: the session ends on time, not when the hung
scrape's deadline passes (a scrape in flight delayed the end by up to 3 s)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from helpers.badserver import BadServer
from helpers.simproc import REPO


def test_a_hung_scrape_does_not_delay_the_duration_exit(tmp_path):
    out = tmp_path / "s"
    with BadServer() as srv:
        srv.faults["/metrics"] = "hang"  # reads the request and never answers
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "specmon", "attach", srv.url, "--no-discover", "--headless",
                            "--interval", "1", "--duration", "2", "--out", str(out)],
                           cwd=str(REPO), capture_output=True, text=True, timeout=60)
        wall = time.monotonic() - t0
    assert p.returncode == 3, p.stderr  # nothing ever answered
    meta = json.loads((out / "session.json").read_text())
    assert meta["exit_reason"] == "duration reached"
    # the recorded session lasts its 2 s (the scrape deadline here is 3 s), the process not much more
    assert meta["end_ts"] - meta["start_ts"] < 2.6, meta["end_ts"] - meta["start_ts"]
    assert wall < 2 + 8, wall
