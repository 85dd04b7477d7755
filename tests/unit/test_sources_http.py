"""The collectors' lean HTTP/1.1 GET (specmon/sources/http.py) against real servers on 127.0.0.1:
the simulator (uvicorn, chunked answers) over one kept-alive connection, and a raw-socket server
whose every byte a test writes (framings, encodings, connections closed while idle or mid-answer)."""

from __future__ import annotations

import asyncio
import gzip
import socket
import threading
import zlib
from typing import Callable

import httpx
import pytest

from helpers.simproc import start_sim
from specmon.model import ArmSpec
from specmon.sources import http
from specmon.sources.get import lean_target
from specmon.sources.sglang import ArmCollector


class RawServer:
    """Answers each request head with answer(path) -> (bytes to send, close the connection after)."""

    def __init__(self, answer: Callable[[str], tuple[bytes, bool]]):
        self.answer = answer
        self.connections = 0
        self.requests: list[bytes] = []
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self.port = self._sock.getsockname()[1]
        self._stop = False
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            self._conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        data = b""
        try:
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = c.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                self.requests.append(head)
                out, close = self.answer(head.split(b" ")[1].decode())
                c.sendall(out)
                if close:
                    c.close()
                    return
        except OSError:
            return

    def close_idle(self) -> None:
        """Close every connection from the server's side (as a server's keep-alive timeout does)."""
        for c in self._conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass
        self._conns.clear()

    def __enter__(self) -> "RawServer":
        return self

    def __exit__(self, *exc) -> None:
        self._stop = True
        self._sock.close()
        self.close_idle()


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def chunked(parts: list[bytes], trailer: bytes = b"") -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for i, p in enumerate(parts):
        out += f"{len(p):x}{';ext=1' if i == 0 else ''}\r\n".encode() + p + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


async def test_the_simulator_is_scraped_over_one_kept_connection():
    with start_sim("--enable-metrics", "--startup-s", "0.2", speed=50) as sim:
        host, port, prefix = lean_target(sim.url)
        c = http.LeanClient(host, port, timeout_s=5.0)
        try:
            for _ in range(20):
                status, body = await c.get(prefix + "/metrics", {}, 2**20)
                assert status == 200 and b"sglang:num_running_reqs" in body
            status, body = await c.get("/server_info", {}, 2**20)
            assert status == 200 and body.startswith(b"{")
            status, body = await c.get("/no-such-path", {}, 2**20)
            assert status == 404 and body == b""  # not read: that connection is closed, not kept
            status, body = await c.get("/metrics", {}, 2**20)
            assert status == 200
        finally:
            await c.aclose()
        assert c.connects == 2  # 21 answers on the first connection, then one after the 404
        # the same body httpx reads (uvicorn frames it chunked): the same families, whole lines
        # (a series may appear between the two reads: each request adds its endpoint's)
        direct = httpx.get(sim.url + "/metrics").content

        def families(text: bytes) -> set[bytes]:
            return {line for line in text.split(b"\n") if line.startswith(b"# TYPE ")}

        assert len(families(body)) > 20 and families(body) == families(direct)
        assert body.endswith(b"\n") and abs(body.count(b"\n") - direct.count(b"\n")) <= 3


@pytest.mark.parametrize("framing", ["length", "chunked", "until-close", "gzip", "deflate", "raw-deflate"])
async def test_framings_and_encodings(framing):
    body = b"sglang:num_running_reqs 3\n" * 3000  # 78 KiB
    answers = {
        "length": (ok(body), False),
        "chunked": (chunked([body[:1000], body[1000:50_000], body[50_000:]], b"X-Trailer: 1\r\n"), False),
        "until-close": (b"HTTP/1.1 200 OK\r\n\r\n" + body, True),
        "gzip": (ok(gzip.compress(body), "Content-Encoding: gzip"), False),
        "deflate": (ok(zlib.compress(body), "Content-Encoding: deflate"), False),
        "raw-deflate": (ok(zlib.compress(body)[2:-4], "Content-Encoding: deflate"), False),
    }
    with RawServer(lambda path: answers[framing]) as srv:
        c = http.LeanClient("127.0.0.1", srv.port, timeout_s=2.0)
        try:
            for _ in range(3):
                assert await c.get("/metrics", {"Authorization": "Bearer k"}, 2**20) == (200, body)
        finally:
            await c.aclose()
        assert srv.connections == (3 if framing == "until-close" else 1)
        assert b"\r\nauthorization: bearer k" in srv.requests[0].lower()
        assert b"accept-encoding: identity" in srv.requests[0].lower()


async def test_a_server_across_a_network_is_asked_for_gzip():
    # SourceGet asks identity of a server on this host and gzip of any other (get.py); the lean
    # client asked for gzip says so and inflates what comes.
    body = b'{"status":"success","data":{"result":[]}}' * 2000
    with RawServer(lambda path: (ok(gzip.compress(body), "Content-Encoding: gzip"), False)) as srv:
        c = http.LeanClient("127.0.0.1", srv.port, timeout_s=2.0, accept_encoding="gzip")
        try:
            assert await c.get("/api/v1/query_range", {}, 2**20) == (200, body)
        finally:
            await c.aclose()
        assert b"\r\naccept-encoding: gzip\r\n" in srv.requests[0].lower() + b"\r\n"


