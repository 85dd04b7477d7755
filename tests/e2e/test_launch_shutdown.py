"""`specmon launch` ending every way it can: no launched server process may outlive it.

Real processes throughout: `specmon launch --headless` (or the TUI, on a pseudo-terminal) in a
subprocess, two simulated arms (one a bash wrapper with a background grandchild in the server's
process group, like SGLang's scheduler and detokenizer), then a signal. Every pid of every
launched process group is collected before the signal (the group id is in each log's second
line) and must be gone after it; session.json says how the session ended.
"""

import fcntl
import os
import signal
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from specmon.sources import logparse as lp
from helpers.launch import SIM, exit_reason, server_pids, wait_gone

LAYOUT = SIM + textwrap.dedent("""
    arms:
      - name: a
        launch:
          # a grandchild in the server's group: only a group kill (or the reaper) reaches it
          command: [bash, -c, 'sleep 300 & exec {py} -m specmon.servers.sim "$@"', sim]
          flags: {{profile: fp8-mtp, speed: 50}}
      - name: b
        launch: {{flags: {{profile: nvfp4-mtp, speed: 50}}}}
    ramp: {{levels: [2], input_len: 300, output_len: 64, level_duration_s: 100000, settle_s: 0}}
    """).format(py=sys.executable)


def wait_ready(session: Path, proc: subprocess.Popen, out_path: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"specmon exited {proc.returncode}: " + out_path.read_text(errors="replace")[-2000:]
        logs = list((session / "logs").glob("*.log")) if (session / "logs").exists() else []
        if len(logs) == 2 and all(lp.READY_TEXT in p.read_text() for p in logs):
            return
        time.sleep(0.2)
    raise AssertionError("servers never became ready: " + out_path.read_text(errors="replace")[-2000:])


def start_headless(tmp_path: Path):
    (tmp_path / "x.yaml").write_text(LAYOUT)
    out_path = tmp_path / "out.txt"
    out = open(out_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "launch", "x.yaml", "--headless", "--out", "s"],
                            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out.close()
    return proc, tmp_path / "s", out_path


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig, reason", [
    pytest.param(signal.SIGHUP, "hangup", id="SIGHUP"),
    pytest.param(signal.SIGTERM, "terminated", id="SIGTERM"),
    pytest.param(signal.SIGINT, "interrupted", id="SIGINT"),
])
def test_headless_signal_stops_every_server(tmp_path, sig, reason):
    proc, session, out_path = start_headless(tmp_path)
    try:
        wait_ready(session, proc, out_path)
        pids = server_pids(proc.pid, session)
        assert len(pids) >= 3  # bash->sim and its sleep, and b
        time.sleep(1.0)  # the ramp is running
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=60)
        exited = time.monotonic() - t0
        left, took = wait_gone(pids, timeout=10)
        print(f"{sig.name}: specmon exited after {exited:.2f} s, servers gone {exited + took:.2f} s after the signal")
        assert left == [], out_path.read_text()[-2000:]
        assert exit_reason(session) == reason
        assert proc.returncode == 128 + sig, out_path.read_text()[-2000:]  # it says it was stopped
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(180)
def test_kill_9_of_specmon_takes_the_servers_down(tmp_path):
    """Nothing runs in specmon after SIGKILL: the kernel's parent-death signal and the reaper do it,
    grandchild included, within a few seconds."""
    proc, session, out_path = start_headless(tmp_path)
    try:
        wait_ready(session, proc, out_path)
        pids = server_pids(proc.pid, session)
        assert len(pids) >= 3
        t0 = time.monotonic()
        proc.kill()
        proc.wait(timeout=10)
        left, took = wait_gone(pids, timeout=8)
        print(f"SIGKILL: servers gone {time.monotonic() - t0:.2f} s after the signal")
        assert left == [], [psutil.Process(p).cmdline() for p in left]
        assert exit_reason(session) is None  # nothing could write it
    finally:
        if proc.poll() is None:
            proc.kill()


# ---- on a terminal: a real hangup, and the TUI -------------------------------------------------


def start_on_pty(tmp_path: Path, *args: str):
    """specmon as the session leader of a new pseudo-terminal (as under ssh or tmux): closing the
    master is a hangup, the kernel sends SIGHUP."""
    (tmp_path / "x.yaml").write_text(LAYOUT)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, b"\x28\x00\x78\x00\x00\x00\x00\x00")  # 40 rows, 120 columns

    def controlling_tty() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-m", "specmon", "launch", "x.yaml", "--out", "s", *args],
                            cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            preexec_fn=controlling_tty, env=dict(os.environ, TERM="xterm-256color"))
    os.close(slave)
    os.set_blocking(master, False)
    return proc, master, tmp_path / "s"


def drain(master: int) -> None:
    try:
        while os.read(master, 65536):
            pass
    except (BlockingIOError, OSError):
        pass


def wait_ready_pty(session: Path, proc: subprocess.Popen, master: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        drain(master)  # a full terminal buffer would block specmon's writes
        assert proc.poll() is None, f"specmon exited {proc.returncode}"
        logs = list((session / "logs").glob("*.log")) if (session / "logs").exists() else []
        if len(logs) == 2 and all(lp.READY_TEXT in p.read_text() for p in logs):
            return
        time.sleep(0.2)
    raise AssertionError("servers never became ready")


def wait_exit_draining(proc: subprocess.Popen, master, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if master is not None:
            drain(master)
        time.sleep(0.05)
    assert proc.poll() is not None, "specmon did not exit"


@pytest.mark.timeout(180)
def test_terminal_hangup_headless(tmp_path):
    """The terminal goes away (ssh drop, tmux kill-session): SIGHUP from the kernel, writes to the
    dead terminal fail; the servers still go."""
    proc, master, session = start_on_pty(tmp_path, "--headless")
    try:
        wait_ready_pty(session, proc, master)
        pids = server_pids(proc.pid, session)
        assert len(pids) >= 3
        os.close(master)
        master = None
        wait_exit_draining(proc, None, 60)
        left, took = wait_gone(pids, timeout=10)
        print(f"hangup (headless): servers gone after {took:.2f} s, exit_reason {exit_reason(session)!r}")
        assert left == []
        assert exit_reason(session) == "hangup"
    finally:
        if master is not None:
            os.close(master)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "hangup"])
def test_tui_ends_without_leaving_servers(tmp_path, how):
    """The TUI on a terminal, ended by SIGTERM, SIGHUP or the terminal closing: every server goes."""
    proc, master, session = start_on_pty(tmp_path)
    try:
        wait_ready_pty(session, proc, master)
        pids = server_pids(proc.pid, session)
        assert len(pids) >= 3
        if how == "hangup":
            os.close(master)
            master = None
        else:
            proc.send_signal(getattr(signal, how))
        wait_exit_draining(proc, master, 60)
        left, took = wait_gone(pids, timeout=10)
        print(f"TUI {how}: servers gone after {took:.2f} s, exit_reason {exit_reason(session)!r}")
        assert left == []
        # the session says how it ended (a closed terminal is a hangup to the TUI)
        assert exit_reason(session) == {"SIGTERM": "terminated", "SIGHUP": "hangup", "hangup": "hangup"}[how]
    finally:
        if master is not None:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
