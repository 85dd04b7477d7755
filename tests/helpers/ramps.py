"""Ramps driven two ways: RampDriver in this process against a URL, and `specmon ramp` as a
subprocess; and a server that refuses every request, for the back-off paths."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import subprocess
import sys
import threading
import time

from helpers.badserver import LOADS, SAMPLE, SERVER_INFO
from helpers.simproc import REPO
from specmon.model import ArmSpec
from specmon.session.live import LiveSession
from specmon.session.ramp import RampDriver


def run_ramp(url, plan, out, interval=0.5, control=None):
    arm = ArmSpec(name="sim", url=url)
    ramp = RampDriver([arm], plan)
    live = LiveSession([arm], interval=interval, out_dir=out, ramp=ramp, isl=plan.input_len, osl=plan.output_len)
    events = []

    async def main():
        def emit(e):
            events.append(e)
            if control:
                control(e, ramp, asyncio.get_running_loop())
        return await live.run(emit, asyncio.Event())

    reason = asyncio.run(main())
    return ramp, events, reason


def ramp_cli(out, url, *args, env=None, timeout=120):
    p = subprocess.run([sys.executable, "-m", "specmon", "ramp", url, *args, "--headless", "--out", str(out)],
                       capture_output=True, text=True, timeout=timeout, cwd=str(REPO), env=env or os.environ)
    return p, out


class RefusingServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, status, headers=()):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status, self.headers = status, list(headers)
        self.lock = threading.Lock()
        self.generate: list[tuple[int, float]] = []  # (client port, monotonic time) per /generate
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "RefusingServer"

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status, body, ctype="application/json", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, SAMPLE.read_bytes(), "text/plain; version=0.0.4")
        elif path in ("/server_info", "/get_server_info"):
            self._send(200, json.dumps(SERVER_INFO).encode())
        elif path == "/v1/loads":
            self._send(200, json.dumps(LOADS).encode())
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.split("?", 1)[0] == "/generate":
            with self.server.lock:
                self.server.generate.append((self.client_address[1], time.monotonic()))
            headers = [(k, v() if callable(v) else v) for k, v in self.server.headers]
            self._send(self.server.status, b'{"error": "no"}', headers=headers)
        else:
            self._send(404, b"not found", "text/plain")
