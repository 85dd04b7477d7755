"""Host CPU/memory and, for servers on this machine, the server process tree's RSS and CPU.

The server process is ArmSpec.pid when known, else the process listening on the URL's port
when the URL's host is local. SGLang runs as a launcher plus scheduler/detokenizer children,
so RSS and CPU are summed over the process and its descendants. Processes of other users may
be invisible (psutil.AccessDenied): the values then stay None.
"""

from __future__ import annotations

import time
from typing import Optional
from urllib.parse import urlsplit

import psutil

from specmon.model import ArmSpec, HostReading

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
MEMBERS_S = 5.0  # how often a server's process tree is walked again for new children


def url_port(url: str) -> Optional[int]:
    u = urlsplit(url)
    if u.port:
        return u.port
    return {"http": 80, "https": 443}.get(u.scheme)


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOCAL_HOSTS


def find_listener(port: int) -> Optional[int]:
    """Pid of the process listening on TCP `port` on this host, if we may see it."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            return c.pid
    return None


class _ProcTree:
    """One server's process tree; keeps psutil.Process objects so cpu_percent has a baseline."""

    def __init__(self, pid: int):
        self.pid = pid
        self.root = psutil.Process(pid)
        self._procs: dict[int, psutil.Process] = {}
        self._members: list[psutil.Process] = []
        self._members_at = -1e9

    def members(self) -> list[psutil.Process]:
        """The root and its descendants, looked up at most every MEMBERS_S: psutil finds children
        by reading every process's /proc/PID/stat (~3 ms with 120 processes, more on a busy GPU
        host), and it was done for every arm on every tick. A server's tree settles once it has
        started; a child that comes later is counted from the next lookup."""
        now = time.monotonic()
        if now - self._members_at >= MEMBERS_S:
            try:
                self._members = [self.root] + self.root.children(recursive=True)
            except psutil.Error:
                self._members = [self.root]
            self._members_at = now
        return self._members

    def pids(self) -> set[int]:
        return {self.pid} | {p.pid for p in self.members()}

    def read(self) -> tuple[Optional[int], Optional[float]]:
        if not self.root.is_running():
            raise psutil.NoSuchProcess(self.pid)
        members = self.members()
        rss = 0
        cpu = 0.0
        seen = False
        for p in members:
            proc = self._procs.setdefault(p.pid, p)
            try:
                rss += proc.memory_info().rss
                cpu += proc.cpu_percent(None)  # since the previous call; 0.0 the first time
                seen = True
            except psutil.Error:
                continue
        self._procs = {pid: p for pid, p in self._procs.items() if p.is_running()}
        return (rss, cpu) if seen else (None, None)


class HostCollector:
    def __init__(self, arms: list[ArmSpec]):
        self.arms = arms
        self._trees: dict[str, _ProcTree] = {}
        self._next_lookup: dict[str, float] = {}
        psutil.cpu_percent(None)  # baseline, so the first tick has a meaningful value

    def server_pids(self, arm: str) -> set[int]:
        t = self._trees.get(arm)
        return t.pids() if t else set()

    def _tree(self, spec: ArmSpec) -> Optional[_ProcTree]:
        t = self._trees.get(spec.name)
        if t is not None and t.root.is_running():
            return t
        self._trees.pop(spec.name, None)
        now = time.monotonic()
        if now < self._next_lookup.get(spec.name, 0.0):
            return None
        self._next_lookup[spec.name] = now + 5.0  # net_connections is costly: look up at most every 5 s
        pid = spec.pid
        if pid is None and is_local(spec.url):
            port = url_port(spec.url)
            pid = find_listener(port) if port else None
        if pid is None:
            return None
        try:
            t = _ProcTree(pid)
        except psutil.Error:
            return None
        self._trees[spec.name] = t
        return t

    def read(self) -> tuple[HostReading, dict[str, tuple[Optional[int], Optional[float]]]]:
        """Host reading plus {arm: (server RSS bytes, server CPU % of one core)} for local arms."""
        vm = psutil.virtual_memory()
        host = HostReading(ts=time.time(), cpu_pct=psutil.cpu_percent(None),
                           mem_used_bytes=int(vm.total - vm.available), mem_total_bytes=int(vm.total))
        per_arm: dict[str, tuple[Optional[int], Optional[float]]] = {}
        for spec in self.arms:
            t = self._tree(spec)
            if t is None:
                continue
            try:
                per_arm[spec.name] = t.read()
            except psutil.Error:
                self._trees.pop(spec.name, None)
        if len(per_arm) == 1:
            host.server_rss_bytes, host.server_cpu_pct = next(iter(per_arm.values()))
        return host, per_arm
