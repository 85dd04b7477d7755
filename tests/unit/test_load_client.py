"""The streaming client against a real sim: token counting, keep-alive reuse, auth errors."""

import asyncio
import time

import pytest

from helpers.simproc import start_sim
from specmon.load.client import GenerateClient
from specmon.load.workload import Workload
from helpers.streams import captured_stream, feed_stream
from helpers.load_client import send


def test_tokens_counted_from_completion_tokens_and_connections_reused(monkeypatch):
    monkeypatch.setenv("SIM_KEY", "k-1")
    with start_sim("--profile", "fp8-mtp", "--enable-metrics", "--api-key", "k-1", speed=50) as sim:
        async def main():
            c = GenerateClient(sim.url, max_concurrency=4, api_key_env="SIM_KEY")
            w = Workload(input_len=128, seed=3)
            outs = []
            for round_ in range(3):
                outs += await asyncio.gather(*[send(c, w.prompt(i), 40, f"{round_}-{i}") for i in range(4)])
            made = c.connections_opened
            await c.aclose()
            return outs, made
        outs, made = asyncio.run(main())
    assert made == 4  # one connection per stream, reused across the 3 rounds
    for o in outs:
        assert o.status == "ok", o.error
        assert o.completion_tokens == 40 and o.prompt_tokens == 128
        assert sum(n for _, n in o.token_events) == 40      # every token accounted for
        assert o.events < 40                                 # speculative chunks carry several
        # one ITL per token after the first chunk (bench_serving's rule: tokens that came with
        # the first token have no gap of their own)
        assert len(o.itls()) == 40 - o.token_events[0][1]
        rec = o.record("a", 0, 4, 50.0, True)
        # A sped-up sim is timed by its own stamps (the client's wall overhead would count x50).
        m = o.final_meta
        assert rec.timing == "server"
        assert rec.ttft_s == m["response_sent_to_client_ts"] - m["request_received_ts"]
        assert rec.e2e_s == m["request_finished_ts"] - m["request_received_ts"]
        assert 0 < rec.ttft_s < rec.e2e_s <= o.e2e * 50.0 * 1.01  # the sim's clock never runs ahead
        assert rec.spec_verify_ct == m["spec_verify_ct"]
        assert rec.accept_length == 40 / rec.spec_verify_ct
        real = o.record("a", 0, 4, 1.0, True)  # a real server: always this client's own clock
        assert real.timing == "client" and real.ttft_s == o.ttft and real.e2e_s == o.e2e


def test_wrong_key_is_a_recorded_error(monkeypatch):
    monkeypatch.setenv("SIM_KEY", "wrong")
    with start_sim("--profile", "fp8-mtp", "--api-key", "right", speed=50) as sim:
        async def main():
            c = GenerateClient(sim.url, max_concurrency=1, api_key_env="SIM_KEY")
            o = await send(c, Workload(input_len=8).prompt(0), 4)
            await c.aclose()
            return o
        o = asyncio.run(main())
    assert o.status == "error" and o.error.startswith("HTTP 401")
    assert o.ttft is None and o.e2e is None and "wrong" not in o.error


def test_chunked_stream_read_the_same_however_the_socket_splits_it():
    """The chunked body as llhttp frames it: a real stream handed over whole,
    byte by byte, or cut in two at every position must read the same; cut short, it is an error."""
    with start_sim("--profile", "fp8-mtp", speed=50) as sim:
        raw = captured_stream(sim, 12)
    assert b"transfer-encoding: chunked" in raw.lower()
    whole, conn = feed_stream(raw, [])
    assert whole.status == "ok", whole.error
    assert sum(n for _, n in whole.token_events) == 12 and whole.rid and whole.events >= 2
    assert conn.reusable()  # keep-alive: the socket goes back to the pool for the next request
    head_end = raw.index(b"\r\n\r\n") + 4
    splits = [list(range(1, len(raw)))] + [[i] for i in range(1, len(raw))]
    for cuts in splits:
        o, conn = feed_stream(raw, cuts)
        assert (o.status, o.rid, o.events, [n for _, n in o.token_events]) == \
            (whole.status, whole.rid, whole.events, [n for _, n in whole.token_events]), cuts[:3]
        assert conn.reusable()
    for end in (head_end + 3, len(raw) - 7, len(raw) - 2):  # the connection dies before the last chunk
        o, conn = feed_stream(raw[:end], [])
        assert o.status == "error" and o.error.startswith("ReadError"), (end, o.error)
        assert not conn.reusable()
    bad = raw[:head_end] + b"zz\r\n" + raw[head_end:]
    o, conn = feed_stream(bad, [])
    assert o.status == "error" and "chunk size" in o.error and not conn.reusable()