async def test_a_connection_the_server_closed_while_idle_is_replaced_silently():
    with RawServer(lambda path: (ok(b"up 1\n"), False)) as srv:
        c = http.LeanClient("127.0.0.1", srv.port, timeout_s=2.0)
        try:
            assert await c.get("/metrics", {}, 1024) == (200, b"up 1\n")
            srv.close_idle()
            await asyncio.sleep(0.05)
            assert await c.get("/metrics", {}, 1024) == (200, b"up 1\n")
            srv.close_idle()  # this time the client has not yet seen the close when it sends
            assert await c.get("/metrics", {}, 1024) == (200, b"up 1\n")
        finally:
            await c.aclose()
        assert srv.connections == 3


@pytest.mark.parametrize("answer, kind, words", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", http.TransportError, "95 bytes before the end"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", http.TransportError, "inside a chunked body"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", http.TransportError, "bad chunk size"),
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", http.TransportError, "not an HTTP/1 answer"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", http.TransportError, "bad header line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Encoding: gzip\r\n\r\nnope", http.Undecodable, ""),
    (b"", http.TransportError, "without a complete answer"),
])
async def test_broken_answers_are_typed_errors(answer, kind, words):
    with RawServer(lambda path: (answer, True)) as srv:
        c = http.LeanClient("127.0.0.1", srv.port, timeout_s=2.0)
        try:
            with pytest.raises(kind) as e:
                await c.get("/metrics", {}, 2**20)
            assert words in str(e.value)
        finally:
            await c.aclose()


async def test_caps_count_the_inflated_body():
    body = b"x" * 5000
    with RawServer(lambda path: (ok(gzip.compress(body), "Content-Encoding: gzip") if path == "/gz" else ok(body),
                                 False)) as srv:
        c = http.LeanClient("127.0.0.1", srv.port, timeout_s=2.0)
        try:
            for path in ("/gz", "/plain"):
                with pytest.raises(http.TooLarge):
                    await c.get(path, {}, 4999)
                assert await c.get(path, {}, 5000) == (200, body)
        finally:
            await c.aclose()


async def test_a_silent_server_is_a_read_timeout():
    with RawServer(lambda path: (b"", False)) as srv:  # reads the request, never answers
        c = http.LeanClient("127.0.0.1", srv.port, timeout_s=0.2)
        try:
            with pytest.raises(http.ReadTimeout):
                await c.get("/metrics", {}, 1024)
        finally:
            await c.aclose()


def test_which_urls_the_lean_client_takes(monkeypatch):
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert lean_target("http://127.0.0.1:30000") == ("127.0.0.1", 30000, "")
    assert lean_target("http://[::1]:30000/sub/") == ("::1", 30000, "/sub")
    assert lean_target("http://gpu-7.internal") == ("gpu-7.internal", 80, "")
    for url in ("https://127.0.0.1:30000", "http://u:p@127.0.0.1:1", "http://127.0.0.1:99999", "http://h:1/?a=b"):
        assert lean_target(url) is None, url
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    assert lean_target("http://gpu-7.internal:30000") is None  # httpx and its proxy handling
    assert lean_target("http://localhost:30000") is not None  # a proxy is never used for loopback
    assert not ArmCollector(ArmSpec("a", "http://gpu-7.internal:1"))._http.is_lean("http://gpu-7.internal:1/metrics")
    assert ArmCollector(ArmSpec("a", "http://127.0.0.1:1"))._http.is_lean("http://127.0.0.1:1/metrics")


async def test_is_refused_reads_a_refusal_through_either_client_and_nothing_else():
    held = socket.socket()  # a port nobody listens on: a connect to it is reset at once
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    try:
        lean = http.LeanClient("127.0.0.1", port, timeout_s=2.0)
        try:
            with pytest.raises(http.HttpError) as lean_err:
                await lean.get("/metrics", {}, 1024)
        finally:
            await lean.aclose()
        async with httpx.AsyncClient(timeout=2.0) as client:
            with pytest.raises(httpx.ConnectError) as httpx_err:
                await client.get(f"http://127.0.0.1:{port}/metrics")
    finally:
        held.close()
    assert http.is_refused(lean_err.value)
    assert http.is_refused(httpx_err.value)  # "All connection attempts failed", refused underneath
    with RawServer(lambda path: (b"", False)) as srv:  # it listens, and never answers
        c = http.LeanClient("127.0.0.1", srv.port, timeout_s=0.2)
        try:
            with pytest.raises(http.ReadTimeout) as silent:
                await c.get("/metrics", {}, 1024)
        finally:
            await c.aclose()
    assert not http.is_refused(silent.value)
