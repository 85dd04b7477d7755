"""The sources' one GET (specmon/sources/get.py): the lean client and httpx fail the same ways
with the same GetFailed kinds, ask the same query, read the bodies asked for; and each source
words a failure as it always has."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
from typing import Callable, Optional

import httpx
import pytest

from helpers.badserver import BadServer
from specmon.sources.gateway.client import _Http
from specmon.sources.get import GetFailed, SourceGet, is_loopback_url
from specmon.sources.promfleet.api import _Api
from specmon.sources.promfleet.parse import PromQueryError

CLIENTS = ["lean", "httpx"]


def source_get(url: str, client: str, timeout_s: float = 2.0) -> SourceGet:
    # a transport of its own sends every GET through httpx, over real sockets here
    g = SourceGet(url, timeout_s, httpx.AsyncHTTPTransport() if client == "httpx" else None)
    assert g.is_lean(url + "/metrics") == (client == "lean")
    return g


async def failure(g: SourceGet, url: str, max_bytes: int = 2**20) -> GetFailed:
    with pytest.raises(GetFailed) as e:
        await g.get(url, {}, max_bytes)
    return e.value


class Raw:
    """A server in the test's loop that answers every request with answer(request head)."""

    def __init__(self, answer: Callable[[bytes], bytes]):
        self.answer = answer
        self.server: Optional[asyncio.base_events.Server] = None
        self.url = ""

    async def __aenter__(self) -> "Raw":
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    writer.write(self.answer(head))
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()


