"""What `specmon report`'s tests share across tiers: the CLI run as a subprocess."""

from __future__ import annotations

import subprocess
import sys

from helpers.simproc import REPO


def specmon(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "specmon", "report", *map(str, args)], cwd=str(cwd or REPO),
                          capture_output=True, text=True, timeout=120)
