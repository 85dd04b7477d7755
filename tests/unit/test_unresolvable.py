"""An unresolvable server name, tried without asking any real DNS server: specmon runs in a new,
empty network namespace (`unshare -rn`: only a loopback interface, no route anywhere), so the
name lookup fails on this machine. attach: the arm is DOWN with the reason named, exit 3; ramp:
a name is not loopback, so it is refused before anything is sent, exit 2; launch with an
`attach:` arm by that name: the arm is down with the reason, the session goes on."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from simproc import REPO

NAME = "no-such-host.test"


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


pytestmark = pytest.mark.skipif(not netns_available(), reason="unshare -rn (a user and network namespace) is not allowed here")


def test_attach_to_an_unresolvable_name(tmp_path):
    p = in_empty_netns(["attach", f"http://{NAME}:30000", "--headless", "--duration", "2", "--interval", "0.5",
                        "--out", str(tmp_path / "s")])
    assert p.returncode == 3, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert f"cannot resolve the name '{NAME}'" in p.stdout
    rows = (tmp_path / "s" / "samples.csv").read_text()
    assert f"cannot resolve the name '{NAME}'" in rows and ",down," in rows


def test_ramp_to_an_unresolvable_name_is_refused_before_any_request(tmp_path):
    p = in_empty_netns(["ramp", f"http://{NAME}:30000", "--levels", "2", "--headless", "--out", str(tmp_path / "s")])
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "--yes" in lines[0] and NAME in lines[0]


def test_launch_with_an_unresolvable_attach_arm_keeps_the_others(tmp_path):
    layout = tmp_path / "l.yaml"
    layout.write_text(
        "name: nx\n"
        "command: [python, -m, specmon.servers.sim]\n"
        "interval_s: 0.5\n"
        "arms:\n"
        f"  - {{name: far, attach: 'http://{NAME}:30000'}}\n"
        "  - name: sim\n"
        "    launch: {flags: {profile: fp8-mtp, speed: 50}}\n")
    # watch-only layouts run until stopped: SIGINT after a few seconds, as Ctrl-C would
    p = in_empty_netns(["launch", str(layout), "--headless", "--out", str(tmp_path / "s")], timeout=90, stop_after=12)
    rows = (tmp_path / "s" / "samples.csv").read_text()
    assert "Traceback" not in p.stderr
    assert f"cannot resolve the name '{NAME}'" in rows
    assert any(",sim,1," in line for line in rows.splitlines()), p.stdout[-2000:] + p.stderr[-2000:]