def answer(status: int, body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("client", CLIENTS)
async def test_the_same_failures_through_either_client(client):
    url = f"http://127.0.0.1:{closed_port()}"
    g = source_get(url, client)
    try:
        assert (await failure(g, url + "/metrics")).kind == "refused"
    finally:
        await g.aclose()
    with BadServer() as srv:
        srv.bomb()  # made now: compressing it takes longer than the GETs wait
        g = source_get(srv.url, client, timeout_s=0.3)
        try:
            for fault, kind in (("hang", "timeout"), ("close", "error"), ("reset-body", "error"),
                                ("gzip-bomb", "too_large"), ("endless", "too_large")):
                srv.faults["/metrics"] = fault
                f = await failure(g, srv.url + "/metrics")
                assert f.kind == kind, (fault, f.kind, f.words, f.cause)
                if kind == "error":  # the reason names what happened, or httpx's error by its type
                    assert f.said and (client == "lean" or f.said.startswith(f.cause)), f.said
            srv.faults["/metrics"] = "status:500"
            assert await g.get(srv.url + "/metrics", {}, 2**20) == (500, b"")  # not asked for: not read
            assert await g.get(srv.url + "/metrics", {}, 2**20, body_for=(500,)) == (500, b"no")
        finally:
            await g.aclose()
    async with Raw(lambda head: answer(200, b"not gzip", "Content-Encoding: gzip")) as srv:
        g = source_get(srv.url, client)
        try:
            assert (await failure(g, srv.url + "/metrics")).kind == "undecodable"
        finally:
            await g.aclose()


async def test_both_clients_ask_the_same_query_and_read_every_status_when_told():
    async with Raw(lambda head: answer(404, head.split(b" ")[1], "Content-Encoding: identity")) as srv:
        params = {"query": 'sum(rate(x{job="a b"}[5m])) by (instance)', "time": "1.5", "note": "é"}
        got = []
        for client in CLIENTS:
            g = source_get(srv.url, client)
            try:
                assert await g.get(srv.url + "/api/v1/query", {}, 1024, params=params) == (404, b"")
                got.append(await g.get(srv.url + "/api/v1/query", {}, 1024, params=params, body_for=None))
            finally:
                await g.aclose()
        assert got[0] == got[1] and got[0][1].startswith(b"/api/v1/query?query=sum%28rate"), got


async def test_the_lean_client_says_when_the_server_closed_a_kept_connection():
    with BadServer() as srv:
        g = SourceGet(srv.url, 2.0)
        try:
            assert not g.peer_closed()
            assert (await g.get(srv.url + "/metrics", {}, 2**20))[0] == 200
            assert not g.peer_closed()
            srv.kill_connections()
            for _ in range(100):
                if g.peer_closed():
                    break
                await asyncio.sleep(0.01)
            assert g.peer_closed()
            assert (await g.get(srv.url + "/metrics", {}, 2**20))[0] == 200  # a new connection
        finally:
            await g.aclose()


async def test_a_proxy_setting_httpx_cannot_use_is_a_setup_failure_of_every_get(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ALL_PROXY", "ftp://127.0.0.1:9")
    url = "http://specmon-test.invalid:30000"
    g = SourceGet(url, 1.0)
    try:
        for _ in range(2):
            f = await failure(g, url + "/metrics")
            assert f.kind == "setup" and "proxy or certificate settings" in f.words and "ftp" in f.words, f.words
    finally:
        await g.aclose()
    assert SourceGet("http://127.0.0.1:1", 1.0).is_lean("http://127.0.0.1:1/metrics")  # loopback never reads it


def test_which_addresses_are_loopback():
    for url in ("http://127.0.0.1:1", "http://127.9.9.9", "http://[::1]:1", "http://localhost:1", "http://LOCALHOST.",
                "https://a.localhost:1", "http://[::ffff:127.0.0.1]:1"):
        assert is_loopback_url(url), url
    for url in ("http://10.0.0.1", "http://localhost.example", "http://[::2]", "http://[::1", "not a url"):
        assert not is_loopback_url(url), url


@pytest.mark.parametrize("client", CLIENTS)
async def test_the_gateway_words_failures_as_before(client):
    url = f"http://127.0.0.1:{closed_port()}"
    h = _Http(url, 2.0, httpx.AsyncHTTPTransport() if client == "httpx" else None)
    try:
        assert await h.get(url + "/workers", {}, 1024) == (None, b"", "connection refused")
    finally:
        await h.aclose()
    with BadServer() as srv:
        h = _Http(srv.url, 0.3, httpx.AsyncHTTPTransport() if client == "httpx" else None)
        try:
            srv.faults["/metrics"] = "hang"
            assert await h.get(srv.url + "/metrics", {}, 2**20) == (None, b"", "no answer in time")
            srv.faults["/metrics"] = "endless"
            assert await h.get(srv.url + "/metrics", {}, 2**20) == (None, b"", "/metrics body over 1 MiB")
            srv.faults["/metrics"] = "status:503"
            assert await h.get(srv.url + "/metrics", {}, 2**20) == (503, b"no", "")
            srv.faults["/metrics"] = "close"
            status, _, problem = await h.get(srv.url + "/metrics", {}, 2**20)
            cause = "TransportError" if client == "lean" else "RemoteProtocolError"
            assert status is None and problem.startswith(cause + ": "), problem
        finally:
            await h.aclose()


@pytest.mark.parametrize("client", CLIENTS)
async def test_prometheus_failures_and_answers_are_worded_as_before(client):
    def prom(head: bytes) -> bytes:
        if b"query=bad" in head:
            return answer(400, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode())
        if b"query=gz" in head:
            return answer(200, gzip.compress(b'{"status": "success", "data": 1}'), "Content-Encoding: gzip")
        return answer(200, json.dumps({"status": "success", "data": {"asked": head.split(b" ")[1].decode()}}).encode())

    transport = httpx.AsyncHTTPTransport() if client == "httpx" else None
    base = f"http://127.0.0.1:{closed_port()}"
    api = _Api(base, 2.0, transport)
    try:
        with pytest.raises(PromQueryError) as e:
            await api.get("/api/v1/query", {"query": "up"})
        assert (e.value.message, e.value.kind) == (f"connection refused at {base}", "refused")
    finally:
        await api.aclose()
    async with Raw(prom) as srv:
        api = _Api(srv.url, 2.0, transport)
        try:
            assert await api.get("/api/v1/query", {"query": "up"}) == {"asked": "/api/v1/query?query=up"}
            assert await api.get("/api/v1/query", {"query": "gz"}) == 1
            with pytest.raises(PromQueryError) as e:
                await api.get("/api/v1/query", {"query": "bad"})  # the body of a 400 is read: it says why
            assert (e.value.message, e.value.kind) == ("HTTP 400, bad_data: parse error", "bad_query")
            assert api.requests == 3
        finally:
            await api.aclose()
