"""Network namespaces for the unresolvable-host tests (unshare -rn): whether this machine
allows one, and a command run inside an empty one."""

from __future__ import annotations

import shutil
import subprocess
import sys

from helpers.simproc import REPO


def in_empty_netns(args: list[str], timeout: float = 60, stop_after: float = 0) -> subprocess.CompletedProcess:
    """specmon in a new network namespace; with stop_after, SIGINT after that many seconds."""
    run = ["timeout", "-s", "INT", str(stop_after)] if stop_after else []
    script = "ip link set lo up 2>/dev/null; exec \"$@\""
    return subprocess.run(["unshare", "-rn", "sh", "-c", script, "sh", *run, sys.executable, "-m", "specmon", *args],
                          cwd=str(REPO), capture_output=True, text=True, timeout=timeout)


def netns_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode == 0
