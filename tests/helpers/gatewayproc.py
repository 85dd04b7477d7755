"""Start the real SGLang Model Gateway (`smg` 1.x, the dev extra's; or sglang-router 0.3.x's) on 127.0.0.1 for tests.

    with start_gateway("--worker-urls", sim.url) as gw:
        httpx.get(gw.url + "/workers"); httpx.get(gw.metrics_url)

The `smg` launcher runs the router in a process of its own that outlives the launcher, so the
gateway starts in its own session and the whole process group is stopped. It must not reach
past this machine: HF_ENDPOINT points at a closed loopback port (the gateway looks a worker's
tokenizer up there when the worker's model path is not a local folder) and the workers the tests
start serve a local, empty model folder.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from helpers.simproc import REPO, LoggedProcess, free_port, stop_process
from specmon.servers.launch.processes import _pdeathsig_preexec

SMG = shutil.which("smg") or str(Path(os.sys.executable).parent / "smg")


def have_gateway() -> bool:
    return Path(SMG).is_file() and os.access(SMG, os.X_OK)


@dataclass(kw_only=True)
class Gateway(LoggedProcess):
    url: str
    metrics_url: str
    admin_key: Optional[str] = None  # smg 1.x asks it (as a bearer) on its worker routes when given one

    def auth(self) -> dict:
        return {"Authorization": f"Bearer {self.admin_key}"} if self.admin_key else {}

    def get_json(self, path: str, timeout: float = 5.0):
        req = urllib.request.Request(self.url + path, headers=self.auth())
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def post_json(self, path: str, body: dict, timeout: float = 10.0):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **self.auth()})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")

    def delete(self, path: str, timeout: float = 10.0) -> int:
        req = urllib.request.Request(self.url + path, method="DELETE", headers=self.auth())
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status

    def workers(self) -> list[dict]:
        return self.get_json("/workers").get("workers", [])

    def wait_workers(self, n: int, healthy: bool = True, timeout: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        last: list[dict] = []
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            try:
                last = self.workers()
            except (urllib.error.URLError, OSError, ValueError):
                last = []
            if len(last) == n and (not healthy or all(w.get("is_healthy") for w in last)):
                return last
            time.sleep(0.1)
        raise RuntimeError(f"gateway has {len(last)} workers, not {n}, after {timeout}s: {last}\n"
                           + self.log_text()[-3000:])


@functools.lru_cache(maxsize=1)
def smg_version() -> tuple[int, ...]:
    """The installed gateway's release: `smg 1.13.0` (smg) or `sgl-model-gateway 0.3.2` (sglang-router)."""
    p = subprocess.run([SMG, "--version"], capture_output=True, text=True, timeout=30)
    words = (p.stdout or p.stderr).split()
    try:
        return tuple(int(x) for x in words[1].split(".")[:3])
    except (IndexError, ValueError):
        return (0,)


def version_flags() -> list[str]:
    # smg 1.x polls each worker's load every 10 s by default: /get_loads and smg_engine_* would lag
    # the tests' few seconds of load
    return ["--load-monitor-interval", "1"] if smg_version() >= (1,) else []


def safe_env() -> dict:
    return dict(os.environ, HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="1", NO_PROXY="*",
                RUST_LOG="warn")


@contextlib.contextmanager
def start_gateway(*flags: str, workers: Optional[int] = None, timeout: float = 30.0,
                  admin_key: Optional[str] = None) -> Iterator[Gateway]:
    """flags: `smg launch` flags after the host/port ones (e.g. "--worker-urls", URL...). Waits
    until /workers lists `workers` healthy workers (None: until the gateway answers at all).
    admin_key: the gateway asks it on its worker routes (smg 1.x's control-plane keys)."""
    port, mport = free_port(), free_port()
    log_dir = Path(tempfile.mkdtemp(prefix="specmon-smg-"))
    log_path = log_dir / f"smg-{port}.log"
    fh = open(log_path, "wb")
    cmd = [SMG, "launch", "--host", "127.0.0.1", "--port", str(port), "--prometheus-host", "127.0.0.1",
           "--prometheus-port", str(mport), "--log-level", "warn", "--health-check-interval-secs", "1",
           *version_flags(), *flags]
    if admin_key:
        cmd += ["--control-plane-api-keys", f"specmon-test:specmon tests:admin:{admin_key}"]
    # its own session (the whole group is stopped), and the kernel TERMs it if the test process
    # dies without stopping it (kill -9 of pytest; KILL: smg drains for up to 180 s on TERM, and the
    # router has no children of its own): no router is left behind either way
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO),
                            env=safe_env(), start_new_session=True, preexec_fn=_pdeathsig_preexec(signal.SIGKILL))
    fh.close()
    gw = Gateway(url=f"http://127.0.0.1:{port}", metrics_url=f"http://127.0.0.1:{mport}/metrics", proc=proc,
                 log_path=log_path, admin_key=admin_key)
    try:
        if workers is not None:
            gw.wait_workers(workers, timeout=timeout)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    gw.get_json("/workers", timeout=1.0)
                    break
                except (urllib.error.URLError, OSError, ValueError):
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError(f"gateway never answered:\n{gw.log_text()[-3000:]}")
                    time.sleep(0.1)
        yield gw
    finally:
        stop_process(proc)


class RecordingProxy:
    """A tiny forwarding proxy on 127.0.0.1 that records every request's method and path, so a
    test can say what specmon sent (e.g. only GETs). Bodies are relayed whole (no streaming)."""

    def __init__(self, upstream: str):
        import http.client
        import http.server
        import threading
        from urllib.parse import urlsplit

        up = urlsplit(upstream)
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _relay(self):
                proxy.requests.append((self.command, self.path))
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn = http.client.HTTPConnection(up.hostname, up.port, timeout=10)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    r = conn.getresponse()
                    data = r.read()
                    self.send_response(r.status)
                    for k, v in r.getheaders():
                        if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    self.send_response(502)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _relay

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def methods(self) -> set[str]:
        return {m for m, _ in self.requests}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
