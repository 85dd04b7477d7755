"""An unresolvable server name, tried without asking any real DNS server: specmon runs in a new,
empty network namespace (`unshare -rn`: only a loopback interface, no route anywhere), so the
name lookup fails on this machine. attach: the arm is DOWN with the reason named, exit 3; ramp:
a name is not loopback, so it is refused before anything is sent, exit 2; launch with an
`attach:` arm by that name: the arm is down with the reason, the session goes on."""

from __future__ import annotations


import pytest

from helpers.netns import in_empty_netns, netns_available

NAME = "no-such-host.test"


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