def test_response_heads_read_by_llhttp_the_same_however_the_socket_splits_them():
    """Every response head and body is framed by httptools (llhttp): the usual 200 + chunked and
    its legal variants stream; a sized, close-delimited or error body reads as such; a head llhttp
    refuses (smuggling shapes: Content-Length beside chunked, folded or malformed header lines)
    is one RemoteProtocolError in llhttp's words. The same whether the head comes whole or split."""
    with start_sim("--profile", "fp8-mtp", speed=50) as sim:
        raw = captured_stream(sim, 6)
    head_end = raw.index(b"\r\n\r\n") + 4
    body = raw[head_end:]
    sized = b'{"error": {"message": "busy"}}'
    ok, keep, close = ("ok", None), True, False
    cases = [  # head, (status, error's start), reusable afterwards
        (raw[:head_end], ok, keep),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ok, keep),
        (b"HTTP/1.1 200 \r\ntransfer-encoding:chunked\r\nX-Empty:\r\n\r\n", ok, keep),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n", ok, close),
        (b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ok, close),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
         ("error", "RemoteProtocolError: Content-Length can't be present with Transfer-Encoding"), close),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n folded: on\r\n\r\n",
         ("error", "RemoteProtocolError: Unexpected whitespace after header value"), close),
        (b"HTTP/1.1 200 OK\r\nBad Name: x\r\nTransfer-Encoding: chunked\r\n\r\n",
         ("error", "RemoteProtocolError: Invalid header token"), close),
        (b"HTTP/1.1 200 OK\r\nX: a\x01b\r\nTransfer-Encoding: chunked\r\n\r\n",
         ("error", "RemoteProtocolError: Invalid header value char"), close),
        # a body that is not SGLang's stream: sized, or running to the close
        (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", ("error", "stream ended without [DONE]"), keep),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", ("error", "stream ended without [DONE]"), close),
        (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: %d\r\n\r\n" % len(sized),
         ("error", 'HTTP 429: {"error": {"message": "busy"}}'), keep),
        (b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n", ("error", "HTTP 503: data: {"), keep),
    ]
    for head, (status, error), reusable in cases:
        response = head + (sized if b"Content-Length: %d" % len(sized) in head else
                           b"data" if b"Content-Length: 4" in head else body)
        seen = set()
        for cuts in ([], [len(head) - 1], [len(head) + 1], list(range(1, len(response)))):
            o, conn = feed_stream(response, cuts)
            seen.add((o.status, (o.error or "")[:len(error or "")] or None, o.retry_after_s,
                      sum(n for _, n in o.token_events), conn.reusable()))
        tokens = 6 if status == "ok" else 0
        retry = 3.0 if b"Retry-After" in head else None
        assert seen == {(status, error, retry, tokens, reusable)}, (head, seen)


def test_the_request_head_is_the_one_h11_writes(monkeypatch):
    """The client writes each request's head itself: the bytes h11 would write for it; a key h11
    would refuse is refused when the client is made, and the key never appears in the message."""
    import h11

    from specmon.load.client import GenerateClient

    monkeypatch.setenv("SPECMON_TEST_KEY", "sk-1234")
    c = GenerateClient("http://127.0.0.1:9/v1/", max_concurrency=1, api_key_env="SPECMON_TEST_KEY")
    payload = b'{"input_ids":[1,2,3]}'
    ours = c.request_bytes(payload)
    h = h11.Connection(h11.CLIENT)
    theirs = h.send(h11.Request(method=b"POST", target=b"/v1/generate",
                                headers=[(b"Host", b"127.0.0.1:9"), (b"Accept", b"text/event-stream"),
                                         (b"Content-Type", b"application/json"),
                                         (b"Authorization", b"Bearer sk-1234"),
                                         (b"Content-Length", b"%d" % len(payload))]))
    assert ours == theirs + h.send(h11.Data(data=payload)) + h.send(h11.EndOfMessage())
    monkeypatch.setenv("SPECMON_TEST_KEY", "sk-12\n34")
    with pytest.raises(ValueError) as e:
        GenerateClient("http://127.0.0.1:9", max_concurrency=1, api_key_env="SPECMON_TEST_KEY")
    assert "sk-12" not in str(e.value)


def test_the_final_event_is_read_for_its_meta_info_alone_only_where_that_is_safe():
    import json

    from specmon.load.client import _final_event

    meta = {"id": "ab12", "completion_tokens": 256, "spec_verify_ct": 90, "finish_reason": {"type": "length"}}
    ev = json.dumps({"text": " tok" * 256, "output_ids": list(range(256)), "meta_info": meta}).encode()
    assert _final_event(ev, whole=False) == {"meta_info": meta}
    assert _final_event(ev, whole=True) == json.loads(ev)  # multi-turn reads the answer too
    # a quote inside the text is escaped, so the text's own "meta_info" cannot be taken for the key
    trick = json.dumps({"text": 'say "meta_info": {"id": "fake"}}', "meta_info": meta}).encode()
    assert _final_event(trick, whole=False) == {"meta_info": meta}
    # meta_info not last, or not an object: the whole event, as before
    for other in ({"meta_info": meta, "text": "z"}, {"text": "z", "meta_info": 5}):
        assert _final_event(json.dumps(other).encode(), whole=False) == other


_WITHOUT_C = r"""
import asyncio, json, sys
from specmon.load import native
assert native.fastread is None, "SPECMON_NATIVE=0 should leave the C module out"
from specmon.load.client import GenerateClient, RequestOutcome
from specmon.load.workload import Workload

async def main(url):
    c = GenerateClient(url, max_concurrency=3)
    w = Workload(input_len=64, seed=5)
    outs = []
    for i in range(3):
        o = RequestOutcome(request_id=f"r{i}", t_scheduled_wall=0.0, t_scheduled=0.0)
        outs.append(c.generate(w.prompt(i), 24, o))
    outs = await asyncio.gather(*outs)
    await c.aclose()
    return [{"status": o.status, "error": o.error, "tokens": o.completion_tokens, "rid": o.rid,
             "events": [n for _, n in o.token_events], "itls": len(o.itls())} for o in outs]

print(json.dumps(asyncio.run(main(sys.argv[1]))))
"""


def test_the_client_streams_without_its_c_module():
    """Where setup.py could not build _fastread.c (no compiler) the client reads in Python: the
    same requests, whole. (It once failed to import there: its stream class had no MRO.)"""
    import json
    import os
    import subprocess
    import sys

    with start_sim("--profile", "fp8-mtp", speed=50) as sim:
        got = subprocess.run([sys.executable, "-c", _WITHOUT_C, sim.url], capture_output=True, text=True,
                             env=dict(os.environ, SPECMON_NATIVE="0"), timeout=120)
    assert got.returncode == 0, got.stderr[-2000:]
    outs = json.loads(got.stdout)
    assert len(outs) == 3
    for o in outs:
        assert o["status"] == "ok", o["error"]
        assert o["tokens"] == 24 and sum(o["events"]) == 24 and o["rid"]
        assert o["itls"] == 24 - o["events"][0]


def test_connections_opened_at_once_look_the_host_up_once():
    # prepare opens C connections together; each used to ask the resolver (C lookups in the
    # loop's thread pool at C=1000). "localhost" needs a real lookup.
    with start_sim("--profile", "fp8-mtp", speed=50) as sim:
        async def main():
            loop = asyncio.get_running_loop()
            lookups = []
            real = loop.getaddrinfo

            async def counted(*a, **k):  # the event loop's resolver, counted (not our code)
                lookups.append(a[0])
                return await real(*a, **k)

            loop.getaddrinfo = counted
            c = GenerateClient(sim.url.replace("127.0.0.1", "localhost"), max_concurrency=24)
            ready = await c.prepare(24)
            await c.aclose()
            return ready, lookups
        ready, lookups = asyncio.run(main())
    assert ready == 24 and lookups == ["localhost"]


def test_a_new_connection_the_server_closes_before_the_request_is_written_fails_at_once():
    """A server that dies as it accepts: the new connection's reader can see it closed before
    the request's task resumes from its connect. The request then fails at once as "no answer"
    (it waited the whole read timeout before: a ramp's level never ended). The wait below makes
    that interleaving certain; the connect, the close and the reads are all real."""
    import socket
    import struct
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            time.sleep(0.1)  # the client's connect has returned by now
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
            c.close()

    threading.Thread(target=serve, daemon=True).start()

    async def main():
        client = GenerateClient(f"http://127.0.0.1:{srv.getsockname()[1]}", max_concurrency=1, timeout_s=60)
        connect = client._connect

        async def connect_then_see_it_closed():
            conn = await connect()
            deadline = time.monotonic() + 5
            while not conn.lost and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert conn.lost, "the server's reset never reached the connection's reader"
            return conn

        client._connect = connect_then_see_it_closed
        t = time.monotonic()
        o = await asyncio.wait_for(send(client, Workload(input_len=16, seed=1).prompt(0), 4), 20)
        took = time.monotonic() - t
        await client.aclose()
        return o, took

    try:
        o, took = asyncio.run(main())
    finally:
        srv.close()
    assert o.status == "error" and o.error.startswith("RemoteProtocolError"), o.error
    assert o.no_answer in ("connection reset", "connection closed before any answer") and o.http_status is None
    assert took < 10


def test_flush_cache_goes_to_the_server_never_through_a_proxy_from_the_environment(monkeypatch):
    import socket
    import threading

    # A "proxy" on loopback that records every connection it gets and answers 502.
    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(8)
    got: list[bytes] = []

    def serve():
        while True:
            try:
                c, _ = proxy.accept()
            except OSError:
                return
            with c:
                got.append(c.recv(65536))
                c.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    proxy_url = f"http://127.0.0.1:{proxy.getsockname()[1]}"
    monkeypatch.setenv("SPECMON_TEST_KEY", "sk-never-to-a-proxy")
    try:
        with start_sim("--api-key", "sk-never-to-a-proxy") as sim:
            # the proxy only now: the sim's own start-up check must not go through it
            for var in ("NO_PROXY", "no_proxy"):
                monkeypatch.delenv(var, raising=False)
            for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
                monkeypatch.setenv(var, proxy_url)

            async def main():
                c = GenerateClient(sim.url, max_concurrency=1, api_key_env="SPECMON_TEST_KEY")
                try:
                    return await c.flush_cache(timeout_s=5)
                finally:
                    await c.aclose()

            assert asyncio.run(main()) is None  # the server flushed
    finally:
        proxy.close()
    assert got == []  # nothing, and so no key, reached the proxy
