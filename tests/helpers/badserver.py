"""A deliberately bad HTTP/1.1 server on 127.0.0.1 for collector fault tests.

    with BadServer() as srv:
        srv.faults["/metrics"] = "trickle"        # one path misbehaves ...
        ...
        srv.faults.clear()                         # ... and then the fault clears

Written on raw sockets (one thread per connection) so a test controls every byte: bodies
that never end or arrive a byte at a time, resets, lies in the headers. Without a fault each
path answers like a small SGLang server with --enable-metrics: /metrics is the sample body of
tests/data, /server_info and /v1/loads are small JSON objects.

Faults (the value of `faults[path]`):
  "endless"        200, no Content-Length, metric lines until the client goes away
  "trickle"        200, Content-Length 1 MiB, then one byte every 50 ms
  "hang"           reads the request and never answers
  "reset"          reads the request and resets the connection (RST)
  "reset-body"     200 with half of the promised body, then RST
  "close"          reads the request and closes without a word
  "gzip-bomb"      200, Content-Encoding: gzip, ~100 KiB on the wire that inflate to 96 MiB
  "status:<code>"  that status with a short text body (status:500, status:401, status:404)
  "body:<text>"    200 with exactly that body (malformed metrics, odd JSON)

Every request line is recorded in `requests`. `proxy_catcher()` answers 502 to anything: set
as HTTP_PROXY, it shows which requests went through the proxy.
"""

from __future__ import annotations

import gzip
import json
import socket
import socketserver
import struct
import threading
import time
from pathlib import Path
from typing import Optional

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sglang-metrics-sample.prom"

SERVER_INFO = {
    "model_path": "bad/model", "served_model_name": "bad", "version": "0.0.bad", "tp_size": 1,
    "speculative_algorithm": None, "max_total_num_tokens": 617344, "enable_metrics": True,
    "internal_states": [{"effective_max_running_requests_per_dp": 48,
                         "memory_usage": {"weight": 16.0, "kvcache": 70.0, "token_capacity": 617344}}],
}
LOADS = {"loads": [{"num_running_reqs": 5, "num_waiting_reqs": 2, "num_used_tokens": 1000,
                    "max_total_num_tokens": 617344, "token_usage": 0.0016, "gen_throughput": 10.0}]}

_ENDLESS_CHUNK = b'sglang:num_running_reqs{model_name="m",tp_rank="0"} 1.0\n' * 1200  # ~68 KiB
_BOMB_SIZE = 96 * 2**20


def _bomb() -> bytes:
    return gzip.compress(b"\0" * _BOMB_SIZE)


class _Handler(socketserver.BaseRequestHandler):
    server: "_TCPServer"

    def handle(self) -> None:
        sock: socket.socket = self.request
        self.server.owner._opened(sock)
        try:
            while not self.server.owner.stopping:
                head = self._read_head(sock)
                if head is None:
                    return
                method, path = head
                self.server.owner.requests.append(f"{method} {path}")
                if not self._answer(sock, path.split("?", 1)[0]):
                    return
        except OSError:
            return  # the client went away or the connection was killed
        finally:
            self.server.owner._closed(sock)

    @staticmethod
    def _read_head(sock: socket.socket) -> Optional[tuple[str, str]]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
            if len(data) > 1 << 20:
                return None
        first = data.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        return (first[0], first[1]) if len(first) >= 2 else ("?", "?")

    def _answer(self, sock: socket.socket, path: str) -> bool:
        """Send the answer; False when the connection is over afterwards."""
        owner = self.server.owner
        fault = owner.faults.get(path, owner.default_fault)
        if fault is None:
            body, ctype = owner.good_body(path)
            if body is None:
                return _send(sock, 404, b"not found", "text/plain")
            return _send(sock, 200, body, ctype)
        if fault == "endless":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
            while not owner.stopping:
                sock.sendall(_ENDLESS_CHUNK)
            return False
        if fault == "trickle":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1048576\r\n\r\n")
            for _ in range(1048576):
                if owner.stopping:
                    break
                sock.sendall(b"#")
                time.sleep(0.05)
            return False
        if fault == "hang":
            while not owner.stopping and sock.recv(65536):
                pass
            return False
        if fault == "reset":
            _reset(sock)
            return False
        if fault == "reset-body":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 20000\r\n\r\n"
                         + b"# partial\n" * 1000)
            time.sleep(0.05)
            _reset(sock)
            return False
        if fault == "close":
            return False
        if fault == "gzip-bomb":
            body = owner.bomb()
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            return True
        if fault.startswith("status:"):
            return _send(sock, int(fault.split(":", 1)[1]), b"no", "text/plain")
        if fault.startswith("body:"):
            return _send(sock, 200, fault.split(":", 1)[1].encode(), "application/json")
        raise ValueError(f"unknown fault {fault!r}")


def _send(sock: socket.socket, status: int, body: bytes, ctype: str) -> bool:
    sock.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body)
    return True


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "BadServer"


class BadServer:
    def __init__(self) -> None:
        self.faults: dict[str, str] = {}
        self.default_fault: Optional[str] = None  # the fault of every path not in `faults`
        self.requests: list[str] = []
        self.stopping = False
        self.metrics_text = SAMPLE.read_text()
        self.server_info: object = SERVER_INFO
        self.loads: object = LOADS
        self._bomb: Optional[bytes] = None
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._srv = _TCPServer(("127.0.0.1", 0), _Handler)
        self._srv.owner = self
        self.port = self._srv.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def good_body(self, path: str) -> tuple[Optional[bytes], str]:
        if path == "/metrics":
            return self.metrics_text.encode(), "text/plain; version=0.0.4; charset=utf-8"
        if path in ("/server_info", "/get_server_info"):
            return json.dumps(self.server_info).encode(), "application/json"
        if path == "/v1/loads":
            return json.dumps(self.loads).encode(), "application/json"
        return None, ""

    def bomb(self) -> bytes:
        if self._bomb is None:
            self._bomb = _bomb()
        return self._bomb

    def kill_connections(self) -> None:
        """Reset every open connection now (a safety stop for tests that watch memory)."""
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RD)  # wakes a handler blocked in recv
                s.close()  # with linger 0: the client gets a reset, not a clean end of body
            except OSError:
                pass

    def _opened(self, s: socket.socket) -> None:
        with self._lock:
            self._socks.add(s)

    def _closed(self, s: socket.socket) -> None:
        with self._lock:
            self._socks.discard(s)

    def __enter__(self) -> "BadServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping = True
        self._srv.shutdown()
        self._srv.server_close()
        self.kill_connections()


def proxy_catcher() -> BadServer:
    """A server that answers 502 to everything: set as HTTP_PROXY, its `requests` list shows
    what went through the proxy (a proxy is sent absolute URLs)."""
    p = BadServer()
    p.default_fault = "status:502"
    return p
