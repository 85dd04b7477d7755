"""Where the real SGLang server (CPU engine) lives, for the `real_sglang` test tier.

`../shared/real-sglang/setup.sh VENV` builds a venv with SGLang 0.5.23 (`SGLANG_VERSION=0.5.10.post1`
for the earlier release) and `serve.sh VENV PORT [flags]` starts it on 127.0.0.1 with a tiny
random-weight model. The tier is written for 0.5.23; `.ci/run` builds both venvs once into cache
folders outside the repo (one per version), runs the tier on 0.5.23 and the attach test on
0.5.10.post1 (SPECMON_SGLANG_VENV pointed at it). Tests marked real_sglang skip (with the reason)
when the venv or the scripts are missing.

  SPECMON_SGLANG_VENV       the venv (default: ~/.cache/specmon/sglvenv, else /work/sglvenv)
  SPECMON_REAL_SGLANG_DIR   the folder holding serve.sh and tiny-llama/ (default: ../shared/real-sglang)
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _first_existing(*paths: Path) -> Path:
    for p in paths:
        if p.exists():
            return p
    return paths[0]


SGLANG_VENV = Path(os.environ["SPECMON_SGLANG_VENV"]) if os.environ.get("SPECMON_SGLANG_VENV") else _first_existing(
    Path.home() / ".cache" / "specmon" / "sglvenv", Path("/work/sglvenv"))
REAL_DIR = Path(os.environ.get("SPECMON_REAL_SGLANG_DIR") or (REPO.parent / "shared" / "real-sglang"))
SERVE_SH = REAL_DIR / "serve.sh"
TINY_MODEL = REAL_DIR / "tiny-llama"
SGLANG_PYTHON = SGLANG_VENV / "bin" / "python"


def sglang_version() -> str:
    """sglang.__version__ of the venv, read from its files (no import: that takes seconds)."""
    for meta in sorted((SGLANG_VENV / "lib").glob("python3*/site-packages/sglang-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.startswith("Version: "):
                return line.split(" ", 1)[1].strip()
    return ""


def missing() -> str | None:
    """Why the real tier cannot run here, or None when it can."""
    if not SERVE_SH.exists():
        return f"real SGLang scripts not found at {REAL_DIR} (set SPECMON_REAL_SGLANG_DIR)"
    if not SGLANG_PYTHON.exists():
        return f"real SGLang venv not found at {SGLANG_VENV} (build it with {REAL_DIR}/setup.sh; set SPECMON_SGLANG_VENV)"
    return None


# ---- starting one real server (test helper) ---------------------------------------------------

import contextlib  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Iterator  # noqa: E402

from helpers.simproc import free_port  # noqa: E402,F401  (one free-port helper for both servers)
from specmon.sources import logparse as lp  # noqa: E402

READY_LINE = "The server is fired up and ready to roll!"
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}


@dataclass
class RealServer:
    url: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def launch_argv(port: int, *flags: str, metrics: bool = True) -> list[str]:
    """`python -m sglang.launch_server` as serve.sh runs it; metrics=False leaves --enable-metrics out
    (serve.sh always sets it). --sleep-on-idle (both releases): an idle CPU-engine scheduler
    otherwise spins a core, on a machine the tests share."""
    argv = [str(SGLANG_PYTHON), "-m", "sglang.launch_server", "--model-path", str(TINY_MODEL), "--device", "cpu",
            "--load-format", "dummy", "--host", "127.0.0.1", "--port", str(port), "--max-total-tokens", "8192",
            "--sleep-on-idle"]
    return argv + (["--enable-metrics"] if metrics else []) + list(flags)


def stop_group(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group (launcher, scheduler, detokenizer), SIGKILL what is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@contextlib.contextmanager
def start_real(log_path: Path, *flags: str, metrics: bool = True, timeout_s: float = 240.0) -> Iterator[RealServer]:
    """A real SGLang server on a free loopback port, ready (/health 200), stopped with its group at exit.
    timeout_s stays below pytest's 300 s per test, so a server that never gets ready fails with its
    log's tail rather than with pytest's timeout."""
    port = free_port()
    env = dict(os.environ, **CPU_ENV)
    log = open(log_path, "wb")
    proc = subprocess.Popen(launch_argv(port, *flags, metrics=metrics), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    server = RealServer(url=f"http://127.0.0.1:{port}", port=port, proc=proc, log_path=log_path)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"real SGLang exited ({proc.returncode}): {server.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"real SGLang not ready in {timeout_s:g} s: {server.log_text()[-3000:]}")
            # uvicorn's bind failure does not end SGLang's launcher for minutes (logparse._BIND_ERROR)
            if any(lp.bind_error(line) for line in server.log_text().splitlines()[-50:]):
                raise RuntimeError(f"real SGLang could not bind port {port}: {server.log_text()[-3000:]}")
            try:
                with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        yield server
    finally:
        stop_group(proc)
        log.close()
