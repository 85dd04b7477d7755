"""What launch mode's tests share across tiers: processes that are gone or alive, the servers a
launch started, files holding a secret, and why a run ended."""

from __future__ import annotations

import json
import os
import re
import textwrap
import time
from pathlib import Path

import psutil

from specmon.servers.layout import parse_layout
from specmon.sources import logparse as lp

from helpers.simproc import group_pids


PID_LINE = re.compile(r"^----- specmon: pid (\d+) \(its own process group (\d+)\)$", re.M)


def gone(pids, timeout=10.0) -> list[int]:
    """Pids still alive (zombies count as gone: they hold nothing) after waiting up to timeout."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    return alive


def files_with(folder: Path, needle: str) -> list[str]:
    hits = []
    for p in folder.rglob("*"):
        if p.is_file() and needle.encode() in p.read_bytes():
            hits.append(str(p.relative_to(folder)))
    return hits


def alive(pids) -> list[int]:
    out = []
    for p in pids:
        try:
            if psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids, timeout: float) -> tuple[list[int], float]:
    """(pids still alive after up to `timeout` s, seconds it took for all to go)."""
    t0 = time.monotonic()
    left = alive(pids)
    while left and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
        left = alive(left)
    return left, time.monotonic() - t0


def server_pids(specmon_pid: int, session: Path) -> list[int]:
    """Every process of every group that specmon's children lead (the servers' groups; the reaper's
    too: it must not outlive the end either). Where the logs name the group (`----- specmon: pid N
    (its own process group N)`), those groups must be among them."""
    pgids = set()
    for kid in psutil.Process(specmon_pid).children():
        try:
            pgids.add(os.getpgid(kid.pid))
        except ProcessLookupError:
            pass
    for log in sorted((session / "logs").glob("*.log")):
        m = PID_LINE.search(log.read_text())
        if m:
            assert int(m.group(2)) in pgids
    return sorted({p for g in pgids for p in group_pids(g)})


def exit_reason(session: Path):
    return json.loads((session / "session.json").read_text())["exit_reason"]


# ---- layouts the launch tests start ------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
SIM = "command: [python, -m, specmon.servers.sim]\nstartup_timeout_s: 60\n"
# Two simulated arms, the first with a grandchild in its server's process group (format with py=).
GRANDCHILD = """
        arms:
          - name: a
            launch:
              # a grandchild in the server's group, like SGLang's scheduler/detokenizer processes
              command: [bash, -c, 'sleep 300 & exec {py} -m specmon.servers.sim "$@"', sim]
              flags: {{profile: fp8-mtp, speed: 50}}
          - name: b
            launch: {{flags: {{profile: nvfp4-mtp, speed: 50}}}}
"""


def layout_of(text: str):
    head, sep, body = text.partition("arms:")
    return parse_layout(textwrap.dedent(head) + sep + textwrap.dedent(body), "test.yaml", env={})[0]


DATA = REPO / "tests" / "data"
# Prints a real SGLang log (its port number replaced by the one specmon gave, with "own"), then
# lives on deaf to SIGTERM, as SGLang 0.5.10 does after failing to bind its port; "exit N" ends
# with that code after the lines instead.
REPLAY = "\n".join([
    "import signal, sys, time",
    "path, mode = sys.argv[1], sys.argv[2]",
    "port = sys.argv[sys.argv.index('--port') + 1]",
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)",
    "for line in open(path):",
    "    print(line.rstrip('\\n').replace('39113', port) if mode == 'own' else line.rstrip('\\n'), flush=True)",
    "if mode.startswith('exit'):",
    "    sys.exit(int(mode.split()[1]))",
    f"if mode == 'other':\n    print({lp.READY_TEXT!r}, flush=True)",
    "time.sleep(600)",
])


def replay_arm(name: str, fixture: str, mode: str) -> str:
    return (f"  - name: {name}\n    launch:\n      command: [python, -c, {json.dumps(REPLAY)}, "
            f"{json.dumps(str(DATA / fixture))}, {json.dumps(mode)}]\n")

