"""The knee on a ramp's last level, end to end: `--levels 8,24,48,72` on the simulator (request
cap 48), where only C=72 queues (TTFT ~180 ms at C=48 -> seconds at C=72, ~24 queued). The ramp
calls the queueing knee at C=72 and makes it the headline, saying it was the last level."""

import subprocess
import sys

from helpers.simproc import REPO, start_sim


def test_queueing_on_the_last_level_is_the_headline_knee(tmp_path):
    with start_sim("--enable-metrics", speed=50) as sim:
        p = subprocess.run([sys.executable, "-m", "specmon", "ramp", sim.url, "--levels", "8,24,48,72",
                            "--level-duration", "60", "--settle", "10", "--headless", "--out", str(tmp_path / "s")],
                           capture_output=True, text=True, timeout=300, cwd=str(REPO))
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout
    called = [x for x in out.splitlines() if x.startswith("knee [queueing]")]
    summary = out[out.index("knees:"):]
    assert called and "knee: queueing knee C=" in summary, out[-3000:]
    # On a loaded machine the simulator falls behind its x50 and C=48 may queue already; then
    # the knee is C=48, confirmed by C=72. Otherwise it is C=72, called on the last level.
    if "~72 concurrent requests" in called[0]:
        assert "the ramp's last level" in called[0], called[0]
        assert "knee: queueing knee C=72 (the ramp's last level: add a level to confirm)" in summary, summary[:600]
    else:
        assert "~48 concurrent requests" in called[0] and "knee: queueing knee C=48 |" in summary, out[-3000:]
