"""launch with an `attach:` arm whose server name does not resolve, in an empty network namespace
(`unshare -rn`): that arm is down with the reason, the session goes on (attach and ramp with
such a name: tests/unit/test_unresolvable.py)."""

from __future__ import annotations

import pytest

from helpers.netns import in_empty_netns, netns_available

NAME = "no-such-host.test"


pytestmark = pytest.mark.skipif(not netns_available(), reason="unshare -rn (a user and network namespace) is not allowed here")


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
