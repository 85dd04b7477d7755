"""Start `specmon sim` as a real process on a free 127.0.0.1 port for tests.

    with start_sim("--enable-metrics", "--profile", "nvfp4-mtp", speed=50) as sim:
        httpx.get(sim.url + "/metrics")

The sim runs in its own process group; at exit it gets SIGTERM, then SIGKILL after `stop_timeout`.
Its stderr/stdout go to `sim.log_path` (SGLang's log lines are on stderr).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import psutil

from specmon.servers.launch import free_port as launch_free_port

REPO = Path(__file__).resolve().parents[2]


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free 127.0.0.1 port, never the same one twice in a test run, picked the way specmon picks
    ports for the servers it launches: below the kernel's ephemeral range. A bind(0) port is one
    the kernel hands out again before a slow server binds it: a real SGLang scheduler opens eight
    listeners on kernel-picked ports ~25 s after launch, before its HTTP server binds, and one
    taking the HTTP port leaves a server that accepts /health but never answers it."""
    port = launch_free_port(avoid=_HANDED_OUT)
    _HANDED_OUT.add(port)
    return port


@dataclass
class LoggedProcess:
    """A process a test started, with its stdout/stderr in a file."""
    proc: subprocess.Popen
    log_path: Path

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@dataclass(kw_only=True)
class SimProcess(LoggedProcess):
    url: str
    port: int

    def stop(self, timeout: float = 5.0) -> None:
        stop_process(self.proc, timeout)


def group_pids(pgid: int) -> list[int]:
    """The live processes of process group `pgid`."""
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return out


def stop_process(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def sim_command(*flags: str, port: int, speed: float) -> list[str]:
    return [sys.executable, "-m", "specmon", "sim", "--host", "127.0.0.1", "--port", str(port),
            "--speed", str(speed), *flags]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float, log_path: Path,
                 headers: Optional[dict] = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sim exited with {proc.returncode} before /health was 200:\n"
                               + log_path.read_text(errors="replace")[-3000:])
        try:
            with urllib.request.urlopen(url + "/health", timeout=1.0) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError, ConnectionError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"sim at {url} not healthy after {timeout}s:\n" + log_path.read_text(errors="replace")[-3000:])


@contextlib.contextmanager
def start_sim(*flags: str, speed: float = 50.0, port: Optional[int] = None, timeout: float = 30.0,
              wait: bool = True, log_dir: Optional[Path] = None) -> Iterator[SimProcess]:
    """flags: any `specmon sim` flags (e.g. "--profile", "nvfp4-mtp", "--enable-metrics").
    wait=False returns as soon as the process is spawned (for --fault-refuse and startup tests)."""
    port = port or free_port()
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="specmon-sim-"))
    log_path = log_dir / f"sim-{port}.log"
    fh = open(log_path, "wb")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(sim_command(*flags, port=port, speed=speed), stdout=fh, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=str(REPO), env=env, start_new_session=True)
    fh.close()
    sim = SimProcess(url=f"http://127.0.0.1:{port}", port=port, proc=proc, log_path=log_path)
    try:
        if wait:
            wait_healthy(sim.url, proc, timeout, log_path)
        yield sim
    finally:
        sim.stop()
