"""Process-group lifetime: stopping a server's process group, and the guards that stop every group
when specmon ends without doing it.

No server outlives specmon, however specmon ends:
  - a clean end, an exception, SIGINT: stop() from the session's `finally`, and an atexit hook
    for a Supervisor nobody stopped;
  - SIGTERM/SIGHUP with no handler installed by the front end (their default action would end
    specmon without running any Python): the Supervisor installs one that stops every group,
    then lets the signal end the process as it would have;
  - kill -9 (nothing runs in specmon): two things outside it. (1) Each server's leader is
    started with PR_SET_PDEATHSIG=SIGTERM, so the kernel signals it when specmon dies; SGLang's
    scheduler and detokenizer set the same on themselves (SIGKILL when the launcher dies), but
    a wrapper's other children (`bash -c '... &'`) would not be reached. (2) A small reaper
    process (own session, stdlib only) holds the read end of a pipe only specmon writes to;
    specmon tells it which groups are live; when the pipe reaches EOF (the kernel closes it when
    specmon dies, whatever killed it) it TERMs, then KILLs, every group still registered. What
    neither survives: the reaper itself killed along with specmon (e.g. `kill -9` of both, or the
    OOM killer picking it), and a server that leaves its process group on purpose.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Optional


def kill_group(pgid: int, grace_s: float = 10.0, leader: Optional[subprocess.Popen] = None) -> None:
    """TERM the process group, wait up to grace_s for all of it to go, then KILL what is left.
    `leader` (our child) is reaped while waiting: an unreaped zombie would still count as alive."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- servers die with specmon --------------------------------------------------------------

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _pdeathsig_preexec(sig: int = signal.SIGTERM) -> Optional[Callable[[], None]]:
    """A preexec_fn asking the kernel to send `sig` to the child when its parent dies (Linux only;
    None elsewhere). The kernel's "parent" is the forking THREAD: call it from a thread that lives
    as long as the process (the main thread: asyncio.run and Textual both run their loop there);
    from another thread the servers would be killed when that thread ends, so there it is None.
    libc is resolved here, in the parent: the child only makes the one call, then checks that the
    parent did not die between fork and prctl (the signal would then never come)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(111)

    return preexec


# The reaper: stdlib only, no site (start to exit ~30 ms here). Lines on stdin: "+PGID" (a live
# group) and "-PGID" (stopped). EOF, i.e. specmon is gone without having stopped them: TERM every
# group left, KILL what is still there after the grace period.
_REAPER_SRC = r"""
import os, signal, sys, time
for s in (signal.SIGHUP, signal.SIGINT):
    signal.signal(s, signal.SIG_IGN)
grace = float(sys.argv[1])
groups = set()
for line in iter(sys.stdin.buffer.readline, b""):
    line = line.strip()
    if line[:1] in (b"+", b"-") and line[1:].isdigit():
        (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
def alive(g):
    try:
        os.killpg(g, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
left = set()
for g in groups:
    try:
        os.killpg(g, signal.SIGTERM)
        left.add(g)
    except (ProcessLookupError, PermissionError):
        pass
end = time.monotonic() + grace
while left and time.monotonic() < end:
    left = {g for g in left if alive(g)}
    time.sleep(0.05)
for g in left:
    try:
        os.killpg(g, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
"""


class _Reaper:
    """The process that stops this Supervisor's groups if specmon dies without doing it."""

    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.proc: Optional[subprocess.Popen] = None
        # Reentrant: the SIGTERM/SIGHUP fallback handler may run stop() on the main thread while it
        # is inside _send. Writes are os.write of one short line (atomic on a pipe), not a buffered
        # file, for the same reason.
        self.lock = threading.RLock()

    def _send(self, text: str) -> None:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                try:
                    self.proc = subprocess.Popen(
                        [sys.executable, "-S", "-E", "-c", _REAPER_SRC, f"{self.grace_s:g}"],
                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        start_new_session=True, close_fds=True,  # terminal signals never reach it
                    )
                except OSError:
                    self.proc = None
                    return
            try:
                assert self.proc.stdin is not None
                os.write(self.proc.stdin.fileno(), text.encode())
            except (OSError, ValueError):
                pass

    def add(self, pgid: int) -> None:
        self._send(f"+{pgid}\n")

    def remove(self, pgid: int) -> None:
        if self.proc is not None:
            self._send(f"-{pgid}\n")

    def close(self) -> None:
        """EOF with no group left: the reaper exits at once."""
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


# Supervisors that may have servers running (held strongly: one that is garbage collected
# without stop() must still have its servers stopped at exit).
_LIVE: set = set()  # of Supervisor (supervisor.py)
_FATAL_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


@atexit.register
def _stop_all_at_exit() -> None:
    for sup in list(_LIVE):
        sup.stop(grace_s=3.0)


def _on_fatal_signal(signum: int, frame) -> None:
    """SIGTERM/SIGHUP that no front end handles: stop every server, then end as the signal would."""
    _stop_all_at_exit()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_fatal_handlers() -> None:
    """Only where the signal would otherwise end the process without running any Python (SIG_DFL);
    a front end's own handler (headless: "terminated", "hangup") stays in charge."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _FATAL_SIGNALS:
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_fatal_signal)
        except (ValueError, OSError):
            pass


def _remove_fatal_handlers() -> None:
    if _LIVE or threading.current_thread() is not threading.main_thread():
        return
    for sig in _FATAL_SIGNALS:
        try:
            if signal.getsignal(sig) is _on_fatal_signal:
                signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass
