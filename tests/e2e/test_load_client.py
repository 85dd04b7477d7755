"""The streaming client against a real sim: token counting, keep-alive reuse, auth errors."""

import asyncio
import re
import socket
import threading
import time

import pytest

from helpers.loopback_http import STREAM_HEAD, chunk, read_request
from helpers.simproc import start_sim
from specmon.load import client as client_module
from specmon.load.client import GenerateClient
from specmon.load.workload import Workload
from helpers.streams import captured_stream, feed_stream
from helpers.load_client import send


def test_stale_keepalive_is_resent_and_refused_connection_recorded():
    """uvicorn drops an idle kept-alive socket after 5 s: the next request on it must go out
    again on a fresh connection, not be recorded as a failure of the server."""
    with start_sim("--profile", "fp8-mtp", speed=50) as sim:
        async def main():
            c = GenerateClient(sim.url, max_concurrency=1)
            w = Workload(input_len=16, seed=1)
            a = await send(c, w.prompt(0), 4)
            await asyncio.sleep(6.0)  # past uvicorn's keep-alive timeout
            b = await send(c, w.prompt(1), 4)
            opened = c.connections_opened
            await c.aclose()
            return a, b, opened
        a, b, opened = asyncio.run(main())
        port = sim.port
    assert a.status == "ok" and b.status == "ok", (a.error, b.error)
    assert opened == 2 and b.completion_tokens == 4
    # The first byte is the kernel's stamp of its arrival; t_written is read after write()
    # returned, so a thread preempted there (a busy CI host) stamps it after the answer came.
    assert b.t_sent <= b.t_written and b.t_sent <= b.t_first_byte <= b.token_events[0][0] <= b.t_end

    async def refused():
        c = GenerateClient(f"http://127.0.0.1:{port}", max_concurrency=1)  # the sim is gone
        o = await send(c, Workload(input_len=8).prompt(0), 4)
        await c.aclose()
        return o
    o = asyncio.run(refused())
    assert o.status == "error" and o.error.startswith("ConnectError"), o.error


def test_server_dying_mid_stream_and_a_stalled_server():
    with start_sim("--profile", "fp8-mtp", "--fault-crash-after", "1", speed=5) as sim:
        async def main():
            c = GenerateClient(sim.url, max_concurrency=2)
            w = Workload(input_len=64, seed=2)
            # the short one finishes and triggers the crash while the long one is streaming
            short, long_ = await asyncio.gather(send(c, w.prompt(0), 2, "s"), send(c, w.prompt(1), 2000, "l"))
            await c.aclose()
            return short, long_
        short, long_ = asyncio.run(main())
    assert short.status == "ok"
    assert long_.status == "error" and long_.token_events, long_.error
    assert long_.error.startswith(("ReadError", "stream ended without [DONE]")), long_.error
    assert long_.e2e is None
    # the server's request id comes with its first chunk: a stream cut before its final event
    # still joins with the server's side of it
    assert short.rid == short.final_meta["id"] and re.fullmatch(r"[0-9a-f]{32}", short.rid)
    assert (long_.final_meta or {}).get("finish_reason") is None  # no final event came
    assert long_.rid and re.fullmatch(r"[0-9a-f]{32}", long_.rid)
    assert long_.rid != short.rid and long_.record("a", 0, 2, 1.0, True).rid == long_.rid

    with start_sim("--profile", "fp8-mtp", "--fault-stall-after", "1", "--fault-stall-s", "30", speed=5) as sim:
        async def stalled():
            c = GenerateClient(sim.url, max_concurrency=2, timeout_s=1.5)
            w = Workload(input_len=64, seed=3)
            first = await send(c, w.prompt(0), 2, "a")          # finishing it starts the stall
            t0 = time.perf_counter()
            second = await send(c, w.prompt(1), 50, "b")
            waited = time.perf_counter() - t0
            await c.aclose()
            return first, second, waited
        first, second, waited = asyncio.run(stalled())
    assert first.status == "ok"
    assert second.status == "timeout" and second.error == "ReadTimeout"
    assert 1.4 < waited < 5.0


def test_cancelled_request_closes_its_stream_and_the_server_aborts_it():
    with start_sim("--profile", "fp8-mtp", "--decode-log-interval", "4", speed=2) as sim:
        async def main():
            c = GenerateClient(sim.url, max_concurrency=1)
            task = asyncio.ensure_future(send(c, Workload(input_len=64, seed=4).prompt(0), 5000))
            await asyncio.sleep(1.0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            left = len(c._free)
            await c.aclose()
            return left
        assert asyncio.run(main()) == 0  # a cut stream's socket is never reused
        time.sleep(0.5)  # the sim's abort and its last log lines on their way
        decodes = sim.log_text().count("Decode batch")
        assert decodes > 0
        time.sleep(1.5)  # a running request logs a decode line every ~0.1 s here
        assert sim.log_text().count("Decode batch") <= decodes + 1  # the server stopped decoding it


def _dechunk(body):
    out, pos = b"", 0
    while True:
        eol = body.index(b"\r\n", pos)
        size = int(body[pos:eol], 16)
        if size == 0:
            return out
        out += body[eol + 2:eol + 2 + size]
        pos = eol + 2 + size + 2


def test_sse_events_in_other_legal_shapes_read_the_same():
    """The same stream re-written as other valid SSE: a comment event before some events, no space
    after `data:`, a second line on an event (so its first newline is not its end), two events to an
    HTTP chunk; whole and cut at every position it reads as the server's own bytes did."""
    with start_sim("--profile", "fp8-mtp", speed=2) as sim:
        raw = captured_stream(sim, 24)
    head_end = raw.index(b"\r\n\r\n") + 4
    events = [e for e in _dechunk(raw[head_end:]).split(b"\n\n") if e]
    assert len(events) >= 4 and events[-1] == b"data: [DONE]"
    shaped = []
    for k, e in enumerate(events):
        last = k >= len(events) - 2  # the final meta_info event and [DONE] stay one-line
        if k % 4 == 1:
            shaped.append(b": ping\n\n" + e + b"\n\n")
        elif k % 4 == 2:
            shaped.append(e.replace(b"data: ", b"data:", 1) + b"\n\n")
        elif k % 4 == 3 and not last:
            shaped.append(e + b"\n: a second line\n\n")
        else:
            shaped.append(e + b"\n\n")
    body = b""
    for k in range(0, len(shaped), 2):
        part = b"".join(shaped[k:k + 2])
        body += b"%x\r\n%s\r\n" % (len(part), part)
    other = raw[:head_end] + body + b"0\r\n\r\n"
    whole, _ = feed_stream(raw, [])
    assert whole.status == "ok", whole.error
    want = (whole.status, whole.rid, whole.events, [n for _, n in whole.token_events], whole.completion_tokens)
    for cuts in [[]] + [[i] for i in range(head_end - 2, len(other))]:
        o, conn = feed_stream(other, cuts)
        assert (o.status, o.rid, o.events, [n for _, n in o.token_events], o.completion_tokens) == want, cuts
        assert conn.reusable()


class _CutServer(threading.Thread):
    """Answers one /generate with the head and one event of a stream, then closes at once: the
    bytes and the close reach the client together, as when a server dies mid-response."""

    def __init__(self, delay_s: float):
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.delay_s = delay_s

    def run(self):
        conn, _ = self.sock.accept()
        with conn:
            read_request(conn)
            time.sleep(self.delay_s)  # the client's loop is busy now: it reads both at once after
            event = b'data: {"text":"a","output_ids":[1],"meta_info":{"id":"x","completion_tokens":1}}\n\n'
            conn.sendall(STREAM_HEAD + chunk(event))
        self.sock.close()


@pytest.mark.parametrize("reader", ["C", "Python"])
def test_a_close_that_arrives_with_the_last_bytes_ends_the_request(reader, monkeypatch):
    """Bytes and the end of the connection waiting together: one read takes the bytes, and the
    close must still be seen (an edge-triggered poll reports both once). Unseen, the request
    hung until its timeout and a ramp whose server died waited that long to end its level."""
    if reader == "C" and client_module._fastread is None:
        pytest.skip("the C reader is not built here")
    if reader == "Python":
        monkeypatch.setattr(client_module, "_fastread", None)
    server = _CutServer(delay_s=0.15)
    server.start()

    async def main():
        c = GenerateClient(server.url, max_concurrency=1, timeout_s=60)
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, time.sleep, 0.4)  # busy while the server answers and closes
        try:
            return await asyncio.wait_for(send(c, Workload(input_len=8, seed=1).prompt(0), 4), 10)
        finally:
            await c.aclose()

    t0 = time.monotonic()
    o = asyncio.run(main())
    assert time.monotonic() - t0 < 3
    assert o.status == "error" and o.error.startswith("ReadError"), o.error
    assert len(o.token_events) == 1
    server.join(5)
