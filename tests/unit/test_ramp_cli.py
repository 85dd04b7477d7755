"""`specmon ramp URL... --headless` as a user runs it, against two real sims."""

import subprocess
import sys

from helpers.simproc import REPO


def test_ramp_usage_errors_exit_2(tmp_path):
    for args, needle in ((["--levels", "2", "--input-len", "0"], "--input-len"),
                         (["--levels", "2", "--category", "low_entropy"], "--category")):
        p = subprocess.run([sys.executable, "-m", "specmon", "ramp", "http://127.0.0.1:9", *args, "--headless",
                            "--out", str(tmp_path / "s")], capture_output=True, text=True, timeout=60, cwd=str(REPO))
        assert p.returncode == 2 and needle in p.stderr, p.stderr
