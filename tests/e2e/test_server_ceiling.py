"""The ceiling on what attach asks of one server: at most MAX_GETS_PER_S GETs in any second, all
its arms together, counted by a real HTTP server on 127.0.0.1 that stamps every request."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from helpers.simproc import REPO, start_sim

from specmon.sources.pace import MAX_GETS_PER_S


def _counting_server(bodies: dict[str, bytes]) -> tuple[ThreadingHTTPServer, list[float]]:
    """Answers the SGLang paths with bodies read from a simulator; stamps each request."""
    stamps: list[float] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            stamps.append(time.monotonic())
            body = bodies.get(self.path.split("?")[0])
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, stamps


def test_ten_arms_on_one_server_at_the_interval_floor_stay_under_the_ceiling(tmp_path):
    with start_sim("--enable-metrics", speed=20.0) as sim:
        bodies = {p: httpx.get(sim.url + p, timeout=10).content for p in ("/metrics", "/server_info", "/health")}
    srv, stamps = _counting_server(bodies)
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        names = [a for i in range(10) for a in ("--name", f"a{i}={url}")]
        p = subprocess.run([sys.executable, "-m", "specmon", "attach", *names, "--no-discover", "--headless",
                            "--interval", "0.1", "--duration", "4", "--out", str(tmp_path / "s")],
                           cwd=str(REPO), capture_output=True, text=True, timeout=90)
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    assert len(stamps) > 2 * MAX_GETS_PER_S  # it did ask, for seconds
    # the most requests in any one-second window
    peak = max(sum(1 for t in stamps[i:] if t - s < 1.0) for i, s in enumerate(stamps))
    assert peak <= MAX_GETS_PER_S, peak


def test_attach_help_states_the_ceiling():
    p = subprocess.run([sys.executable, "-m", "specmon", "attach", "--help"], cwd=str(REPO), capture_output=True,
                       text=True, timeout=60)
    words = " ".join(p.stdout.split())
    assert f"at most {MAX_GETS_PER_S} requests a second" in words, words
