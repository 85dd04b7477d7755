"""The load loop's pacing tests (tests/unit/test_load_pacing.py) again, on the Python reader: a
process of its own with SPECMON_NATIVE=0, so the same plan is shown to pace the same way with or
without the C reader built."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.load import native

# Where the C reader is not built the unit tests already ran on the Python reader.
needs_c = pytest.mark.skipif(native.fastread is None, reason="the C reader is not built here")
HERE = Path(__file__).resolve().parents[1] / "unit" / "test_load_pacing.py"


@needs_c
def test_the_python_reader_paces_by_the_same_rule():
    """The paced tests of test_load_pacing.py again, in a process whose client reads in Python (SPECMON_NATIVE=0):
    one pause a pass, the pause a share of the chunk gaps, every stamp the arrival's."""
    here = HERE
    env = {**os.environ, "SPECMON_NATIVE": "0", "PYTEST_ADDOPTS": ""}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", str(here),
                        "-k", "paced_loop or share_of_the_chunk_gaps or pacing_off"],
                       capture_output=True, text=True, env=env, cwd=here.parents[2], timeout=120)
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
