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

from specmon import clock
from specmon.model import ArmSpec, HostReading

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
MEMBERS_S = 5.0  # how often a server's process tree is walked again for new children ...
MEMBERS_MAX_S = 40.0  # ... doubling up to this while it stays the same
LOOKUP_S = 5.0  # an arm whose server process is not found is looked for again after this ...
LOOKUP_MAX_S = 60.0  # ... doubling each time up to this


def url_port(url: str) -> Optional[int]:
    u = urlsplit(url)
    if u.port:
        return u.port
    return {"http": 80, "https": 443}.get(u.scheme)


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOCAL_HOSTS


def listening_pids() -> dict[int, int]:
    """{TCP port: pid of the process listening on it} on this host, for the processes we may see."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return {}
    return {c.laddr.port: c.pid for c in conns if c.status == psutil.CONN_LISTEN and c.laddr and c.pid}


def ppid_map() -> dict[int, int]:
    """{pid: parent pid} of every process on this host: one read of each /proc/PID/stat, the
    cost of any walk of a process tree (psutil's own map where it has one)."""
    own = getattr(psutil, "_ppid_map", None)
    if own is not None:
        try:
            return own()
        except (psutil.Error, OSError):
            pass
    out = {}
    for p in psutil.process_iter():
        try:
            out[p.pid] = p.ppid()
        except psutil.Error:
            continue
    return out


def descendants(pid: int, ppids: dict[int, int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for child, parent in ppids.items():
        if child != parent:
            children.setdefault(parent, []).append(child)
    out, todo, seen = [], [pid], {pid}
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in seen:
                seen.add(c)
                out.append(c)
                todo.append(c)
    return out


class _ProcTree:
    """One server's process tree; keeps psutil.Process objects so cpu_percent has a baseline.

    Its members are looked up again every MEMBERS_S while they change, the wait doubling up to
    MEMBERS_MAX_S while they do not: a server's tree settles once it has started (SGLang's
    scheduler and detokenizer come up with it), and each lookup reads every process's
    /proc/PID/stat (~1 ms with 70 processes, far more on a busy GPU host). A child that comes
    later is counted from the next lookup."""

    def __init__(self, pid: int):
        self.pid = pid
        self.root = psutil.Process(pid)
        self._start = self.root.create_time()
        self._members: list[psutil.Process] = [self.root]
        self._every = MEMBERS_S
        self._due = -1e9

    def due(self, now: float) -> bool:
        return now >= self._due

    def refresh(self, ppids: dict[int, int], now: float) -> None:
        """New members from a host's ppid map. A member seen before keeps its Process object
        (its CPU baseline); a pid now held by another process, or one older than the root (a
        reused pid), is a new member or none."""
        if not self.root.is_running():  # gone, or its pid taken by another process
            raise psutil.NoSuchProcess(self.pid)
        known = {p.pid: p for p in self._members}
        members = [self.root]
        for pid in descendants(self.pid, ppids):
            try:
                fresh = psutil.Process(pid)
                if fresh.create_time() < self._start:
                    continue
            except psutil.Error:
                continue
            old = known.get(pid)
            members.append(old if old is not None and old == fresh else fresh)
        changed = [id(p) for p in members] != [id(p) for p in self._members]
        self._members = members
        self._every = MEMBERS_S if changed else min(MEMBERS_MAX_S, self._every * 2)
        self._due = now + self._every

    def pids(self) -> set[int]:
        return {p.pid for p in self._members}

    def read(self) -> tuple[Optional[int], Optional[float]]:
        """(RSS bytes, CPU % of one core) summed over the tree; raises psutil.NoSuchProcess when
        the root has gone. Two small /proc reads per member: whether each is still the same
        process is checked when the members are looked up again, not on every tick."""
        rss = 0
        cpu = 0.0
        seen = False
        for p in self._members:
            try:
                rss += p.memory_info().rss
                cpu += p.cpu_percent(None)  # since the previous call; 0.0 the first time
                seen = True
            except psutil.Error:
                if p is self.root:
                    raise psutil.NoSuchProcess(self.pid)
                continue
        return (rss, cpu) if seen else (None, None)


class HostCollector:
    """The host's CPU and memory, and each local arm's server process tree.

    Finding the process behind a URL reads the whole TCP table (every process's open files):
    some 30 ms on a busy host. It is read at most once per lookup round for all the arms not
    found yet, and an arm that stays unfound is looked for less and less often (LOOKUP_S
    doubling to LOOKUP_MAX_S). Arms served by one process (a fleet of workers in one program)
    share one tree, read once a tick."""

    def __init__(self, arms: list[ArmSpec]):
        self.arms = arms
        self._trees: dict[int, _ProcTree] = {}  # root pid -> its tree
        self._arm_pid: dict[str, int] = {}
        self._next_lookup: dict[str, float] = {}
        self._lookup_wait: dict[str, float] = {}
        self.table_reads = 0  # times the TCP table was read (what the lookups cost)
        psutil.cpu_percent(None)  # baseline, so the first tick has a meaningful value

    def server_pids(self, arm: str) -> set[int]:
        t = self._trees.get(self._arm_pid.get(arm, -1))
        return t.pids() if t else set()

    def _find(self) -> None:
        """Trees for the arms that have none, looked up when each one's wait is over."""
        now = time.monotonic()
        wanted: dict[int, list[ArmSpec]] = {}  # port -> arms to find by their listener
        for spec in self.arms:
            pid = self._arm_pid.get(spec.name)
            if pid is not None and pid in self._trees:
                continue
            if now < self._next_lookup.get(spec.name, 0.0):
                continue
            wait = self._lookup_wait.get(spec.name, LOOKUP_S)
            self._next_lookup[spec.name] = now + wait
            self._lookup_wait[spec.name] = min(LOOKUP_MAX_S, wait * 2)
            if spec.pid is not None:
                self._adopt(spec.name, spec.pid)
            elif is_local(spec.url):
                port = url_port(spec.url)
                if port:
                    wanted.setdefault(port, []).append(spec)
        if not wanted:
            return
        self.table_reads += 1
        listeners = listening_pids()
        for port, specs in wanted.items():
            pid = listeners.get(port)
            if pid is not None:
                for spec in specs:
                    self._adopt(spec.name, pid)

    def _adopt(self, arm: str, pid: int) -> None:
        if pid not in self._trees:
            try:
                self._trees[pid] = _ProcTree(pid)
            except psutil.Error:
                return
        self._arm_pid[arm] = pid
        self._lookup_wait.pop(arm, None)  # found: a later loss is looked for again at once

    def read(self) -> tuple[HostReading, dict[str, tuple[Optional[int], Optional[float]]]]:
        """Host reading plus {arm: (server RSS bytes, server CPU % of one core)} for local arms."""
        vm = psutil.virtual_memory()
        host = HostReading(ts=clock.wall(), cpu_pct=psutil.cpu_percent(None),
                           mem_used_bytes=int(vm.total - vm.available), mem_total_bytes=int(vm.total))
        self._find()
        now = time.monotonic()
        due = {id(t) for t in self._trees.values() if t.due(now)}
        ppids = ppid_map() if due else {}  # one walk of the host's processes for every tree due
        per_pid: dict[int, tuple[Optional[int], Optional[float]]] = {}
        for pid, t in list(self._trees.items()):
            try:
                if id(t) in due:
                    t.refresh(ppids, now)
                per_pid[pid] = t.read()
            except psutil.Error:
                del self._trees[pid]  # gone: its arms are looked up again on the next read
                for arm in [a for a, p in self._arm_pid.items() if p == pid]:
                    del self._arm_pid[arm]
                    self._next_lookup.pop(arm, None)
        per_arm = {spec.name: per_pid[self._arm_pid[spec.name]] for spec in self.arms
                   if self._arm_pid.get(spec.name) in per_pid}
        if len(per_arm) == 1:
            host.server_rss_bytes, host.server_cpu_pct = next(iter(per_arm.values()))
        return host, per_arm
