"""HostCollector against real processes on this machine: a server found by the port it listens
on (one read of the TCP table for every arm looked up in a round), its children counted, arms
served by one process sharing one tree, a server that goes away dropped and looked up again."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from helpers.simproc import free_port
from specmon.model import ArmSpec
from specmon.sources import host
from specmon.sources.host import HostCollector

# A listener on two ports with one child process: what a server with a scheduler child looks like.
SERVER = """
import socket, subprocess, sys, time
socks = []
for port in sys.argv[1:]:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(port))); s.listen(); socks.append(s)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print("ready", flush=True)
for line in sys.stdin:  # each line: one more child
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print("spawned", flush=True)
time.sleep(120)
"""


def kill_tree(p: subprocess.Popen) -> None:
    try:
        for c in psutil.Process(p.pid).children(recursive=True):
            c.kill()
    except psutil.NoSuchProcess:
        pass
    p.kill()
    p.wait()


@pytest.fixture
def server():
    ports = [free_port(), free_port()]
    p = subprocess.Popen([sys.executable, "-c", SERVER, *map(str, ports)], stdout=subprocess.PIPE,
                         stdin=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        yield p, ports
    finally:
        kill_tree(p)


def test_a_local_server_is_found_by_its_port_with_its_children(server):
    proc, (port_a, port_b) = server
    dead = free_port()
    arms = [ArmSpec("a", f"http://127.0.0.1:{port_a}"), ArmSpec("b", f"http://localhost:{port_b}"),
            ArmSpec("gone", f"http://127.0.0.1:{dead}"), ArmSpec("remote", "http://10.255.255.1:30000")]
    h = HostCollector(arms)
    _, per_arm = h.read()
    # every arm looked for in one read of the TCP table; a remote arm is never looked for
    assert h.table_reads == 1
    assert set(per_arm) == {"a", "b"}
    kids = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    assert kids and h.server_pids("a") == {proc.pid} | kids == h.server_pids("b")
    assert h.server_pids("gone") == set() and h.server_pids("remote") == set()
    rss, cpu = per_arm["a"]
    assert rss > sum(psutil.Process(pid).memory_info().rss for pid in kids) and cpu == 0.0  # no baseline yet
    assert per_arm["b"] == per_arm["a"]  # one process, one tree, read once
    time.sleep(0.2)
    _, per_arm = h.read()
    assert set(per_arm) == {"a", "b"} and per_arm["a"][1] is not None
    # the arm nobody serves waits before it is looked for again: no new read of the table
    assert h.table_reads == 1


def test_an_unfound_arm_is_looked_for_less_and_less_often(monkeypatch):
    monkeypatch.setattr(host, "LOOKUP_S", 0.05)
    monkeypatch.setattr(host, "LOOKUP_MAX_S", 0.2)
    h = HostCollector([ArmSpec("gone", f"http://127.0.0.1:{free_port()}")])
    reads_at = []  # (just before, just after) each read() that read the table
    t_end = time.monotonic() + 1.2
    while time.monotonic() < t_end:
        before, t = h.table_reads, time.monotonic()
        h.read()
        if h.table_reads > before:
            reads_at.append((t, time.monotonic()))
        time.sleep(0.005)
    # The collector takes its own clock inside read(): from just before one read to just after
    # the next bounds its gap from above, so each must be at least the wait it was given.
    gaps = [b[1] - a[0] for a, b in zip(reads_at, reads_at[1:])]
    # 0.05, 0.1, 0.2, 0.2 ... s apart at least: far fewer reads than rounds
    assert 3 <= len(reads_at) <= 9, reads_at
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and all(g >= 0.2 for g in gaps[2:]), gaps


def test_a_server_that_goes_away_is_dropped_and_a_new_one_found(server):
    proc, (port_a, _) = server
    h = HostCollector([ArmSpec("a", f"http://127.0.0.1:{port_a}")])
    _, per_arm = h.read()
    assert "a" in per_arm and h.server_pids("a")
    kill_tree(proc)
    _, per_arm = h.read()
    assert per_arm == {} and h.server_pids("a") == set()
    # a new server on the same port is found on the next read, not after a wait
    p2 = subprocess.Popen([sys.executable, "-c", SERVER, str(port_a)], stdout=subprocess.PIPE, text=True)
    try:
        assert p2.stdout.readline().strip() == "ready"
        _, per_arm = h.read()
        assert "a" in per_arm and proc.pid not in h.server_pids("a") and p2.pid in h.server_pids("a")
    finally:
        kill_tree(p2)


def test_an_arm_with_a_pid_needs_no_table():
    h = HostCollector([ArmSpec("me", "http://10.255.255.1:1", pid=psutil.Process().pid)])
    _, per_arm = h.read()
    assert h.table_reads == 0 and per_arm["me"][0] > 0


def test_a_late_child_is_counted_and_a_settled_tree_walked_less_often(server, monkeypatch):
    monkeypatch.setattr(host, "MEMBERS_S", 0.1)
    monkeypatch.setattr(host, "MEMBERS_MAX_S", 0.4)
    proc, (port_a, _) = server
    h = HostCollector([ArmSpec("a", f"http://127.0.0.1:{port_a}")])
    h.read()
    first = h.server_pids("a")
    assert len(first) == 2  # the server and its child
    proc.stdin.write("more\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "spawned"
    time.sleep(0.15)
    h.read()
    pids = h.server_pids("a")
    assert len(pids) == 3 and first < pids
    tree = h._trees[proc.pid]
    assert tree._every == 0.1  # it changed: looked at again soon
    waits = []
    for _ in range(4):
        time.sleep(max(0.0, tree._due - time.monotonic()) + 0.01)
        h.read()
        waits.append(tree._every)
    assert waits == [0.2, 0.4, 0.4, 0.4]  # unchanged: the wait doubles to its ceiling
