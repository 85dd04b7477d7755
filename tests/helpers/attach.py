"""What attach's tests share across tiers: `specmon attach` run as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers.simproc import REPO


def attach(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", "attach", *args], cwd=str(REPO), capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})
